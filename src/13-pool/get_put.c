/* fa_pool_get and fa_pool_put, and the slow paths behind them.  The fast
 * paths are a pop or a push on the thread's cache, a few instructions each
 * (tools/icount.sh --pool).  They stay in one file with their slow paths,
 * which are static here: each fast path is then inlined whole into its
 * public function and leaves for its slow path by one direct jump (compare
 * `objdump -d` of fa_pool_get and fa_pool_put after a change).  A get's
 * slow path refills the cache from the thread's own blocks, then from
 * remote puts, the global pools, and last new memory; a put's slow path
 * gives the cache's oldest objects back to their blocks (local.c). */
#include "13-pool/pool.h"
#include "00-base/asan.h"
#include "01-os/clock.h"

#include <errno.h>

/* ---- get ---- */

/* A block from the global pools for lp (NULL: for nobody): one with objects
 * out first (it packs the pool), else an all-free one.  NULL when they have
 * none. */
static struct block *adopt(fa_pool *pool, struct lpool *lp, int built_only)
{
    unsigned first = lp != NULL ? (unsigned)(lp->g - pool->g) : 0;
    for (unsigned k = 0; k < pool->ngpools; k++) {
        struct gpool *g = &pool->g[(first + k) % pool->ngpools];
        if (__atomic_load_n(&g->part.n, __ATOMIC_RELAXED) == 0 &&
            __atomic_load_n(&g->empty.n, __ATOMIC_RELAXED) == 0)
            continue;
        fa__lock(&g->lock);
        struct block *b = NULL;
        for (int s = 0; s < SCAN && g->part.head != NULL; s++) {
            struct block *c = g->part.head;
            fa__pool_bl_remove(&g->part, c);
            fa__pool_block_collect(pool, c);
            if (has_built_free(pool, c) || (!built_only && c->bump < c->end)) {
                b = c;
                break;
            }
            fa__pool_bl_add(&g->part, c, W_GPART, true);
        }
        if (b == NULL && g->empty.head != NULL &&
            (!built_only || has_built_free(pool, g->empty.head))) {
            b = g->empty.head;
            fa__pool_bl_remove(&g->empty, b);
        }
        if (b != NULL)
            __atomic_store_n(&b->owner, lp, __ATOMIC_RELAXED);
        fa__unlock(&g->lock);
        if (b != NULL)
            return b;
    }
    return NULL;
}

/* The next block for lp's cache to take from, out of its list: free
 * objects already built first, then objects never cut. */
static struct block *next_block(fa_pool *pool, struct lpool *lp)
{
    struct block *b = lp->avail.head != NULL ? lp->avail.head : lp->spare.head;
    if (b == NULL && (b = adopt(pool, lp, 1)) == NULL)
        b = lp->fresh.head;
    if (b != NULL) {
        if (b->where != W_NONE) /* a head of lp's lists, not a block taken out already */
            fa__pool_bl_remove(&lp->lists[b->where - W_AVAIL], b);
        return b;
    }
    if ((b = adopt(pool, lp, 0)) != NULL)
        return b;
    pthread_mutex_lock(&pool->grow);
    /* A few blocks looked at for stranded puts at each growth: every
     * block, in turn, as the pool grows. */
    if (fa__pool_sweep_detached(pool, SWEEP) > 0 && (b = adopt(pool, lp, 0)) != NULL) {
        pthread_mutex_unlock(&pool->grow);
        return b;
    }
    b = fa__pool_block_new(pool, lp);
    pthread_mutex_unlock(&pool->grow);
    if (b != NULL) {
        fa__pool_maybe_idle_trim(pool);
        return b;
    }
    /* At the cap: every detached block looked at before giving up. */
    pthread_mutex_lock(&pool->grow);
    pool->sweep = NULL;
    if (fa__pool_sweep_detached(pool, SIZE_MAX) > 0)
        b = adopt(pool, lp, 0);
    pthread_mutex_unlock(&pool->grow);
    return b;
}

/* Get for a thread with no local pool (exiting, or no memory for one): one
 * object from a block of the global pools, or of a new one, which goes back
 * to the first global pool, owned by nobody. */
static void *get_unowned(fa_pool *pool)
{
    pthread_mutex_lock(&pool->grow);
    struct block *b = adopt(pool, NULL, 0);
    if (b == NULL)
        b = fa__pool_block_new(pool, NULL);
    void *o = NULL;
    if (b != NULL) {
        if (has_built_free(pool, b))
            fa__pool_take(pool, b, 1, &o);
        else if ((o = fa__pool_cut_one(pool, b)) != NULL)
            b->out++;
        fa__lock(&pool->g[0].lock);
        fa__pool_bl_add(&pool->g[0].part, b, W_GPART, false);
        fa__unlock(&pool->g[0].lock);
    }
    if (o != NULL)
        pool->gets_retired++;
    pthread_mutex_unlock(&pool->grow);
    if (o == NULL)
        errno = ENOMEM;
    return o;
}

/* Up to CUT_BATCH objects of b from its bump pointer into lp's cache
 * (empty), the lowest on top.  Returns how many. */
