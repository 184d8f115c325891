/* A pool's life: create, destroy, trim and stats; the registry of the
 * pools alive; fork.  The registry's lock is the first of the lock order
 * (pool.h): fork and destroy, which take every lock of a pool, start
 * with it. */
#include "13-pool/pool.h"
#include "00-base/mem.h"
#include "00-base/asan.h"
#include "10-stats/stats.h"
#include "01-os/clock.h"
#include "11-init/init.h"
#include "01-os/os.h"
#include "01-os/sys.h"

#include <errno.h>
#include <string.h>

/* The pools alive, by id, under fa__pool_registry (local.c, which takes it
 * too). */
static fa_pool *pools[POOL_MAX];

/* ---- fork ---- */

/* Every pool lock is held across fork() (registry, then each pool's grow
 * mutex and global pools, the usual order), so the child finds the pools
 * consistent.  The blocks of the parent's other threads stay owned by local
 * pools that have no thread in the child: the child cannot reuse them. */
static void fork_prepare(void)
{
    fa__lock(&fa__pool_registry);
    for (size_t id = 0; id < POOL_MAX; id++) {
        fa_pool *p = pools[id];
        if (p == NULL)
            continue;
        pthread_mutex_lock(&p->grow);
        for (unsigned i = 0; i < p->ngpools; i++)
            fa__lock(&p->g[i].lock);
    }
}

static void fork_release(int child)
{
    for (size_t id = POOL_MAX; id-- > 0;) {
        fa_pool *p = pools[id];
        if (p == NULL)
            continue;
        for (unsigned i = p->ngpools; i-- > 0;)
            fa__unlock(&p->g[i].lock);
        if (child)
            pthread_mutex_init(&p->grow, NULL);
        else
            pthread_mutex_unlock(&p->grow);
    }
    fa__unlock(&fa__pool_registry);
}

/* The pools' statistics for fa_stats_get (10-stats/stats.c): the live pools,
 * in creation slots, at most max of them filled; returns how many live. */
static unsigned stats_all(fa_pool_stats_t *out, unsigned max)
{
    unsigned n = 0;
    fa__lock(&fa__pool_registry);
    for (size_t id = 0; id < POOL_MAX; id++) {
        if (pools[id] == NULL)
            continue;
        if (n < max)
            fa_pool_stats(pools[id], &out[n]);
        n++;
    }
    fa__unlock(&fa__pool_registry);
    return n;
}

static void join_fork(void)
{
    fa__init_fork_hooks(fork_prepare, fork_release);
    fa__stats_set_pool_source(stats_all);
}

/* ---- create / destroy / trim / stats ---- */

