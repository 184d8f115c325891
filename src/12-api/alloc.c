/* malloc, calloc, realloc and friends. */
#include "fastalloc.h"
#include "00-base/mem.h"
#include "12-api/fastpath.h"
#include "12-api/override.h"
#include "00-base/diag.h"
#include "06-large/empty.h"
#include "06-large/large.h"
#include "09-diag/debug.h"
#include "11-init/init.h"

#include <errno.h>
#include <string.h>

/* The bytes the program may use of the small block p of class cls: what
 * it asked for, in the hardened build with tails (02-records/tail.h), where
 * the bytes past it are the canary's.  A p that is no block's start stops
 * the program, the line naming the call who. */
static size_t held(void *p, unsigned cls, const char *who)
{
    size_t size = fa__classes[cls].size;
    struct fa__span *s = fa__pm_span((uintptr_t)p);
    if (FA_UNLIKELY(!fa__span_block_start(s, (uintptr_t)p)))
        fa__tc_bad_block(p, s, who);
#if FA_SECURE
    size_t n = fa__tail_get(p, size);
    if (FA_UNLIKELY(n == SIZE_MAX)) {
        fa__tail_corrupt(p, size, false);
        n = fa__tail_get(p, size);
    }
    return n;
#else
    (void)p;
    return size;
#endif
}

/* calloc asks whether blocks of this size and up are fresh (fa_calloc). */
#define FA_CALLOC_FRESH_MIN ((size_t)4096)

FA_HOT_ENTRY void *fa_malloc(size_t size)
{
    return fa__do_malloc(size);
}

