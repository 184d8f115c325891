/* fa_pool_get and fa_pool_put, and the slow paths behind them.  The fast
 * paths are a pop or a push on the current block's list in the thread's
 * local pool, a few instructions each (tools/icount.sh --pool).  They stay
 * in one file with their slow paths, which are static here: each fast path
 * is then inlined whole into its public function and leaves for its slow
 * path by one direct jump (compare `objdump -d` of fa_pool_get and
 * fa_pool_put after a change).  The slow paths find the next block to
 * serve from: the thread's own lists, then remote puts, the global pools,
 * and last new memory. */
#include "13-pool/pool.h"
#include "00-base/asan.h"

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
            if (has_built_free(pool, c) || (c->out == 0 && c->built_end > first_obj(pool, c)) ||
                (!built_only && c->bump < c->end)) {
                b = c;
                break;
            }
            fa__pool_bl_add(&g->part, c, W_GPART, true);
        }
        if (b == NULL && g->empty.head != NULL &&
            (!built_only || g->empty.head->built_end > first_obj(pool, g->empty.head))) {
            b = g->empty.head;
            fa__pool_bl_remove(&g->empty, b);
        }
        if (b != NULL)
            __atomic_store_n(&b->owner, lp, __ATOMIC_RELAXED);
        fa__unlock(&g->lock);
        if (b != NULL) {
            if (b->out == 0)
                block_reset(pool, b);
            return b;
        }
    }
    return NULL;
}

/* One of lp's full blocks that has had remote puts; up to `scan` looked at,
 * and only when a remote put has raised lp's hint since the last look
 * (`all`: every block, hint or not). */
static struct block *full_with_remote(fa_pool *pool, struct lpool *lp, size_t scan, int all)
{
    if (lp->full.head == NULL)
        return NULL;
    if (!__atomic_exchange_n(&lp->remote_hint, 0, __ATOMIC_ACQUIRE) && !all)
        return NULL;
    for (size_t s = 0; s < scan && lp->full.head != NULL; s++) {
        struct block *b = lp->full.head;
        fa__pool_bl_remove(&lp->full, b);
        fa__pool_block_collect(pool, b);
        if (b->out == 0)
            block_reset(pool, b);
        if (b->free != NULL || b->bump < b->end) {
            /* Others may have had puts too: look again next time. */
            __atomic_store_n(&lp->remote_hint, 1, __ATOMIC_RELAXED);
            return b;
        }
        fa__pool_bl_add(&lp->full, b, W_FULL, true);
    }
    if (scan < lp->full.n)
        __atomic_store_n(&lp->remote_hint, 1, __ATOMIC_RELAXED);
    return NULL;
}

/* The next block for lp to serve from, taken out of its list.  Free
 * objects already built come first (built_only), then objects never cut. */
