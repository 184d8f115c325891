/* Debug pools: every call is checked, under the grow mutex.  Such a pool
 * has no local pools: one LIFO list serves every thread, and each block
 * keeps one bit per slot, set while its object is out, so that a double
 * put or a put of a pointer the pool never handed out is reported, as
 * malloc's debug mode reports (09-diag/debug.c: one line, the stack, then
 * abort unless FASTALLOC_DEBUG_CONTINUE=1).  A put object waits in a
 * quarantine (FASTALLOC_DEBUG_QUARANTINE bytes, per pool) before the list.
 * In a pool with no ctor or dtor, whose objects keep no state while free,
 * a got object is filled with 0xAA and a put one with 0xDD (but its link,
 * the first word), and the fill is checked when the object leaves the
 * quarantine: a write after put is reported then.  Slow on purpose: the
 * get and put paths come here from their slow paths, which a debug pool
 * always takes. */
#include "13-pool/pool.h"
#include "00-base/mem.h"
#include "00-base/diag.h"
#include "01-os/sys.h"
#include "00-base/options.h"
#include "09-diag/debug.h"

#include <errno.h>
#include <string.h>

#define FILL_GOT 0xAA
#define FILL_PUT 0xDD

static struct block *debug_find_block(fa_pool *pool, void *obj)
{
    struct block *want = block_of(pool, obj);
    for (struct block *b = pool->blocks; b != NULL; b = b->next)
        if (b == want)
            return b;
    return NULL;
}

/* Objects keep no state while free: they are filled. */
static bool filled(const fa_pool *pool)
{
    return pool->ctor == NULL && pool->dtor == NULL;
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
        size_t i = slot_index(pool, b, (uintptr_t)o);
        block_bits(pool, b)[i / 64] |= (uint64_t)1 << (i % 64);
        b->out++;
        pool->gets_retired++;
        if (filled(pool))
            fa__memset(o, FILL_GOT, pool->slot);
    } else {
        errno = ENOMEM;
    }
    pthread_mutex_unlock(&pool->grow);
    return o;
}

/* The oldest object leaves the quarantine for the free list, its fill
 * checked; grow is held. */
static void quarantine_pop(fa_pool *pool)
{
    void *o = pool->dbg_qhead;
    pool->dbg_qhead = fa__fl_next_at(o, negoff(pool));
    if (pool->dbg_qhead == NULL)
        pool->dbg_qtail = NULL;
    pool->dbg_qbytes -= pool->slot;
    if (filled(pool)) {
        const unsigned char *c = o;
        for (size_t i = sizeof(void *); i < pool->slot; i++) {
            if (c[i] != FILL_PUT) {
                fa__diag("fastalloc: debug: write after put to %p (%zu bytes) in pool '%s': byte %zu is 0x%02x, "
                         "found by thread %d",
                         o, pool->slot, pool->name, i, c[i], fa__os_thread_id());
                fa__dbg_report_end();
                break;
            }
        }
    }
    fa__fl_set_next_at(o, negoff(pool), pool->dbg_free);
    pool->dbg_free = o;
}

void fa__pool_debug_put(fa_pool *pool, void *u)
{
    pthread_mutex_lock(&pool->grow);
    struct block *b = debug_find_block(pool, u);
    uintptr_t first = b ? first_obj(pool, b) : 0;
    if (b == NULL || (uintptr_t)u < first || ((uintptr_t)u - first) % pool->slot != 0 ||
        (uintptr_t)u >= b->bump) {
        pthread_mutex_unlock(&pool->grow);
        fa__diag("fastalloc: debug: invalid pointer %p passed to fa_pool_put: not handed out by pool '%s', "
                 "thread %d",
                 u, pool->name, fa__os_thread_id());
        fa__dbg_report_end();
        return;
    }
    size_t i = slot_index(pool, b, (uintptr_t)u);
    uint64_t bit = (uint64_t)1 << (i % 64);
    if (!(block_bits(pool, b)[i / 64] & bit)) {
        pthread_mutex_unlock(&pool->grow);
        fa__diag("fastalloc: debug: double put of %p (%zu bytes) in pool '%s', thread %d", u, pool->slot,
                 pool->name, fa__os_thread_id());
        fa__dbg_report_end();
        return;
    }
    block_bits(pool, b)[i / 64] &= ~bit;
    b->out--;
    if (filled(pool))
        fa__memset(u, FILL_PUT, pool->slot);
    fa__fl_set_next_at(u, negoff(pool), NULL);
    if (pool->dbg_qtail != NULL)
        fa__fl_set_next_at(pool->dbg_qtail, negoff(pool), u);
    else
        pool->dbg_qhead = u;
    pool->dbg_qtail = u;
    pool->dbg_qbytes += pool->slot;
    size_t bound = __atomic_load_n(&fa__opt.debug_quarantine, __ATOMIC_RELAXED);
    while (pool->dbg_qbytes > bound)
        quarantine_pop(pool);
    pool->puts_retired++;
    pthread_mutex_unlock(&pool->grow);
}

/* A debug pool's blocks with nothing out go, their objects off the list;
 * the quarantine empties into the list first (its objects checked). */
size_t fa__pool_debug_trim_locked(fa_pool *pool)
{
    while (pool->dbg_qhead != NULL)
        quarantine_pop(pool);
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
