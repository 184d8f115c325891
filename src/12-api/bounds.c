/* The hardened library's copies into the heap, bounded: memcpy, memmove,
 * mempcpy, memset and the str*cpy and str*cat family, exported beside
 * malloc, stop the program when they would write past the end of the heap
 * block their destination lies in: its size class's bytes, or with the
 * `secure_tails` option the bytes asked for, which its tail records
 * (02-records/tail.h); a large block's span records those (06-large).
 * With tails a free finds an overflow too, but only at the block's free,
 * and only where it reached the canary; here the write never happens
 * (snmalloc's checked build bounds memcpy the same way, against its size
 * classes).  A write that starts in no block and ends in one (an
 * underflow from below it) stops the program as well (bound_end).
 *
 * The copy itself is glibc's, called through its __*_chk entry points with
 * no bound (00-base/mem.h), which is also how the library's own writes
 * pass by these names.
 * malloc and free pay nothing; each call here pays a page-map read, and a
 * destination in the heap a multiply (and with tails a tail's read) more.  A copy that
 * the compiler inlines (a small memcpy of known size) is not checked.
 *
 * FA_BOUNDS (00-base/mem.h): not in AddressSanitizer or ThreadSanitizer
 * builds, whose runtimes intercept these names themselves, nor where the
 * library does not take the standard names. */
/* A build with _FORTIFY_SOURCE has string.h define these names inline;
 * here they are defined for real. */
#undef _FORTIFY_SOURCE
#include "00-base/mem.h"

#if FA_BOUNDS

#include "00-base/diag.h"
#include "02-records/pagemap.h"
#include "02-records/sizeclass.h"
#include "02-records/span.h"
#include "02-records/tail.h"
#include "06-large/large.h"

#include <string.h>

#define EXPORT __attribute__((visibility("default")))

#define UNBOUNDED FA_UNBOUNDED

/* Bytes from d to the end of what was asked for of the heap block that
 * holds d (0 when d is past it), and that block's start and bytes in *b
 * and *n; UNBOUNDED when d is in no block the heap handed out.  The page
 * map's entry for a page inside a free span may be stale: the span it
 * names is believed only if it holds d.  full: read the tail in full,
 * canary too, and stop the program if it was overwritten; else only its
 * record, and a record that cannot be (past the block) returns
 * FA_BOUNDS_LOOK, for a call with full set, off the common path (the
 * block's free checks the canary). */
#define FA_BOUNDS_LOOK ((size_t)-2)
FA_INLINE size_t room(const void *d, uintptr_t *b, size_t *n, bool full)
{
    uintptr_t a = (uintptr_t)d;
    struct fa__pm_leaf *leaf = fa__pm_leaf_of(a);
    if (leaf == NULL)
        return UNBOUNDED;
    size_t i = fa__pm_index(a);
    struct fa__span *s = __atomic_load_n(&leaf->span[i], __ATOMIC_RELAXED);
    unsigned cls = leaf->cls[i];
    if (FA_UNLIKELY(s == NULL || a - s->start >= (size_t)s->npages * FA_PAGE_SIZE)) {
        /* Inside a huge span the pages have no entries of their own
         * (02-records/pagemap.h). */
        if (FA_LIKELY(__atomic_load_n(&fa__pm_nhuge, __ATOMIC_RELAXED) == 0) ||
            (s = fa__pm_huge_find(a)) == NULL)
            return UNBOUNDED;
        cls = 0;
    }
    uintptr_t off = a - s->start;
    size_t held;
    if (FA_LIKELY(cls != 0)) {
        size_t size = fa__classes[cls].size;
        *b = s->start + ((off * fa__classes[cls].recip) >> 42) * size;
        held = size;
        if (full) {
            held = fa__tail_get((void *)*b, size);
            if (held == SIZE_MAX) {
                fa__tail_corrupt((void *)*b, size, false); /* returns if it was moving */
                held = fa__tail_get((void *)*b, size);
                if (held == SIZE_MAX)
                    return UNBOUNDED;
            }
        } else if (FA_TAILS_ON && size >= FA_TAIL_MIN) {
            size_t dd = (size_t)fa__tail_ld16((const char *)*b + size - 2) ^ fa__fl_key.tail_len;
            if (FA_UNLIKELY(dd - FA_TAIL_BYTES > size - FA_TAIL_BYTES))
                return FA_BOUNDS_LOOK;
            held = size - dd;
        }
    } else if (__atomic_load_n(&s->state, __ATOMIC_RELAXED) == FA_SPAN_LARGE) {
        *b = s->start;
        held = fa__large_held(s);
    } else {
        return UNBOUNDED;
    }
    *n = held;
    return a - *b < held ? *b + held - a : 0;
}

/* room in full, off the common path. */
static FA_NOINLINE size_t room_slow(const void *d)
{
    uintptr_t b;
    size_t n;
    return room(d, &b, &n, true);
}

/* The room at d; FA_BOUNDS_LOOK never. */
FA_INLINE size_t room_at(const void *d)
{
    uintptr_t b;
    size_t n, r = room(d, &b, &n, false);
    return FA_LIKELY(r != FA_BOUNDS_LOOK) ? r : room_slow(d);
}

_Noreturn FA_COLD static void overflow(const char *what, const void *d, size_t len)
{
    uintptr_t b = 0;
    size_t n = 0;
    room(d, &b, &n, true);
    fa__fatal("fastalloc: heap overflow: %s of %zu bytes at %p writes past the end of the %zu-byte block "
              "at %p",
              what, len, d, n, (void *)b);
}

