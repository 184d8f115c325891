/* Object pool.
 *
 * Objects are cut from blocks (64 KiB by default, aligned to their size, a
 * header first).  Each block keeps its own LIFO free list and belongs at any
 * time to one thread's local pool or to one of the pool's global pools.
 *
 * A thread serves gets from one block at a time, its current block, whose
 * free-list head lives in the local pool (found in O(1): a per-thread array
 * indexed by the pool's id).  A put of an object of the current block is a
 * push onto that list.  A put of an object of another block of the thread's
 * makes that block the current one, so the object put last is always the
 * next one got.  A put of an object of a block the thread does not own goes
 * onto the block's remote list, a lock-free stack its owner takes whole when
 * its own lists run dry.
 *
 * Why lists per block and not one list per thread (seed 001's design): a
 * list threaded through objects freed in random order is walked in random
 * order, one cache miss and often one TLB miss per get.  A block's list stays
 * within its block, and a block whose objects are all free is cut again from
 * its start, in address order, which the hardware prefetches.
 *
 * A block whose objects are all free is handed over whole to the thread's
 * global pool (one list push under a spinlock), beyond a small local spare.
 * Threads take blocks from their global pool, then from the others; an
 * exiting thread hands over every block it holds.  Growth takes the pool's
 * mutex, a longer and rarer critical section.
 *
 * Lock order: registry -> pool->grow -> gpool[i] (ascending) -> metadata.
 */
#include "fastalloc.h"
#include "base/clock.h"
#include "base/diag.h"
#include "base/lock.h"
#include "core/freelist.h"
#include "core/meta.h"
#include "init/init.h"
#include "os/os.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POOL_MAX 1024            /* pools alive at once */
#define FAST_SLOTS 127           /* pools whose local pool TLS finds in one load */
#define CHUNK_FIRST 4            /* blocks mapped by a pool's first growth */
#define CHUNK_MAX 64             /* ... doubling up to this (4 MiB of 64 KiB blocks) */
#define DEFAULT_BLOCK ((size_t)64 << 10)
#define DEFAULT_IDLE_MS 1000
#define IDLE_CHECK_EVERY 16      /* hand-overs and growths between two looks at the clock */
#define GPOOLS_MAX 16
#define CUT_BATCH 64             /* objects linked at once when a block is cut */
#define SCAN 8                   /* blocks looked at per search for remote puts */

/* A free object's link word (through the free-list seam): at the object
 * for a plain pool, in a header before it for a pool with ctor or dtor
 * (negoff = -header size), since such a pool promises that a free object
 * keeps all its state. */

enum where { W_NONE, W_CUR, W_AVAIL, W_FRESH, W_FULL, W_SPARE, W_GPART, W_GEMPTY, W_DEBUG };

struct block;
struct blist {
    struct block *head, *tail;
    size_t n;
};

struct block {
    /* The owner's fields, read and written only by the owning thread, or
     * under the global pool's lock while nobody owns the block.  A put into
     * a block that is not current touches only this first line. */
    struct lpool *owner;   /* NULL: in a global pool, or a debug pool's */
    void *free;            /* free list, while not current */
    int64_t out;           /* objects handed out, while not current */
    /* The owner while the block is on its avail list, else NULL: with
     * lpool.tok, one compare admits a put to the short path. */
    uintptr_t tag;
    uint8_t where;
    uint8_t doomed;
    uintptr_t bump, end;   /* next object to cut; end of the block's objects */
    uintptr_t built_end;   /* objects below have entered the pool (ctor run) */
    uint64_t nremote_seen; /* remote puts already taken off `out` */
    struct block *lnext __attribute__((aligned(FA_CACHELINE))); /* in the list `where` names */
    struct block *lprev;
    struct block *next;    /* every block of the pool (grow) */
    uint64_t stamp_ms;     /* when it entered a global pool all free */
    /* Written by other threads. */
    void *remote __attribute__((aligned(FA_CACHELINE)));
    uint64_t nremote;      /* remote puts ever; added after the push */
    uint64_t bits[];       /* debug pools: one bit per slot, set while out */
};

struct gpool {
    fa__lock_t lock;
    struct blist part;     /* blocks with objects out, from exited threads */
    struct blist empty;    /* blocks whose objects are all free */
} FA_ALIGNED_CL;

struct lpool {
    /* fast-path fields, one cache line */
    void *head;            /* the current block's free list */
    uint64_t gets, puts;
    intptr_t negoff;       /* link word = object + negoff */
    uintptr_t mask;        /* ~(block size - 1) */
    uintptr_t cur_base;    /* the current block's address; 1 when none */
    uintptr_t tok;         /* this lpool's address while no block is current, else | 1 */
    intptr_t tag_off;      /* offsetof(struct block, tag) (the stand-in: see below) */
    /* the current block's session: its `out` is out0 + gets - puts since */
    struct block *cur;
    int64_t out0;
    uint64_t gets0 FA_ALIGNED_CL, puts0;
    struct blist avail;    /* blocks with free objects (built) */
    struct blist fresh;    /* blocks with only objects never cut */
    struct blist full;     /* blocks with none (until a put or a remote put) */
    struct blist spare;    /* blocks all free, at most spare_max */
    struct block *last;    /* while no block is current: the last put's */
    struct block *emptied; /* the last block a put emptied */
    size_t spare_max;
    struct gpool *g;
    struct fa_pool *pool;
    struct lpool *next, *prev; /* the pool's local pools */
    struct lpool **slot;   /* where the owning thread's array points to us */
    /* Raised by other threads: a remote put went into one of our blocks
     * whose remote list was empty. */
    int remote_hint FA_ALIGNED_CL;
} FA_ALIGNED_CL;

