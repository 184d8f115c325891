/* Large blocks (large.h): spans of their own from the page heap, and the
 * blocks each thread keeps after freeing them. */
#include "06-large/large.h"
#include "06-large/empty.h"
#include "00-base/probe.h"
#include "00-base/mem.h"
#include "00-base/asan.h"
#include "00-base/diag.h"
#include "01-os/os.h"
#include "02-records/pagemap.h"
#include "02-records/freelist.h"
#include "04-pageheap/pageheap.h"

#include <errno.h>
#include <string.h>

size_t fa__large_size(const struct fa__span *s)
{
    return (s->npages - FA_SECURE) * FA_PAGE_SIZE;
}

/* The hardened build's canary after a large block's asked bytes, as far
 * as the guard page: up to 8 bytes of the tails' byte (02-records/tail.h),
 * written when the block is handed out and checked when it is freed.  A
 * write past the end of a block that is not a whole number of pages
 * lands there before it reaches the guard page. */
#define CANARY 8

size_t fa__large_held(const struct fa__span *s)
{
    return FA_SECURE ? s->asked : fa__large_size(s);
}

static void *hand_out(struct fa__span *s, size_t size)
{
#if FA_SECURE
    s->asked = size;
    size_t end = fa__large_size(s), n = end - size < CANARY ? end - size : CANARY;
    fa__memset((char *)s->start + size, (int)(fa__fl_key.tail & 0xff), n);
#else
    (void)size;
#endif
    return (void *)s->start;
}

/* Stop the program if the canary of the large block s was overwritten. */
static void check(const struct fa__span *s)
{
#if FA_SECURE
    size_t end = fa__large_size(s), n = end - s->asked < CANARY ? end - s->asked : CANARY;
    const unsigned char *c = (const unsigned char *)s->start + s->asked;
    for (size_t i = 0; i < n; i++) {
        if (FA_UNLIKELY(c[i] != (unsigned char)fa__fl_key.tail))
            fa__fatal("fastalloc: heap corruption: the %zu-byte block at %p was written past its end "
                      "(an overflow)",
                      s->asked, (void *)s->start);
    }
#else
    (void)s;
#endif
}

/* The hardened build never hands out again the block a keeper took in
 * last: a freed block is not the next one of its size, so that a stale
 * pointer to it does not at once alias the program's next block (a
 * thread that frees and takes back one block of a size alternates two).
 * glibc gives such a block's pages back to the OS; here it waits, kept,
 * under its guard page, and goes to the next request but one. */
#define FRESH_HELD ((unsigned)FA_SECURE)

/* Bytes the block's span holds in whole pages (its guard page too). */
static size_t span_bytes(const struct fa__span *s)
{
    return (size_t)s->npages * FA_PAGE_SIZE;
}

/* Give the large block s back to the page heap (its guard page made
 * ordinary again in the hardened build). */
static void unguard_free(struct fa__span *s)
{
    if (FA_SECURE)
        fa__os_unguard((void *)(s->start + fa__large_size(s)), FA_PAGE_SIZE);
    fa__ph_free(s);
}

#if FA_SECURE
/* The hardened build's shared keeper: the blocks that leave the threads'
 * keepers, or that none would hold, wait here with their guard pages in
 * place for any thread's next large allocation of their size.  A guard
 * costs two system calls, one to make it and one to undo it, and each
 * takes the process's mapping lock; made and undone at every large block
 * that missed a thread's keeper, they were most of the time of threads
 * that free large blocks, since the threads' keepers hold little
 * (docs/HISTORY.md, #26).  Blocks leave for
 * the page heap, oldest first, when the keeper is full, when a decay tick
 * finds one it held since the tick before, and at a forced purge. */
#define SHARED_SLOTS 64
#define SHARED_BYTES ((size_t)64 << 20)

static struct {
    fa__lock_t lock;
    struct fa__span *slot[SHARED_SLOTS]; /* oldest first */
    unsigned n;
    size_t bytes;
    unsigned fresh; /* slot[fresh..n) came in since the last trim */
} shared = {FA_LOCK_INIT, {NULL}, 0, 0, 0};

