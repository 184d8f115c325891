/* Aligned allocation: posix_memalign, aligned_alloc, memalign, valloc,
 * pvalloc.  An alignment up to a page is a size class whose blocks all
 * have it; above, a large block whose span starts aligned. */
#include "fastalloc.h"
#include "12-api/fastpath.h"
#include "12-api/override.h"
#include "00-base/diag.h"
#include "01-os/sys.h"
#include "11-init/init.h"

#include <errno.h>
#include <unistd.h>

/* align is a power of two. */
static void *alloc_aligned(size_t align, size_t size)
{
    if (align <= FA_MIN_ALIGN) /* every block is */
        return fa__do_malloc(size);
    if (FA_UNLIKELY(size > FA_MAX_REQUEST)) {
        errno = ENOMEM;
        return NULL;
    }
    fa__ensure_init();
    if (FA_UNLIKELY(fa__diag_every()))
        return fa__api_alloc_diag(size, align, false);
    unsigned cls = fa__class_for_aligned(size + FA_TAIL, align);
    if (cls != 0) {
        /* A class of its own size, and a tail for size. */
        void *p = fa__do_malloc(fa__classes[cls].size - FA_TAIL);
        if (p != NULL)
            fa__tail_set(p, fa__tail_n(size, fa__classes[cls].size), fa__classes[cls].size);
        return p;
    }
    return fa__api_alloc_large(size, align, false);
}

static bool is_pow2(size_t x)
{
    return x != 0 && (x & (x - 1)) == 0;
}

int fa_posix_memalign(void **out, size_t align, size_t size)
{
    if (!is_pow2(align) || align % sizeof(void *) != 0)
        return EINVAL;
    int saved = errno;
    void *p = alloc_aligned(align, size);
    errno = saved;
    if (p == NULL)
        return ENOMEM;
    *out = p;
    return 0;
}

void *fa_aligned_alloc(size_t align, size_t size)
{
    if (!is_pow2(align)) {
        errno = EINVAL;
        return NULL;
    }
    return alloc_aligned(align, size);
}

void *fa_memalign(size_t align, size_t size)
{
    /* glibc's bound: above half the address space, EINVAL; below it, an
     * alignment no heap can meet is ENOMEM, as any size it cannot. */
    if (align > ((size_t)1 << (sizeof(size_t) * 8 - 1))) {
        errno = EINVAL;
        return NULL;
    }
    if (align < sizeof(void *))
        align = sizeof(void *);
    if (!is_pow2(align)) /* glibc rounds up to the next power of two */
        align = (size_t)1 << (sizeof(size_t) * 8 - (size_t)__builtin_clzl(align));
    return alloc_aligned(align, size);
}

void *fa_valloc(size_t size)
{
    return alloc_aligned(fa__os_page_size(), size);
}

void *fa_pvalloc(size_t size)
{
    size_t pg = fa__os_page_size();
    if (size > FA_MAX_REQUEST) {
        errno = ENOMEM;
        return NULL;
    }
    size = size == 0 ? pg : (size + pg - 1) & ~(pg - 1);
    return alloc_aligned(pg, size);
}

#ifdef FA_OVERRIDE
FA_ALIAS(memalign, fa_memalign);
FA_ALIAS(posix_memalign, fa_posix_memalign);
FA_ALIAS(aligned_alloc, fa_aligned_alloc);
FA_ALIAS(valloc, fa_valloc);
FA_ALIAS(pvalloc, fa_pvalloc);
FA_ALIAS(__libc_memalign, fa_memalign);
FA_ALIAS(__libc_valloc, fa_valloc);
FA_ALIAS(__libc_pvalloc, fa_pvalloc);
FA_ALIAS(__posix_memalign, fa_posix_memalign);
#endif