struct fa_pool {
    uint32_t tls_idx;      /* id below FAST_SLOTS, else FAST_SLOTS (a stand-in) */
    uint32_t id;
    size_t slot;           /* bytes per slot, a multiple of the alignment */
    size_t link_off;       /* object = slot + link_off */
    size_t align;
    size_t block_size;
    size_t data_off;       /* first slot's offset in a block */
    uint32_t per_block;
    size_t spare_max;
    unsigned ngpools;
    int debug;
    int idle_ms;
    void (*ctor)(void *, void *);
    void (*dtor)(void *, void *);
    void *arg;
    size_t max_objects, max_bytes;
    char name[48];

    pthread_mutex_t grow;
    struct block *blocks;  /* every block */
    char *spare, *spare_end; /* mapped blocks not yet handed out */
    size_t chunk_blocks;   /* blocks the next mapping takes */
    size_t reserved;       /* objects promised to blocks (cap accounting) */
    size_t bytes_os, bytes_peak;
    struct lpool locals;   /* sentinel */
    uint64_t gets_retired, puts_retired; /* from local pools gone, debug, exiting threads */
    uint64_t remote_retired; /* remote puts into blocks released */
    uint64_t trims;

    /* debug pools: one LIFO list and the block being cut, under grow */
    void *dbg_free;
    struct block *dbg_blk;

    /* idle trim */
    unsigned tick;
    uint64_t last_check_ms;

    unsigned rr;           /* next global pool to assign */
    struct gpool g[];
};

/* ---- per-thread arrays of local pools ---- */

/* The thread's local pools of the first FAST_SLOTS pool ids, in static TLS:
 * one load finds a local pool (a pointer to a heap array would take two).
 * 1 KiB per thread, small enough that the library can still be dlopen()ed.
 * Pools with higher ids all map to the last slot, a permanent stand-in, so
 * their gets and puts always take the slow path, which finds their local
 * pool in a per-thread heap array. */
static struct block no_block;
/* Stand-in for "no local pool yet": no free object and a current block that
 * no object is in, so both get and put fall into their slow path with no
 * extra test (its `cur` is not NULL for the same reason). */
static uintptr_t no_tag; /* the stand-in's mask makes every block address 0 */
static struct lpool empty_lp = {.head = NULL, .mask = 0, .cur_base = 1, .tok = 1,
                                .tag_off = (intptr_t)&no_tag, .cur = &no_block};
static __thread struct lpool *pool_lp[FAST_SLOTS + 1]
    __attribute__((tls_model("initial-exec"))) = {[0 ... FAST_SLOTS] = &empty_lp};
static __thread struct lpool **pool_lp_more __attribute__((tls_model("initial-exec")));
static __thread int pool_tls_dead __attribute__((tls_model("initial-exec")));
static __thread int pool_tls_registered __attribute__((tls_model("initial-exec")));

static fa__lock_t registry = FA_LOCK_INIT;
static fa_pool *pools[POOL_MAX];
static struct lpool *spare_lps;
static struct lpool ***spare_more; /* recycled pool_lp_more arrays */

/* The calling thread's local pool for pool, or &empty_lp. */
static inline struct lpool *find_lp(const fa_pool *pool)
{
    if (FA_LIKELY(pool->id < FAST_SLOTS))
        return pool_lp[pool->id];
    return pool_lp_more != NULL ? pool_lp_more[pool->id] : &empty_lp;
}
static pthread_key_t exit_key;
static int key_state; /* 0 none, 2 ready */

static void thread_exit(void *arg);

static void ensure_key(void)
{
    if (__atomic_load_n(&key_state, __ATOMIC_ACQUIRE) == 2)
        return;
    fa__lock(&registry);
    if (key_state == 0) {
        pthread_key_create(&exit_key, thread_exit);
        __atomic_store_n(&key_state, 2, __ATOMIC_RELEASE);
    }
    fa__unlock(&registry);
}

/* ---- block lists ---- */

/* b has just been linked into l. */
static void bl_entered(struct blist *l, struct block *b, int where)
{
    __atomic_store_n(&l->n, l->n + 1, __ATOMIC_RELAXED); /* peeked without the lock */
    b->where = (uint8_t)where;
    /* Read by any thread's put (it never equals another thread's token). */
    __atomic_store_n(&b->tag, where == W_AVAIL ? (uintptr_t)b->owner : 0, __ATOMIC_RELAXED);
}

static void bl_push(struct blist *l, struct block *b, int where)
{
    b->lprev = NULL;
    b->lnext = l->head;
    if (l->head != NULL)
        l->head->lprev = b;
    else
        l->tail = b;
    l->head = b;
    bl_entered(l, b, where);
}

static void bl_push_tail(struct blist *l, struct block *b, int where)
{
    b->lnext = NULL;
    b->lprev = l->tail;
    if (l->tail != NULL)
        l->tail->lnext = b;
    else
        l->head = b;
    l->tail = b;
    bl_entered(l, b, where);
}