fa_pool *fa_pool_create(const fa_pool_options *opt)
{
    if (opt == NULL || opt->object_size == 0 || opt->object_size > ((size_t)1 << 30) ||
        (opt->object_align & (opt->object_align - 1)) != 0 || opt->object_align > 4096 ||
        (opt->block_size != 0 && ((opt->block_size & (opt->block_size - 1)) != 0 || opt->block_size < 4096))) {
        errno = EINVAL;
        return NULL;
    }
    fa__ensure_init();
    static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
    pthread_once(&fork_once, join_fork);
    size_t align = opt->object_align ? opt->object_align : 16;
    if (align < sizeof(void *))
        align = sizeof(void *);
    size_t link_off = 0, slot = opt->object_size;
    if (opt->ctor || opt->dtor)
        link_off = (sizeof(void *) + align - 1) & ~(align - 1);
    else if (slot < sizeof(void *))
        slot = sizeof(void *);
    slot = (link_off + slot + align - 1) & ~(align - 1);
    size_t bs = opt->block_size ? opt->block_size : DEFAULT_BLOCK;
    unsigned ncpu = fa__os_cpu_count();
    unsigned ng = opt->global_pools;
    if (ng == 0)
        ng = ncpu > 8 ? ncpu / 4 : 2;
    if (ng > GPOOLS_MAX)
        ng = GPOOLS_MAX;
    size_t capacity = 0, hdr = 0, bl = 0;
    /* Grow the block until a useful number of objects fits after the header. */
    for (;;) {
        capacity = bs / slot;
        /* The slots start after the remote bits of the header's last
         * place (block_rbits), which follow the header and the bits. */
        bl = (capacity + 8 * FA_CACHELINE - 1) / (8 * FA_CACHELINE);
        size_t lines = 0;
        for (size_t c = 0; c < COLOURS; c++)
            if (rbits_line(c, bl) + bl > lines)
                lines = rbits_line(c, bl) + bl;
        hdr = (lines * FA_CACHELINE + align - 1) & ~(align - 1);
        if (bs > hdr && (bs - hdr) / slot >= 8)
            break;
        bs *= 2;
        if (bs > ((size_t)1 << 34)) {
            errno = EINVAL;
            return NULL;
        }
    }
    size_t size = sizeof(fa_pool) + ng * sizeof(struct gpool);
    fa_pool *pool = fa__os_map(size, 0);
    if (pool == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pool->slot = slot;
    pool->slot_inv = UINT64_MAX / slot + 1;
    pool->link_off = link_off;
    pool->align = align;
    pool->block_size = bs;
    pool->data_off = hdr;
    pool->bits_lines = bl;
    pool->per_block = (uint32_t)((bs - hdr) / slot);
    pool->chunk_blocks = CHUNK_FIRST;
    /* handover: free objects a thread may keep in all-free blocks. */
    pool->spare_max = opt->handover ? opt->handover / pool->per_block : 1;
    pool->ngpools = ng;
    pool->debug = opt->debug;
    pool->idle_ms = opt->idle_trim_ms == 0 ? DEFAULT_IDLE_MS : opt->idle_trim_ms;
    pool->ctor = opt->ctor;
    pool->dtor = opt->dtor;
    pool->arg = opt->arg;
    pool->max_objects = opt->max_objects;
    pool->max_bytes = opt->max_bytes;
    if (opt->name) {
        size_t n = strnlen(opt->name, sizeof pool->name - 1);
        fa__memcpy(pool->name, opt->name, n);
        pool->name[n] = '\0';
    }
    pthread_mutex_init(&pool->grow, NULL);
    pool->locals.next = pool->locals.prev = &pool->locals;
    pool->last_check_ms = fa__now_ms();

    fa__lock(&fa__pool_registry);
    unsigned id = 0;
    while (id < POOL_MAX && pools[id] != NULL)
        id++;
    if (id == POOL_MAX) {
        fa__unlock(&fa__pool_registry);
        fa__os_unmap(pool, size);
        errno = ENOMEM;
        return NULL;
    }
    pool->id = id;
    pool->tls_idx = id < FAST_SLOTS ? id : FAST_SLOTS;
    pool->tls_off = (uintptr_t)&fa__pool_lp[pool->tls_idx] - (uintptr_t)__builtin_thread_pointer();
    pools[id] = pool;
    fa__unlock(&fa__pool_registry);
    return pool;
}

void fa_pool_destroy(fa_pool *pool)
{
    if (pool == NULL)
        return;
    fa__lock(&fa__pool_registry);
    pools[pool->id] = NULL;
    pthread_mutex_lock(&pool->grow);
    /* Every thread's local pool goes: its blocks join the global pools. */
    while (pool->locals.next != &pool->locals)
        fa__pool_lp_drop(pool, pool->locals.next);
    /* dtor on every free object (objects still out get none): those free
     * in their blocks (the caches went back to them above) and remote puts,
     * and a debug pool's lists.  The blocks are about to go: none of their
     * memory stays poisoned. */
    for (struct block *b = pool->blocks; b != NULL; b = b->next)
        FA_UNPOISON((void *)block_base(pool, b), pool->block_size);
    if (pool->dtor) {
        void *lists[2] = {pool->dbg_free, pool->dbg_qhead}; /* a debug pool's */
        for (int k = 0; k < 2; k++)
            for (void *o = lists[k]; o != NULL; o = fa__fl_next_at(o, negoff(pool)))
                pool->dtor(o, pool->arg);
        for (struct block *b = pool->blocks; b != NULL; b = b->next) {
            if (b->where == W_DEBUG)
                continue;
            fa__pool_block_collect(pool, b);
            for (size_t w = 0; w < (pool->per_block + 63) / 64; w++)
                for (uint64_t m = block_bits(pool, b)[w]; m != 0; m &= m - 1)
                    pool->dtor((void *)(first_obj(pool, b) + (w * 64 + (size_t)__builtin_ctzll(m)) * pool->slot),
                               pool->arg);
        }
    }
    struct block *b = pool->blocks;
    while (b != NULL) {
        struct block *next = b->next;
        fa__os_unmap((void *)block_base(pool, b), pool->block_size);
        b = next;
    }
    if (pool->spare != pool->spare_end)
        fa__os_unmap(pool->spare, (size_t)(pool->spare_end - pool->spare));
    pthread_mutex_unlock(&pool->grow);
    pthread_mutex_destroy(&pool->grow);
    fa__unlock(&fa__pool_registry);
    fa__os_unmap(pool, sizeof(fa_pool) + pool->ngpools * sizeof(struct gpool));
}

size_t fa_pool_trim(fa_pool *pool)
{
    pthread_mutex_lock(&pool->grow);
    /* The caller's own local pool is handed over first, so a pool used by
     * one thread can be trimmed to nothing. */
    struct lpool *lp = find_lp(pool);
    if (lp != &fa__pool_empty_lp)
        fa__pool_lp_retire(pool, lp);
    size_t r = fa__pool_trim_locked(pool, UINT64_MAX);
    pool->trims++;
    pthread_mutex_unlock(&pool->grow);
    return r;
}

/* The local pools' and the blocks' counts, which their owners update
 * with plain stores on the fast paths: exact only when the pool is quiet
 * (a figure read mid-update is a get or a put off, never torn: each is one
 * aligned word).  Objects in caches are out for their blocks, free for the
 * pool.  lp_gets() is written out: an inline function keeps its checks. */
FA_RACY_READER static void read_counts(fa_pool *pool, uint64_t *gets, uint64_t *puts, int64_t *local,
                                       int64_t *global)
{
    for (struct lpool *lp = pool->locals.next; lp != &pool->locals; lp = lp->next) {
        *gets += lp->taken - lp->spilled + lp->puts - lp->n;
        *puts += lp->puts;
        *local += (int64_t)lp->n;
    }
    for (struct block *b = pool->blocks; b != NULL; b = b->next) {
        int64_t o = __atomic_load_n(&b->out, __ATOMIC_RELAXED);
        const uint64_t *rb = block_rbits(pool, b);
        for (size_t w = 0; w < (pool->per_block + 63) / 64; w++)
            o -= __builtin_popcountll(__atomic_load_n(&rb[w], __ATOMIC_RELAXED));
        int64_t built = (int64_t)slot_index(pool, b, b->bump);
        int64_t f = built > o ? built - o : 0;
        if (__atomic_load_n(&b->owner, __ATOMIC_RELAXED) != NULL)
            *local += f;
        else
            *global += f;
    }
}

void fa_pool_stats(fa_pool *pool, fa_pool_stats_t *out)
{
    fa__memset(out, 0, sizeof *out);
    pthread_mutex_lock(&pool->grow);
    out->name = pool->name;
    out->object_size = pool->slot - pool->link_off;
    uint64_t gets = pool->gets_retired;
    uint64_t puts = pool->puts_retired;
    int64_t local = 0, global = 0;
    read_counts(pool, &gets, &puts, &local, &global);
    out->free_local = local > 0 ? (size_t)local : 0;
    out->free_global = (size_t)global;
    out->gets = gets;
    out->puts = puts;
    out->live = gets > puts ? (size_t)(gets - puts) : 0;
    out->bytes_os = pool->bytes_os;
    out->bytes_peak = pool->bytes_peak;
    out->trims = pool->trims;
    pthread_mutex_unlock(&pool->grow);
}
