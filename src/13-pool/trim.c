/* Trim: blocks whose objects are all free go back to the OS, when the
 * program asks (fa_pool_trim, pool.c) or by the idle policy, which the slow
 * paths of the other files call now and then.  Only blocks in the global
 * pools, which no thread owns, are released; fa_pool_trim hands the
 * caller's own blocks over first.  A debug pool's trim is in debug.c. */
#include "13-pool/pool.h"
#include "01-os/clock.h"
#include "01-os/os.h"

/* A put that read a block's owner just before the owner detached it
 * leaves its bit in a block no thread collects: the puts that take a
 * detached block come only while some of its objects are out.  Such a
 * block goes to a global pool here, where adopt() collects it. */
size_t fa__pool_sweep_detached(fa_pool *pool, size_t budget)
{
    size_t moved = 0;
    struct block *b = pool->sweep != NULL ? pool->sweep : pool->blocks;
    for (size_t k = 0; k < budget && b != NULL; k++, b = b->next) {
        struct lpool *was = __atomic_load_n(&b->owner, __ATOMIC_RELAXED);
        if (!detached(was) || !block_has_remote(pool, b) ||
            !__atomic_compare_exchange_n(&b->owner, &was, NULL, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            continue;
        fa__pool_block_collect(pool, b);
        uint64_t now = fa__now_ms();
        fa__lock(&pool->g[0].lock);
        fa__pool_to_global(&pool->g[0], b, now);
        fa__unlock(&pool->g[0].lock);
        moved++;
    }
    pool->sweep = b;
    return moved;
}

/* Release the unowned blocks whose objects are all free and that entered a
 * global pool at or before `before` (UINT64_MAX: all).  grow held. */
size_t fa__pool_trim_locked(fa_pool *pool, uint64_t before)
{
    if (pool->debug)
        return fa__pool_debug_trim_locked(pool);
    pool->sweep = NULL;
    fa__pool_sweep_detached(pool, SIZE_MAX);
    uint64_t now = fa__now_ms();
    for (unsigned i = 0; i < pool->ngpools; i++) {
        struct gpool *g = &pool->g[i];
        fa__lock(&g->lock);
        /* Blocks that remote puts emptied join the empty list. */
        for (struct block *b = g->part.head, *next; b != NULL; b = next) {
            next = b->lnext;
            fa__pool_block_collect(pool, b);
            if (b->out == 0) {
                fa__pool_bl_remove(&g->part, b);
                b->stamp_ms = now;
                fa__pool_bl_add(&g->empty, b, W_GEMPTY, false);
            }
        }
        for (struct block *b = g->empty.tail, *prev; b != NULL; b = prev) {
            prev = b->lprev;
            if (b->stamp_ms <= before) {
                fa__pool_bl_remove(&g->empty, b);
                b->doomed = 1;
            }
        }
        fa__unlock(&g->lock);
    }
    size_t released = fa__pool_release_doomed(pool);
    /* Mapped blocks never handed out go too. */
    if (before == UINT64_MAX && pool->spare != pool->spare_end) {
        fa__os_unmap(pool->spare, (size_t)(pool->spare_end - pool->spare));
        pool->spare = pool->spare_end = NULL;
    }
    return released;
}

/* The idle policy: a block that has sat all free in a global pool for
 * idle_trim_ms goes back to the OS.  Looked at on the pool's slow paths
 * (hand-overs and growth), every IDLE_CHECK_EVERY of them, at most four
 * times per delay. */
void fa__pool_maybe_idle_trim(fa_pool *pool)
{
    if (pool->idle_ms < 0 ||
        (__atomic_add_fetch(&pool->tick, 1, __ATOMIC_RELAXED) % IDLE_CHECK_EVERY) != 0)
        return;
    uint64_t now = fa__now_ms();
    uint64_t last = __atomic_load_n(&pool->last_check_ms, __ATOMIC_RELAXED);
    if (now - last < (uint64_t)pool->idle_ms / 4)
        return;
    if (pthread_mutex_trylock(&pool->grow) != 0)
        return;
    __atomic_store_n(&pool->last_check_ms, now, __ATOMIC_RELAXED);
    /* A look that finds nothing old enough is not a trim: the count tells
     * the user how often the pool actually gave memory back by itself. */
    if (now >= (uint64_t)pool->idle_ms && fa__pool_trim_locked(pool, now - (uint64_t)pool->idle_ms) > 0)
        pool->trims++;
    pthread_mutex_unlock(&pool->grow);
}
