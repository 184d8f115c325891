#include "06-large/large.h"
#include "00-base/diag.h"
#include "04-pageheap/pageheap.h"
#include "02-records/pagemap.h"
#include "01-os/os.h"

#include <errno.h>
#include <string.h>

void *fa__large_alloc(size_t size, size_t align, bool zero)
{
    if (FA_UNLIKELY(size > FA_MAX_REQUEST)) {
        errno = ENOMEM;
        return NULL;
    }
    size_t npages = (size + FA_PAGE_SIZE - 1) >> FA_PAGE_SHIFT;
    if (npages == 0)
        npages = 1;
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

void fa__large_release(struct fa__span *s)
{
    if (FA_SECURE)
        fa__os_commit((void *)(s->start + fa__large_size(s)), FA_PAGE_SIZE);
    fa__ph_free(s);
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

void fa__large_free(void *p)
{
    if (p == NULL)
        return;
    fa__large_release(fa__large_span_of(p, "free"));
}

size_t fa__large_size(const struct fa__span *s)
{
    return (s->npages - FA_SECURE) * FA_PAGE_SIZE;
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
