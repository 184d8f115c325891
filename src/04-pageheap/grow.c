/* The page heap's growth from the OS, and the memory limit.  The heap
 * grows upwards through a reserve of address space mapped with no access,
 * made read-write in steps, so that it stays one range as long as the OS
 * allows; each growth is a free span, joined to the one at the heap's top.
 * The limit counts what is in use or free but resident.
 *
 * The hardened build keeps what no span uses yet without access: a fresh
 * reserve's first BOTTOM_GUARD bytes are never used, and its pages become
 * read-write only when a span is handed out (fa__ph_commit_to), up to the
 * span's end rounded up to COMMIT_STEP.  A write far past the heap's last
 * span, or far below its first, faults instead of landing in memory that
 * some later span will hand out (docs/SECURITY.md, "Reserve"). */
#include "04-pageheap/heap_int.h"
#include "00-base/options.h"
#include "01-os/os.h"
#include "02-records/pagemap.h"

#define GROW_ALIGN ((size_t)2 << 20) /* the heap grows by huge pages */
#define RESERVE_SIZE ((size_t)1 << 30) /* address space reserved at a time */
/* A request of less than GROW_EXACT_MIN grows the heap by at least
 * grow_next, which doubles from GROW_MIN to GROW_MAX; a larger one by what
 * it lacks.  See fa__ph_grow(). */
#define GROW_EXACT_MIN ((size_t)1 << 20)
#define GROW_MIN ((size_t)4 << 20)
#define GROW_MAX ((size_t)64 << 20)
#define COMMIT_MIN ((size_t)4 << 20)   /* made read-write at a time: 4 MiB, */
#define COMMIT_MAX ((size_t)64 << 20)  /* doubling up to 64 MiB */
/* Measuring knob: -DFA_SECURE_RESERVE=0 makes a hardened build grow as
 * the default one does.  Not a build anyone ships. */
#ifndef FA_SECURE_RESERVE
#define FA_SECURE_RESERVE FA_SECURE
#endif
#if FA_SECURE_RESERVE
#define BOTTOM_GUARD GROW_ALIGN /* keeps the heap aligned to huge pages */
/* Less than the 1 MiB a wild write is commonly tried at, and a quarter of
 * the mprotect calls of one per 64 KiB span. */
#define COMMIT_STEP ((size_t)256 << 10)
#else
#define BOTTOM_GUARD ((size_t)0)
#endif

/* Under the page heap's lock, like all of its state.
 * The reserve: address space above the heap's top, [res_lo, res_hi),
 * mapped with no access.  The heap grows into it from res_lo up
 * (res_start: where the heap's part of this reserve begins).  See
 * fa__ph_grow(). */
static uintptr_t res_start, res_lo, res_hi;
/* [res_lo, res_rw) is read-write already (untouched): mprotect takes
 * the process's mmap lock for writing, which stalls every other
 * thread's page faults, so it runs in steps that double up to 64 MiB,
 * as the mmap calls of the old growth did, not at every growth.  In the
 * hardened build res_rw trails res_lo instead: [res_rw, res_lo) is heap,
 * free spans, with no access until handed out. */
static uintptr_t res_rw;
/* The ranges the heap grew into, for fa__ph_heap_resident: one per reserve
 * that could not sit right above the last, so a few in any program. */
#define RANGES_LISTED 16
static struct {
    uintptr_t lo, hi;
} ranges[RANGES_LISTED];
static unsigned nranges;
static size_t commit_next, grow_next;

/* Bytes that count against the memory limit: in use, or free but resident. */
static size_t committed(void)
{
    return fa__ph.st.small_bytes + fa__ph.st.large_bytes + fa__ph.st.dirty_bytes;
}

/* Reserve address space for at least size more bytes of heap, right above
 * the heap's top if the OS allows, so that the heap stays one range. */
static bool reserve(size_t size)
{
    size_t len = size > RESERVE_SIZE ? size : RESERVE_SIZE;
    if (res_hi != 0 && fa__os_reserve((void *)res_hi, len, 0) != NULL) {
        if (!fa__pm_reserve(res_hi, len / FA_PAGE_SIZE)) {
            fa__os_unmap((void *)res_hi, len);
            return false;
        }
        res_hi += len;
        return true; /* res_rw stays: the new part is not read-write yet */
    }
    void *p = fa__os_reserve(NULL, len + BOTTOM_GUARD, GROW_ALIGN);
    if (p == NULL && len > size) { /* RLIMIT_AS, or a small address space */
        len = size;
        p = fa__os_reserve(NULL, len + BOTTOM_GUARD, GROW_ALIGN);
    }
    if (p == NULL)
        return false;
    if (!fa__pm_reserve((uintptr_t)p, (len + BOTTOM_GUARD) / FA_PAGE_SIZE)) {
        fa__os_unmap(p, len + BOTTOM_GUARD);
        return false;
    }
    /* The old range's free spans that were never handed out become
     * read-write now: fa__ph_commit_to looks after the current range only. */
    if (res_rw < res_lo && !fa__os_commit((void *)res_rw, res_lo - res_rw)) {
        fa__os_unmap(p, len + BOTTOM_GUARD);
        return false;
    }
    if (res_hi > res_lo) /* what is left of the old one is too small */
        fa__os_unmap((void *)res_lo, res_hi - res_lo);
    res_start = res_lo = res_rw = (uintptr_t)p + BOTTOM_GUARD;
    res_hi = res_start + len;
    return true;
}

