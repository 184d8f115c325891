/* The page heap's spans: its state and its lock, span records, the free
 * lists (one per length up to EXACT_LISTS pages, then one for the rest),
 * the list of dirty free spans, and coalescing; also start-up, statistics
 * and the lock for fork.  The rest of the page heap builds on these
 * (heap_int.h gives the order of its files).
 *
 * One lock guards the page heap: it is reached only when a central cache
 * needs a new span, or gives an empty one back, and for large blocks, so the
 * lock is taken once per tens of kilobytes allocated at most.
 *
 * Invariants: a free span's dirty pages are its first ndirty; two free
 * spans are adjacent only where merging them would break that (a clean
 * span below a dirty one), or where one was purged in place; and the first
 * and last page of every free span map to it in the page map, which is
 * what lets a span find its neighbours in O(1). */
#include "04-pageheap/heap_int.h"
#include "00-base/mem.h"
#include "02-records/meta.h"
#include "02-records/pagemap.h"

fa__lock_t fa__ph_lock = FA_LOCK_INIT;
struct fa__ph_state fa__ph;

static void dirty_push(struct fa__span *s)
{
    fa__list_push_back(&fa__ph.dirty, &s->dlink);
    fa__ph.st.dirty_bytes += (size_t)s->ndirty * FA_PAGE_SIZE;
}

void fa__ph_dirty_del(struct fa__span *s)
{
    fa__list_del(&s->dlink);
    fa__ph.st.dirty_bytes -= (size_t)s->ndirty * FA_PAGE_SIZE;
}

void fa__ph_init(void)
{
    for (size_t i = 0; i <= EXACT_LISTS; i++)
        fa__list_init(&fa__ph.exact[i]);
    fa__list_init(&fa__ph.big);
    fa__list_init(&fa__ph.spare);
    fa__list_init(&fa__ph.dirty);
}

struct fa__span *fa__ph_span_new(void)
{
    if (!fa__list_empty(&fa__ph.spare)) {
        struct fa__span *s = fa__span_of(fa__ph.spare.next);
        fa__list_del(&s->link);
        fa__memset(s, 0, sizeof *s);
        return s;
    }
    /* Two cache lines a record, the second left empty: the hardware fetches
     * lines in aligned pairs, and the owner of a span writes its record at
     * every free, so two threads' spans whose records shared a pair slowed
     * each other (measured: docs/HISTORY.md). */
    return fa__meta_alloc(2 * FA_CACHELINE);
}

void fa__ph_span_delete(struct fa__span *s)
{
    __atomic_store_n(&s->state, FA_SPAN_FREE, __ATOMIC_RELAXED);
    s->npages = 0;
    s->start = 0;
    fa__list_push(&fa__ph.spare, &s->link);
}

static struct fa__list *list_for(size_t npages)
{
    return npages <= EXACT_LISTS ? &fa__ph.exact[npages] : &fa__ph.big;
}

/* Put a free span on its list and publish its ends in the page map. */
void fa__ph_insert_free(struct fa__span *s)
{
    __atomic_store_n(&s->state, FA_SPAN_FREE, __ATOMIC_RELAXED);
    s->cls = 0;
    fa__pm_set_one(s->start, s, 0);
    fa__pm_set_one(s->start + (s->npages - 1) * FA_PAGE_SIZE, s, 0);
    /* Dirty spans first, clean ones last: find_free reads the head of a
     * list to tell whether it has resident pages to give. */
    if (s->dirty)
        fa__list_push(list_for(s->npages), &s->link);
    else
        fa__list_push_back(list_for(s->npages), &s->link);
    fa__ph.st.free_bytes += s->npages * FA_PAGE_SIZE;
    if (s->dirty)
        dirty_push(s);
}

void fa__ph_requeue_clean(struct fa__span *s)
{
    fa__list_del(&s->link);
    fa__list_push_back(list_for(s->npages), &s->link);
}

void fa__ph_remove_free(struct fa__span *s)
{
    fa__list_del(&s->link);
    fa__ph.st.free_bytes -= s->npages * FA_PAGE_SIZE;
    if (s->dirty)
        fa__ph_dirty_del(s);
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

struct fa__span *fa__ph_free_neighbour(uintptr_t page_addr)
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

/* Whether free spans l and, right above it, r merge into one whose dirty
 * pages come first: l has no clean page, or r no dirty one.  A clean span
 * below a dirty one stays apart: cut from its low end, the merged span
 * would hand out the clean pages, each a page fault, and keep the resident
 * ones (#39: a heap that freed its 10 MB and took them again faulted 2.2
 * MB of fresh pages, 4 pages at a time, off a span with 4 dirty pages
 * on top of 284 clean ones). */
static bool mergeable(const struct fa__span *l, const struct fa__span *r)
{
    return l->ndirty == l->npages || r->ndirty == 0;
}

/* Merge s (not on any list) with its free neighbours and insert it. */
void fa__ph_coalesce_insert(struct fa__span *s)
{
    if (!s->dirty)
        s->ndirty = 0;
    struct fa__span *l = fa__ph_free_neighbour(s->start - FA_PAGE_SIZE);
    if (l != NULL && !l->dirty)
        l->ndirty = 0;
    if (l != NULL && mergeable(l, s)) {
        fa__ph_remove_free(l);
        s->start = l->start;
        s->npages += l->npages;
        absorb(s, l);
        fa__ph_span_delete(l);
    }
    struct fa__span *r = fa__ph_free_neighbour(s->start + s->npages * FA_PAGE_SIZE);
    if (r != NULL && !r->dirty)
        r->ndirty = 0;
    if (r != NULL && mergeable(s, r)) {
        fa__ph_remove_free(r);
        s->npages += r->npages;
        absorb(s, r);
        fa__ph_span_delete(r);
    }
    fa__ph_insert_free(s);
}

void fa__ph_lock_for_fork(void) { fa__lock(&fa__ph_lock); }
void fa__ph_unlock_for_fork(void) { fa__unlock(&fa__ph_lock); }

void fa__ph_get_stats(struct fa__ph_stats *st)
{
    fa__lock(&fa__ph_lock);
    fa__memcpy(st, &fa__ph.st, sizeof *st); /* no struct copy: a call of memcpy, bounds.c's in the hardened library */
    fa__unlock(&fa__ph_lock);
}
_Static_assert(offsetof(struct fa__span, blockdiv) == 64 && sizeof(struct fa__span) == 2 * FA_CACHELINE,
               "a span record's state is one cache line, what is read-only a second one, the pair allocated");
