/* free, and the sized frees. */
#include "fastalloc.h"
#include "12-api/fastpath.h"
#include "12-api/override.h"
#include "00-base/diag.h"
#include "09-diag/debug.h"

void fa__api_free_unmapped(void *p)
{
    if (FA_UNLIKELY(fa__diag_on()))
        fa__dbg_free(p);
    else
        fa__tc_free_slow(p); /* NULL, or no block: the large-block check stops a bad one */
}

void fa__api_free_misaligned(void *p)
{
    if (FA_UNLIKELY(fa__diag_on()))
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
    if (FA_UNLIKELY(fa__diag_on())) {
        fa__tc_leave();
        fa__dbg_free(p);
        return;
    }
    unsigned cls = fa__pm_class((uintptr_t)p);
    if (cls != 0)
        fa__fl_poison(p, fa__classes[cls].size);
    fa__tc_free_slow(p);
}

FA_HOT_ENTRY void fa_free(void *p)
{
    fa__do_free(p);
}

FA_HOT_ENTRY void fa_free_sized(void *p, size_t size)
{
    /* The block's span is read from the page map all the same: a free goes
     * to the span, whatever its size. */
    (void)size;
    fa__do_free(p);
}

void fa_free_aligned_sized(void *p, size_t align, size_t size)
{
    (void)align;
    (void)size;
    fa__do_free(p);
}

#ifdef FA_OVERRIDE
FA_ALIAS(free, fa_free);
FA_ALIAS(free_sized, fa_free_sized);
FA_ALIAS(free_aligned_sized, fa_free_aligned_sized);
FA_ALIAS(__libc_free, fa_free);
FA_ALIAS(cfree, fa_free);
#endif
