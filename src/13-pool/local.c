/* Local pools: each thread's own part of a pool, and the per-thread arrays
 * that find them.  A local pool is created on a thread's first get or put,
 * holds the thread's cache and its lists of blocks, gives the cache's
 * oldest objects back to their blocks, hands all-free blocks over to its
 * global pool, and gives everything back when its thread exits or its pool
 * is destroyed.  The get and put paths call in here from their slow paths
 * only: to file a block, to spill the cache, and to find a thread its
 * local pool. */
#include "13-pool/pool.h"
#include "00-base/mem.h"
#include "00-base/seam.h"
#include "01-os/clock.h"
#include "01-os/exit.h"
#include "01-os/os.h"
#include "02-records/meta.h"

#include <string.h>

/* ---- per-thread arrays of local pools (why they look so: pool.h) ---- */

/* Stand-in for "no local pool yet": an empty cache with no room, so both
 * get and put fall into their slow path with no extra test, and neither
 * writes to it. */
struct lpool fa__pool_empty_lp = {.n = 0, .max = 0};
__thread struct lpool *fa__pool_lp[FAST_SLOTS + 1]
    __attribute__((tls_model("initial-exec"))) = {[0 ... FAST_SLOTS] = &fa__pool_empty_lp};
__thread struct lpool **fa__pool_lp_more __attribute__((tls_model("initial-exec")));
static __thread int pool_tls_dead __attribute__((tls_model("initial-exec")));
static __thread int pool_tls_registered __attribute__((tls_model("initial-exec")));

/* Guards the pool ids (pool.c), the recycled local pools and the
 * per-thread arrays of other threads; the first lock of the order (pool.h).
 * Defined here, in the lowest file that takes it. */
fa__lock_t fa__pool_registry = FA_LOCK_INIT;

/* Under the registry lock.  Local pools dropped, for reuse: their pages
 * went back to the OS, so the list is an array beside them, reserved at
 * first use and faulted in as it fills. */
#define SPARE_LPS_MAX ((size_t)1 << 20)
static struct lpool **spare_lps;
static size_t spare_n;
static struct lpool ***spare_more; /* recycled fa__pool_lp_more arrays */

static void thread_exit(void *arg);

/* ---- local pools ---- */

