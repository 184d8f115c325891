/* Thread caches: the slow paths behind the inlined fast paths, the lists'
 * dynamic sizing, and the life cycle of a cache (created on a thread's first
 * allocation, flushed to the central cache when the thread exits, recycled). */
#include "tcache.h"
#include "central.h"
#include "meta.h"
#include "pagemap.h"

#include <pthread.h>

void fa__free_other(void *p) FA_HIDDEN; /* api.c: large and foreign blocks */

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
    fa__ensure_init();
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

/* Raise a list's bound by delta blocks if the cache's byte budget allows. */
static void grow_list(struct fa__tcache *tc, unsigned cls, uint32_t delta)
{
    const struct fa__class_info *ci = &fa__classes[cls];
    if (tc->maxlen[cls] + delta > ci->max_list)
        delta = ci->max_list - tc->maxlen[cls];
    if (delta == 0)
        return;
    /* The first batch of every class is always allowed, so that a thread
     * whose budget is spent still moves blocks a batch at a time rather than
     * one lock per call; the budget bounds what it caches beyond that. */
    if (tc->maxlen[cls] + delta > ci->batch &&
        tc->max_bytes + (size_t)delta * ci->size > fa__opt.thread_cache_bytes)
        return;
    tc->maxlen[cls] += delta;
    tc->avail[cls] += (int32_t)delta;
    tc->max_bytes += (size_t)delta * ci->size;
}

void *fa__tc_alloc_slow(size_t size)
{
    fa__ensure_init();
    unsigned cls = fa__size_to_class(size);
    const struct fa__class_info *ci = &fa__classes[cls];
    struct fa__tcache *tc = my_cache();
    void *head;
    if (FA_UNLIKELY(tc == NULL)) {
        if (fa__central_fetch(cls, &head, 1) == 0)
            return NULL;
        return head;
    }
    if (tc->heads[cls] != NULL) { /* a nested call refilled it */
        void *p = tc->heads[cls];
        tc->heads[cls] = *(void **)p;
        tc->avail[cls]++;
        return p;
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
    unsigned got = fa__central_fetch(cls, &head, want);
    tc->fetches++;
    if (got == 0)
        return NULL;
    void *p = head;
    tc->heads[cls] = *(void **)p;
    /* The list was empty, so it now holds got - 1 blocks. */
    tc->avail[cls] -= (int32_t)(got - 1);
    if (tc->avail[cls] < 0) { /* more than the bound: widen it to fit */
        uint32_t over = (uint32_t)-tc->avail[cls];
        tc->maxlen[cls] += over;
        tc->max_bytes += (size_t)over * ci->size;
        tc->avail[cls] = 0;
    }
    return p;
}

/* Cut the first n blocks off a list and give them to the central cache. */
static void release(struct fa__tcache *tc, unsigned cls, unsigned n)
{
    void *head = tc->heads[cls];
    void *last = head;
    for (unsigned i = 1; i < n; i++)
        last = *(void **)last;
    tc->heads[cls] = *(void **)last;
    *(void **)last = NULL; /* a batch may be handed on whole from a slot */
    tc->avail[cls] += (int32_t)n;
    tc->releases++;
    fa__central_release(cls, head, n);
}

void fa__tc_free_slow(void *p)
{
    unsigned cls = fa__pm_class((uintptr_t)p);
    struct fa__tcache *tc = fa__tls_cache;
    if (cls == 0) {
        tc->avail[0] = FA_AVAIL_NEVER;
        fa__free_other(p);
        return;
    }
    if (tc->kind != FA_TC_REAL) {
        tc->avail[cls] = FA_AVAIL_NEVER;
        tc = my_cache();
        if (tc == NULL) {
            *(void **)p = NULL;
            fa__central_release(cls, p, 1);
            return;
        }
    } else {
        tc->avail[cls]++; /* undo the fast path's decrement */
    }
    if (tc->avail[cls] <= 0) {
        const struct fa__class_info *ci = &fa__classes[cls];
        if (tc->maxlen[cls] < ci->batch)
            grow_list(tc, cls, 1);
        unsigned len = list_len(tc, cls);
        if (tc->avail[cls] <= 0 && len > 0)
            release(tc, cls, len < ci->batch ? len : ci->batch);
    }
    if (tc->avail[cls] <= 0) { /* nothing could be released: go straight back */
        *(void **)p = NULL;
        fa__central_release(cls, p, 1);
        return;
    }
    *(void **)p = tc->heads[cls];
    tc->heads[cls] = p;
    tc->avail[cls]--;
}

static void flush(struct fa__tcache *tc)
{
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++) {
        unsigned len = list_len(tc, c);
        if (len > 0)
            release(tc, c, len);
    }
}

static void thread_exit(void *arg)
{
    struct fa__tcache *tc = arg;
    /* Later destructors may still allocate: they go to the central cache. */
    fa__tls_cache = &tc_dead;
    flush(tc);
    fa__lock(&registry_lock);
    tc->prev->next = tc->next;
    tc->next->prev = tc->prev;
    tc->next = spare_caches;
    spare_caches = tc;
    fa__unlock(&registry_lock);
}

size_t fa__tc_cached_bytes(void)
{
    size_t total = 0;
    fa__lock(&registry_lock);
    for (struct fa__tcache *tc = registry.next; tc != &registry; tc = tc->next)
        for (unsigned c = 1; c < FA_NUM_CLASSES; c++)
            total += (size_t)(tc->maxlen[c] - (uint32_t)tc->avail[c]) * fa__classes[c].size;
    fa__unlock(&registry_lock);
    return total;
}

void fa__tc_lock_registry(void) { fa__lock(&registry_lock); }
void fa__tc_unlock_registry(void) { fa__unlock(&registry_lock); }
