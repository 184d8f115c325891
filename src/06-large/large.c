/* Large blocks (large.h): spans of their own from the page heap, and the
 * blocks each thread keeps after freeing them. */
#include "06-large/large.h"
#include "00-base/asan.h"
#include "00-base/diag.h"
#include "01-os/os.h"
#include "02-records/pagemap.h"
#include "04-pageheap/pageheap.h"

#include <errno.h>
#include <string.h>

size_t fa__large_size(const struct fa__span *s)
{
    return (s->npages - FA_SECURE) * FA_PAGE_SIZE;
}

/* Bytes the block's span holds in whole pages (its guard page too). */
static size_t span_bytes(const struct fa__span *s)
{
    return (size_t)s->npages * FA_PAGE_SIZE;
}

/* Give the large block s back to the page heap (its guard page made
 * ordinary again in the hardened build). */
static void release(struct fa__span *s)
{
    if (FA_SECURE)
        fa__os_commit((void *)(s->start + fa__large_size(s)), FA_PAGE_SIZE);
    fa__ph_free(s);
}

void fa__large_free_moved(struct fa__span *s)
{
    if (FA_SECURE)
        fa__os_commit((void *)(s->start + fa__large_size(s)), FA_PAGE_SIZE);
    fa__ph_free_released(s);
}

/* Take the keeper's block i out of its slots, in use again. */
static struct fa__span *take(struct fa__large_cache *lc, unsigned i)
{
    struct fa__span *s = lc->slot[i];
    for (unsigned k = i + 1; k < lc->n; k++)
        lc->slot[k - 1] = lc->slot[k];
    lc->n--;
    __atomic_store_n(&lc->bytes, lc->bytes - span_bytes(s), __ATOMIC_RELAXED);
    __atomic_store_n(&s->state, FA_SPAN_LARGE, __ATOMIC_RELAXED);
    return s;
}

/* The newest kept block that holds npages pages with at most 1/8 to spare,
 * or NULL.  A block of the hardened build keeps its guard page while kept:
 * it is not counted in. */
static struct fa__span *take_fit(struct fa__large_cache *lc, size_t npages)
{
    for (unsigned i = lc->n; i-- > 0;) {
        size_t have = lc->slot[i]->npages - FA_SECURE;
        if (have < npages || have - npages > npages / 8)
            continue;
        lc->used = true;
        return take(lc, i);
    }
    return NULL;
}

void *fa__large_alloc(struct fa__large_cache *lc, size_t size, size_t align, bool zero)
{
    if (FA_UNLIKELY(size > FA_MAX_REQUEST)) {
        errno = ENOMEM;
        return NULL;
    }
    size_t npages = (size + FA_PAGE_SIZE - 1) >> FA_PAGE_SHIFT;
    if (npages == 0)
        npages = 1;
    if (lc != NULL && lc->n > 0 && size <= FA_LARGE_KEEP_MAX && align <= FA_PAGE_SIZE) {
        struct fa__span *s = take_fit(lc, npages);
        if (s != NULL) {
            FA_UNPOISON((void *)s->start, fa__large_size(s));
            if (zero)
                memset((void *)s->start, 0, size);
            return (void *)s->start;
        }
    }
    size_t align_pages = align > FA_PAGE_SIZE ? align >> FA_PAGE_SHIFT : 1;
    /* The hardened build puts a guard page after each block: a write past
     * its end faults. */
    struct fa__span *s = fa__ph_alloc(npages + FA_SECURE, align_pages, FA_SPAN_LARGE, 0);
    if (FA_UNLIKELY(s == NULL)) {
        errno = ENOMEM;
        return NULL;
    }
    if (zero && !s->zeroed)
        memset((void *)s->start, 0, npages * FA_PAGE_SIZE);
    s->zeroed = 0;
    /* The span's last page: the page heap may have handed out more pages
     * than were asked for. */
    if (FA_SECURE && !fa__os_guard((void *)(s->start + fa__large_size(s)), FA_PAGE_SIZE)) {
        fa__ph_free(s);
        errno = ENOMEM;
        return NULL;
    }
    return (void *)s->start;
}

struct fa__span *fa__large_span_of(void *p, const char *who)
{
    struct fa__span *s = fa__pm_span((uintptr_t)p);
    if (s != NULL && s->npages != 0 && (uintptr_t)p >= s->start &&
        (uintptr_t)p < s->start + s->npages * FA_PAGE_SIZE) {
        /* The state may change under a racing double free: read once. */
        unsigned state = __atomic_load_n(&s->state, __ATOMIC_RELAXED);
        if (state == FA_SPAN_LARGE && s->start == (uintptr_t)p)
            return s;
        if (state == FA_SPAN_FREE || state == FA_SPAN_PURGING || state == FA_SPAN_CACHED)
            fa__fatal("fastalloc: %s(): double free or stale pointer %p", who, p);
        fa__fatal("fastalloc: %s(): pointer %p is inside a block, not at its start", who, p);
    }
    fa__fatal("fastalloc: %s(): invalid pointer %p (not allocated by fastalloc)", who, p);
}

bool fa__large_keepable(const struct fa__span *s)
{
    return span_bytes(s) <= FA_LARGE_KEEP_MAX;
}

void fa__large_free(struct fa__large_cache *lc, struct fa__span *s, size_t cap)
{
    size_t bytes = span_bytes(s);
    if (lc == NULL || bytes > FA_LARGE_KEEP_MAX) {
        release(s);
        return;
    }
    if (lc->n == FA_LARGE_KEEP_SLOTS)
        release(take(lc, 0));
    while (lc->n > 0 && lc->bytes + bytes > cap)
        release(take(lc, 0));
    if (lc->bytes + bytes > cap) {
        release(s);
        return;
    }
    /* Freed for everyone else: a second free or a realloc of the block now
     * stops the program, as it does for a block the page heap has.  In the
     * hardened build a kept block keeps its guard page; the guard is made
     * ordinary when the block goes back (release). */
    __atomic_store_n(&s->state, FA_SPAN_CACHED, __ATOMIC_RELAXED);
    FA_POISON((void *)s->start, bytes);
    lc->slot[lc->n++] = s;
    __atomic_store_n(&lc->bytes, lc->bytes + bytes, __ATOMIC_RELAXED);
}

void fa__large_cache_trim(struct fa__large_cache *lc, size_t cap, bool idle)
{
    if (idle && !lc->used)
        cap = 0;
    lc->used = false;
    while (lc->n > 0 && lc->bytes > cap)
        release(take(lc, 0));
}

size_t fa__large_usable(void *p)
{
    struct fa__span *s = fa__pm_span((uintptr_t)p);
    if (s == NULL || __atomic_load_n(&s->state, __ATOMIC_RELAXED) != FA_SPAN_LARGE || s->start != (uintptr_t)p) {
        fa__diag("fastalloc: malloc_usable_size(): invalid pointer %p", p);
        return 0;
    }
    return fa__large_size(s);
}

bool fa__large_resize(struct fa__span *s, size_t size)
{
    if (FA_SECURE) /* the guard page would have to move: the block moves */
        return false;
    size_t npages = (size + FA_PAGE_SIZE - 1) >> FA_PAGE_SHIFT;
    /* Shrinks by less than a quarter keep their pages: a block that shrinks
     * and grows again should not bounce through the page heap. */
    if (npages <= s->npages && npages >= s->npages - s->npages / 4)
        return true;
    return fa__ph_resize(s, npages);
}
