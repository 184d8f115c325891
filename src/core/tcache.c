/* Thread caches: the slow paths behind the inlined fast paths, the lists'
 * dynamic sizing, and the life cycle of a cache (created on a thread's first
 * allocation, flushed to the central cache when the thread exits, recycled). */
#include "core/tcache.h"
#include "base/lock.h"
#include "base/options.h"
#include "core/central.h"
#include "core/large.h"
#include "core/meta.h"
#include "core/pageheap.h"
#include "core/pagemap.h"
#include "policy/decay.h"

#include <errno.h>
#include <pthread.h>

/* Shared stand-ins: never hold a block.  `empty` is what a new thread sees;
 * `dead` is what a thread sees once its cache has been flushed at exit, so that
 * destructors running after ours still work, straight on the central cache. */
#define STANDIN(k) { .avail = {[0 ... FA_NUM_CLASSES - 1] = FA_AVAIL_NEVER}, .heads = {0}, .kind = (k) }
static struct fa__tcache tc_empty = STANDIN(FA_TC_EMPTY);
static struct fa__tcache tc_dead = STANDIN(FA_TC_DEAD);

__thread struct fa__tcache *fa__tls_cache __attribute__((tls_model("initial-exec"))) = &tc_empty;

static fa__lock_t registry_lock = FA_LOCK_INIT;
static struct fa__tcache registry = {.next = &registry, .prev = &registry};
static struct fa__tcache *spare_caches;
static pthread_key_t exit_key;
static size_t claimed;        /* sum of live caches' max_bytes */
static unsigned live_caches;
/* Threads' exits since a cache was last created.  A thread that exits
 * while new ones keep coming is being replaced; a run of exits with no new
 * thread is a program winding its threads down. */
static unsigned exits_since_birth;
/* An exit is taken as replaced while at most this many exits came since the
 * last new cache: a thread's successor may make its first allocation after
 * the exits of other chains' threads (thread-churn: two chains). */
#define EXITS_REPLACED 2

static void thread_exit(void *arg);

void fa__tc_init(void)
{
    pthread_key_create(&exit_key, thread_exit);
}

static struct fa__tcache *cache_new(void)
{
    fa__lock(&registry_lock);
    struct fa__tcache *tc = spare_caches;
    if (tc != NULL)
        spare_caches = tc->next;
    fa__unlock(&registry_lock);
    if (tc == NULL) {
        tc = fa__meta_alloc(sizeof *tc);
        if (tc == NULL)
            return NULL;
    }
    __builtin_memset(tc, 0, sizeof *tc);
    tc->kind = FA_TC_REAL;
    tc->epoch = __atomic_load_n(&fa__scavenge_epoch, __ATOMIC_RELAXED);
    __atomic_add_fetch(&live_caches, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&exits_since_birth, 0, __ATOMIC_RELAXED);
    /* Class 0 is "not a small block": its free always takes the slow path. */
    tc->avail[0] = FA_AVAIL_NEVER;
    fa__lock(&registry_lock);
    tc->next = registry.next;
    tc->prev = &registry;
    registry.next->prev = tc;
    registry.next = tc;
    fa__unlock(&registry_lock);
    return tc;
}

/* The calling thread's real cache, created on first use; NULL when it cannot
 * have one (exiting, or no memory for the cache itself). */
static struct fa__tcache *my_cache(void)
{
    struct fa__tcache *tc = fa__tls_cache;
    if (FA_LIKELY(tc->kind == FA_TC_REAL))
        return tc;
    if (tc->kind == FA_TC_DEAD)
        return NULL;
    tc = cache_new();
    if (tc == NULL)
        return NULL;
    /* Publish before pthread_setspecific: if it allocates, the nested call
     * finds the cache ready instead of recursing. */
    fa__tls_cache = tc;
    pthread_setspecific(exit_key, tc);
    return tc;
}

