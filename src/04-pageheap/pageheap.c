/* The page heap's entry points that hand spans out and take them back:
 * allocation (best fit, alignment, splitting the span found), free and
 * resize.  They take the lock, work on the lists of spans.c, and call on
 * growth (grow.c) and purging (reclaim.c) as they need. */
#include "04-pageheap/heap_int.h"
#include "00-base/probe.h"
#include "00-base/asan.h"
#include "01-os/clock.h"
#include "02-records/pagemap.h"
#include "03-purge/purge.h"

#include <errno.h>

static uint32_t now32(void)
{
    return (uint32_t)fa__now_ms();
}

/* Pages a program touched and freed are resident; clean ones (purged, or
 * never touched since the heap grew) cost a page fault each when used
 * again, about 11 us a page on the virtual machines we measure on
 * (docs/HISTORY.md, #25).  So a span with dirty pages is taken first: the
 * smallest such span that holds npages, lowest address among equals in
 * the big list.  Only when none holds npages does the clean best fit go.
 * Best fit alone took the smaller clean top of a grown heap over the
 * dirty pages just freed below it, and a program that freed its 10 MB and
 * allocated them again faulted 2.2 MB of fresh pages (#39). */
static struct fa__span *best_in_big(size_t npages, bool dirty_only)
{
    struct fa__span *best = NULL;
    for (struct fa__span *s = fa__span_first(&fa__ph.big); s != NULL; s = fa__span_after(&fa__ph.big, s)) {
        if (s->npages >= npages && (!dirty_only || s->dirty) &&
            (best == NULL || s->npages < best->npages ||
             (s->npages == best->npages && s->start < best->start)))
            best = s;
    }
    return best;
}

static struct fa__span *find_free(size_t npages)
{
    struct fa__span *clean = NULL;
    for (size_t n = npages; n <= EXACT_LISTS; n++) {
        struct fa__span *s = fa__span_first(&fa__ph.exact[n]);
        if (s == NULL)
            continue;
        if (s->dirty) /* a list keeps its dirty spans first */
            return s;
        if (clean == NULL)
            clean = s;
    }
    struct fa__span *s = best_in_big(npages, true);
    if (s != NULL)
        return s;
    return clean != NULL ? clean : best_in_big(npages, false);
}

/* Cut the first npages pages off free span s (already off its list); the rest
 * goes back as a free span. */
static bool split_tail(struct fa__span *s, size_t npages)
{
    if (s->npages == npages)
        return true;
    struct fa__span *t = fa__ph_span_new();
    if (t == NULL)
        return false;
    t->start = s->start + npages * FA_PAGE_SIZE;
    t->npages = s->npages - npages;
    t->zeroed = s->zeroed;
    t->free_since = s->free_since;
    t->ndirty = s->ndirty;
    dirty_cut(t, npages);
    s->npages = npages;
    fa__ph_insert_free(t);
    return true;
}

static void note_peak(void)
{
    size_t used = fa__ph.st.large_bytes + fa__ph.st.small_bytes;
    if (used > fa__ph.st.peak_used_bytes)
        fa__ph.st.peak_used_bytes = used;
}

static void mark_used(struct fa__span *s, unsigned state, unsigned cls)
{
    __atomic_store_n(&s->state, (uint8_t)state, __ATOMIC_RELAXED);
    s->cls = (uint8_t)cls;
    s->link.next = s->link.prev = NULL;
    s->dirty = 0;
    s->ndirty = 0;
    if (state == FA_SPAN_LARGE) {
        fa__pm_set_large(s, s->start, s->npages);
    } else {
        s->blockdiv = s->blocklim = fa__span_blockdiv(fa__classes[cls].size);
        s->blockstart = s->start;
        fa__pm_set(s->start, s->npages, s, cls);
    }
    if (state == FA_SPAN_LARGE) {
        fa__ph.st.large_bytes += s->npages * FA_PAGE_SIZE;
    } else {
        fa__ph.st.small_bytes += s->npages * FA_PAGE_SIZE;
        fa__ph.st.spans[cls]++;
    }
    note_peak();
}

