/* The entry points every diagnostic mode takes (debug.h), and the modes'
 * start-up.  Each call goes to one of three kinds of block, by the modes
 * on (docs/DESIGN.md, "Debug mode, valgrind, AddressSanitizer"):
 *   checked, in debug mode and under memcheck (checked.c);
 *   traced, when a trace is recorded without them (traced.c);
 *   plain, with hooks alone or the heap profile (blocks.c), of which
 *     the profile samples some (profile.c);
 * and to the hooks (hooks.c) and the trace recorder (trace.c) on each.
 * Calls every other file of 09-diag but leaks.c (which runs at exit), and
 * none calls it (debug_int.h gives the order). */
#include "09-diag/debug_int.h"
#include "00-base/mem.h"
#include "00-base/diag.h"
#include "00-base/options.h"
#include "07-decay/decay.h"
#include "08-tcache/tcache.h"
#include "09-diag/format.h"
#include "09-diag/memcheck.h"
#include "09-diag/trace.h"

#include <errno.h>
#include <string.h>

/* ---- modes ---- */

void fa__dbg_init(void)
{
    int mode = 0;
    if (fa__opt.debug)
        mode |= FA_DIAG_DEBUG;
    if (fa__dbg_under_memcheck())
        mode |= FA_DIAG_VALGRIND;
    __atomic_fetch_or(&fa__diag_mode, mode, __ATOMIC_RELAXED);
    fa__trace_init(); /* sets its own bit when FASTALLOC_TRACE is set */
    if (fa__prof_init(fa__diag_on() & (FA_DIAG_DEBUG | FA_DIAG_VALGRIND | FA_DIAG_TRACE)))
        __atomic_fetch_or(&fa__diag_mode, FA_DIAG_PROFILE, __ATOMIC_RELEASE);
}


static bool checked(void)
{
    return fa__diag_on() & (FA_DIAG_DEBUG | FA_DIAG_VALGRIND);
}

static bool tracing(void)
{
    return fa__diag_on() & FA_DIAG_TRACE;
}

/* Recording without checked blocks: each block has a trace header
 * (09-diag/trace.h) before it, and alignment room when asked for. */
static bool traced(void)
{
    return (fa__diag_on() & (FA_DIAG_TRACE | FA_DIAG_DEBUG | FA_DIAG_VALGRIND)) == FA_DIAG_TRACE;
}

/* The profile is on (it is never on with checked or traced blocks). */
static bool profiling(void)
{
    return fa__diag_on() & FA_DIAG_PROFILE;
}

static void *mode_alloc(size_t size, size_t align, bool zero)
{
    if (checked())
        return fa__dbg_checked_alloc(size, align, zero);
    if (profiling()) {
        void *p = fa__prof_alloc(size, align, zero);
        if (p != NULL)
            return p;
    }
    return fa__dbg_plain_alloc(size, align, zero);
}

/* A plain block back to the thread cache, after the profile forgets it. */
static void plain_free(void *p)
{
    if (profiling())
        fa__prof_free(p);
    fa__tc_free_slow(p);
}

static unsigned trace_op(size_t align, bool zero)
{
    return zero ? FA_TR_CALLOC : align > FA_MIN_ALIGN ? FA_TR_ALIGNED : FA_TR_MALLOC;
}

/* ---- the entry points: checked blocks (debug mode, memcheck) or plain
 * ones (hooks alone), and the hooks on either ---- */

void *fa__dbg_alloc(size_t size, size_t align, bool zero)
{
    fa__decay_maybe();
    if (traced()) {
        struct fa__trace_hdr *h;
        void *p = fa__dbg_traced_alloc(size, align, zero, &h);
        if (p != NULL)
            fa__trace_alloc_hdr(trace_op(align, zero), h, size, align);
        fa__dbg_hook_alloc(p, size);
        return p;
    }
    void *p = mode_alloc(size, align, zero);
    fa__dbg_hook_alloc(p, size);
    if (tracing())
        fa__trace_alloc(trace_op(align, zero), p, size, align);
    return p;
}

