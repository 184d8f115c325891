/* Radix-tree page map.  Leaves are mapped straight from the OS on first use;
 * their 8.5 MiB are virtual until the pages of the map that describe live
 * memory are written: 17 bytes per 8 KiB page (owner, span, class), so a
 * process that uses 100 MiB touches about 220 KiB of it. */
#include "02-records/pagemap.h"
#include "01-os/os.h"
#include "02-records/span.h"

struct fa__pm_dir fa__pm_dir __attribute__((aligned(4096)));
_Static_assert(sizeof(struct fa__pm_dir) == sizeof(((struct fa__pm_leaf *)0)->owner),
               "a missing leaf's owners are read inside the directory");

/* The leaves mapped, for fa__pm_resident: a heap spans one or two 4 GiB
 * ranges, so the first few are all there is to count. */
#define LEAVES_LISTED 8
static struct fa__pm_leaf *leaves[LEAVES_LISTED];
static unsigned nleaves;

static bool ensure_leaf(size_t root_index)
{
    if (fa__pm_dir.root[root_index] != 0)
        return true;
    char *m = fa__os_map(sizeof(struct fa__pm_leaf) + FA_PM_BIAS, 0);
    if (m == NULL)
        return false;
    struct fa__pm_leaf *leaf = (struct fa__pm_leaf *)(m + FA_PM_BIAS);
    __atomic_store_n(&fa__pm_dir.root[root_index], (uintptr_t)leaf - (uintptr_t)&fa__pm_dir, __ATOMIC_RELEASE);
    unsigned n = __atomic_load_n(&nleaves, __ATOMIC_RELAXED);
    if (n < LEAVES_LISTED) {
        __atomic_store_n(&leaves[n], (struct fa__pm_leaf *)m, __ATOMIC_RELAXED); /* mincore's page */
        __atomic_store_n(&nleaves, n + 1, __ATOMIC_RELEASE);
    }
    return true;
}

size_t fa__pm_resident(void)
{
    size_t bytes = 0;
    unsigned n = __atomic_load_n(&nleaves, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n; i++)
        bytes += fa__os_resident(__atomic_load_n(&leaves[i], __ATOMIC_RELAXED), sizeof(struct fa__pm_leaf) + FA_PM_BIAS);
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
    struct fa__pm_leaf *leaf = fa__pm_leaf_of(a);
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
        struct fa__pm_leaf *leaf = fa__pm_leaf_of(a);
        uintptr_t leaf_end = (a | (((uintptr_t)1 << 32) - 1)) + 1;
        size_t i = fa__pm_index(a), n = ((leaf_end < end ? leaf_end : end) - a) >> FA_PAGE_SHIFT;
        for (size_t k = 0; k < n; k++)
            __atomic_store_n(&leaf->owner[i + k], owner, __ATOMIC_RELAXED);
        a += n << FA_PAGE_SHIFT;
    }
}

/* The huge spans' slots: written under the page-heap lock, read by anyone
 * (a reader that races a block's free or resize is in a race of the
 * program's own). */
struct fa__span *fa__pm_huge[FA_PM_HUGE_SLOTS];
unsigned fa__pm_nhuge;

static bool holds(const struct fa__span *s, uintptr_t a)
{
    return s != NULL && a >= s->start && a - s->start < (uintptr_t)s->npages * FA_PAGE_SIZE;
}

struct fa__span *fa__pm_huge_find(uintptr_t a)
{
    unsigned n = __atomic_load_n(&fa__pm_nhuge, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n; i++) {
        struct fa__span *s = __atomic_load_n(&fa__pm_huge[i], __ATOMIC_ACQUIRE);
        if (holds(s, a))
            return s;
    }
    return NULL;
}

struct fa__span *fa__pm_span_holding(uintptr_t a)
{
    /* The slots first: inside a huge span, a page's entry is whatever an
     * older span left there, and the record it names may hold the page
     * still, as a record no span uses. */
    if (__atomic_load_n(&fa__pm_nhuge, __ATOMIC_RELAXED) != 0) {
        struct fa__span *h = fa__pm_huge_find(a);
        if (h != NULL)
            return h;
    }
    struct fa__span *s = fa__pm_span(a);
    return holds(s, a) ? s : NULL;
}

static bool is_huge(const struct fa__span *s)
{
    unsigned n = fa__pm_nhuge;
    for (unsigned i = 0; i < n; i++)
        if (fa__pm_huge[i] == s)
            return true;
    return false;
}

/* A slot for s; false when all are taken. */
static bool huge_add(struct fa__span *s)
{
    for (unsigned i = 0; i < FA_PM_HUGE_SLOTS; i++) {
        if (fa__pm_huge[i] == NULL) {
            __atomic_store_n(&fa__pm_huge[i], s, __ATOMIC_RELEASE);
            if (i >= fa__pm_nhuge)
                __atomic_store_n(&fa__pm_nhuge, i + 1, __ATOMIC_RELEASE);
            return true;
        }
    }
    return false;
}

void fa__pm_huge_drop(struct fa__span *s)
{
    unsigned n = fa__pm_nhuge;
    for (unsigned i = 0; i < n; i++) {
        if (fa__pm_huge[i] == s) {
            __atomic_store_n(&fa__pm_huge[i], NULL, __ATOMIC_RELEASE);
            while (n > 0 && fa__pm_huge[n - 1] == NULL)
                n--;
            __atomic_store_n(&fa__pm_nhuge, n, __ATOMIC_RELEASE);
            return;
        }
    }
}

void fa__pm_set_large(struct fa__span *s, uintptr_t start, size_t npages)
{
    uintptr_t last = start + (npages - 1) * FA_PAGE_SIZE;
    if (is_huge(s) || (s->npages > FA_PM_HUGE_PAGES && huge_add(s))) {
        /* Its first page for a free's look-up, its last for the page
         * heap's merge with the span after it. */
        if (start == s->start)
            fa__pm_set_one(start, s, 0);
        fa__pm_set_one(last, s, 0);
        return;
    }
    for (uintptr_t a = start; a <= last; a += FA_PAGE_SIZE)
        fa__pm_set_one(a, s, 0);
}