static void bl_remove(struct blist *l, struct block *b)
{
    if (b->lprev != NULL)
        b->lprev->lnext = b->lnext;
    else
        l->head = b->lnext;
    if (b->lnext != NULL)
        b->lnext->lprev = b->lprev;
    else
        l->tail = b->lprev;
    __atomic_store_n(&l->n, l->n - 1, __ATOMIC_RELAXED);
    b->lnext = b->lprev = NULL;
    b->where = W_NONE;
    __atomic_store_n(&b->tag, 0, __ATOMIC_RELAXED);
}

/* ---- blocks ---- */

static inline struct block *block_of(const fa_pool *pool, const void *obj)
{
    return (struct block *)((uintptr_t)obj & ~(uintptr_t)(pool->block_size - 1));
}

static inline uintptr_t first_obj(const fa_pool *pool, const struct block *b)
{
    return (uintptr_t)b + pool->data_off + pool->link_off;
}

static inline intptr_t negoff(const fa_pool *pool)
{
    return -(intptr_t)pool->link_off;
}

/* Cut again from the start: every object is free (out == 0, so no remote
 * put is pending either) and the list can be dropped for address order. */
static void block_reset(fa_pool *pool, struct block *b)
{
    b->free = NULL;
    b->bump = first_obj(pool, b);
}

/* Remote puts: a push, then the count.  A taker reads the count first, so
 * every put it counts is in the list it takes or in an earlier one; `out`
 * can lag the truth but never run ahead of it, and out == 0 means that
 * every object is back on the free list. */