void fa__dbg_free(void *p)
{
    if (p == NULL)
        return;
    if (traced()) {
        /* As outside the modes, a free trusts its pointer (the block's own
         * checks stop a bad large one). */
        struct fa__trace_hdr *h = (struct fa__trace_hdr *)((char *)p - FA_TRACE_HDR);
        if (FA_UNLIKELY(fa__diag_on() & FA_DIAG_HOOKS))
            fa__dbg_hook_free(p, fa__dbg_traced_usable(p, "free"));
        fa__trace_free_hdr(h);
        fa__tc_free_slow((char *)h - h->off);
        return;
    }
    if (checked()) {
        struct fa__dbg_hdr *h = fa__dbg_check_ptr(p, "free");
        if (h != NULL) {
            fa__dbg_hook_free(p, h->size);
            if (tracing())
                fa__trace_free(p);
        }
        fa__dbg_checked_free(p);
        return;
    }
    fa__dbg_hook_free(p, fa__dbg_plain_usable(p, "free"));
    if (tracing())
        fa__trace_free(p);
    plain_free(p);
}

void *fa__dbg_realloc(void *p, size_t size)
{
    if (p == NULL)
        return fa__dbg_alloc(size, 0, false);
    if (size == 0) {
        fa__dbg_free(p);
        return NULL;
    }
    fa__decay_maybe();
    if (traced()) {
        struct fa__trace_hdr *oh = fa__dbg_traced_hdr_or_die(p, "realloc"), *nh;
        size_t old = fa__dbg_traced_usable(p, "realloc");
        void *n = fa__dbg_traced_alloc(size, 0, false, &nh);
        if (n == NULL)
            return NULL; /* p stays valid */
        fa__memcpy(n, p, old < size ? old : size);
        fa__dbg_hook_alloc(n, size);
        fa__dbg_hook_free(p, old);
        fa__trace_realloc_hdr(oh, nh, size);
        fa__tc_free_slow((char *)oh - oh->off);
        return n;
    }
    size_t old;
    if (checked()) {
        struct fa__dbg_hdr *h = fa__dbg_check_ptr(p, "realloc");
        if (h == NULL) {
            errno = EINVAL;
            return NULL;
        }
        fa__dbg_canary_ok(h, "realloc");
        old = h->size;
    } else {
        old = fa__dbg_plain_usable(p, "realloc");
    }
    void *n = mode_alloc(size, 0, false);
    if (n == NULL)
        return NULL; /* p stays valid */
    fa__memcpy(n, p, old < size ? old : size);
    /* Hooks see a move as an allocation and a free; a trace, as a realloc
     * that keeps the block's id. */
    fa__dbg_hook_alloc(n, size);
    fa__dbg_hook_free(p, old);
    if (tracing())
        fa__trace_realloc(p, n, size);
    if (checked())
        fa__dbg_checked_free(p);
    else
        plain_free(p);
    return n;
}

size_t fa__dbg_usable(void *p)
{
    if (p == NULL)
        return 0;
    if (traced())
        return fa__dbg_traced_usable(p, "malloc_usable_size");
    return checked() ? fa__dbg_checked_usable(p) : fa__dbg_plain_usable(p, "malloc_usable_size");
}

int fa__dbg_owns(const void *p)
{
    if (traced())
        return fa__dbg_traced_hdr(p) != NULL;
    return fa__dbg_checked_owns(p);
}

/* The lock of checked blocks' live list and quarantine (checked.c), and
 * the profile's (profile.c). */
void fa__dbg_lock_for_fork(void)
{
    fa__dbg_live_lock();
    fa__prof_lock_for_fork();
}

void fa__dbg_unlock_for_fork(void)
{
    fa__prof_unlock_for_fork();
    fa__dbg_live_unlock();
}
