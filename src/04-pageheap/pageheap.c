/* Page heap.  One lock guards it: it is reached only when a central cache
 * needs a new span, or gives an empty one back, and for large blocks, so the
 * lock is taken once per tens of kilobytes allocated at most.
 *
 * Invariant: no two free spans are adjacent (they would have been merged), and
 * the first and last page of every free span map to it in the page map, which
 * is what lets a span find its neighbours in O(1). */
#include "04-pageheap/pageheap.h"
#include "00-base/asan.h"
#include "00-base/clock.h"
#include "00-base/options.h"
#include "02-records/meta.h"
#include "02-records/pagemap.h"
#include "01-os/os.h"
#include "03-purge/purge.h"

#include <errno.h>
#include <sched.h>

#define EXACT_LISTS 128 /* free spans of 1..128 pages have a list each */
#define GROW_ALIGN ((size_t)2 << 20) /* the heap grows by huge pages */
#define RESERVE_SIZE ((size_t)1 << 30) /* address space reserved at a time */
/* A request of less than GROW_EXACT_MIN grows the heap by at least
 * grow_next, which doubles from GROW_MIN to GROW_MAX; a larger one by what
 * it lacks.  See grow(). */
#define GROW_EXACT_MIN ((size_t)1 << 20)
#define GROW_MIN ((size_t)4 << 20)
#define GROW_MAX ((size_t)64 << 20)
#define COMMIT_MIN ((size_t)4 << 20)   /* made read-write at a time: 4 MiB, */
#define COMMIT_MAX ((size_t)64 << 20)  /* doubling up to 64 MiB */
#define HUGE_PAGE ((size_t)2 << 20)
#define PURGE_SCAN_MAX 256 /* spans looked at by one timed purge */

static fa__lock_t fa__ph_lock = FA_LOCK_INIT;

static struct {
    struct fa__span exact[EXACT_LISTS + 1]; /* sentinels, [0] unused */
    struct fa__span big;                    /* sentinel: spans > EXACT_LISTS */
    struct fa__span *spare;                 /* recycled span records */
    /* The reserve: address space above the heap's top, [res_lo, res_hi),
     * mapped with no access.  The heap grows into it from res_lo up
     * (res_start: where the heap's part of this reserve begins).  See
     * grow(). */
    uintptr_t res_start, res_lo, res_hi;
    /* [res_lo, res_rw) is read-write already (untouched): mprotect takes
     * the process's mmap lock for writing, which stalls every other
     * thread's page faults, so it runs in steps that double up to 64 MiB,
     * as the mmap calls of the old growth did, not at every growth. */
    uintptr_t res_rw;
    size_t commit_next, grow_next;
    struct fa__span dirty;                  /* sentinel: dirty spans, oldest first */
    uint64_t last_decay_ms;
    /* Spans off the lists while a thread madvises them without the lock, and
     * a count bumped each time such a batch comes back: an allocation that
     * finds nothing while pages are in flight waits for them instead of
     * mapping more (each growth is up to 64 MiB, and under preemption a
     * purge can stay in flight long enough for several). */
    size_t purging_pages;
    unsigned purge_gen;
    struct fa__ph_stats st;
} ph;

static void dirty_push(struct fa__span *s)
{
    s->dnext = &ph.dirty;
    s->dprev = ph.dirty.dprev;
    ph.dirty.dprev->dnext = s;
    ph.dirty.dprev = s;
    ph.st.dirty_bytes += (size_t)s->ndirty * FA_PAGE_SIZE;
}

static void dirty_del(struct fa__span *s)
{
    s->dprev->dnext = s->dnext;
    s->dnext->dprev = s->dprev;
    s->dnext = s->dprev = NULL;
    ph.st.dirty_bytes -= (size_t)s->ndirty * FA_PAGE_SIZE;
}

/* A part cut from a dirty span keeps at most its own size of dirty pages:
 * where in the span they lie is not known. */