struct fa__span *fa__ph_alloc(size_t npages, size_t align_pages, unsigned state, unsigned cls)
{
    if (align_pages == 0)
        align_pages = 1;
    size_t need = npages + align_pages - 1;
    if (need < npages || need > UINT32_MAX)
        return NULL;
    fa__lock(&fa__ph_lock);
    fa__ph_decay_tick_locked();
    struct fa__span *s = find_free(need);
    while (FA_UNLIKELY(s == NULL && fa__ph.purging_pages > 0)) {
        fa__ph_wait_for_purge();
        s = find_free(need);
    }
    if (s == NULL) {
        if (!fa__ph_grow(need) || (s = find_free(need)) == NULL) {
            fa__unlock(&fa__ph_lock);
            return NULL;
        }
    }
    if (FA_UNLIKELY(fa__ph_over_limit(s, need))) {
        /* Purging first may bring the resident total back under the limit;
         * the span found may itself have been purged, so look again. */
        fa__ph_purge_all_locked();
        s = find_free(need);
        if (fa__ph_over_limit(s, need)) {
            fa__unlock(&fa__ph_lock);
            errno = ENOMEM;
            return NULL;
        }
    }
    fa__ph_remove_free(s);
    if (align_pages > 1) {
        uintptr_t align = align_pages * FA_PAGE_SIZE;
        uintptr_t a = (s->start + align - 1) & ~(align - 1);
        if (a != s->start) {
            struct fa__span *head = fa__ph_span_new();
            if (head == NULL) {
                fa__ph_insert_free(s);
                fa__unlock(&fa__ph_lock);
                return NULL;
            }
            head->start = s->start;
            head->npages = (a - s->start) / FA_PAGE_SIZE;
            head->zeroed = s->zeroed;
            head->free_since = s->free_since;
            head->ndirty = dirty_part(s->ndirty, head->npages);
            head->dirty = head->ndirty > 0;
            s->start = a;
            s->npages -= head->npages;
            dirty_cut(s, head->npages);
            /* The head's left neighbour is not free (s was free and spans
             * never touch), so it needs no coalescing. */
            fa__ph_insert_free(head);
        }
    }
    if (!split_tail(s, npages) || !fa__ph_commit_to(s->start, s->start + npages * FA_PAGE_SIZE)) {
        fa__ph_coalesce_insert(s);
        fa__unlock(&fa__ph_lock);
        return NULL;
    }
    mark_used(s, state, cls);
    fa__purge_note_use(in_use());
    fa__unlock(&fa__ph_lock);
    FA_UNPOISON((void *)s->start, s->npages * FA_PAGE_SIZE);
    FA_PROBE3(span_alloc, s->start, s->npages, cls);
    return s;
}

/* released: the caller gave the span's pages back to the OS (released
 * bytes of them), so it comes back clean. */
static void free_span(struct fa__span *s, size_t released)
{
    fa__lock(&fa__ph_lock);
    size_t bytes = s->npages * FA_PAGE_SIZE;
    if (s->state == FA_SPAN_LARGE) {
        fa__ph.st.large_bytes -= bytes;
    } else {
        fa__ph.st.small_bytes -= bytes;
        fa__ph.st.spans[s->cls]--;
    }
    /* Small blocks of a released span must not find their class any more: a
     * stale free of one then reaches the slow path and is reported. */
    if (s->state == FA_SPAN_SMALL) {
        fa__pm_set(s->start, s->npages, s, 0);
    } else {
        fa__pm_set_one(s->start, s, 0);
        fa__pm_huge_drop(s);
    }
    __atomic_store_n(&s->state, FA_SPAN_FREE, __ATOMIC_RELAXED);
    s->used = 0;
    s->listed = 0;
    s->free_since = now32();
    if (released != 0) {
        fa__ph.st.purged_bytes += released;
        fa__ph.st.purges++;
    }
    if (released == bytes) {
        s->dirty = 0;
        s->ndirty = 0;
    } else {
        s->zeroed = 0;
        s->dirty = 1;
        s->ndirty = s->npages;
    }
    fa__ph_coalesce_insert(s);
    fa__ph_purge_down_to(fa__purge_after_free(in_use(), fa__ph.st.dirty_bytes));
    fa__ph_decay_tick_locked();
    fa__unlock(&fa__ph_lock);
}