static unsigned list_len(const struct fa__tcache *tc, unsigned cls)
{
    return tc->maxlen[cls] - (uint32_t)tc->avail[cls];
}

/* What one cache may hold: its own cap, and its share of the global bound
 * among the threads alive now. */
static size_t fair_share(void)
{
    unsigned n = __atomic_load_n(&live_caches, __ATOMIC_RELAXED);
    return fa__opt.thread_cache_max / (n ? n : 1);
}

static size_t share(void)
{
    size_t fair = fair_share();
    return fair < fa__opt.thread_cache_bytes ? fair : fa__opt.thread_cache_bytes;
}

/* What one cache may hold in large blocks: four times its own cap, and
 * what its lists leave of its fair share of the global bound, so that lists
 * and large blocks of all caches together stay within thread_cache_max.
 * A large block that misses the cache takes the page heap's one lock, where
 * small blocks take a class's lock once per batch: threads that churn blocks
 * of a few hundred KiB contended on it at every allocation under the lists'
 * 2 MiB cap (micro-window256-mixedlarge, 2 threads: 1.6 us a pair against
 * 0.12 us with one thread).  Large blocks make no claim on the global
 * counter: an atomic add on one shared line at every large free and
 * allocation cost more than the page heap saved. */
static size_t large_share(const struct fa__tcache *tc)
{
    size_t fair = fair_share(), own = fa__opt.thread_cache_bytes * 4;
    if (own / 4 != fa__opt.thread_cache_bytes)
        own = SIZE_MAX;
    fair = fair > tc->max_bytes ? fair - tc->max_bytes : 0;
    return fair < own ? fair : own;
}

/* Claim bytes on the global bound; false if that would pass it. */
static bool claim(struct fa__tcache *tc, size_t bytes)
{
    if (__atomic_add_fetch(&claimed, bytes, __ATOMIC_RELAXED) > fa__opt.thread_cache_max) {
        __atomic_sub_fetch(&claimed, bytes, __ATOMIC_RELAXED);
        return false;
    }
    tc->max_bytes += bytes;
    return true;
}

static void unclaim(struct fa__tcache *tc, size_t bytes)
{
    tc->max_bytes -= bytes;
    __atomic_sub_fetch(&claimed, bytes, __ATOMIC_RELAXED);
}

/* ---- large blocks kept by the thread that freed them ---- */

/* Take cached large block i out of the cache, in use again. */
static struct fa__span *large_take(struct fa__tcache *tc, unsigned i)
{
    struct fa__span *s = tc->large[i];
    size_t bytes = (size_t)s->npages * FA_PAGE_SIZE;
    for (unsigned k = i + 1; k < tc->nlarge; k++)
        tc->large[k - 1] = tc->large[k];
    tc->nlarge--;
    tc->large_bytes -= bytes;
    __atomic_store_n(&s->state, FA_SPAN_LARGE, __ATOMIC_RELAXED);
    return s;
}

/* Give cached large block i back to the page heap. */
static void large_drop(struct fa__tcache *tc, unsigned i)
{
    fa__ph_free(large_take(tc, i));
}

static void large_drop_all(struct fa__tcache *tc)
{
    while (tc->nlarge > 0)
        large_drop(tc, 0);
}

void *fa__tc_large_alloc(size_t size)
{
    struct fa__tcache *tc = fa__tls_cache;
    if (tc->nlarge == 0) /* the stand-ins never hold one */
        return NULL;
    size_t npages = (size + FA_PAGE_SIZE - 1) >> FA_PAGE_SHIFT;
    /* The newest block that fits with at most 1/8 to spare. */
    for (unsigned i = tc->nlarge; i-- > 0;) {
        struct fa__span *s = tc->large[i];
        if (s->npages < npages || s->npages - npages > npages / 8)
            continue;
        tc->large_used = true;
        return (void *)large_take(tc, i)->start;
    }
    return NULL;
}