static size_t cut_batch(fa_pool *pool, struct lpool *lp, struct block *b)
{
    uintptr_t u = b->bump;
    size_t n = (b->end - u) / pool->slot;
    if (n > CUT_BATCH)
        n = CUT_BATCH;
    if (n > lp->max)
        n = lp->max;
    b->bump = u + n * pool->slot;
    if (FA_UNLIKELY(b->bump > b->pop_end))
        fa__pool_populate(b, b->bump);
    for (size_t i = 0; i < n; i++)
        lp->cache[i] = (void *)(u + (n - 1 - i) * pool->slot);
    b->out += (int64_t)n;
    return n;
}

/* Fill lp's empty cache from one block: free objects already built first,
 * in address order, then objects never used.  0 when there are none to
 * have (the cap, or no memory). */
static int refill(fa_pool *pool, struct lpool *lp)
{
    struct block *b = next_block(pool, lp);
    if (b == NULL)
        return 0;
    size_t n = 1;
    /* Before cutting new objects, the remote puts of the block. */
    if (!has_built_free(pool, b))
        fa__pool_block_collect(pool, b);
    if (has_built_free(pool, b)) {
        n = fa__pool_take(pool, b, lp->max / 2, lp->cache);
    } else if (pool->ctor) {
        /* One object a call, so that exactly the objects handed out have
         * been constructed. */
        lp->cache[0] = fa__pool_cut_one(pool, b);
        b->out++;
    } else {
        n = cut_batch(pool, lp, b);
    }
    fa__pool_place(pool, lp, b);
    lp->n = n;
    lp->taken += n;
    return 1;
}

/* The cache is empty, the thread has no local pool yet, or the pool is
 * past FAST_SLOTS (the fast paths see the stand-in). */
static FA_NOINLINE void *get_slow(fa_pool *pool)
{
    struct lpool *lp = find_lp(pool);
    if (lp == &fa__pool_empty_lp) {
        lp = fa__pool_my_lp(pool);
        if (lp == NULL)
            return pool->debug ? fa__pool_debug_get(pool) : get_unowned(pool);
    }
    if (lp->n == 0 && !refill(pool, lp)) {
        errno = ENOMEM;
        return NULL;
    }
    return lp->cache[--lp->n];
}

void *fa_pool_get(fa_pool *pool)
{
    struct lpool *lp = FAST_LP(pool);
    size_t n = lp->n;
    if (FA_UNLIKELY(n == 0)) {
        void *o = get_slow(pool);
        if (o != NULL && !pool->debug)
            FA_UNPOISON(o, pool->slot - pool->link_off);
        return o;
    }
    lp->n = --n;
    void *o = lp->cache[n];
    FA_UNPOISON(o, pool->slot - pool->link_off);
    return o;
}

/* ---- put ---- */

/* The cache is at its bound, the thread has no local pool yet, or the
 * pool is past FAST_SLOTS (the fast paths see the stand-in). */
static FA_NOINLINE void put_slow(fa_pool *pool, void *obj)
{
    if (pool->debug) {
        fa__pool_debug_put(pool, obj);
        return;
    }
    struct lpool *lp = fa__pool_my_lp(pool);
    if (lp == NULL) {
        /* No local pool (the thread is exiting): its owner takes it back. */
        pthread_mutex_lock(&pool->grow);
        struct block *b = block_of(pool, obj);
        struct lpool *was = __atomic_load_n(&b->owner, __ATOMIC_RELAXED);
        if (detached(was) && __atomic_compare_exchange_n(&b->owner, &was, NULL, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            /* No thread's: into a global pool, where a thread finds it;
             * remote bits in it would wait for a put that may never come. */
            fa__pool_block_collect(pool, b);
            set_free(pool, b, (uintptr_t)obj);
            b->out--;
            uint64_t now = fa__now_ms();
            fa__lock(&pool->g[0].lock);
            fa__pool_to_global(&pool->g[0], b, now);
            fa__unlock(&pool->g[0].lock);
        } else {
            size_t s = slot_index(pool, b, (uintptr_t)obj);
            remote_put_word(pool, b, s / 64, (uint64_t)1 << (s % 64));
        }
        pool->puts_retired++;
        pthread_mutex_unlock(&pool->grow);
        return;
    }
    if (lp->n >= lp->max)
        fa__pool_spill(pool, lp, lp->max / 2);
    lp->cache[lp->n++] = obj;
    lp->puts++;
}

void fa_pool_put(fa_pool *pool, void *obj)
{
#ifdef FA_ASAN
    /* A free object is poisoned whole (00-base/asan.h): nothing writes
     * into it until it is got again, remote puts included.  A debug pool
     * fills and checks its objects instead. */
    if (!pool->debug)
        FA_POISON(obj, pool->slot - pool->link_off);
#endif
    struct lpool *lp = FAST_LP(pool);
    size_t n = lp->n;
    if (FA_UNLIKELY(n >= lp->max)) {
        put_slow(pool, obj);
        return;
    }
    lp->cache[n] = obj;
    lp->n = n + 1;
    lp->puts++;
}