static uint32_t dirty_part(uint32_t ndirty, size_t npages)
{
    return ndirty < npages ? ndirty : (uint32_t)npages;
}

static uint32_t now32(void)
{
    return (uint32_t)fa__now_ms();
}

/* Bytes that count against the memory limit: in use, or free but resident. */
static size_t committed(void)
{
    return ph.st.small_bytes + ph.st.large_bytes + ph.st.dirty_bytes;
}

static void list_init(struct fa__span *h) { h->next = h->prev = h; }

static void list_push(struct fa__span *h, struct fa__span *s)
{
    s->next = h->next;
    s->prev = h;
    h->next->prev = s;
    h->next = s;
}

static void list_del(struct fa__span *s)
{
    s->prev->next = s->next;
    s->next->prev = s->prev;
    s->next = s->prev = NULL;
}

/* In a child of fork(), a batch another parent thread was purging never
 * comes back (its list was on that thread's stack): nothing may wait for it.
 * Its pages stay lost to the child's heap. */
void fa__ph_after_fork_child(void)
{
    ph.purging_pages = 0;
}

void fa__ph_init(void)
{
    for (size_t i = 0; i <= EXACT_LISTS; i++)
        list_init(&ph.exact[i]);
    list_init(&ph.big);
    ph.dirty.dnext = ph.dirty.dprev = &ph.dirty;
}

static struct fa__span *span_new(void)
{
    struct fa__span *s = ph.spare;
    if (s != NULL) {
        ph.spare = s->next;
        __builtin_memset(s, 0, sizeof *s);
        return s;
    }
    /* Two cache lines a record, the second left empty: the hardware fetches
     * lines in aligned pairs, and the owner of a span writes its record at
     * every free, so two threads' spans whose records shared a pair slowed
     * each other (objpool-shuffle, 2 threads, 11 rounds: 16.1 -> 14.8 ms;
     * mimalloc 12.2). */
    return fa__meta_alloc(2 * FA_CACHELINE);
}

static void span_delete(struct fa__span *s)
{
    __atomic_store_n(&s->state, FA_SPAN_FREE, __ATOMIC_RELAXED);
    s->npages = 0;
    s->start = 0;
    s->next = ph.spare;
    ph.spare = s;
}

static struct fa__span *list_for(size_t npages)
{
    return npages <= EXACT_LISTS ? &ph.exact[npages] : &ph.big;
}

/* Put a free span on its list and publish its ends in the page map. */
static void insert_free(struct fa__span *s)
{
    __atomic_store_n(&s->state, FA_SPAN_FREE, __ATOMIC_RELAXED);
    s->cls = 0;
    fa__pm_set_one(s->start, s, 0);
    fa__pm_set_one(s->start + (s->npages - 1) * FA_PAGE_SIZE, s, 0);
    list_push(list_for(s->npages), s);
    ph.st.free_bytes += s->npages * FA_PAGE_SIZE;
    if (s->dirty)
        dirty_push(s);
}

static void remove_free(struct fa__span *s)
{
    list_del(s);
    ph.st.free_bytes -= s->npages * FA_PAGE_SIZE;
    if (s->dirty)
        dirty_del(s);
}

/* A merged span holds the dirty pages of its parts, and is as young as its
 * youngest dirty part. */
static void absorb(struct fa__span *s, const struct fa__span *part)
{
    s->zeroed &= part->zeroed;
    if (part->dirty) {
        if (!s->dirty) {
            s->free_since = part->free_since;
            s->ndirty = 0;
        } else if ((int32_t)(part->free_since - s->free_since) > 0) {
            s->free_since = part->free_since;
        }
        s->ndirty += part->ndirty;
        s->dirty = 1;
    }
}