static inline void housekeeping(struct fa__tcache *tc);

/* Free the large block at p: keep it if it is small enough and the cache's
 * share allows (older blocks make room first), else the page heap has it. */
static void large_free(struct fa__tcache *tc, void *p)
{
    struct fa__span *s = fa__large_span_of(p, "free");
    size_t bytes = (size_t)s->npages * FA_PAGE_SIZE;
    /* A thread that allocates only large blocks has no cache until its
     * first such free: it gets one here (an exiting thread gets none). */
    if (bytes > FA_TC_LARGE_MAX || fa__opt.thread_cache_bytes == 0 || (tc = my_cache()) == NULL) {
        fa__ph_free(s);
        return;
    }
    housekeeping(tc); /* the only slow path a large-only thread takes */
    if (tc->nlarge == FA_TC_LARGE_SLOTS)
        large_drop(tc, 0);
    size_t cap = large_share(tc);
    while (tc->nlarge > 0 && tc->large_bytes + bytes > cap)
        large_drop(tc, 0);
    if (tc->large_bytes + bytes > cap) {
        fa__ph_free(s);
        return;
    }
    /* Freed for everyone else: a second free or a realloc of p now stops
     * the program, as it does for a block the page heap has. */
    __atomic_store_n(&s->state, FA_SPAN_CACHED, __ATOMIC_RELAXED);
    tc->large[tc->nlarge++] = s;
    tc->large_bytes += bytes;
}

/* Raise a list's bound by delta blocks if the budgets allow. */
static void grow_list(struct fa__tcache *tc, unsigned cls, uint32_t delta)
{
    const struct fa__class_info *ci = &fa__classes[cls];
    /* A list can be over its class's bound after taking a span's whole free
     * list: it does not grow further then. */
    if (tc->maxlen[cls] >= ci->max_list)
        return;
    if (tc->maxlen[cls] + delta > ci->max_list)
        delta = ci->max_list - tc->maxlen[cls];
    size_t bytes = (size_t)delta * ci->size;
    if (delta == 0 || tc->max_bytes + bytes > share() || !claim(tc, bytes))
        return;
    tc->maxlen[cls] += delta;
    tc->avail[cls] += (int32_t)delta;
}

/* Cut the first n blocks off a list and give them to the central cache
 * (to their spans when to_spans is set, so that empty spans can go). */
static void release(struct fa__tcache *tc, unsigned cls, unsigned n, bool to_spans)
{
    void *head = tc->heads[cls];
    void *last = fa__fl_nth(head, n - 1);
    tc->heads[cls] = fa__fl_next(last);
    fa__fl_set_next(last, NULL); /* a batch may be handed on whole from a slot */
    tc->avail[cls] += (int32_t)n;
    fa__central_release(cls, head, n, to_spans);
}

/* Shrink a list by n blocks and its bound with it, giving the budget back. */
static void shrink_list(struct fa__tcache *tc, unsigned cls, unsigned n, bool to_spans)
{
    if (n == 0)
        return;
    release(tc, cls, n, to_spans);
    tc->maxlen[cls] -= n;
    tc->avail[cls] -= (int32_t)n;
    unclaim(tc, (size_t)n * fa__classes[cls].size);
}

/* Lists untouched since the last scavenge lose half their blocks; a cache
 * over its share of the global bound sheds its largest lists' halves. */