void fa__ph_free(struct fa__span *s)
{
    FA_POISON((void *)s->start, s->npages * FA_PAGE_SIZE);
    free_span(s, 0);
}

void fa__ph_free_released(struct fa__span *s)
{
    size_t released = fa__ph_release_pages(s);
    /* After the release, which gives an AddressSanitizer build's shadow of
     * the range back too: a read through a stale pointer to the block
     * realloc moved is still reported. */
    FA_POISON((void *)s->start, s->npages * FA_PAGE_SIZE);
    free_span(s, released);
}

bool fa__ph_resize(struct fa__span *s, size_t npages)
{
    bool ok = false;
    fa__lock(&fa__ph_lock);
    if (npages == s->npages) {
        ok = true;
    } else if (npages < s->npages) {
        struct fa__span *t = fa__ph_span_new();
        if (t != NULL) {
            t->start = s->start + npages * FA_PAGE_SIZE;
            t->npages = s->npages - npages;
            t->dirty = 1;
            t->free_since = now32();
            t->ndirty = t->npages;
            fa__ph.st.large_bytes -= t->npages * FA_PAGE_SIZE;
            s->npages = npages;
            /* The pages given back name t, so that a stale pointer into
             * them is told from one into s; a huge tail's boundaries
             * alone, which its merge sets (the rest hold s, which no
             * longer holds them).  s's new last page names s. */
            if (t->npages <= FA_PM_HUGE_PAGES)
                fa__pm_set(t->start, t->npages, t, 0);
            fa__pm_set_large(s, t->start - FA_PAGE_SIZE, 1);
            FA_POISON((void *)t->start, t->npages * FA_PAGE_SIZE);
            fa__ph_coalesce_insert(t);
            ok = true;
        }
    } else {
        uintptr_t end = s->start + s->npages * FA_PAGE_SIZE;
        struct fa__span *r = fa__ph_free_neighbour(end);
        size_t extra = npages - s->npages;
        if (r != NULL && r->start == end && r->npages >= extra && !fa__ph_over_limit(r, extra) &&
            fa__ph_commit_to(end, end + extra * FA_PAGE_SIZE)) {
            fa__ph_remove_free(r);
            if (r->npages > extra) {
                r->start += extra * FA_PAGE_SIZE;
                r->npages -= extra;
                dirty_cut(r, extra);
                fa__ph_insert_free(r);
            } else {
                fa__ph_span_delete(r);
            }
            s->npages = npages;
            fa__pm_set_large(s, end, extra);
            FA_UNPOISON((void *)end, extra * FA_PAGE_SIZE);
            fa__ph.st.large_bytes += extra * FA_PAGE_SIZE;
            note_peak();
            ok = true;
            fa__purge_note_use(in_use());
        }
    }
    fa__unlock(&fa__ph_lock);
    return ok;
}

size_t fa__ph_resident_bytes(void)
{
    return __atomic_load_n(&fa__ph.st.small_bytes, __ATOMIC_RELAXED) +
           __atomic_load_n(&fa__ph.st.large_bytes, __ATOMIC_RELAXED) +
           __atomic_load_n(&fa__ph.st.dirty_bytes, __ATOMIC_RELAXED);
}

void fa__ph_reclass(struct fa__span *s, unsigned cls)
{
    fa__lock(&fa__ph_lock);
    fa__ph.st.spans[s->cls]--;
    fa__ph.st.spans[cls]++;
    fa__unlock(&fa__ph_lock);
    s->cls = (uint8_t)cls;
    s->blockdiv = s->blocklim = fa__span_blockdiv(fa__classes[cls].size);
    /* The old class's free blocks left their links and marks at offsets
     * that fall inside the new class's blocks: no longer all zero, so a
     * cut with `secure_zero` zeroes its blocks again (span.c). */
    s->zeroed = 0;
    for (uint32_t i = 0; i < s->npages; i++)
        fa__pm_set_one(s->start + i * FA_PAGE_SIZE, s, cls);
    /* As a span the heap hands out: the old class's free blocks were
     * poisoned past their links, where the new class's links fall. */
    FA_UNPOISON((void *)s->start, s->npages * FA_PAGE_SIZE);
}