static struct fa__span *shared_take(unsigned i)
{
    struct fa__span *s = shared.slot[i];
    /* fa__memmove, not a loop the compiler would turn into a call of
     * memmove, which the hardened library's bounds.c exports. */
    fa__memmove(&shared.slot[i], &shared.slot[i + 1], (shared.n - i - 1) * sizeof shared.slot[0]);
    __atomic_store_n(&shared.n, shared.n - 1, __ATOMIC_RELAXED); /* peeked at (shared_fit) */
    if (i < shared.fresh)
        shared.fresh--;
    shared.bytes -= span_bytes(s);
    /* A large block again, whether it is handed out or goes back to the
     * page heap: the heap counts a span it takes back by its state, and
     * counted a kept one (FA_SPAN_CACHED) as small bytes, which then
     * wrapped below zero (test_stress_profile_secure). */
    __atomic_store_n(&s->state, FA_SPAN_LARGE, __ATOMIC_RELAXED);
    return s;
}

/* Keep s, guarded; the blocks that make room leave for the page heap. */
static void release(struct fa__span *s)
{
    struct fa__span *out[SHARED_SLOTS + 1];
    unsigned nout = 0;
    size_t bytes = span_bytes(s);
    fa__lock(&shared.lock);
    if (bytes > SHARED_BYTES / 4) {
        out[nout++] = s;
    } else {
        while (shared.n == SHARED_SLOTS || shared.bytes + bytes > SHARED_BYTES)
            out[nout++] = shared_take(0);
        __atomic_store_n(&s->state, FA_SPAN_CACHED, __ATOMIC_RELAXED);
        FA_POISON((void *)s->start, bytes);
        shared.slot[shared.n] = s;
        __atomic_store_n(&shared.n, shared.n + 1, __ATOMIC_RELAXED);
        shared.bytes += bytes;
    }
    fa__unlock(&shared.lock);
    for (unsigned i = 0; i < nout; i++)
        unguard_free(out[i]);
}

/* The newest block the shared keeper holds of npages pages with at most
 * 1/8 to spare, or NULL; never the newest of all (FRESH_HELD). */
static struct fa__span *shared_fit(size_t npages)
{
    if (__atomic_load_n(&shared.n, __ATOMIC_RELAXED) <= FRESH_HELD)
        return NULL;
    struct fa__span *s = NULL;
    fa__lock(&shared.lock);
    for (unsigned i = shared.n > FRESH_HELD ? shared.n - FRESH_HELD : 0; i-- > 0;) {
        size_t have = shared.slot[i]->npages - 1;
        if (have >= npages && have - npages <= npages / 8) {
            s = shared_take(i);
            break;
        }
    }
    fa__unlock(&shared.lock);
    return s;
}

void fa__large_shared_trim(bool all)
{
    struct fa__span *out[SHARED_SLOTS];
    unsigned nout = 0;
    fa__lock(&shared.lock);
    unsigned old = all ? shared.n : shared.fresh; /* held at the last trim */
    while (old-- > 0)
        out[nout++] = shared_take(0);
    shared.fresh = shared.n;
    fa__unlock(&shared.lock);
    for (unsigned i = 0; i < nout; i++)
        unguard_free(out[i]);
}

void fa__large_lock_for_fork(void) { fa__lock(&shared.lock); }
void fa__large_unlock_for_fork(void) { fa__unlock(&shared.lock); }
#else
static void release(struct fa__span *s)
{
    unguard_free(s);
}

void fa__large_shared_trim(bool all) { (void)all; }
void fa__large_lock_for_fork(void) {}
void fa__large_unlock_for_fork(void) {}
#endif

/* A block realloc moved out of, of at most this many bytes, goes back to
 * the page heap like any other, dirty, where the next run of its length
 * or less takes it: runs this short are where programs of many middling
 * blocks grow theirs, and a system call for each would cost more than
 * its pages. */
#define MOVED_KEEP_MAX ((size_t)256 << 10)

void fa__large_free_moved(struct fa__span *s)
{
    if (span_bytes(s) <= MOVED_KEEP_MAX) {
        fa__large_free(NULL, s, 0);
        return;
    }
    check(s);
    if (FA_SECURE)
        fa__os_unguard((void *)(s->start + fa__large_size(s)), FA_PAGE_SIZE);
    fa__ph_free_released(s);
}

/* Take the keeper's block i out of its slots, in use again. */
static struct fa__span *take(struct fa__large_cache *lc, unsigned i)
{
    struct fa__span *s = lc->slot[i];
    fa__memmove(&lc->slot[i], &lc->slot[i + 1], (lc->n - i - 1) * sizeof lc->slot[0]);
    lc->n--;
    __atomic_store_n(&lc->bytes, lc->bytes - span_bytes(s), __ATOMIC_RELAXED);
    __atomic_store_n(&s->state, FA_SPAN_LARGE, __ATOMIC_RELAXED);
    return s;
}