static struct block *next_block(fa_pool *pool, struct lpool *lp, int built_only)
{
    struct block *b;
    if (built_only) {
        if ((b = lp->last) != NULL && b->where == W_AVAIL) {
            lp->last = NULL;
            fa__pool_bl_remove(&lp->avail, b);
            return b;
        }
        if ((b = lp->avail.head) != NULL) {
            fa__pool_bl_remove(&lp->avail, b);
            return b;
        }
        if ((b = lp->spare.head) != NULL) {
            fa__pool_bl_remove(&lp->spare, b);
            block_reset(pool, b);
            return b;
        }
        if ((b = full_with_remote(pool, lp, SCAN, 0)) != NULL)
            return b;
        return adopt(pool, lp, 1);
    }
    if ((b = lp->fresh.head) != NULL) {
        fa__pool_bl_remove(&lp->fresh, b);
        return b;
    }
    if ((b = adopt(pool, lp, 0)) != NULL)
        return b;
    pthread_mutex_lock(&pool->grow);
    b = fa__pool_block_new(pool, lp);
    pthread_mutex_unlock(&pool->grow);
    if (b != NULL) {
        fa__pool_maybe_idle_trim(pool);
        return b;
    }
    /* At the cap: look at every full block before giving up. */
    return full_with_remote(pool, lp, lp->full.n, 1);
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
        if ((o = b->free) != NULL)
            b->free = fa__fl_next_at(o, negoff(pool));
        else
            o = fa__pool_cut_one(pool, b);
        b->out += o != NULL;
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

static inline void *pop(struct lpool *lp)
{
    void *o = lp->head;
    lp->head = fa__fl_next_at(o, lp->negoff);
    lp->gets++;
    return o;
}

/* Link up to CUT_BATCH objects of b from its bump pointer, in address
 * order, below lim; the first is returned, the rest become lp's list. */
static void *cut_batch(fa_pool *pool, struct lpool *lp, struct block *b, uintptr_t lim)
{
    uintptr_t u = b->bump;
    size_t n = (lim - u) / pool->slot;
    if (n > CUT_BATCH)
        n = CUT_BATCH;
    uintptr_t last = u + (n - 1) * pool->slot;
    if (FA_UNLIKELY(last + pool->slot > b->pop_end))
        fa__pool_populate(b, last + pool->slot);
    for (uintptr_t p = u; p < last; p += pool->slot)
        fa__fl_set_next_at((void *)p, lp->negoff, (void *)(p + pool->slot));
    fa__fl_set_next_at((void *)last, lp->negoff, NULL);
    b->bump = last + pool->slot;
    if (b->bump > b->built_end)
        b->built_end = b->bump;
    lp->head = fa__fl_next_at((void *)u, lp->negoff);
    lp->gets++;
    return (void *)u;
}

static FA_NOINLINE void *get_slow(fa_pool *pool)
{
    struct lpool *lp = find_lp(pool);
    if (lp == &fa__pool_empty_lp) {
        lp = fa__pool_my_lp(pool);
        if (lp == NULL)
            return pool->debug ? fa__pool_debug_get(pool) : get_unowned(pool);
    }
    if (lp->head != NULL) /* a pool past FAST_SLOTS, or a new local pool */
        return pop(lp);
    for (;;) {
        struct block *b = lp->cur;
        if (b != NULL) {
            /* Objects built before, cut again in address order. */
            if (b->bump < b->built_end)
                return cut_batch(pool, lp, b, b->built_end);
            int64_t n;
            void *r = remote_take(b, &n);
            lp->out0 -= n;
            if (r != NULL) {
                lp->head = r;
                return pop(lp);
            }
            if (cur_out(lp) == 0 && b->built_end > first_obj(pool, b)) {
                /* Everything came back: cut it again, in order. */
                block_reset(pool, b);
                continue;
            }
        }
        /* Free objects in other blocks come before new ones. */
        struct block *nb = next_block(pool, lp, 1);
        if (nb == NULL && b != NULL && b->bump < b->end) {
            /* A pool with a ctor builds one object a call, so that exactly
             * the objects handed out have been constructed. */
            if (pool->ctor) {
                lp->gets++;
                return fa__pool_cut_one(pool, b);
            }
            return cut_batch(pool, lp, b, b->end);
        }
        if (b != NULL)
            fa__pool_place(pool, lp, close_cur(lp));
        if (nb == NULL)
            nb = next_block(pool, lp, 0);
        if (nb == NULL) {
            errno = ENOMEM;
            return NULL;
        }
        open_cur(lp, nb);
        if (lp->head != NULL)
            return pop(lp);
    }
}

/* Where a get goes when its fast path finds nothing: a pool whose local
 * pool the fast paths do not read (tls_idx is not its id: past FAST_SLOTS,
 * or a ctor or dtor, pool.h) pops from it here, reading the link's offset;
 * this small function spares such a pool get_slow's entry and exit. */
static FA_NOINLINE void *get_miss(fa_pool *pool)
{
    if (pool->tls_idx != pool->id) {
        struct lpool *lp = find_lp(pool);
        if (lp->head != NULL)
            return pop(lp);
    }
    return get_slow(pool);
}

void *fa_pool_get(fa_pool *pool)
{
    struct lpool *lp = FAST_LP(pool);
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    /* gcc keeps lp in %rax and then moves the object there to return it:
     * an instruction more than with lp in another register. */
    __asm__("" : "+c"(lp));
#endif
    void *o = lp->head;
    if (FA_UNLIKELY(o == NULL)) {
        o = get_miss(pool);
        if (o != NULL && !pool->debug)
            FA_UNPOISON(o, pool->slot - pool->link_off);
        return o;
    }
    lp->head = fa__fl_next_at(o, 0); /* a plain pool's link: pool.h, FAST_LP */
    lp->gets++;
    FA_UNPOISON(o, pool->slot - pool->link_off);
    return o;
}

/* ---- put ---- */

/* A put emptied b (all its objects are back).  b is where the next get
 * starts, so it stays; the block emptied before it, if still all free and
 * not current, is filed now: spare or handed over. */
static FA_NOINLINE void put_emptied(fa_pool *pool, struct lpool *lp, struct block *b)
{
    struct block *p = lp->emptied;
    lp->emptied = b;
    if (p != NULL && p != b && p->owner == lp && p->where == W_AVAIL && p->out == 0 &&
        p != lp->last) {
        fa__pool_bl_remove(&lp->avail, p);
        fa__pool_place(pool, lp, p);
    }
}

/* The put paths that need no list change: into the current block, or
 * into one of the thread's own blocks while none is current.  Objects put in
 * random order land in many blocks, and keeping that second path short too
 * keeps more of the caller's cache misses in flight. */
static inline __attribute__((always_inline)) int put_local(fa_pool *pool, struct lpool *lp, void *obj,
                                                           intptr_t negoff)
{
    uintptr_t base = (uintptr_t)obj & lp->mask;
    if (FA_LIKELY(base == lp->cur_base)) {
        fa__fl_set_next_at(obj, negoff, lp->head);
        lp->head = obj;
        lp->puts++;
        return 1;
    }
    /* tag == tok: b is on lp's avail list and lp has no current block. */
    uintptr_t hdr = block_header(base);
    if (FA_LIKELY(__atomic_load_n((uintptr_t *)(hdr + lp->tag_off), __ATOMIC_RELAXED) == lp->tok)) {
        struct block *b = (struct block *)hdr;
        fa__fl_set_next_at(obj, negoff, b->free);
        b->free = obj;
        lp->puts++;
        lp->last = b;
        if (FA_UNLIKELY(--b->out == 0))
            put_emptied(pool, lp, b);
        return 1;
    }
    return 0;
}

static FA_NOINLINE void put_slow(fa_pool *pool, void *obj)
{
    struct lpool *lp = find_lp(pool);
    if (pool->debug) {
        fa__pool_debug_put(pool, obj);
        return;
    }
    struct block *b = block_of(pool, obj);
    if (lp == &fa__pool_empty_lp || __atomic_load_n(&b->owner, __ATOMIC_RELAXED) != lp) {
        /* Not ours (or no local pool): the owner takes it back later. */
        remote_push(b, obj, negoff(pool));
        return;
    }
    /* One of our blocks, not the current one: the object goes onto the
     * block's own list, and the block is remembered so that the next get
     * starts there (the object put last is the one got next).  There is no
     * current block until then, so that a get cannot miss it. */
    if (lp->cur != NULL)
        fa__pool_place(pool, lp, close_cur(lp));
    fa__fl_set_next_at(obj, lp->negoff, b->free);
    b->free = obj;
    lp->puts++;
    lp->last = b;
    if (b->where != W_AVAIL) {
        if (b->where > W_AVAIL && b->where <= W_SPARE)
            fa__pool_bl_remove(&lp->lists[b->where - W_AVAIL], b);
        fa__pool_bl_add(&lp->avail, b, W_AVAIL, false);
    }
    if (--b->out == 0)
        put_emptied(pool, lp, b);
}

/* The same for a put (get_miss): put_local with the link's offset. */
static FA_NOINLINE void put_miss(fa_pool *pool, void *obj)
{
    struct lpool *lp;
    if (pool->tls_idx == pool->id || (lp = find_lp(pool)) == &fa__pool_empty_lp ||
        !put_local(pool, lp, obj, lp->negoff))
        put_slow(pool, obj);
}

void fa_pool_put(fa_pool *pool, void *obj)
{
#ifdef FA_ASAN
    /* A free object is poisoned (00-base/asan.h): all of it when its link is
     * in the header before it, all but the link otherwise.  A debug pool
     * fills and checks its objects instead. */
    if (!pool->debug) {
        size_t keep = pool->link_off == 0 ? sizeof(void *) : 0;
        FA_POISON((char *)obj + keep, pool->slot - pool->link_off - keep);
    }
#endif
    if (FA_UNLIKELY(!put_local(pool, FAST_LP(pool), obj, 0)))
        put_miss(pool, obj);
}
