/* Debug pools: every call is checked, under the grow mutex.  Such a pool
 * has no local pools: one LIFO list serves every thread, and each block
 * keeps one bit per slot, set while its object is out, so that a double
 * put or a put of a pointer the pool never handed out stops the program
 * with a line that names it.  Slow on purpose: the get and put paths come
 * here from their slow paths, which a debug pool always takes. */
#include "pool/pool.h"
#include "base/diag.h"

#include <errno.h>

static struct block *debug_find_block(fa_pool *pool, void *obj)
{
    struct block *want = block_of(pool, obj);
    for (struct block *b = pool->blocks; b != NULL; b = b->next)
        if (b == want)
            return b;
    return NULL;
}

static size_t slot_index(fa_pool *pool, struct block *b, void *u)
{
    return ((uintptr_t)u - first_obj(pool, b)) / pool->slot;
}

void *fa__pool_debug_get(fa_pool *pool)
{
    pthread_mutex_lock(&pool->grow);
    void *o = pool->dbg_free;
    if (o != NULL) {
        pool->dbg_free = fa__fl_next_at(o, negoff(pool));
    } else {
        struct block *b = pool->dbg_blk;
        if (b == NULL || b->bump >= b->end) {
            b = fa__pool_block_new(pool, NULL);
            if (b != NULL) {
                b->where = W_DEBUG;
                pool->dbg_blk = b;
            }
        }
        if (b != NULL)
            o = fa__pool_cut_one(pool, b);
    }
    if (o != NULL) {
        struct block *b = block_of(pool, o);
        size_t i = slot_index(pool, b, o);
        b->bits[i / 64] |= (uint64_t)1 << (i % 64);
        b->out++;
        pool->gets_retired++;
    } else {
        errno = ENOMEM;
    }
    pthread_mutex_unlock(&pool->grow);
    return o;
}

void fa__pool_debug_put(fa_pool *pool, void *u)
{
    pthread_mutex_lock(&pool->grow);
    struct block *b = debug_find_block(pool, u);
    uintptr_t first = b ? first_obj(pool, b) : 0;
    if (b == NULL || (uintptr_t)u < first || ((uintptr_t)u - first) % pool->slot != 0 ||
        (uintptr_t)u >= b->bump)
        fa__fatal("fastalloc: fa_pool_put(): %p was not handed out by pool '%s'", u, pool->name);
    size_t i = slot_index(pool, b, u);
    uint64_t bit = (uint64_t)1 << (i % 64);
    if (!(b->bits[i / 64] & bit))
        fa__fatal("fastalloc: fa_pool_put(): double put of %p in pool '%s'", u, pool->name);
    b->bits[i / 64] &= ~bit;
    b->out--;
    fa__fl_set_next_at(u, negoff(pool), pool->dbg_free);
    pool->dbg_free = u;
    pool->puts_retired++;
    pthread_mutex_unlock(&pool->grow);
}

/* A debug pool's blocks with nothing out go, their objects off the list. */
size_t fa__pool_debug_trim_locked(fa_pool *pool)
{
    for (struct block *b = pool->blocks; b != NULL; b = b->next)
        b->doomed = b->out == 0;
    void *kept = NULL, *tail = NULL;
    for (void *o = pool->dbg_free, *next; o != NULL; o = next) {
        next = fa__fl_next_at(o, negoff(pool));
        if (block_of(pool, o)->doomed)
            continue;
        if (tail == NULL)
            kept = o;
        else
            fa__fl_set_next_at(tail, negoff(pool), o);
        tail = o;
    }
    if (tail != NULL)
        fa__fl_set_next_at(tail, negoff(pool), NULL);
    pool->dbg_free = kept;
    if (pool->dbg_blk != NULL && pool->dbg_blk->doomed)
        pool->dbg_blk = NULL;
    return fa__pool_release_doomed(pool);
}
