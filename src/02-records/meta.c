#include "02-records/meta.h"
#include "01-os/os.h"

#define META_CHUNK ((size_t)1 << 20)

fa__lock_t fa__meta_lock = FA_LOCK_INIT;
static char *meta_cur, *meta_end;
static size_t meta_mapped, meta_used;

void *fa__meta_alloc(size_t size)
{
    size = (size + FA_CACHELINE - 1) & ~(size_t)(FA_CACHELINE - 1);
    fa__lock(&fa__meta_lock);
    if ((size_t)(meta_end - meta_cur) < size) {
        size_t chunk = size > META_CHUNK ? (size + META_CHUNK - 1) & ~(META_CHUNK - 1) : META_CHUNK;
        /* The hardened build fences each chunk with a guard page on
         * either side: an overflow of a neighbouring mapping (a large
         * block, a span) cannot reach the allocator's records. */
        char *p = fa__os_map(chunk + 2 * FA_SECURE * FA_PAGE_SIZE, 0);
        if (p == NULL) {
            fa__unlock(&fa__meta_lock);
            return NULL;
        }
        if (FA_SECURE) {
            fa__os_guard(p, FA_PAGE_SIZE);
            fa__os_guard(p + FA_PAGE_SIZE + chunk, FA_PAGE_SIZE);
            p += FA_PAGE_SIZE;
        }
        meta_mapped += chunk;
        /* The rest of the old chunk is abandoned: metadata is small and
         * long-lived, so the loss is bounded by one object per chunk. */
        meta_cur = p;
        meta_end = p + chunk;
    }
    void *r = meta_cur;
    meta_cur += size;
    __atomic_store_n(&meta_used, meta_used + size, __ATOMIC_RELAXED);
    fa__unlock(&fa__meta_lock);
    return r;
}

size_t fa__meta_bytes(void)
{
    return __atomic_load_n(&meta_mapped, __ATOMIC_RELAXED);
}

size_t fa__meta_used(void)
{
    return __atomic_load_n(&meta_used, __ATOMIC_RELAXED);
}