static FA_NOINLINE void scavenge(struct fa__tcache *tc)
{
    tc->epoch = __atomic_load_n(&fa__scavenge_epoch, __ATOMIC_RELAXED);
    /* Large blocks no allocation took since the last scavenge go, and so
     * do the oldest while the cache is over its share. */
    if (!tc->large_used)
        large_drop_all(tc);
    tc->large_used = false;
    while (tc->nlarge > 0 && tc->large_bytes > large_share(tc))
        large_drop(tc, 0);
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++) {
        unsigned len = list_len(tc, c);
        if (len > 0 && tc->heads[c] == tc->snap[c])
            shrink_list(tc, c, (len + 1) / 2, true);
    }
    for (int guard = 0; tc->max_bytes > share() && guard < FA_NUM_CLASSES; guard++) {
        unsigned big = 0;
        size_t big_bytes = 0;
        for (unsigned c = 1; c < FA_NUM_CLASSES; c++) {
            size_t b = (size_t)tc->maxlen[c] * fa__classes[c].size;
            if (b > big_bytes) {
                big_bytes = b;
                big = c;
            }
        }
        if (big == 0)
            break;
        /* Empty the list if needed, then drop half its bound. */
        unsigned len = list_len(tc, big);
        unsigned cut = (tc->maxlen[big] + 1) / 2;
        if (len > tc->maxlen[big] - cut)
            release(tc, big, len - (tc->maxlen[big] - cut), true);
        tc->maxlen[big] -= cut;
        tc->avail[big] -= (int32_t)cut;
        unclaim(tc, (size_t)cut * fa__classes[big].size);
    }
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++)
        tc->snap[c] = tc->heads[c];
}

/* Slow-path housekeeping: the timed decay work, and this cache's scavenge
 * when the epoch moved. */
static inline void housekeeping(struct fa__tcache *tc)
{
    fa__decay_maybe();
    if (FA_UNLIKELY(tc->epoch != __atomic_load_n(&fa__scavenge_epoch, __ATOMIC_RELAXED)))
        scavenge(tc);
}

void *fa__tc_alloc_slow(size_t size)
{
    unsigned cls = fa__size_to_class(size);
    const struct fa__class_info *ci = &fa__classes[cls];
    struct fa__tcache *tc = my_cache();
    void *head;
    if (FA_UNLIKELY(tc == NULL)) {
        if (fa__central_fetch(cls, &head, 1, false) == 0) {
            errno = ENOMEM;
            return NULL;
        }
        return head;
    }
    housekeeping(tc);
    if (tc->heads[cls] != NULL) { /* a nested call refilled it */
        tc->avail[cls]++;
        return fa__fl_pop(&tc->heads[cls]);
    }
    /* Slow start: a list that keeps running dry is allowed to grow, one block
     * at a time up to a batch, then a batch at a time. */
    uint32_t want = tc->maxlen[cls] < ci->batch ? tc->maxlen[cls] : ci->batch;
    if (want == 0)
        want = 1;
    if (tc->maxlen[cls] < ci->batch)
        grow_list(tc, cls, 1);
    else
        grow_list(tc, cls, ci->batch);
    if (want > tc->maxlen[cls] + 1)
        want = tc->maxlen[cls] + 1; /* the byte budget is spent: stay within it */
    unsigned got = fa__central_fetch(cls, &head, want, true);
    if (got == 0) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = fa__fl_pop(&head);
    tc->heads[cls] = head;
    /* The list was empty, so it now holds got - 1 blocks. */
    tc->avail[cls] -= (int32_t)(got - 1);
    if (tc->avail[cls] < 0) {
        /* A span's whole free list came, more than the list may hold: keep
         * the surplus if the cache's share and the global bound allow, else
         * it goes straight back.  Kept past the share, it stayed until the
         * thread's next scavenge (for good, if the thread went idle), so
         * thread_cache_bytes bounded nothing. */
        unsigned over = (unsigned)-tc->avail[cls];
        size_t bytes = (size_t)over * ci->size;
        if (tc->max_bytes + bytes <= share() && claim(tc, bytes)) {
            tc->maxlen[cls] += over;
            tc->avail[cls] = 0;
        } else {
            release(tc, cls, over, false);
        }
    }
    return p;
}