/* File a block that is in no list.  May hand it over. */
void fa__pool_place(fa_pool *pool, struct lpool *lp, struct block *b)
{
    if (b->out == 0 && b->bump > first_obj(pool, b)) {
        if (lp->spare.n < lp->spare_max) {
            fa__pool_bl_add(&lp->spare, b, W_SPARE, false);
        } else {
            uint64_t now = fa__now_ms();
            fa__lock(&lp->g->lock);
            fa__pool_to_global(lp->g, b, now);
            fa__unlock(&lp->g->lock);
            fa__pool_maybe_idle_trim(pool);
        }
    } else if (has_built_free(pool, b)) {
        fa__pool_bl_add(&lp->avail, b, W_AVAIL, false);
    } else if (b->bump < b->end) {
        fa__pool_bl_add(&lp->fresh, b, W_FRESH, false);
    } else {
        /* Every object is out: the block is detached, no thread's, and
         * the first thread that puts one of its objects back takes it.
         * A burst that another thread gives back then goes back with no
         * atomic operation per object, and that thread gets the objects
         * again, as malloc's spans change hands (#40). */
        fa__pool_block_collect(pool, b);
        if (has_built_free(pool, b)) {
            fa__pool_bl_add(&lp->avail, b, W_AVAIL, false);
            return;
        }
        b->where = W_NONE;
        fa__seam(FA_SEAM_POOL_DETACH, b);
        __atomic_store_n(&b->owner, DETACHED(lp), __ATOMIC_SEQ_CST);
        /* A put that read us as the owner may have set its bit since the
         * collect: take the block back for it.  (One that sets its bit
         * after this look leaves it to a sweep: trim.c.) */
        struct lpool *was = DETACHED(lp);
        if (block_has_remote(pool, b) &&
            __atomic_compare_exchange_n(&b->owner, &was, lp, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            fa__pool_block_collect(pool, b);
            fa__pool_place(pool, lp, b);
            return;
        }
        fa__seam(FA_SEAM_POOL_DETACHED, b);
    }
}

/* Object o is free again in b, a block of lp's; b changes list when it
 * had no built object free, or has all free now. */
static void give_back(fa_pool *pool, struct lpool *lp, struct block *b, void *o)
{
    set_free(pool, b, (uintptr_t)o);
    if (--b->out == 0 || b->where != W_AVAIL) {
        fa__pool_bl_remove(&lp->lists[b->where - W_AVAIL], b);
        fa__pool_place(pool, lp, b);
    }
}

void fa__pool_spill(fa_pool *pool, struct lpool *lp, size_t keep)
{
    size_t n = lp->n > keep ? lp->n - keep : 0;
    for (size_t i = 0; i < n;) {
        void *o = lp->cache[i];
        struct block *b = block_of(pool, o);
        struct lpool *was = __atomic_load_n(&b->owner, __ATOMIC_RELAXED);
        if (was == lp) {
            give_back(pool, lp, b, o);
            i++;
            continue;
        }
        if (detached(was)) {
            struct lpool *to = was == DETACHED(lp) || lp->avail.n < TAKE_MAX ? lp : NULL;
            if (__atomic_compare_exchange_n(&b->owner, &was, to, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
                /* Ours now, with what other threads put back meanwhile;
                 * or the global pool's, when we have blocks enough. */
                fa__pool_block_collect(pool, b);
                set_free(pool, b, (uintptr_t)o);
                b->out--;
                if (to != NULL) {
                    fa__pool_place(pool, lp, b);
                } else {
                    uint64_t now = fa__now_ms();
                    fa__lock(&lp->g->lock);
                    fa__pool_to_global(lp->g, b, now);
                    fa__unlock(&lp->g->lock);
                }
                i++;
                continue;
            }
        }
        /* Another thread's block: its remote bits, one OR for each run of
         * objects here that share a word. */
        do {
            size_t s = slot_index(pool, b, (uintptr_t)lp->cache[i]);
            uint64_t mask = (uint64_t)1 << (s % 64);
            for (i++; i < n && block_of(pool, lp->cache[i]) == b; i++) {
                size_t t = slot_index(pool, b, (uintptr_t)lp->cache[i]);
                if (t / 64 != s / 64)
                    break;
                mask |= (uint64_t)1 << (t % 64);
            }
            remote_put_word(pool, b, s / 64, mask);
        } while (i < n && block_of(pool, lp->cache[i]) == b);
    }
    fa__memmove(lp->cache, lp->cache + n, (lp->n - n) * sizeof lp->cache[0]);
    lp->n -= n;
    lp->spilled += n;
}

static struct lpool *lp_new(fa_pool *pool)
{
    /* registry lock held */
    static unsigned colour;
    struct lpool *lp = NULL;
    if (spare_n > 0) {
        lp = spare_lps[--spare_n];
    } else {
        char *page = fa__os_map(LP_PAGE, LP_PAGE);
        if (page != NULL)
            lp = (struct lpool *)(page + (1 + colour++ % LP_COLOURS) * FA_CACHELINE);
    }
    if (lp == NULL)
        return NULL;
    fa__memset(lp, 0, offsetof(struct lpool, cache));
    lp->pool = pool;
    lp->max = CACHE_BYTES / pool->slot;
    lp->max = lp->max < CACHE_MIN ? CACHE_MIN : lp->max > CACHE_CAP ? CACHE_CAP : lp->max;
    lp->spare_max = pool->spare_max;
    lp->g = &pool->g[pool->rr++ % pool->ngpools];
    return lp;
}

/* The calling thread's local pool for pool, created on first use; NULL in a
 * thread that is exiting, for a debug pool, or without memory for it. */
struct lpool *fa__pool_my_lp(fa_pool *pool)
{
    struct lpool *found = find_lp(pool);
    if (found != &fa__pool_empty_lp)
        return found;
    if (pool_tls_dead || pool->debug)
        return NULL;
    if (!pool_tls_registered) {
        /* Any non-NULL argument: the thread's local pools are all found
         * through its TLS slots. */
        fa__os_exit_arm(FA_EXIT_POOL, thread_exit, &fa__pool_empty_lp);
        pool_tls_registered = 1;
    }
    fa__lock(&fa__pool_registry);
    if (pool->id >= FAST_SLOTS && fa__pool_lp_more == NULL) {
        struct lpool **more = (struct lpool **)spare_more;
        if (more != NULL)
            spare_more = (struct lpool ***)more[0];
        else
            more = fa__meta_alloc(POOL_MAX * sizeof *more);
        if (more == NULL) {
            fa__unlock(&fa__pool_registry);
            return NULL;
        }
        for (size_t i = 0; i < POOL_MAX; i++)
            more[i] = &fa__pool_empty_lp;
        fa__pool_lp_more = more;
    }
    pthread_mutex_lock(&pool->grow);
    struct lpool *lp = lp_new(pool);
    if (lp != NULL) {
        lp->next = pool->locals.next;
        lp->prev = &pool->locals;
        pool->locals.next->prev = lp;
        pool->locals.next = lp;
        lp->slot = pool->id < FAST_SLOTS ? &fa__pool_lp[pool->id] : &fa__pool_lp_more[pool->id];
        *lp->slot = lp;
    }
    pthread_mutex_unlock(&pool->grow);
    fa__unlock(&fa__pool_registry);
    return lp;
}

/* The cache goes back to its blocks, and every block of a local pool to
 * its global pool (grow held). */
void fa__pool_lp_retire(fa_pool *pool, struct lpool *lp)
{
    fa__pool_spill(pool, lp, 0);
    struct gpool *g = lp->g;
    uint64_t now = fa__now_ms();
    fa__lock(&g->lock);
    for (struct blist *l = lp->lists; l < lp->lists + NLISTS; l++)
        for (struct block *b; (b = l->head) != NULL;) {
            fa__pool_bl_remove(l, b);
            fa__pool_to_global(g, b, now);
        }
    fa__unlock(&g->lock);
    pool->gets_retired += lp_gets(lp);
    pool->puts_retired += lp->puts;
    lp->puts = lp->taken = lp->spilled = 0;
}

/* Every block of lp goes to its global pool, and lp leaves its pool's list
 * and its thread's array, kept for the next thread (registry and grow held;
 * the thread may be another one, when the pool is destroyed). */
void fa__pool_lp_drop(fa_pool *pool, struct lpool *lp)
{
    fa__pool_lp_retire(pool, lp);
    lp->prev->next = lp->next;
    lp->next->prev = lp->prev;
    *lp->slot = &fa__pool_empty_lp;
    if (spare_lps == NULL)
        spare_lps = fa__os_map(SPARE_LPS_MAX * sizeof *spare_lps, 0);
    if (spare_lps == NULL || spare_n == SPARE_LPS_MAX)
        return; /* not kept (and not unmapped: it is small) */
    spare_lps[spare_n++] = lp;
    /* Nothing in it is read again before lp_new clears it.  A block
     * detached by it carries its address as a tag (pool.h, DETACHED), and
     * only compares it. */
    fa__os_release((void *)((uintptr_t)lp & ~(uintptr_t)(LP_PAGE - 1)), LP_PAGE, false);
}

static void thread_exit(void *arg)
{
    (void)arg;
    pool_tls_dead = 1;
    fa__lock(&fa__pool_registry);
    for (size_t i = 0; i < POOL_MAX; i++) {
        struct lpool **slot = i < FAST_SLOTS ? &fa__pool_lp[i]
                              : fa__pool_lp_more ? &fa__pool_lp_more[i]
                                                 : NULL;
        if (slot == NULL)
            break;
        struct lpool *lp = *slot;
        if (lp == &fa__pool_empty_lp)
            continue;
        fa_pool *pool = lp->pool;
        pthread_mutex_lock(&pool->grow);
        fa__pool_lp_drop(pool, lp); /* lp->slot is slot */
        pthread_mutex_unlock(&pool->grow);
    }
    if (fa__pool_lp_more != NULL) {
        fa__pool_lp_more[0] = (struct lpool *)spare_more;
        spare_more = (struct lpool ***)fa__pool_lp_more;
        fa__pool_lp_more = NULL;
    }
    fa__unlock(&fa__pool_registry);
}
