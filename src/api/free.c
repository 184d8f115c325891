/* free, and the sized frees. */
#include "fastalloc.h"
#include "api/fastpath.h"
#include "api/override.h"

FA_HOT_ENTRY void fa_free(void *p)
{
    fa__do_free(p);
}

FA_HOT_ENTRY void fa_free_sized(void *p, size_t size)
{
    /* The size names the class, so the page map is not read.  Only the
     * first table is used: it is filled once initialised, and p != NULL
     * means a block was handed out, so initialisation is done. */
    if (FA_LIKELY(size <= FA_SMALL_TABLE_MAX && p != NULL)) {
        fa__free_to_class(p, fa__class_small[(size + 7) >> 3]);
        return;
    }
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