/* Bytes of growth that make a span of npages pages free: what the free span
 * at the top of the current range lacks, in whole huge pages (0 on
 * overflow). */
static size_t growth_for(size_t npages)
{
    size_t top = 0;
    if (res_lo > res_start) {
        struct fa__span *t = fa__ph_free_neighbour(res_lo - FA_PAGE_SIZE);
        if (t != NULL && t->npages < npages)
            top = t->npages;
    }
    size_t want = (npages - top) * FA_PAGE_SIZE;
    size_t size = (want + GROW_ALIGN - 1) & ~(GROW_ALIGN - 1);
    return size < want ? 0 : size;
}

/* Grow the heap so that a span of npages pages is free.  The growth joins the
 * free span at the heap's top, if there is one.
 * - For a request of 1 MiB or more, it is only what that span lacks, in
 *   whole huge pages: fresh pages are touched only when no free span fits,
 *   which keeps the resident heap close to the most ever in use when large
 *   blocks of varied sizes churn.  Growing by chunks that doubled up to
 *   64 MiB, with best fit over all of them, touched every page of every
 *   chunk in time instead, and the churning program's resident heap ended
 *   well above its most in use.
 * - For a smaller one (spans for small blocks, large blocks under 1 MiB) it
 *   is at least grow_next, 4 MiB doubling up to 64 MiB, as before: growing
 *   by 2 MiB steps for them raised the peak resident memory of programs
 *   with many threads (docs/HISTORY.md). */
bool fa__ph_grow(size_t npages)
{
    size_t size = growth_for(npages);
    if (size == 0)
        return false;
    if (res_hi - res_lo < size) {
        /* Ask for the whole request: a reserve that cannot sit right above
         * the old one starts a new range, where the old top is no help. */
        size_t full = (npages * FA_PAGE_SIZE + GROW_ALIGN - 1) & ~(GROW_ALIGN - 1);
        if (full < size || !reserve(full))
            return false;
        size = growth_for(npages);
    }
    if (npages * FA_PAGE_SIZE < GROW_EXACT_MIN) {
        if (grow_next < GROW_MIN)
            grow_next = GROW_MIN;
        if (size < grow_next)
            size = grow_next;
        if (grow_next < GROW_MAX)
            grow_next *= 2;
        if (size > res_hi - res_lo)
            size = res_hi - res_lo; /* the rest of the reserve holds the request */
    }
    void *p = (void *)res_lo;
    if (!FA_SECURE_RESERVE && res_lo + size > res_rw) {
        if (commit_next < COMMIT_MIN)
            commit_next = COMMIT_MIN;
        size_t c = res_lo + size - res_rw;
        if (c < commit_next)
            c = commit_next;
        if (c > res_hi - res_rw)
            c = res_hi - res_rw;
        if (!fa__os_commit((void *)res_rw, c))
            return false;
        res_rw += c;
        if (commit_next < COMMIT_MAX)
            commit_next *= 2;
    }
    struct fa__span *s = fa__ph_span_new();
    if (s == NULL)
        return false;
    res_lo += size;
    fa__ph.st.mapped_bytes += size;
    if (nranges > 0 && ranges[nranges - 1].hi == (uintptr_t)p) {
        ranges[nranges - 1].hi = res_lo;
    } else if (nranges < RANGES_LISTED) {
        ranges[nranges].lo = (uintptr_t)p;
        ranges[nranges++].hi = res_lo;
    }
    if (fa__opt.hugepages)
        fa__os_hugepage(p, size);
    s->start = (uintptr_t)p;
    s->npages = size / FA_PAGE_SIZE;
    s->zeroed = 1;
    fa__ph_coalesce_insert(s);
    return true;
}

bool fa__ph_commit_to(uintptr_t lo, uintptr_t hi)
{
#if FA_SECURE_RESERVE
    if (hi <= res_rw || lo >= res_lo || hi <= res_start)
        return true; /* read-write already, or another range's */
    uintptr_t end = res_rw + ((hi - res_rw + COMMIT_STEP - 1) & ~(COMMIT_STEP - 1));
    if (end > res_lo || end < hi)
        end = res_lo;
    if (!fa__os_commit((void *)res_rw, end - res_rw))
        return false;
    res_rw = end;
#else
    (void)lo;
    (void)hi;
#endif
    return true;
}

/* Would taking npages pages out of span s break the memory limit? */
bool fa__ph_over_limit(const struct fa__span *s, size_t npages)
{
    if (fa__opt.limit == 0)
        return false;
    /* The dirty pages are taken to lie in the part taken: they are counted
     * as committed already. */
    size_t add = (npages - (s->dirty ? dirty_part(s->ndirty, npages) : 0)) * FA_PAGE_SIZE;
    return committed() + add > fa__opt.limit;
}

size_t fa__ph_heap_resident(void)
{
    uintptr_t lo[RANGES_LISTED], hi[RANGES_LISTED];
    fa__lock(&fa__ph_lock);
    unsigned n = nranges;
    for (unsigned i = 0; i < n; i++) {
        lo[i] = ranges[i].lo;
        hi[i] = ranges[i].hi;
    }
    fa__unlock(&fa__ph_lock);
    size_t bytes = 0;
    for (unsigned i = 0; i < n; i++)
        bytes += fa__os_resident((void *)lo[i], hi[i] - lo[i]);
    return bytes;
}