static void remote_push(struct block *b, void *u, intptr_t off)
{
    void *old = __atomic_load_n(&b->remote, __ATOMIC_RELAXED);
    do
        fa__fl_set_next_at(u, off, old);
    while (!__atomic_compare_exchange_n(&b->remote, &old, u, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
    __atomic_fetch_add(&b->nremote, 1, __ATOMIC_RELEASE);
    if (old == NULL) {
        /* The owner may change under us; a hint to a former owner only
         * costs it one look.  Local pools are never freed. */
        struct lpool *o = __atomic_load_n(&b->owner, __ATOMIC_RELAXED);
        if (o != NULL)
            __atomic_store_n(&o->remote_hint, 1, __ATOMIC_RELEASE);
    }
}

/* The owner, or the holder of the global pool's lock for an unowned block.
 * Returns the remote list; *counted = puts newly counted. */
static void *remote_take(struct block *b, int64_t *counted)
{
    uint64_t c = __atomic_load_n(&b->nremote, __ATOMIC_ACQUIRE);
    *counted = (int64_t)(c - b->nremote_seen);
    b->nremote_seen = c;
    if (__atomic_load_n(&b->remote, __ATOMIC_RELAXED) == NULL)
        return NULL;
    return __atomic_exchange_n(&b->remote, NULL, __ATOMIC_ACQUIRE);
}

/* Move a non-current block's remote puts onto its free list. */
static void block_collect(fa_pool *pool, struct block *b)
{
    int64_t n;
    void *r = remote_take(b, &n);
    b->out -= n;
    if (r == NULL)
        return;
    if (b->free != NULL) {
        void *t = r;
        while (fa__fl_next_at(t, negoff(pool)) != NULL)
            t = fa__fl_next_at(t, negoff(pool));
        fa__fl_set_next_at(t, negoff(pool), b->free);
    }
    b->free = r;
}

static int block_has_remote(const struct block *b)
{
    return __atomic_load_n(&b->remote, __ATOMIC_RELAXED) != NULL ||
           __atomic_load_n(&b->nremote, __ATOMIC_RELAXED) != b->nremote_seen;
}

/* A new block, not in any list.  grow held.  NULL when the pool is at its
 * cap or the OS refuses. */
static struct block *block_new(fa_pool *pool, struct lpool *owner)
{
    size_t objs = pool->per_block;
    if (pool->max_objects) {
        if (pool->reserved >= pool->max_objects)
            return NULL;
        if (objs > pool->max_objects - pool->reserved)
            objs = pool->max_objects - pool->reserved;
    }
    if (pool->max_bytes && pool->bytes_os + pool->block_size > pool->max_bytes)
        return NULL;
    if (pool->spare == pool->spare_end) {
        /* Fewer, larger mappings as the pool grows: each mmap() takes the
         * process's mmap lock for writing and stalls the page faults of
         * every other thread. */
        size_t n = pool->chunk_blocks;
        if (pool->chunk_blocks < CHUNK_MAX)
            pool->chunk_blocks *= 2;
        if (pool->max_bytes && n * pool->block_size > pool->max_bytes - pool->bytes_os)
            n = (pool->max_bytes - pool->bytes_os) / pool->block_size;
        if (n == 0)
            n = 1;
        char *p = fa__os_map(n * pool->block_size, pool->block_size);
        if (p == NULL)
            return NULL;
        pool->spare = p;
        pool->spare_end = p + n * pool->block_size;
    }
    /* Fresh from mmap or from a trimmed-away spare range: zero. */
    struct block *b = (struct block *)pool->spare;
    pool->spare += pool->block_size;
    pool->bytes_os += pool->block_size;
    if (pool->bytes_os > pool->bytes_peak)
        pool->bytes_peak = pool->bytes_os;
    pool->reserved += objs;
    __atomic_store_n(&b->owner, owner, __ATOMIC_RELAXED);
    b->bump = b->built_end = first_obj(pool, b);
    b->end = b->bump + objs * pool->slot;
    b->next = pool->blocks;
    pool->blocks = b;
    return b;
}

/* Cut one object from b's uncut part, constructing it if it is new. */
static void *cut_one(fa_pool *pool, struct block *b)
{
    uintptr_t u = b->bump;
    if (u >= b->end)
        return NULL;
    b->bump = u + pool->slot;
    if (u >= b->built_end) {
        if (pool->ctor)
            pool->ctor((void *)u, pool->arg);
        b->built_end = b->bump;
    }
    return (void *)u;
}

/* ---- local pools ---- */

static inline int64_t cur_out(const struct lpool *lp)
{
    return lp->out0 + (int64_t)(lp->gets - lp->gets0) - (int64_t)(lp->puts - lp->puts0);
}

static void open_cur(struct lpool *lp, struct block *b)
{
    lp->last = NULL;
    lp->cur = b;
    lp->cur_base = (uintptr_t)b;
    lp->tok = (uintptr_t)lp | 1;
    lp->head = b->free;
    b->free = NULL;
    b->where = W_CUR;
    lp->out0 = b->out;
    lp->gets0 = lp->gets;
    lp->puts0 = lp->puts;
}

static struct block *close_cur(struct lpool *lp)
{
    struct block *b = lp->cur;
    b->out = cur_out(lp);
    b->free = lp->head;
    b->where = W_NONE;
    lp->head = NULL;
    lp->cur = NULL;
    lp->cur_base = 1;
    lp->tok = (uintptr_t)lp;
    return b;
}

static void maybe_idle_trim(fa_pool *pool);

/* An all-free block leaves the thread: the hand-over. */
static void hand_over_empty(fa_pool *pool, struct gpool *g, struct block *b, uint64_t now)
{
    fa__lock(&g->lock);
    __atomic_store_n(&b->owner, NULL, __ATOMIC_RELAXED);
    b->stamp_ms = now;
    bl_push(&g->empty, b, W_GEMPTY);
    fa__unlock(&g->lock);
    (void)pool;
}

static inline int has_built_free(const fa_pool *pool, const struct block *b)
{
    (void)pool;
    return b->free != NULL || b->bump < b->built_end;
}

/* File a block that just stopped being current.  May hand it over. */
static void place(fa_pool *pool, struct lpool *lp, struct block *b)
{
    if (b->out == 0 && b->built_end > first_obj(pool, b)) {
        if (lp->spare.n < lp->spare_max) {
            bl_push(&lp->spare, b, W_SPARE);
        } else {
            /* It leaves the thread (and may be unmapped by a trim): no
             * pointer of ours may keep it. */
            if (lp->emptied == b)
                lp->emptied = NULL;
            if (lp->last == b)
                lp->last = NULL;
            hand_over_empty(pool, lp->g, b, fa__now_ms());
            maybe_idle_trim(pool);
        }
    } else if (has_built_free(pool, b)) {
        bl_push(&lp->avail, b, W_AVAIL);
    } else if (b->bump < b->end) {
        bl_push(&lp->fresh, b, W_FRESH);
    } else {
        bl_push(&lp->full, b, W_FULL);
    }
}

static struct lpool *lp_new(fa_pool *pool)
{
    struct lpool *lp = spare_lps; /* registry lock held */
    if (lp != NULL)
        spare_lps = lp->next;
    else
        lp = fa__meta_alloc(sizeof *lp);
    if (lp == NULL)
        return NULL;
    /* Not the hint: a remote put may still raise it in a recycled lpool. */
    memset(lp, 0, offsetof(struct lpool, remote_hint));
    __atomic_store_n(&lp->remote_hint, 0, __ATOMIC_RELAXED);
    lp->pool = pool;
    lp->negoff = negoff(pool);
    lp->mask = ~(uintptr_t)(pool->block_size - 1);
    lp->cur_base = 1;
    lp->tok = (uintptr_t)lp;
    lp->tag_off = (intptr_t)offsetof(struct block, tag);
    lp->spare_max = pool->spare_max;
    lp->g = &pool->g[pool->rr++ % pool->ngpools];
    return lp;
}

/* The calling thread's local pool for pool, created on first use; NULL in a
 * thread that is exiting, for a debug pool, or without memory for it. */
static struct lpool *my_lp(fa_pool *pool)
{
    struct lpool *found = find_lp(pool);
    if (found != &empty_lp)
        return found;
    if (pool_tls_dead || pool->debug)
        return NULL;
    ensure_key();
    if (!pool_tls_registered) {
        /* Any non-NULL value: the destructor runs at thread exit. */
        pthread_setspecific(exit_key, &empty_lp);
        pool_tls_registered = 1;
    }
    fa__lock(&registry);
    if (pool->id >= FAST_SLOTS && pool_lp_more == NULL) {
        struct lpool **more = (struct lpool **)spare_more;
        if (more != NULL)
            spare_more = (struct lpool ***)more[0];
        else
            more = fa__meta_alloc(POOL_MAX * sizeof *more);
        if (more == NULL) {
            fa__unlock(&registry);
            return NULL;
        }
        for (size_t i = 0; i < POOL_MAX; i++)
            more[i] = &empty_lp;
        pool_lp_more = more;
    }
    pthread_mutex_lock(&pool->grow);
    struct lpool *lp = lp_new(pool);
    if (lp != NULL) {
        lp->next = pool->locals.next;
        lp->prev = &pool->locals;
        pool->locals.next->prev = lp;
        pool->locals.next = lp;
        lp->slot = pool->id < FAST_SLOTS ? &pool_lp[pool->id] : &pool_lp_more[pool->id];
        *lp->slot = lp;
    }
    pthread_mutex_unlock(&pool->grow);
    fa__unlock(&registry);
    return lp;
}

/* Every block of a local pool goes to its global pool (grow held). */
static void lp_retire(fa_pool *pool, struct lpool *lp)
{
    struct gpool *g = lp->g;
    uint64_t now = fa__now_ms();
    lp->last = lp->emptied = NULL;
    fa__lock(&g->lock);
    if (lp->cur != NULL) {
        struct block *b = close_cur(lp);
        __atomic_store_n(&b->owner, NULL, __ATOMIC_RELAXED);
        b->stamp_ms = now;
        if (b->out == 0)
            bl_push(&g->empty, b, W_GEMPTY);
        else
            bl_push(&g->part, b, W_GPART);
    }
    struct blist *from[4] = {&lp->avail, &lp->fresh, &lp->full, &lp->spare};
    for (int i = 0; i < 4; i++) {
        struct block *b;
        while ((b = from[i]->head) != NULL) {
            bl_remove(from[i], b);
            __atomic_store_n(&b->owner, NULL, __ATOMIC_RELAXED);
            b->stamp_ms = now;
            if (b->out == 0)
                bl_push(&g->empty, b, W_GEMPTY);
            else
                bl_push(&g->part, b, W_GPART);
        }
    }
    fa__unlock(&g->lock);
    pool->gets_retired += lp->gets;
    pool->puts_retired += lp->puts;
    lp->gets = lp->puts = lp->gets0 = lp->puts0 = 0;
}

static void thread_exit(void *arg)
{
    (void)arg;
    pool_tls_dead = 1;
    fa__lock(&registry);
    for (size_t i = 0; i < POOL_MAX; i++) {
        struct lpool **slot = i < FAST_SLOTS ? &pool_lp[i] : pool_lp_more ? &pool_lp_more[i] : NULL;
        if (slot == NULL)
            break;
        struct lpool *lp = *slot;
        if (lp == &empty_lp)
            continue;
        fa_pool *pool = lp->pool;
        pthread_mutex_lock(&pool->grow);
        lp_retire(pool, lp);
        lp->prev->next = lp->next;
        lp->next->prev = lp->prev;
        pthread_mutex_unlock(&pool->grow);
        lp->next = spare_lps;
        spare_lps = lp;
        *slot = &empty_lp;
    }
    if (pool_lp_more != NULL) {
        pool_lp_more[0] = (struct lpool *)spare_more;
        spare_more = (struct lpool ***)pool_lp_more;
        pool_lp_more = NULL;
    }
    fa__unlock(&registry);
}

/* ---- get ---- */

static void *debug_get(fa_pool *pool);
static void debug_put(fa_pool *pool, void *obj);

/* A block from the global pools for lp: one with objects out first (it
 * packs the pool), else an all-free one.  NULL when they have none. */
static struct block *adopt(fa_pool *pool, struct lpool *lp, int built_only)
{
    unsigned first = (unsigned)(lp->g - pool->g);
    for (unsigned k = 0; k < pool->ngpools; k++) {
        struct gpool *g = &pool->g[(first + k) % pool->ngpools];
        if (__atomic_load_n(&g->part.n, __ATOMIC_RELAXED) == 0 &&
            __atomic_load_n(&g->empty.n, __ATOMIC_RELAXED) == 0)
            continue;
        fa__lock(&g->lock);
        struct block *b = NULL;
        for (int s = 0; s < SCAN && g->part.head != NULL; s++) {
            struct block *c = g->part.head;
            bl_remove(&g->part, c);
            block_collect(pool, c);
            if (has_built_free(pool, c) || (c->out == 0 && c->built_end > first_obj(pool, c)) ||
                (!built_only && c->bump < c->end)) {
                b = c;
                break;
            }
            bl_push_tail(&g->part, c, W_GPART);
        }
        if (b == NULL && g->empty.head != NULL &&
            (!built_only || g->empty.head->built_end > first_obj(pool, g->empty.head))) {
            b = g->empty.head;
            bl_remove(&g->empty, b);
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
        bl_remove(&lp->full, b);
        if (block_has_remote(b)) {
            block_collect(pool, b);
            if (b->out == 0)
                block_reset(pool, b);
            if (b->free != NULL || b->bump < b->end) {
                /* Others may have had puts too: look again next time. */
                __atomic_store_n(&lp->remote_hint, 1, __ATOMIC_RELAXED);
                return b;
            }
        }
        bl_push_tail(&lp->full, b, W_FULL);
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
            bl_remove(&lp->avail, b);
            return b;
        }
        if ((b = lp->avail.head) != NULL) {
            bl_remove(&lp->avail, b);
            return b;
        }
        if ((b = lp->spare.head) != NULL) {
            bl_remove(&lp->spare, b);
            block_reset(pool, b);
            return b;
        }
        if ((b = full_with_remote(pool, lp, SCAN, 0)) != NULL)
            return b;
        return adopt(pool, lp, 1);
    }
    if ((b = lp->fresh.head) != NULL) {
        bl_remove(&lp->fresh, b);
        return b;
    }
    if ((b = adopt(pool, lp, 0)) != NULL)
        return b;
    pthread_mutex_lock(&pool->grow);
    b = block_new(pool, lp);
    pthread_mutex_unlock(&pool->grow);
    if (b != NULL) {
        maybe_idle_trim(pool);
        return b;
    }
    /* At the cap: look at every full block before giving up. */
    return full_with_remote(pool, lp, lp->full.n, 1);
}

/* Get for a thread with no local pool (exiting, or no memory for one): one
 * object from an unowned block, or from a new one left unowned. */
static void *get_unowned(fa_pool *pool)
{
    pthread_mutex_lock(&pool->grow);
    void *o = NULL;
    for (unsigned i = 0; i < pool->ngpools && o == NULL; i++) {
        struct gpool *g = &pool->g[i];
        fa__lock(&g->lock);
        struct blist *ls[2] = {&g->part, &g->empty};
        for (int k = 0; k < 2 && o == NULL; k++) {
            for (struct block *b = ls[k]->head; b != NULL && o == NULL; b = b->lnext) {
                block_collect(pool, b);
                if (b->free != NULL) {
                    o = b->free;
                    b->free = fa__fl_next_at(o, negoff(pool));
                } else {
                    o = cut_one(pool, b);
                }
                if (o != NULL) {
                    b->out++;
                    if (k == 1) {
                        bl_remove(&g->empty, b);
                        bl_push(&g->part, b, W_GPART);
                    }
                }
            }
        }
        fa__unlock(&g->lock);
    }
    if (o == NULL) {
        struct block *b = block_new(pool, NULL);
        if (b != NULL) {
            o = cut_one(pool, b);
            b->out = 1;
            fa__lock(&pool->g[0].lock);
            bl_push(&pool->g[0].part, b, W_GPART);
            fa__unlock(&pool->g[0].lock);
        }
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
    if (lp == &empty_lp) {
        lp = my_lp(pool);
        if (lp == NULL)
            return pool->debug ? debug_get(pool) : get_unowned(pool);
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
                return cut_one(pool, b);
            }
            return cut_batch(pool, lp, b, b->end);
        }
        if (b != NULL)
            place(pool, lp, close_cur(lp));
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

void *fa_pool_get(fa_pool *pool)
{
    struct lpool *lp = pool_lp[pool->tls_idx];
    void *o = lp->head;
    if (FA_UNLIKELY(o == NULL))
        return get_slow(pool);
    lp->head = fa__fl_next_at(o, lp->negoff);
    lp->gets++;
    return o;
}

/* ---- put ---- */

static void unlist(struct lpool *lp, struct block *b)
{
    switch (b->where) {
    case W_AVAIL: bl_remove(&lp->avail, b); break;
    case W_FRESH: bl_remove(&lp->fresh, b); break;
    case W_FULL: bl_remove(&lp->full, b); break;
    case W_SPARE: bl_remove(&lp->spare, b); break;
    default: break;
    }
}

/* A put emptied b (all its objects are back).  b is where the next get
 * starts, so it stays; the block emptied before it, if still all free and
 * not current, is filed now: spare or handed over. */
static FA_NOINLINE void put_emptied(fa_pool *pool, struct lpool *lp, struct block *b)
{
    struct block *p = lp->emptied;
    lp->emptied = b;
    if (p != NULL && p != b && p->owner == lp && p->where == W_AVAIL && p->out == 0 &&
        p != lp->last) {
        bl_remove(&lp->avail, p);
        place(pool, lp, p);
    }
}

/* The put paths that need no list change: into the current block, or
 * into one of the thread's own blocks while none is current.  Objects put in
 * random order land in many blocks, and keeping that second path short too
 * keeps more of the caller's cache misses in flight. */
static inline __attribute__((always_inline)) int put_local(fa_pool *pool, struct lpool *lp, void *obj)
{
    uintptr_t base = (uintptr_t)obj & lp->mask;
    if (FA_LIKELY(base == lp->cur_base)) {
        fa__fl_set_next_at(obj, lp->negoff, lp->head);
        lp->head = obj;
        lp->puts++;
        return 1;
    }
    /* tag == tok: b is on lp's avail list and lp has no current block. */
    if (FA_LIKELY(__atomic_load_n((uintptr_t *)(base + lp->tag_off), __ATOMIC_RELAXED) == lp->tok)) {
        struct block *b = (struct block *)base;
        fa__fl_set_next_at(obj, lp->negoff, b->free);
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
        debug_put(pool, obj);
        return;
    }
    if (lp != &empty_lp && pool->tls_idx != pool->id && put_local(pool, lp, obj))
        return; /* a pool past FAST_SLOTS */
    struct block *b = block_of(pool, obj);
    if (lp == &empty_lp || __atomic_load_n(&b->owner, __ATOMIC_RELAXED) != lp) {
        /* Not ours (or no local pool): the owner takes it back later. */
        remote_push(b, obj, negoff(pool));
        return;
    }
    /* One of our blocks, not the current one: the object goes onto the
     * block's own list, and the block is remembered so that the next get
     * starts there (the object put last is the one got next).  There is no
     * current block until then, so that a get cannot miss it. */
    if (lp->cur != NULL)
        place(pool, lp, close_cur(lp));
    fa__fl_set_next_at(obj, lp->negoff, b->free);
    b->free = obj;
    lp->puts++;
    lp->last = b;
    if (b->where != W_AVAIL) {
        unlist(lp, b);
        bl_push(&lp->avail, b, W_AVAIL);
    }
    if (--b->out == 0)
        put_emptied(pool, lp, b);
}

void fa_pool_put(fa_pool *pool, void *obj)
{
    if (FA_UNLIKELY(!put_local(pool, pool_lp[pool->tls_idx], obj)))
        put_slow(pool, obj);
}

/* ---- trim ---- */

/* Unmap a block (grow held, in no list) after dtor on its objects, which
 * are all free. */
static size_t block_release(fa_pool *pool, struct block *b)
{
    if (pool->dtor)
        for (uintptr_t u = first_obj(pool, b); u < b->built_end; u += pool->slot)
            pool->dtor((void *)u, pool->arg);
    pool->remote_retired += b->nremote;
    pool->reserved -= (b->end - first_obj(pool, b)) / pool->slot;
    pool->bytes_os -= pool->block_size;
    fa__os_unmap(b, pool->block_size);
    return pool->block_size;
}

static size_t debug_trim_locked(fa_pool *pool);

/* Release the unowned blocks whose objects are all free and that entered a
 * global pool at or before `before` (UINT64_MAX: all).  grow held. */
static size_t trim_locked(fa_pool *pool, uint64_t before)
{
    if (pool->debug)
        return debug_trim_locked(pool);
    uint64_t now = fa__now_ms();
    for (unsigned i = 0; i < pool->ngpools; i++) {
        struct gpool *g = &pool->g[i];
        fa__lock(&g->lock);
        /* Blocks that remote puts emptied join the empty list. */
        for (struct block *b = g->part.head, *next; b != NULL; b = next) {
            next = b->lnext;
            block_collect(pool, b);
            if (b->out == 0) {
                bl_remove(&g->part, b);
                b->stamp_ms = now;
                bl_push(&g->empty, b, W_GEMPTY);
            }
        }
        for (struct block *b = g->empty.tail, *prev; b != NULL; b = prev) {
            prev = b->lprev;
            if (b->stamp_ms <= before) {
                bl_remove(&g->empty, b);
                b->doomed = 1;
            }
        }
        fa__unlock(&g->lock);
    }
    size_t released = 0;
    struct block **pp = &pool->blocks;
    while (*pp != NULL) {
        struct block *b = *pp;
        if (b->doomed) {
            *pp = b->next;
            released += block_release(pool, b);
        } else {
            pp = &b->next;
        }
    }
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
static void maybe_idle_trim(fa_pool *pool)
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
    if (now >= (uint64_t)pool->idle_ms && trim_locked(pool, now - (uint64_t)pool->idle_ms) > 0)
        pool->trims++;
    pthread_mutex_unlock(&pool->grow);
}

size_t fa_pool_trim(fa_pool *pool)
{
    pthread_mutex_lock(&pool->grow);
    /* The caller's own local pool is handed over first, so a pool used by
     * one thread can be trimmed to nothing. */
    struct lpool *lp = find_lp(pool);
    if (lp != &empty_lp)
        lp_retire(pool, lp);
    size_t r = trim_locked(pool, UINT64_MAX);
    pool->trims++;
    pthread_mutex_unlock(&pool->grow);
    return r;
}

/* ---- debug pools: every call is checked, under the grow mutex ---- */

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

static void *debug_get(fa_pool *pool)
{
    pthread_mutex_lock(&pool->grow);
    void *o = pool->dbg_free;
    if (o != NULL) {
        pool->dbg_free = fa__fl_next_at(o, negoff(pool));
    } else {
        struct block *b = pool->dbg_blk;
        if (b == NULL || b->bump >= b->end) {
            b = block_new(pool, NULL);
            if (b != NULL) {
                b->where = W_DEBUG;
                pool->dbg_blk = b;
            }
        }
        if (b != NULL)
            o = cut_one(pool, b);
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

static void debug_put(fa_pool *pool, void *u)
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
static size_t debug_trim_locked(fa_pool *pool)
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
    size_t released = 0;
    struct block **bp = &pool->blocks;
    while (*bp != NULL) {
        struct block *b = *bp;
        if (b->doomed) {
            *bp = b->next;
            released += block_release(pool, b);
        } else {
            bp = &b->next;
        }
    }
    return released;
}

/* ---- fork ---- */

/* Every pool lock is held across fork() (registry, then each pool's grow
 * mutex and global pools, the usual order), so the child finds the pools
 * consistent.  The blocks of the parent's other threads stay owned by local
 * pools that have no thread in the child: the child cannot reuse them. */
static void fork_prepare(void)
{
    fa__lock(&registry);
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
    fa__unlock(&registry);
}

static void join_fork(void)
{
    fa__init_fork_hooks(fork_prepare, fork_release);
}

/* ---- create / destroy / stats ---- */

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
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned ng = opt->global_pools;
    if (ng == 0)
        ng = ncpu > 8 ? (unsigned)(ncpu / 4) : 2;
    if (ng > GPOOLS_MAX)
        ng = GPOOLS_MAX;
    size_t capacity = 0, hdr = 0;
    /* Grow the block until a useful number of objects fits after the header. */
    for (;;) {
        capacity = bs / slot;
        hdr = sizeof(struct block) + (opt->debug ? (capacity + 63) / 64 * 8 : 0);
        hdr = (hdr + align - 1) & ~(align - 1);
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
    pool->link_off = link_off;
    pool->align = align;
    pool->block_size = bs;
    pool->data_off = hdr;
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
    if (opt->name)
        strncpy(pool->name, opt->name, sizeof pool->name - 1);
    pthread_mutex_init(&pool->grow, NULL);
    pool->locals.next = pool->locals.prev = &pool->locals;
    pool->last_check_ms = fa__now_ms();

    fa__lock(&registry);
    unsigned id = 0;
    while (id < POOL_MAX && pools[id] != NULL)
        id++;
    if (id == POOL_MAX) {
        fa__unlock(&registry);
        fa__os_unmap(pool, size);
        errno = ENOMEM;
        return NULL;
    }
    pool->id = id;
    pool->tls_idx = id < FAST_SLOTS ? id : FAST_SLOTS;
    pools[id] = pool;
    fa__unlock(&registry);
    return pool;
}

void fa_pool_destroy(fa_pool *pool)
{
    if (pool == NULL)
        return;
    fa__lock(&registry);
    pools[pool->id] = NULL;
    pthread_mutex_lock(&pool->grow);
    /* Every thread's local pool goes: its blocks join the global pools. */
    while (pool->locals.next != &pool->locals) {
        struct lpool *lp = pool->locals.next;
        lp_retire(pool, lp);
        *lp->slot = &empty_lp;
        lp->prev->next = lp->next;
        lp->next->prev = lp->prev;
        lp->next = spare_lps;
        spare_lps = lp;
    }
    /* dtor on every free object (objects still out get none): the free
     * lists, remote puts, and what a reset block has not cut again. */
    if (pool->dtor) {
        for (void *o = pool->dbg_free; o != NULL; o = fa__fl_next_at(o, negoff(pool)))
            pool->dtor(o, pool->arg);
        for (struct block *b = pool->blocks; b != NULL; b = b->next) {
            if (b->where == W_DEBUG)
                continue;
            int64_t n;
            void *lists[2] = {b->free, remote_take(b, &n)};
            for (int k = 0; k < 2; k++)
                for (void *o = lists[k]; o != NULL; o = fa__fl_next_at(o, negoff(pool)))
                    pool->dtor(o, pool->arg);
            for (uintptr_t u = b->bump; u < b->built_end; u += pool->slot)
                pool->dtor((void *)u, pool->arg);
        }
    }
    struct block *b = pool->blocks;
    while (b != NULL) {
        struct block *next = b->next;
        fa__os_unmap(b, pool->block_size);
        b = next;
    }
    if (pool->spare != pool->spare_end)
        fa__os_unmap(pool->spare, (size_t)(pool->spare_end - pool->spare));
    pthread_mutex_unlock(&pool->grow);
    pthread_mutex_destroy(&pool->grow);
    fa__unlock(&registry);
    fa__os_unmap(pool, sizeof(fa_pool) + pool->ngpools * sizeof(struct gpool));
}

void fa_pool_stats(fa_pool *pool, fa_pool_stats_t *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&pool->grow);
    out->name = pool->name;
    out->object_size = pool->slot - pool->link_off;
    uint64_t gets = pool->gets_retired;
    uint64_t puts = pool->puts_retired + pool->remote_retired;
    for (struct lpool *lp = pool->locals.next; lp != &pool->locals; lp = lp->next) {
        gets += __atomic_load_n(&lp->gets, __ATOMIC_RELAXED);
        puts += __atomic_load_n(&lp->puts, __ATOMIC_RELAXED);
    }
    /* Other threads change their blocks as this runs: the figures are
     * exact only when the pool is quiet. */
    size_t local = 0, global = 0;
    for (struct block *b = pool->blocks; b != NULL; b = b->next) {
        uint64_t nr = __atomic_load_n(&b->nremote, __ATOMIC_RELAXED);
        puts += nr;
        struct lpool *owner = __atomic_load_n(&b->owner, __ATOMIC_RELAXED);
        int64_t o = (owner != NULL && __atomic_load_n(&owner->cur, __ATOMIC_RELAXED) == b)
                        ? cur_out(owner)
                        : __atomic_load_n(&b->out, __ATOMIC_RELAXED);
        o -= (int64_t)(nr - b->nremote_seen);
        int64_t built = (int64_t)((b->built_end - first_obj(pool, b)) / pool->slot);
        size_t f = built > o ? (size_t)(built - o) : 0;
        if (owner != NULL)
            local += f;
        else
            global += f;
    }
    out->free_local = local;
    out->free_global = global;
    out->gets = gets;
    out->puts = puts;
    out->live = gets > puts ? (size_t)(gets - puts) : 0;
    out->bytes_os = pool->bytes_os;
    out->bytes_peak = pool->bytes_peak;
    out->trims = pool->trims;
    pthread_mutex_unlock(&pool->grow);
}
