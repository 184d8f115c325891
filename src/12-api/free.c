/* free, and the sized frees. */
#include "fastalloc.h"
#include "12-api/fastpath.h"
#include "12-api/override.h"
#include "00-base/diag.h"
#include "09-diag/debug.h"

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
