/* The hardened library's copies into the heap, bounded: memcpy, memmove,
 * mempcpy, memset and the str*cpy and str*cat family, exported beside
 * malloc, stop the program when they would write past the bytes asked for
 * of the heap block their destination lies in.  A tail records those bytes
 * (02-records/tail.h), a large block's span the same (06-large).  A free
 * finds an overflow too, but only at the block's free, and only where it
 * reached the canary; here the write never happens (snmalloc's checked
 * build bounds memcpy the same way, against its size classes).
 *
 * The copy itself is glibc's, called through its __*_chk entry points with
 * no bound (00-base/mem.h), which is also how the library's own writes
 * pass by these names.
 * malloc and free pay nothing; each call here pays a page-map read, and a
 * destination in the heap a multiply and a tail's read more.  A copy that
 * the compiler inlines (a small memcpy of known size) is not checked.
 *
 * FA_BOUNDS (00-base/mem.h): not in AddressSanitizer or ThreadSanitizer
 * builds, whose runtimes intercept these names themselves, nor where the
 * library does not take the standard names. */
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
 * and *n; UNBOUNDED when d is in no block the heap handed out.  A record
 * read here may be changing under another thread only if the program
 * writes into memory that it frees meanwhile: each one is checked
 * against d before it is believed. */
FA_INLINE size_t room(const void *d, uintptr_t *b, size_t *n)
{
    uintptr_t a = (uintptr_t)d;
    struct fa__pm_leaf *leaf = fa__pm_leaf_of(a);
    if (FA_LIKELY(leaf == NULL))
        return UNBOUNDED;
    size_t i = fa__pm_index(a);
    struct fa__span *s = __atomic_load_n(&leaf->span[i], __ATOMIC_RELAXED);
    if (s == NULL)
        return UNBOUNDED;
    uintptr_t start = s->start;
    if (a < start || a - start >= (size_t)s->npages * FA_PAGE_SIZE)
        return UNBOUNDED; /* a stale entry inside a free span */
    unsigned state = __atomic_load_n(&s->state, __ATOMIC_RELAXED);
    size_t held;
    if (state == FA_SPAN_SMALL) {
        unsigned cls = s->cls;
        size_t size = fa__classes[cls].size;
        uint64_t q = fa__span_block_index(s, a);
        if (cls == 0 || q >= s->carved)
            return UNBOUNDED;
        *b = start + q * size;
        held = fa__tail_get((void *)*b, size);
        if (FA_UNLIKELY(held == SIZE_MAX)) {
            fa__tail_corrupt((void *)*b, size, false); /* returns if the tail was moving */
            held = fa__tail_get((void *)*b, size);
            if (held == SIZE_MAX)
                return UNBOUNDED;
        }
    } else if (state == FA_SPAN_LARGE) {
        *b = start;
        held = fa__large_held(s);
    } else {
        return UNBOUNDED;
    }
    *n = held;
    return a - *b < held ? *b + held - a : 0;
}

_Noreturn FA_COLD static void overflow(const char *what, const void *d, size_t len)
{
    uintptr_t b = 0;
    size_t n = 0;
    room(d, &b, &n);
    fa__fatal("fastalloc: heap overflow: %s of %zu bytes at %p writes past the end of the %zu-byte block "
              "at %p",
              what, len, d, n, (void *)b);
}

/* The bound for a write of len bytes at d by what: stop the program if
 * len does not fit. */
FA_INLINE void bound(const char *what, const void *d, size_t len)
{
    uintptr_t b;
    size_t n;
    size_t r = room(d, &b, &n);
    if (FA_UNLIKELY(len > r))
        overflow(what, d, len);
}

EXPORT void *memcpy(void *restrict d, const void *restrict s, size_t len)
{
    bound("memcpy", d, len);
    return fa__libc_memcpy(d, s, len, UNBOUNDED);
}

EXPORT void *memmove(void *d, const void *s, size_t len)
{
    bound("memmove", d, len);
    return fa__libc_memmove(d, s, len, UNBOUNDED);
}

EXPORT void *mempcpy(void *restrict d, const void *restrict s, size_t len)
{
    bound("mempcpy", d, len);
    return fa__libc_mempcpy(d, s, len, UNBOUNDED);
}

EXPORT void *memset(void *d, int c, size_t len)
{
    bound("memset", d, len);
    return fa__libc_memset(d, c, len, UNBOUNDED);
}

/* The bound for a copy of the string s, its NUL with it, to d by what. */
static void bound_str(const char *what, const char *d, const char *s)
{
    uintptr_t b;
    size_t n, r = room(d, &b, &n);
    if (r != UNBOUNDED && FA_UNLIKELY(strnlen(s, r) >= r))
        overflow(what, d, strlen(s) + 1);
}

EXPORT char *strcpy(char *restrict d, const char *restrict s)
{
    bound_str("strcpy", d, s);
    return fa__libc_strcpy(d, s, UNBOUNDED);
}

EXPORT char *stpcpy(char *restrict d, const char *restrict s)
{
    bound_str("stpcpy", d, s);
    return fa__libc_stpcpy(d, s, UNBOUNDED);
}

EXPORT char *strcat(char *restrict d, const char *restrict s)
{
    uintptr_t b;
    size_t n, r = room(d, &b, &n);
    if (r != UNBOUNDED) {
        size_t have = strnlen(d, r);
        if (FA_UNLIKELY(have >= r || strnlen(s, r - have) >= r - have))
            overflow("strcat", d, have + strlen(s) + 1);
    }
    return fa__libc_strcat(d, s, UNBOUNDED);
}

EXPORT char *strncpy(char *restrict d, const char *restrict s, size_t len)
{
    bound("strncpy", d, len); /* it writes len bytes, NULs after the string */
    return fa__libc_strncpy(d, s, len, UNBOUNDED);
}

EXPORT char *strncat(char *restrict d, const char *restrict s, size_t len)
{
    uintptr_t b;
    size_t n, r = room(d, &b, &n);
    if (r != UNBOUNDED) {
        size_t have = strnlen(d, r);
        size_t add = strnlen(s, len);
        if (FA_UNLIKELY(have >= r || add >= r - have))
            overflow("strncat", d, have + add + 1);
    }
    return fa__libc_strncat(d, s, len, UNBOUNDED);
}

#endif