static struct fa__span *free_neighbour(uintptr_t page_addr)
{
    struct fa__span *n = fa__pm_span(page_addr);
    /* An entry can be stale (the interior page of an old span), so the record
     * must both be free and really cover the page. */
    if (n == NULL || __atomic_load_n(&n->state, __ATOMIC_RELAXED) != FA_SPAN_FREE || n->npages == 0)
        return NULL;
    if (page_addr < n->start || page_addr >= n->start + n->npages * FA_PAGE_SIZE)
        return NULL;
    return n;
}

/* Merge s (not on any list) with its free neighbours and insert it. */
static void coalesce_insert(struct fa__span *s)
{
    struct fa__span *l = free_neighbour(s->start - FA_PAGE_SIZE);
    if (l != NULL) {
        remove_free(l);
        s->start = l->start;
        s->npages += l->npages;
        absorb(s, l);
        span_delete(l);
    }
    struct fa__span *r = free_neighbour(s->start + s->npages * FA_PAGE_SIZE);
    if (r != NULL) {
        remove_free(r);
        s->npages += r->npages;
        absorb(s, r);
        span_delete(r);
    }
    insert_free(s);
}

/* Reserve address space for at least size more bytes of heap, right above
 * the heap's top if the OS allows, so that the heap stays one range. */
static bool reserve(size_t size)
{
    size_t len = size > RESERVE_SIZE ? size : RESERVE_SIZE;
    if (ph.res_hi != 0 && fa__os_reserve((void *)ph.res_hi, len, 0) != NULL) {
        if (!fa__pm_reserve(ph.res_hi, len / FA_PAGE_SIZE)) {
            fa__os_unmap((void *)ph.res_hi, len);
            return false;
        }
        ph.res_hi += len;
        return true; /* res_rw stays: the new part is not read-write yet */
    }
    void *p = fa__os_reserve(NULL, len, GROW_ALIGN);
    if (p == NULL && len > size) { /* RLIMIT_AS, or a small address space */
        len = size;
        p = fa__os_reserve(NULL, len, GROW_ALIGN);
    }
    if (p == NULL)
        return false;
    if (!fa__pm_reserve((uintptr_t)p, len / FA_PAGE_SIZE)) {
        fa__os_unmap(p, len);
        return false;
    }
    if (ph.res_hi > ph.res_lo) /* what is left of the old one is too small */
        fa__os_unmap((void *)ph.res_lo, ph.res_hi - ph.res_lo);
    ph.res_start = ph.res_lo = ph.res_rw = (uintptr_t)p;
    ph.res_hi = (uintptr_t)p + len;
    return true;
}

/* Bytes of growth that make a span of npages pages free: what the free span
 * at the top of the current range lacks, in whole huge pages (0 on
 * overflow). */