/* The newest kept block that holds npages pages with at most 1/8 to spare,
 * or NULL; never the newest of all (FRESH_HELD).  A block of the hardened
 * build keeps its guard page while kept: it is not counted in. */
static struct fa__span *take_fit(struct fa__large_cache *lc, size_t npages)
{
    for (unsigned i = lc->n > FRESH_HELD ? lc->n - FRESH_HELD : 0; i-- > 0;) {
        size_t have = lc->slot[i]->npages - FA_SECURE;
        if (have < npages || have - npages > npages / 8)
            continue;
        lc->used = true;
        return take(lc, i);
    }
    return NULL;
}

/* A kept block, in use again for size bytes. */
static void *reuse(struct fa__span *s, size_t size, bool zero)
{
    FA_UNPOISON((void *)s->start, fa__large_size(s));
    if (zero)
        fa__memset((void *)s->start, 0, size);
    return hand_out(s, size);
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
        if (s != NULL)
            return reuse(s, size, zero);
    }
#if FA_SECURE
    if (align <= FA_PAGE_SIZE) {
        struct fa__span *s = shared_fit(npages);
        if (s != NULL)
            return reuse(s, size, zero);
    }
#endif
    size_t align_pages = align > FA_PAGE_SIZE ? align >> FA_PAGE_SHIFT : 1;
    /* The hardened build puts a guard page after each block: a write past
     * its end faults. */
    struct fa__span *s = fa__ph_alloc(npages + FA_SECURE, align_pages, FA_SPAN_LARGE, 0);
    if (FA_UNLIKELY(s == NULL)) {
        errno = ENOMEM;
        return NULL;
    }
    if (zero && !s->zeroed)
        fa__memset((void *)s->start, 0, npages * FA_PAGE_SIZE);
    s->zeroed = 0;
    /* The span's last page: the page heap may have handed out more pages
     * than were asked for. */
    if (FA_SECURE && !fa__os_guard((void *)(s->start + fa__large_size(s)), FA_PAGE_SIZE)) {
        fa__ph_free(s);
        errno = ENOMEM;
        return NULL;
    }
    FA_PROBE2(large_alloc, s->start, size);
    return hand_out(s, size);
}

struct fa__span *fa__large_span_of(void *p, const char *who)
{
    struct fa__span *s = fa__pm_span_holding((uintptr_t)p);
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
    check(s);
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
    if (fa__empty_has(p))
        return 0;
    struct fa__span *s = fa__pm_span_holding((uintptr_t)p);
    if (s == NULL || __atomic_load_n(&s->state, __ATOMIC_RELAXED) != FA_SPAN_LARGE || s->start != (uintptr_t)p) {
        fa__diag("fastalloc: malloc_usable_size(): invalid pointer %p", p);
        return 0;
    }
    return fa__large_held(s);
}

bool fa__large_resize(struct fa__span *s, size_t size)
{
    check(s);
    size_t npages = (size + FA_PAGE_SIZE - 1) >> FA_PAGE_SHIFT, have = s->npages - FA_SECURE;
    /* Shrinks by less than a quarter keep their pages: a block that shrinks
     * and grows again should not bounce through the page heap. */
    if (npages <= have && npages >= have - have / 4) {
        hand_out(s, size); /* the hardened build's canary moves */
        return true;
    }
    if (!FA_SECURE)
        return fa__ph_resize(s, npages);
    /* The hardened build's guard page moves to the new end: made there
     * before the old one is undone, so that the block is never unguarded,
     * and undone before a shrink gives the old one back.  Two system calls,
     * where a move took two as well, and copied the block into pages that
     * each faulted. */
    uintptr_t old_guard = s->start + have * FA_PAGE_SIZE, new_guard = s->start + npages * FA_PAGE_SIZE;
    if (npages > have) {
        if (!fa__ph_resize(s, npages + 1))
            return false;
        if (!fa__os_guard((void *)new_guard, FA_PAGE_SIZE)) {
            fa__ph_resize(s, have + 1);
            return false;
        }
        fa__os_unguard((void *)old_guard, FA_PAGE_SIZE);
        /* A kept block's guard page stayed poisoned (asan.h): it is the
         * block's now. */
        FA_UNPOISON((void *)old_guard, FA_PAGE_SIZE);
    } else {
        if (!fa__os_guard((void *)new_guard, FA_PAGE_SIZE))
            return false;
        fa__os_unguard((void *)old_guard, FA_PAGE_SIZE);
        fa__ph_resize(s, npages + 1); /* a shrink always works */
    }
    hand_out(s, size);
    return true;
}
