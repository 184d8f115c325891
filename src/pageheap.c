/* Page heap.  One lock guards it: it is reached only when a central cache
 * needs a new span, or gives an empty one back, and for large blocks, so the
 * lock is taken once per tens of kilobytes allocated at most.
 *
 * Invariant: no two free spans are adjacent (they would have been merged), and
 * the first and last page of every free span map to it in the page map, which
 * is what lets a span find its neighbours in O(1). */
#include "pageheap.h"
#include "pagemap.h"
#include "meta.h"
#include "os.h"

#define EXACT_LISTS 128 /* free spans of 1..128 pages have a list each */
#define GROW_MIN ((size_t)4 << 20)
#define GROW_MAX ((size_t)64 << 20)
#define GROW_ALIGN ((size_t)2 << 20) /* huge-page boundaries */

fa__lock_t fa__ph_lock = FA_LOCK_INIT;

static struct {
    struct fa__span exact[EXACT_LISTS + 1]; /* sentinels, [0] unused */
    struct fa__span big;                    /* sentinel: spans > EXACT_LISTS */
    struct fa__span *spare;                 /* recycled span records */
    size_t grow_next;
    struct fa__ph_stats st;
} ph;

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

void fa__ph_init(void)
{
    for (size_t i = 0; i <= EXACT_LISTS; i++)
        list_init(&ph.exact[i]);
    list_init(&ph.big);
    ph.grow_next = GROW_MIN;
}

static struct fa__span *span_new(void)
{
    struct fa__span *s = ph.spare;
    if (s != NULL) {
        ph.spare = s->next;
        __builtin_memset(s, 0, sizeof *s);
        return s;
    }
    return fa__meta_alloc(sizeof(struct fa__span));
}

static void span_delete(struct fa__span *s)
{
    s->state = FA_SPAN_FREE;
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
    s->state = FA_SPAN_FREE;
    s->cls = 0;
    fa__pm_set_one(s->start, s, 0);
    fa__pm_set_one(s->start + (s->npages - 1) * FA_PAGE_SIZE, s, 0);
    list_push(list_for(s->npages), s);
    ph.st.free_bytes += s->npages * FA_PAGE_SIZE;
}

static void remove_free(struct fa__span *s)
{
    list_del(s);
    ph.st.free_bytes -= s->npages * FA_PAGE_SIZE;
}

static struct fa__span *free_neighbour(uintptr_t page_addr)
{
    struct fa__span *n = fa__pm_span(page_addr);
    /* An entry can be stale (the interior page of an old span), so the record
     * must both be free and really cover the page. */
    if (n == NULL || n->state != FA_SPAN_FREE || n->npages == 0)
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
        s->zeroed &= l->zeroed;
        span_delete(l);
    }
    struct fa__span *r = free_neighbour(s->start + s->npages * FA_PAGE_SIZE);
    if (r != NULL) {
        remove_free(r);
        s->npages += r->npages;
        s->zeroed &= r->zeroed;
        span_delete(r);
    }
    insert_free(s);
}

static bool grow(size_t npages)
{
    size_t want = npages * FA_PAGE_SIZE;
    size_t size = want > ph.grow_next ? want : ph.grow_next;
    size = (size + GROW_ALIGN - 1) & ~(GROW_ALIGN - 1);
    if (size < want)
        return false;
    void *p = fa__os_map(size, GROW_ALIGN);
    if (p == NULL)
        return false;
    struct fa__span *s = span_new();
    if (s == NULL || !fa__pm_reserve((uintptr_t)p, size / FA_PAGE_SIZE)) {
        fa__os_unmap(p, size);
        if (s != NULL)
            span_delete(s);
        return false;
    }
    if (ph.grow_next < GROW_MAX)
        ph.grow_next *= 2;
    ph.st.mapped_bytes += size;
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
    s->npages = npages;
    insert_free(t);
    return true;
}

static void mark_used(struct fa__span *s, unsigned state, unsigned cls)
{
    s->state = (uint8_t)state;
    s->cls = (uint8_t)cls;
    s->next = s->prev = NULL;
    fa__pm_set(s->start, s->npages, s, cls);
    if (state == FA_SPAN_LARGE)
        ph.st.large_bytes += s->npages * FA_PAGE_SIZE;
    else
        ph.st.small_bytes += s->npages * FA_PAGE_SIZE;
}

struct fa__span *fa__ph_alloc(size_t npages, size_t align_pages, unsigned state, unsigned cls)
{
    if (align_pages == 0)
        align_pages = 1;
    size_t need = npages + align_pages - 1;
    if (need < npages || need > (SIZE_MAX >> FA_PAGE_SHIFT))
        return NULL;
    fa__lock(&fa__ph_lock);
    struct fa__span *s = find_free(need);
    if (s == NULL) {
        if (!grow(need)) {
            fa__unlock(&fa__ph_lock);
            return NULL;
        }
        s = find_free(need);
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
            s->start = a;
            s->npages -= head->npages;
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
    fa__unlock(&fa__ph_lock);
    return s;
}

void fa__ph_free(struct fa__span *s)
{
    fa__lock(&fa__ph_lock);
    size_t bytes = s->npages * FA_PAGE_SIZE;
    if (s->state == FA_SPAN_LARGE)
        ph.st.large_bytes -= bytes;
    else
        ph.st.small_bytes -= bytes;
    /* Small blocks of a released span must not find their class any more: a
     * stale free of one then reaches the slow path and is reported. */
    if (s->state == FA_SPAN_SMALL)
        fa__pm_set(s->start, s->npages, s, 0);
    else
        fa__pm_set_one(s->start, s, 0);
    s->state = FA_SPAN_FREE;
    s->zeroed = 0;
    s->freelist = NULL;
    s->used = 0;
    s->listed = 0;
    coalesce_insert(s);
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
            ph.st.large_bytes -= t->npages * FA_PAGE_SIZE;
            s->npages = npages;
            fa__pm_set(t->start, t->npages, t, 0);
            coalesce_insert(t);
            ok = true;
        }
    } else {
        uintptr_t end = s->start + s->npages * FA_PAGE_SIZE;
        struct fa__span *r = free_neighbour(end);
        size_t extra = npages - s->npages;
        if (r != NULL && r->start == end && r->npages >= extra) {
            remove_free(r);
            if (r->npages > extra) {
                r->start += extra * FA_PAGE_SIZE;
                r->npages -= extra;
                insert_free(r);
            } else {
                span_delete(r);
            }
            fa__pm_set(end, extra, s, 0);
            s->npages = npages;
            ph.st.large_bytes += extra * FA_PAGE_SIZE;
            ok = true;
        }
    }
    fa__unlock(&fa__ph_lock);
    return ok;
}

void fa__ph_get_stats(struct fa__ph_stats *st)
{
    fa__lock(&fa__ph_lock);
    *st = ph.st;
    fa__unlock(&fa__ph_lock);
}