static size_t growth_for(size_t npages)
{
    size_t top = 0;
    if (ph.res_lo > ph.res_start) {
        struct fa__span *t = free_neighbour(ph.res_lo - FA_PAGE_SIZE);
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
 *   chunk in time instead (large-churn: 460 MiB resident for 352 MiB at most
 *   in use, against 415).
 * - For a smaller one (spans for small blocks, large blocks under 1 MiB) it
 *   is at least grow_next, 4 MiB doubling up to 64 MiB, as before: growing
 *   by 2 MiB steps for them raised many-threads' peak RSS by 16% (median of
 *   40 runs: 60 MiB against 51; docs/HISTORY.md). */
static bool grow(size_t npages)
{
    size_t size = growth_for(npages);
    if (size == 0)
        return false;
    if (ph.res_hi - ph.res_lo < size) {
        /* Ask for the whole request: a reserve that cannot sit right above
         * the old one starts a new range, where the old top is no help. */
        size_t full = (npages * FA_PAGE_SIZE + GROW_ALIGN - 1) & ~(GROW_ALIGN - 1);
        if (full < size || !reserve(full))
            return false;
        size = growth_for(npages);
    }
    if (npages * FA_PAGE_SIZE < GROW_EXACT_MIN) {
        if (ph.grow_next < GROW_MIN)
            ph.grow_next = GROW_MIN;
        if (size < ph.grow_next)
            size = ph.grow_next;
        if (ph.grow_next < GROW_MAX)
            ph.grow_next *= 2;
        if (size > ph.res_hi - ph.res_lo)
            size = ph.res_hi - ph.res_lo; /* the rest of the reserve holds the request */
    }
    void *p = (void *)ph.res_lo;
    if (ph.res_lo + size > ph.res_rw) {
        if (ph.commit_next < COMMIT_MIN)
            ph.commit_next = COMMIT_MIN;
        size_t c = ph.res_lo + size - ph.res_rw;
        if (c < ph.commit_next)
            c = ph.commit_next;
        if (c > ph.res_hi - ph.res_rw)
            c = ph.res_hi - ph.res_rw;
        if (!fa__os_commit((void *)ph.res_rw, c))
            return false;
        ph.res_rw += c;
        if (ph.commit_next < COMMIT_MAX)
            ph.commit_next *= 2;
    }
    struct fa__span *s = span_new();
    if (s == NULL)
        return false;
    ph.res_lo += size;
    ph.st.mapped_bytes += size;
    if (fa__opt.hugepages)
        fa__os_hugepage(p, size);
    s->start = (uintptr_t)p;
    s->npages = size / FA_PAGE_SIZE;
    s->zeroed = 1;
    coalesce_insert(s);
    return true;
}

/* Best fit: smallest span that holds npages, lowest address among equals in
 * the big list, which keeps the heap compact. */
static struct fa__span *find_free(size_t npages)
{
    for (size_t n = npages; n <= EXACT_LISTS; n++) {
        if (ph.exact[n].next != &ph.exact[n])
            return ph.exact[n].next;
    }
    struct fa__span *best = NULL;
    for (struct fa__span *s = ph.big.next; s != &ph.big; s = s->next) {
        if (s->npages >= npages &&
            (best == NULL || s->npages < best->npages ||
             (s->npages == best->npages && s->start < best->start)))
            best = s;
    }
    return best;
}

/* Cut the first npages pages off free span s (already off its list); the rest
 * goes back as a free span. */
static bool split_tail(struct fa__span *s, size_t npages)
{
    if (s->npages == npages)
        return true;
    struct fa__span *t = span_new();
    if (t == NULL)
        return false;
    t->start = s->start + npages * FA_PAGE_SIZE;
    t->npages = s->npages - npages;
    t->zeroed = s->zeroed;
    t->dirty = s->dirty;
    t->free_since = s->free_since;
    t->ndirty = s->dirty ? dirty_part(s->ndirty, t->npages) : 0;
    s->npages = npages;
    insert_free(t);
    return true;
}

static void note_peak(void)
{
    size_t used = ph.st.large_bytes + ph.st.small_bytes;
    if (used > ph.st.peak_used_bytes)
        ph.st.peak_used_bytes = used;
}

static void mark_used(struct fa__span *s, unsigned state, unsigned cls)
{
    __atomic_store_n(&s->state, (uint8_t)state, __ATOMIC_RELAXED);
    s->cls = (uint8_t)cls;
    s->next = s->prev = NULL;
    s->dirty = 0;
    s->ndirty = 0;
    fa__pm_set(s->start, s->npages, s, cls);
    if (state == FA_SPAN_LARGE) {
        ph.st.large_bytes += s->npages * FA_PAGE_SIZE;
    } else {
        ph.st.small_bytes += s->npages * FA_PAGE_SIZE;
        ph.st.spans[cls]++;
    }
    note_peak();
}

/* Give a span's pages back to the OS.  With huge pages on, only whole
 * 2 MiB pages inside the span go, so no huge page is split.  Touches no
 * shared structure: callers may run it without the lock on a span they have
 * taken off every list. */
static size_t release_pages(struct fa__span *s)
{
    uintptr_t a = s->start, e = s->start + s->npages * FA_PAGE_SIZE;
    if (fa__opt.hugepages) {
        uintptr_t ha = (a + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
        uintptr_t he = e & ~(uintptr_t)(HUGE_PAGE - 1);
        if (ha != a || he != e)
            s->zeroed = 0;
        if (ha >= he)
            return 0;
        a = ha;
        e = he;
    }
    /* An AddressSanitizer build gives the shadow of the range back too:
     * without it, every purged byte that was poisoned would keep an eighth
     * of a byte resident.  Shadow pages read as zero again: unpoisoned. */
    uintptr_t slo, shi;
    fa__asan_shadow_pages(a, e - a, &slo, &shi);
    if (shi > slo)
        fa__os_release((void *)slo, shi - slo, false);
    fa__os_release((void *)a, e - a, fa__opt.purge_madv_free);
    if (!fa__opt.purge_madv_free && a == s->start)
        s->zeroed = (e == s->start + s->npages * FA_PAGE_SIZE);
    return e - a;
}

static size_t purge_span(struct fa__span *s)
{
    dirty_del(s);
    s->dirty = 0;
    s->ndirty = 0;
    size_t n = release_pages(s);
    ph.st.purged_bytes += n;
    ph.st.purges++;
    return n;
}

/* Purging outside the lock: dirty spans are taken off the lists (state
 * PURGING, so no neighbour merges with them and nobody allocates them), the
 * lock is dropped for the madvise calls, and they come back clean.  Other
 * threads' frees and allocations do not wait for the kernel. */
#define PURGE_BATCH 32

static unsigned detach_dirty(struct fa__span **out, size_t down_to)
{
    unsigned n = 0;
    while (n < PURGE_BATCH && ph.st.dirty_bytes > down_to && ph.dirty.dnext != &ph.dirty) {
        struct fa__span *s = ph.dirty.dnext;
        remove_free(s);
        __atomic_store_n(&s->state, FA_SPAN_PURGING, __ATOMIC_RELAXED);
        s->dirty = 0;
        s->ndirty = 0;
        ph.purging_pages += s->npages;
        out[n++] = s;
    }
    return n;
}

/* Called with the lock held; returns with it held. */
static void purge_detached(struct fa__span **spans, unsigned n)
{
    if (n == 0)
        return;
    fa__unlock(&fa__ph_lock);
    size_t bytes = 0;
    for (unsigned i = 0; i < n; i++)
        bytes += release_pages(spans[i]);
    fa__lock(&fa__ph_lock);
    ph.st.purged_bytes += bytes;
    ph.st.purges += n;
    for (unsigned i = 0; i < n; i++) {
        ph.purging_pages -= spans[i]->npages;
        coalesce_insert(spans[i]);
    }
    __atomic_store_n(&ph.purge_gen, ph.purge_gen + 1, __ATOMIC_RELEASE);
}

/* Called with the lock held; returns with it held, after at least one batch
 * in flight has come back. */
static void wait_for_purge(void)
{
    unsigned gen = ph.purge_gen;
    fa__unlock(&fa__ph_lock);
    for (unsigned i = 0; __atomic_load_n(&ph.purge_gen, __ATOMIC_ACQUIRE) == gen; i++) {
        if (i < 64)
            fa__cpu_relax();
        else
            sched_yield(); /* the purging thread may be descheduled */
    }
    fa__lock(&fa__ph_lock);
}

static size_t in_use(void)
{
    return ph.st.small_bytes + ph.st.large_bytes;
}

/* Purge, oldest first, until dirty memory is at most down_to bytes (the
 * policy's answer; FA_PURGE_NONE purges nothing). */
static void purge_down_to(size_t down_to)
{
    if (down_to == FA_PURGE_NONE)
        return;
    struct fa__span *batch[PURGE_BATCH];
    unsigned n;
    while ((n = detach_dirty(batch, down_to)) > 0)
        purge_detached(batch, n);
}

void fa__ph_shed(bool replaced)
{
    fa__lock(&fa__ph_lock);
    purge_down_to(fa__purge_at_exit(in_use(), ph.st.dirty_bytes, replaced));
    fa__unlock(&fa__ph_lock);
}

static size_t purge_all_locked(void)
{
    size_t n = 0;
    while (ph.dirty.dnext != &ph.dirty)
        n += purge_span(ph.dirty.dnext);
    return n;
}

/* Spans the policy finds old enough go back to the OS. */
static size_t purge_aged_locked(uint64_t now)
{
    fa__purge_note_look(now, in_use());
    size_t n = 0;
    struct fa__span *s = ph.dirty.dnext;
    for (int i = 0; s != &ph.dirty && i < PURGE_SCAN_MAX; i++) {
        struct fa__span *next = s->dnext;
        if (fa__purge_span_aged(now, s->free_since))
            n += purge_span(s);
        s = next;
    }
    ph.last_decay_ms = now;
    return n;
}

/* The timed part of decay, amortized on page-heap calls. */
static void decay_tick_locked(void)
{
    uint64_t now;
    if (ph.dirty.dnext != &ph.dirty && fa__purge_look_due(ph.last_decay_ms, &now))
        purge_aged_locked(now);
}

size_t fa__ph_purge(bool force)
{
    fa__lock(&fa__ph_lock);
    size_t n = force ? purge_all_locked() : purge_aged_locked(fa__now_ms());
    fa__unlock(&fa__ph_lock);
    return n;
}

/* Would taking npages pages out of span s break the memory limit? */
static bool over_limit(const struct fa__span *s, size_t npages)
{
    if (fa__opt.limit == 0)
        return false;
    /* The dirty pages are taken to lie in the part taken: they are counted
     * as committed already. */
    size_t add = (npages - (s->dirty ? dirty_part(s->ndirty, npages) : 0)) * FA_PAGE_SIZE;
    return committed() + add > fa__opt.limit;
}

struct fa__span *fa__ph_alloc(size_t npages, size_t align_pages, unsigned state, unsigned cls)
{
    if (align_pages == 0)
        align_pages = 1;
    size_t need = npages + align_pages - 1;
    if (need < npages || need > UINT32_MAX)
        return NULL;
    fa__lock(&fa__ph_lock);
    decay_tick_locked();
    struct fa__span *s = find_free(need);
    while (FA_UNLIKELY(s == NULL && ph.purging_pages > 0)) {
        wait_for_purge();
        s = find_free(need);
    }
    if (s == NULL) {
        if (!grow(need) || (s = find_free(need)) == NULL) {
            fa__unlock(&fa__ph_lock);
            return NULL;
        }
    }
    if (FA_UNLIKELY(over_limit(s, need))) {
        /* Purging first may bring the resident total back under the limit;
         * the span found may itself have been purged, so look again. */
        purge_all_locked();
        s = find_free(need);
        if (over_limit(s, need)) {
            fa__unlock(&fa__ph_lock);
            errno = ENOMEM;
            return NULL;
        }
    }
    remove_free(s);
    if (align_pages > 1) {
        uintptr_t align = align_pages * FA_PAGE_SIZE;
        uintptr_t a = (s->start + align - 1) & ~(align - 1);
        if (a != s->start) {
            struct fa__span *head = span_new();
            if (head == NULL) {
                insert_free(s);
                fa__unlock(&fa__ph_lock);
                return NULL;
            }
            head->start = s->start;
            head->npages = (a - s->start) / FA_PAGE_SIZE;
            head->zeroed = s->zeroed;
            head->dirty = s->dirty;
            head->free_since = s->free_since;
            head->ndirty = s->dirty ? dirty_part(s->ndirty, head->npages) : 0;
            s->start = a;
            s->npages -= head->npages;
            s->ndirty = s->dirty ? dirty_part(s->ndirty, s->npages) : 0;
            /* The head's left neighbour is not free (s was free and spans
             * never touch), so it needs no coalescing. */
            insert_free(head);
        }
    }
    if (!split_tail(s, npages)) {
        coalesce_insert(s);
        fa__unlock(&fa__ph_lock);
        return NULL;
    }
    mark_used(s, state, cls);
    fa__purge_note_use(in_use());
    fa__unlock(&fa__ph_lock);
    FA_UNPOISON((void *)s->start, s->npages * FA_PAGE_SIZE);
    return s;
}

void fa__ph_free(struct fa__span *s)
{
    FA_POISON((void *)s->start, s->npages * FA_PAGE_SIZE);
    fa__lock(&fa__ph_lock);
    size_t bytes = s->npages * FA_PAGE_SIZE;
    if (s->state == FA_SPAN_LARGE) {
        ph.st.large_bytes -= bytes;
    } else {
        ph.st.small_bytes -= bytes;
        ph.st.spans[s->cls]--;
    }
    /* Small blocks of a released span must not find their class any more: a
     * stale free of one then reaches the slow path and is reported. */
    if (s->state == FA_SPAN_SMALL)
        fa__pm_set(s->start, s->npages, s, 0);
    else
        fa__pm_set_one(s->start, s, 0);
    __atomic_store_n(&s->state, FA_SPAN_FREE, __ATOMIC_RELAXED);
    s->zeroed = 0;
    s->used = 0;
    s->listed = 0;
    s->dirty = 1;
    s->free_since = now32();
    s->ndirty = s->npages;
    coalesce_insert(s);
    purge_down_to(fa__purge_after_free(in_use(), ph.st.dirty_bytes));
    decay_tick_locked();
    fa__unlock(&fa__ph_lock);
}

bool fa__ph_resize(struct fa__span *s, size_t npages)
{
    bool ok = false;
    fa__lock(&fa__ph_lock);
    if (npages == s->npages) {
        ok = true;
    } else if (npages < s->npages) {
        struct fa__span *t = span_new();
        if (t != NULL) {
            t->start = s->start + npages * FA_PAGE_SIZE;
            t->npages = s->npages - npages;
            t->dirty = 1;
            t->free_since = now32();
            t->ndirty = t->npages;
            ph.st.large_bytes -= t->npages * FA_PAGE_SIZE;
            s->npages = npages;
            fa__pm_set(t->start, t->npages, t, 0);
            FA_POISON((void *)t->start, t->npages * FA_PAGE_SIZE);
            coalesce_insert(t);
            ok = true;
        }
    } else {
        uintptr_t end = s->start + s->npages * FA_PAGE_SIZE;
        struct fa__span *r = free_neighbour(end);
        size_t extra = npages - s->npages;
        if (r != NULL && r->start == end && r->npages >= extra && !over_limit(r, extra)) {
            remove_free(r);
            if (r->npages > extra) {
                r->start += extra * FA_PAGE_SIZE;
                r->npages -= extra;
                r->ndirty = r->dirty ? dirty_part(r->ndirty, r->npages) : 0;
                insert_free(r);
            } else {
                span_delete(r);
            }
            fa__pm_set(end, extra, s, 0);
            FA_UNPOISON((void *)end, extra * FA_PAGE_SIZE);
            s->npages = npages;
            ph.st.large_bytes += extra * FA_PAGE_SIZE;
            note_peak();
            ok = true;
            fa__purge_note_use(in_use());
        }
    }
    fa__unlock(&fa__ph_lock);
    return ok;
}

void fa__ph_lock_for_fork(void) { fa__lock(&fa__ph_lock); }
void fa__ph_unlock_for_fork(void) { fa__unlock(&fa__ph_lock); }

void fa__ph_get_stats(struct fa__ph_stats *st)
{
    fa__lock(&fa__ph_lock);
    *st = ph.st;
    fa__unlock(&fa__ph_lock);
}
_Static_assert(sizeof(struct fa__span) == 64, "a span record is one cache line");