void fa__tc_free_slow(void *p)
{
    unsigned cls = fa__pm_class((uintptr_t)p);
    struct fa__tcache *tc = fa__tls_cache;
    if (cls == 0) {
        tc->avail[0] = FA_AVAIL_NEVER;
        if (p != NULL)
            large_free(tc, p);
        return;
    }
    if (tc->kind != FA_TC_REAL) {
        tc->avail[cls] = FA_AVAIL_NEVER;
        tc = my_cache();
        if (tc == NULL) {
            fa__fl_set_next(p, NULL);
            fa__central_release(cls, p, 1, false);
            return;
        }
    } else {
        tc->avail[cls]++; /* undo the fast path's decrement */
        housekeeping(tc);
    }
    if (tc->avail[cls] <= 0) {
        const struct fa__class_info *ci = &fa__classes[cls];
        if (tc->maxlen[cls] < ci->batch)
            grow_list(tc, cls, 1);
        unsigned len = list_len(tc, cls);
        if (tc->avail[cls] <= 0 && len > 0)
            release(tc, cls, len < ci->batch ? len : ci->batch, false);
    }
    if (tc->avail[cls] <= 0) { /* nothing could be released: go straight back */
        fa__fl_set_next(p, NULL);
        fa__central_release(cls, p, 1, false);
        return;
    }
    fa__fl_push(&tc->heads[cls], p);
    tc->avail[cls]--;
}

/* Empty every list and give the whole budget back; blocks go to their
 * spans, so spans that were only waiting for them can return to the page
 * heap. */
static void flush(struct fa__tcache *tc)
{
    large_drop_all(tc);
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++) {
        unsigned len = list_len(tc, c);
        if (len > 0)
            release(tc, c, len, true);
        tc->avail[c] -= (int32_t)tc->maxlen[c];
        tc->maxlen[c] = 0;
    }
    unclaim(tc, tc->max_bytes);
}

void fa__tc_flush_mine(void)
{
    struct fa__tcache *tc = fa__tls_cache;
    if (tc->kind == FA_TC_REAL)
        flush(tc);
}

static void thread_exit(void *arg)
{
    struct fa__tcache *tc = arg;
    /* Later destructors may still allocate: they go to the central cache. */
    fa__tls_cache = &tc_dead;
    flush(tc);
    __atomic_sub_fetch(&live_caches, 1, __ATOMIC_RELAXED);
    fa__lock(&registry_lock);
    tc->prev->next = tc->next;
    tc->next->prev = tc->prev;
    tc->next = spare_caches;
    spare_caches = tc;
    fa__unlock(&registry_lock);
    fa__ph_shed(__atomic_add_fetch(&exits_since_birth, 1, __ATOMIC_RELAXED) <= EXITS_REPLACED);
}

size_t fa__tc_cached_bytes(void)
{
    size_t total = 0;
    fa__lock(&registry_lock);
    for (struct fa__tcache *tc = registry.next; tc != &registry; tc = tc->next) {
        total += tc->large_bytes;
        for (unsigned c = 1; c < FA_NUM_CLASSES; c++)
            total += (size_t)(tc->maxlen[c] - (uint32_t)tc->avail[c]) * fa__classes[c].size;
    }
    fa__unlock(&registry_lock);
    return total;
}

size_t fa__tc_claimed_bytes(void)
{
    /* The lists' claims, and the large blocks kept, which claim nothing on
     * the global counter (large_share) but are held all the same. */
    size_t total = __atomic_load_n(&claimed, __ATOMIC_RELAXED);
    fa__lock(&registry_lock);
    for (struct fa__tcache *tc = registry.next; tc != &registry; tc = tc->next)
        total += tc->large_bytes;
    fa__unlock(&registry_lock);
    return total;
}

unsigned fa__tc_live_threads(void)
{
    return __atomic_load_n(&live_caches, __ATOMIC_RELAXED);
}

void fa__tc_lock_registry(void) { fa__lock(&registry_lock); }
void fa__tc_unlock_registry(void) { fa__unlock(&registry_lock); }