_Noreturn FA_COLD static void underflow(const char *what, const void *d, size_t len, uintptr_t b, size_t n)
{
    fa__fatal("fastalloc: heap overflow: %s of %zu bytes at %p writes before the start of the %zu-byte block "
              "at %p",
              what, len, d, n, (void *)b);
}

/* A write of len bytes at d, which lies in no heap block, and whose last
 * byte lies on another page: that byte must lie in no heap block either.
 * A write that runs into a block from below is an underflow of it (or an
 * overflow of whatever d lies in); bounding the start alone let it pass. */
static void bound_end(const char *what, const void *d, size_t len)
{
    uintptr_t b = 0;
    size_t n = 0;
    if (room((const char *)d + len - 1, &b, &n, false) != UNBOUNDED)
        underflow(what, d, len, b, n);
}

/* The bound for a write of len bytes at d by what: stop the program if
 * len does not fit the block d lies in.  True when d lies in no block and
 * the write crosses a page (the page map's unit): then its end is looked
 * at too (bound_end), by a copy of the call off the common path, so that
 * the common one keeps nothing across a call.  Within one page, both ends
 * lie in the same span or in none. */
FA_INLINE bool bound(const char *what, const void *d, size_t len)
{
    size_t r = room_at(d);
    if (FA_LIKELY(r != UNBOUNDED)) {
        if (FA_UNLIKELY(len > r))
            overflow(what, d, len);
        return false;
    }
    return ((uintptr_t)d & (FA_PAGE_SIZE - 1)) + len > FA_PAGE_SIZE && len - 1 <= UINTPTR_MAX - (uintptr_t)d;
}

static FA_NOINLINE void *memcpy_far(void *restrict d, const void *restrict s, size_t len)
{
    bound_end("memcpy", d, len);
    return fa__libc_memcpy(d, s, len, fa__unbounded());
}

EXPORT void *memcpy(void *restrict d, const void *restrict s, size_t len)
{
    if (FA_UNLIKELY(bound("memcpy", d, len)))
        return memcpy_far(d, s, len);
    return fa__libc_memcpy(d, s, len, fa__unbounded());
}

static FA_NOINLINE void *memmove_far(void *d, const void *s, size_t len)
{
    bound_end("memmove", d, len);
    return fa__libc_memmove(d, s, len, fa__unbounded());
}

EXPORT void *memmove(void *d, const void *s, size_t len)
{
    if (FA_UNLIKELY(bound("memmove", d, len)))
        return memmove_far(d, s, len);
    return fa__libc_memmove(d, s, len, fa__unbounded());
}

static FA_NOINLINE void *mempcpy_far(void *restrict d, const void *restrict s, size_t len)
{
    bound_end("mempcpy", d, len);
    return fa__libc_mempcpy(d, s, len, fa__unbounded());
}

EXPORT void *mempcpy(void *restrict d, const void *restrict s, size_t len)
{
    if (FA_UNLIKELY(bound("mempcpy", d, len)))
        return mempcpy_far(d, s, len);
    return fa__libc_mempcpy(d, s, len, fa__unbounded());
}

static FA_NOINLINE void *memset_far(void *d, int c, size_t len)
{
    bound_end("memset", d, len);
    return fa__libc_memset(d, c, len, fa__unbounded());
}

EXPORT void *memset(void *d, int c, size_t len)
{
    if (FA_UNLIKELY(bound("memset", d, len)))
        return memset_far(d, c, len);
    return fa__libc_memset(d, c, len, fa__unbounded());
}

/* The bound for a copy of the string s, its NUL with it, to d by what. */
static void bound_str(const char *what, const char *d, const char *s)
{
    size_t r = room_at(d);
    if (r != UNBOUNDED && FA_UNLIKELY(strnlen(s, r) >= r))
        overflow(what, d, strlen(s) + 1);
}

EXPORT char *strcpy(char *restrict d, const char *restrict s)
{
    bound_str("strcpy", d, s);
    return fa__libc_strcpy(d, s, fa__unbounded());
}

EXPORT char *stpcpy(char *restrict d, const char *restrict s)
{
    bound_str("stpcpy", d, s);
    return fa__libc_stpcpy(d, s, fa__unbounded());
}

EXPORT char *strcat(char *restrict d, const char *restrict s)
{
    size_t r = room_at(d);
    if (r != UNBOUNDED) {
        size_t have = strnlen(d, r);
        if (FA_UNLIKELY(have >= r || strnlen(s, r - have) >= r - have))
            overflow("strcat", d, have + strlen(s) + 1);
    }
    return fa__libc_strcat(d, s, fa__unbounded());
}

EXPORT char *strncpy(char *restrict d, const char *restrict s, size_t len)
{
    if (FA_UNLIKELY(bound("strncpy", d, len))) /* it writes len bytes, NULs after the string */
        bound_end("strncpy", d, len);
    return fa__libc_strncpy(d, s, len, fa__unbounded());
}

EXPORT char *strncat(char *restrict d, const char *restrict s, size_t len)
{
    size_t r = room_at(d);
    if (r != UNBOUNDED) {
        size_t have = strnlen(d, r);
        size_t add = strnlen(s, len);
        if (FA_UNLIKELY(have >= r || add >= r - have))
            overflow("strncat", d, have + add + 1);
    }
    return fa__libc_strncat(d, s, len, fa__unbounded());
}

#endif