void *fa_calloc(size_t n, size_t size)
{
    size_t total;
    if (FA_UNLIKELY(__builtin_mul_overflow(n, size, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    /* A block that is large with its tail too: the large path knows
     * whether its pages are zero (malloc's path would not say). */
    if (total > FA_MAX_SMALL - FA_TAIL)
        return fa__api_alloc_large(total, 0, true);
    if (FA_UNLIKELY(fa__diag_every())) /* a trace records it as a calloc */
        return fa__api_alloc_diag(total, 0, true);
    void *p = fa__do_malloc(total);
    if (FA_UNLIKELY(p == NULL))
        return p;
    /* A block cut from pages known zero, handed out for the first time,
     * holds zeros but for its link (its hand-out cleared the free mark):
     * clearing it whole would touch pages the program may never use.  A
     * compiler callocs tables of 4 KiB to hundreds that it fills sparsely
     * (#54, decision 1; 02-records/span.h says which blocks are fresh).
     * Below a page, the clearing costs less than the look. */
    if (total >= FA_CALLOC_FRESH_MIN) {
        uintptr_t a = (uintptr_t)p;
        /* Class 0: a block of a span of its own (a sample of the heap
         * profile), which large.c would have cleared if asked. */
        struct fa__span *s = fa__pm_class(a) != 0 ? fa__pm_span(a) : NULL;
        if (s != NULL && fa__span_fresh(s, a)) {
            fa__memset(p, 0, 2 * sizeof(void *));
            return p;
        }
    }
    fa__memset(p, 0, total);
    return p;
}

size_t fa_malloc_usable_size(void *p)
{
    if (p == NULL)
        return 0;
    if (FA_UNLIKELY(fa__diag_every()))
        return fa__dbg_usable(p);
    unsigned cls = fa__pm_class((uintptr_t)p);
    if (FA_LIKELY(cls != 0))
        return held(p, cls, "malloc_usable_size");
    return fa__large_usable(p);
}

/* What a block of old usable bytes that must move to hold size bytes is
 * given: a large block that grows gets at least a quarter more than it
 * had, pages it does not touch until it grows into them (fa__large_resize
 * keeps them).  A large block grown a little at a time (a vector, a string
 * builder) then moves at most every quarter.  tcmalloc's realloc grows by
 * the same quarter.  A small block gets exactly the class of its size:
 * sized free may name the class by the size. */
static size_t grown(size_t old_usable, size_t size)
{
    size_t more = old_usable + old_usable / 4;
    return size > FA_MAX_SMALL && size > old_usable && size < more && more <= FA_MAX_REQUEST ? more
                                                                                              : size;
}

/* A new block for the contents of p (old_usable bytes) resized to size;
 * p is left to the caller to free.  NULL with errno = ENOMEM, p still
 * valid, as the standard asks. */
static void *copy_to_new(void *p, size_t old_usable, size_t size)
{
    void *n = fa__do_malloc(grown(old_usable, size));
    if (FA_LIKELY(n != NULL))
        fa__memcpy(n, p, old_usable < size ? old_usable : size);
    return n;
}

void *fa_realloc(void *p, size_t size)
{
    /* The heap profile alone takes only its samples' reallocs: they move,
     * and the profile forgets them. */
    if (FA_UNLIKELY(fa__diag_on()) && (fa__diag_every() || fa__prof_is_sample(p)))
        return fa__dbg_realloc(p, size);
    if (p == NULL)
        return fa__do_malloc(size);
    if (size == 0) { /* glibc frees and returns NULL */
        fa__do_free(p);
        return NULL;
    }
    unsigned cls = fa__pm_class((uintptr_t)p);
    if (cls != 0) {
        /* Stay in place only within the same class: a shrink into a smaller
         * class moves, so that a block shrunk for good gives back the memory
         * it no longer needs. */
        size_t old = held(p, cls, "realloc");
        /* Blocks too small for a tail (the hardened build's 16 bytes) hold
         * whatever fits, as malloc_usable_size says. */
        bool untailed = FA_SECURE && fa__classes[cls].size < FA_TAIL_MIN && size <= fa__classes[cls].size;
        if (size <= FA_MAX_SMALL - FA_TAIL && (untailed || fa__size_to_class(size + FA_TAIL) == cls)) {
            fa__tail_set(p, size, fa__classes[cls].size);
            return p;
        }
        void *n = copy_to_new(p, old, size);
        if (n != NULL)
            fa__do_free(p);
        return n;
    }
    if (fa__empty_has(p)) /* a block of no bytes: nothing to copy, nothing to free */
        return fa__do_malloc(size);
    struct fa__span *s = fa__large_span_of(p, "realloc");
    if (FA_UNLIKELY(size > FA_MAX_REQUEST)) {
        errno = ENOMEM;
        return NULL;
    }
    size_t old = fa__large_size(s);
    /* A request that is small by itself but not with its tail is a large
     * block in the hardened build with tails, and resizes as one. */
    if (size > FA_MAX_SMALL - FA_TAIL && fa__large_resize(s, size)) {
        /* The same block, counted as freed at its old size and allocated
         * at its new one. */
        if (fa__large_size(s) != old) {
            fa__tc_count_large(false, old);
            fa__tc_count_large(true, fa__large_size(s));
        }
        return p;
    }
    void *n = copy_to_new(p, fa__large_held(s), size);
    if (n != NULL) {
        fa__tc_count_large(false, old);
        fa__large_free_moved(s);
    }
    return n;
}

void *fa_reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (FA_UNLIKELY(__builtin_mul_overflow(n, size, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    return fa_realloc(p, total);
}

#ifdef FA_OVERRIDE
FA_ALIAS(malloc, fa_malloc);
FA_ALIAS(calloc, fa_calloc);
FA_ALIAS(realloc, fa_realloc);
FA_ALIAS(reallocarray, fa_reallocarray);
FA_ALIAS(malloc_usable_size, fa_malloc_usable_size);
/* glibc's internal names: glibc itself and some programs call these. */
FA_ALIAS(__libc_malloc, fa_malloc);
FA_ALIAS(__libc_calloc, fa_calloc);
FA_ALIAS(__libc_realloc, fa_realloc);
#endif
