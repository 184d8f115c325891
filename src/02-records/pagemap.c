/* Radix-tree page map.  Leaves are mapped straight from the OS on first use;
 * their 8.5 MiB are virtual until the pages of the map that describe live
 * memory are written: 17 bytes per 8 KiB page (owner, span, class), so a
 * process that uses 100 MiB touches about 220 KiB of it. */
#include "02-records/pagemap.h"
#include "01-os/os.h"

struct fa__pm_leaf *fa__pm_root[FA_PM_ROOT_LEN];

/* The leaves mapped, for fa__pm_resident: a heap spans one or two 4 GiB
 * ranges, so the first few are all there is to count. */
#define LEAVES_LISTED 8
static struct fa__pm_leaf *leaves[LEAVES_LISTED];
static unsigned nleaves;

static bool ensure_leaf(size_t root_index)
{
    if (fa__pm_root[root_index] != NULL)
        return true;
    struct fa__pm_leaf *leaf = fa__os_map(sizeof(struct fa__pm_leaf), 0);
    if (leaf == NULL)
        return false;
    __atomic_store_n(&fa__pm_root[root_index], leaf, __ATOMIC_RELEASE);
    unsigned n = __atomic_load_n(&nleaves, __ATOMIC_RELAXED);
    if (n < LEAVES_LISTED) {
        __atomic_store_n(&leaves[n], leaf, __ATOMIC_RELAXED);
        __atomic_store_n(&nleaves, n + 1, __ATOMIC_RELEASE);
    }
    return true;
}

size_t fa__pm_resident(void)
{
    size_t bytes = 0;
    unsigned n = __atomic_load_n(&nleaves, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n; i++)
        bytes += fa__os_resident(__atomic_load_n(&leaves[i], __ATOMIC_RELAXED), sizeof(struct fa__pm_leaf));
    return bytes;
}

bool fa__pm_reserve(uintptr_t start, size_t npages)
{
    uintptr_t last = start + npages * FA_PAGE_SIZE - 1;
    for (uintptr_t r = start >> 32; r <= (last >> 32); r++) {
        if (r >= FA_PM_ROOT_LEN || !ensure_leaf(r))
            return false;
    }
    return true;
}

void fa__pm_set_one(uintptr_t a, struct fa__span *span, unsigned cls)
{
    struct fa__pm_leaf *leaf = fa__pm_root[(a >> 32) & (FA_PM_ROOT_LEN - 1)];
    size_t i = fa__pm_index(a);
    __atomic_store_n(&leaf->span[i], span, __ATOMIC_RELAXED);
    __atomic_store_n(&leaf->cls[i], (uint8_t)cls, __ATOMIC_RELAXED);
}

void fa__pm_set(uintptr_t start, size_t npages, struct fa__span *span, unsigned cls)
{
    for (size_t i = 0; i < npages; i++)
        fa__pm_set_one(start + i * FA_PAGE_SIZE, span, cls);
    fa__pm_set_owner(start, npages, NULL);
}

void fa__pm_set_owner(uintptr_t start, size_t npages, const void *owner)
{
    /* Spans change hands often: one leaf lookup per leaf, not per page. */
    uintptr_t a = start, end = start + npages * FA_PAGE_SIZE;
    while (a < end) {
        struct fa__pm_leaf *leaf = fa__pm_root[(a >> 32) & (FA_PM_ROOT_LEN - 1)];
        uintptr_t leaf_end = (a | (((uintptr_t)1 << 32) - 1)) + 1;
        size_t i = fa__pm_index(a), n = ((leaf_end < end ? leaf_end : end) - a) >> FA_PAGE_SHIFT;
        for (size_t k = 0; k < n; k++)
            __atomic_store_n(&leaf->owner[i + k], owner, __ATOMIC_RELAXED);
        a += n << FA_PAGE_SHIFT;
    }
}
