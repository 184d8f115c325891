/* The slow paths of malloc and free (slow.h): start-up, the diagnostic
 * modes, and the thread cache's slow paths. */
#include "12-api/slow.h"
#include "00-base/diag.h"
#include "02-records/freelist.h"
#include "02-records/pagemap.h"
#include "02-records/sizeclass.h"
#include "02-records/tail.h"
#include "06-large/empty.h"
#include "08-tcache/tcache.h"
#include "09-diag/debug.h"
#include "10-stats/stats.h"
#include "11-init/init.h"

/* The thread cache's slow path, past the refill: diag is the modes on,
 * none or the heap profile alone, which counts the blocks the refill put
 * on heads[] (profile.c). */
static void *refill_slow(size_t size, int diag)
{
    unsigned cls = fa__size_to_class(size + FA_TAIL);
    void *p = fa__tc_alloc_slow(size + FA_TAIL);
    if (p != NULL) {
        size_t bytes = fa__classes[cls].size;
        fa__fl_hand_out(p, bytes, FA_FL_ZEROED);
        fa__tail_set(p, size, bytes);
        if (FA_UNLIKELY(diag))
            fa__prof_meter(cls);
    }
    fa__stats_peak_sample();
    return p;
}

/* Past the refill: start-up, the diagnostic modes, the thread cache's slow
 * path.  A function of its own, so that the refill before it needs no
 * stack frame (it saved a register for the call to start-up). */
static FA_NOINLINE void *alloc_slower(size_t size)
{
    fa__ensure_init();
    /* A call before start-up chose a small class without knowing of tails
     * (`secure_tails`): the last FA_TAIL bytes below the largest class
     * become a large block with them. */
    if (FA_UNLIKELY(size > FA_MAX_SMALL - FA_TAIL))
        return fa__api_alloc_large(size, 0, false);
    int diag = fa__diag_on();
    if (FA_UNLIKELY(diag)) {
        if (diag & FA_DIAG_EVERY)
            return fa__api_alloc_diag(size, 0, false);
        /* The heap profile: this call may be its sample. */
        void *p = fa__prof_take(size);
        if (p != NULL)
            return p;
    }
#if FA_SECURE
    if (size == 0) { /* class 0 (sizeclass.c) */
        void *p = fa__empty_alloc();
        if (FA_LIKELY(p != NULL))
            return p;
        size = 1; /* no range for them: a block of the smallest class */
    }
#endif
    return refill_slow(size, diag);
}

/* malloc's slow path while a mode is on.  The heap profile alone takes the
 * refill as a normal run does (the sample first, if this call is it), and
 * counts what it put on heads[]; the other modes see every call. */
static FA_NOINLINE void *alloc_moded(size_t size, unsigned cls)
{
    if (cls == 0 || fa__diag_every()) /* class 0: before start-up */
        return alloc_slower(size);
    void *p = fa__prof_take(size);
    if (p != NULL)
        return p;
    p = fa__tc_refill(cls);
    if (p == NULL)
        return refill_slow(size, FA_DIAG_PROFILE);
    fa__fl_hand_out(p, fa__classes[cls].size, FA_FL_ZEROED);
    fa__tail_set(p, size, fa__classes[cls].size);
    fa__prof_meter(cls);
    return p;
}

void *fa__api_alloc_diag(size_t size, size_t align, bool zero)
{
    fa__ensure_init();
    fa__tc_leave(); /* a thread whose cache was in view when the mode came on */
    return fa__dbg_alloc(size, align, zero);
}

void *fa__api_alloc_slow(size_t size, unsigned cls)
{
    /* A diagnostic mode sees the refill, and its own modes every call. */
    if (FA_UNLIKELY(fa__diag_on()))
        return alloc_moded(size, cls);
    /* Class 0 (before start-up) has no current span. */
    void *p = fa__tc_refill(cls);
    if (FA_LIKELY(p != NULL)) {
        fa__fl_hand_out(p, fa__classes[cls].size, FA_FL_ZEROED);
        fa__tail_set(p, size, fa__classes[cls].size);
        return p;
    }
    return alloc_slower(size);
}

void *fa__api_alloc_large(size_t size, size_t align, bool zero)
{
    fa__ensure_init();
    int diag = fa__diag_on();
    if (FA_UNLIKELY(diag)) {
        if (diag & FA_DIAG_EVERY)
            return fa__api_alloc_diag(size, align, zero);
        void *p = fa__prof_take_large(size, align, zero);
        if (p != NULL)
            return p;
    }
    void *p = fa__tc_alloc_large(size, align, zero);
    fa__stats_peak_sample();
    return p;
}

/* The default build's fast path tests no alignment (fastpath.h): what
 * leaves it unaligned is stopped here with the line the hardened build's
 * gives. */
static bool free_misaligned(void *p)
{
    if (FA_SECURE || FA_LIKELY((uintptr_t)p % FA_MIN_ALIGN == 0))
        return false;
    fa__api_free_misaligned(p);
    return true;
}

void fa__api_free_bad(void *p)
{
    fa__api_free_misaligned(p);
    fa__tc_free_bad(p, fa__pm_span((uintptr_t)p));
}

void fa__api_free_misaligned(void *p)
{
    if ((uintptr_t)p % FA_MIN_ALIGN == 0)
        return;
    if (FA_UNLIKELY(fa__diag_every()))
        fa__dbg_free(p);
    else
        fa__fatal("fastalloc: free(): invalid pointer %p (not 16-byte aligned, so no block's start)", p);
}

void fa__api_free_marked(void *p)
{
    fa__tc_free_marked(p);
    fa__fl_poison(p, fa__classes[fa__pm_class((uintptr_t)p)].size);
}

void fa__api_free_slow(void *p)
{
    if (free_misaligned(p))
        return;
    int diag = fa__diag_on();
    if (FA_UNLIKELY(diag)) {
        if (diag & FA_DIAG_EVERY) {
            fa__tc_leave();
            fa__dbg_free(p);
            return;
        }
        fa__prof_free(p); /* the profile forgets a sample */
    }
    unsigned cls = fa__pm_class((uintptr_t)p);
    if (cls != 0)
        fa__fl_poison(p, fa__classes[cls].size);
    fa__tc_free_slow(p);
}
