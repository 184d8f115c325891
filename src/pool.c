/* Object pool.
 *
 * A pool hands out fixed-size slots cut from blocks.  Each thread works on a
 * local pool of its own (found in O(1): a per-thread array indexed by the
 * pool's id): a LIFO free list and the block it is cutting.  A local list that
 * reaches `handover` objects moves whole to a global pool: one pointer store
 * under a spinlock, the list head itself standing for the list (its first
 * object's second word links the lists).  Threads are spread over several
 * global pools round-robin; an empty one is refilled from its neighbours.
 * Block growth takes the pool's mutex, a longer and rarer critical section.
 *
 * Lock order: registry -> pool->grow -> gpool[i] (ascending) -> metadata.
 */
#include "fastalloc.h"
#include "internal.h"
#include "meta.h"
#include "os.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POOL_MAX 1024            /* pools alive at once */
#define CHUNK_BLOCKS 16          /* blocks mapped at once when a pool grows */
#define DEFAULT_HANDOVER 256
#define DEFAULT_BLOCK ((size_t)64 << 10)
#define DEFAULT_IDLE_MS 1000
#define IDLE_CHECK_EVERY 64      /* hand-overs between two looks at the clock */
#define GPOOLS_MAX 16
/* room value that no run of decrements brings to zero (see tcache.h) */
#define FA_AVAIL_NEVER_POOL (INT32_MIN / 2)

struct block {
    struct block *next;   /* all blocks of the pool */
    struct block *next_parked;
    uintptr_t bump, end;  /* the part not cut yet */
    uint32_t carved;      /* objects cut (and constructed) so far */
    uint32_t free_seen;   /* scratch for trim */
    uint8_t owned;        /* a thread is cutting it */
    uint8_t parked;
    uint8_t doomed;       /* trim: every object is free, the block goes */
    uint64_t bits[];      /* debug pools: one bit per slot, set while out */
};

struct gpool {
    fa__lock_t lock;
    void *full;           /* stack of lists of exactly `handover` objects */
    size_t nfull;
    void *partial;        /* one shorter list, topped up by exiting threads */
    size_t npartial;
} FA_ALIGNED_CL;

struct lpool {
    /* fast-path fields first */
    void *head;           /* free slots, LIFO */
    int32_t room;         /* handover - length; a put goes slow below 0 */
    uint32_t pad;
    uint64_t gets;
    /* object = slot + link_off (see fa_pool.link_off); 64 bits wide so that
     * the fast paths add it straight from memory */
    uintptr_t link_off;
    struct block *blk;    /* block being cut */
    struct gpool *g;
    struct fa_pool *pool;
    struct lpool *next, *prev; /* the pool's local pools */
    struct lpool **slot;  /* where the owning thread's array points to us */
} FA_ALIGNED_CL;

struct fa_pool {
    uint32_t id;
    uint32_t handover;
    size_t slot;          /* bytes per slot, a multiple of the alignment */
    /* Free slots are linked through their first two words.  A pool with a
     * ctor or dtor promises that an object keeps all its state while free,
     * so its slots carry a 16-byte link header before the object; a plain
     * pool lets the links overwrite a free object's first 16 bytes. */
    size_t link_off;
    size_t align;
    size_t block_size;
    size_t data_off;      /* first slot's offset in a block */
    uint32_t per_block;
    unsigned ngpools;
    int debug;
    int idle_ms;
    void (*ctor)(void *, void *);
    void (*dtor)(void *, void *);
    void *arg;
    size_t max_objects, max_bytes;
    char name[48];

    pthread_mutex_t grow;
    struct block *blocks; /* every block */
    struct block *parked; /* partly cut blocks nobody is cutting */
    char *spare, *spare_end; /* mapped blocks not yet handed out */
    size_t reserved;      /* objects promised to blocks (cap accounting) */
    size_t bytes_os, bytes_peak;
    struct lpool locals;  /* sentinel */
    uint64_t gets_retired, puts_retired; /* from local pools that went away */
    uint64_t puts_slow;
    uint64_t trims;

    /* idle trim */
    unsigned tick;
    uint64_t last_check_ms;
    size_t low_water;     /* fewest global free objects since last check */

    unsigned rr;          /* next global pool to assign */
    struct gpool g[];
};

/* ---- per-thread arrays of local pools ---- */

struct tls_array {
    struct lpool *lp[POOL_MAX];
    struct tls_array *next_spare;
};

/* Stand-in for "no local pool yet": no free object and no room, so both
 * get and put fall into their slow path with no extra test. */
static struct lpool empty_lp = {.head = NULL, .room = FA_AVAIL_NEVER_POOL};
static struct tls_array empty_array = {.lp = {[0 ... POOL_MAX - 1] = &empty_lp}};

static __thread struct tls_array *pool_tls __attribute__((tls_model("initial-exec"))) = &empty_array;
static __thread int pool_tls_dead __attribute__((tls_model("initial-exec")));

static fa__lock_t registry = FA_LOCK_INIT;
static fa_pool *pools[POOL_MAX];
static struct tls_array *spare_arrays;
static struct lpool *spare_lps;
static pthread_key_t exit_key;
static int key_state; /* 0 none, 1 creating, 2 ready */

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

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- lists threaded through free objects: word 0 links objects, word 1
 * links whole lists on a global pool's stack ---- */

#define NEXT(o) (*(void **)(o))
#define NEXT_LIST(o) (((void **)(o))[1])

static struct block *block_of(const fa_pool *pool, const void *obj)
{
    return (struct block *)((uintptr_t)obj & ~(uintptr_t)(pool->block_size - 1));
}

/* Push a list of n objects onto gpool g (lock held). */
static void gpool_push_locked(fa_pool *pool, struct gpool *g, void *head, size_t n)
{
    if (n == pool->handover) {
        NEXT_LIST(head) = g->full;
        g->full = head;
        g->nfull++;
        return;
    }
    /* Shorter lists are merged into the partial one, object by object. */
    while (head != NULL) {
        void *next = NEXT(head);
        NEXT(head) = g->partial;
        g->partial = head;
        if (++g->npartial == pool->handover) {
            NEXT_LIST(g->partial) = g->full;
            g->full = g->partial;
            g->nfull++;
            g->partial = NULL;
            g->npartial = 0;
        }
        head = next;
    }
}

/* Take one list from g (lock held); returns its length. */
static size_t gpool_pop_locked(fa_pool *pool, struct gpool *g, void **head)
{
    if (g->full != NULL) {
        *head = g->full;
        g->full = NEXT_LIST(g->full);
        g->nfull--;
        return pool->handover;
    }
    if (g->partial != NULL) {
        size_t n = g->npartial;
        *head = g->partial;
        g->partial = NULL;
        g->npartial = 0;
        return n;
    }
    return 0;
}

static size_t global_free(fa_pool *pool)
{
    size_t n = 0;
    for (unsigned i = 0; i < pool->ngpools; i++)
        n += __atomic_load_n(&pool->g[i].nfull, __ATOMIC_RELAXED) * pool->handover +
             __atomic_load_n(&pool->g[i].npartial, __ATOMIC_RELAXED);
    return n;
}

/* ---- local pools ---- */

static struct lpool *lp_new(fa_pool *pool)
{
    struct lpool *lp = spare_lps; /* registry lock held */
    if (lp != NULL)
        spare_lps = lp->next;
    else
        lp = fa__meta_alloc(sizeof *lp);
    if (lp == NULL)
        return NULL;
    memset(lp, 0, sizeof *lp);
    lp->pool = pool;
    lp->link_off = pool->link_off;
    lp->room = (int32_t)pool->handover;
    lp->g = &pool->g[pool->rr++ % pool->ngpools];
    return lp;
}

/* The calling thread's local pool for pool, created on first use; NULL in a
 * thread that is exiting or when there is no memory for it. */
static struct lpool *my_lp(fa_pool *pool)
{
    struct tls_array *arr = pool_tls;
    if (arr->lp[pool->id] != &empty_lp)
        return arr->lp[pool->id];
    if (pool_tls_dead || pool->debug)
        return NULL;
    ensure_key();
    fa__lock(&registry);
    if (arr == &empty_array) {
        arr = spare_arrays;
        if (arr != NULL)
            spare_arrays = arr->next_spare;
        else
            arr = fa__meta_alloc(sizeof *arr);
        if (arr == NULL) {
            fa__unlock(&registry);
            return NULL;
        }
        for (size_t i = 0; i < POOL_MAX; i++)
            arr->lp[i] = &empty_lp;
        pool_tls = arr;
        pthread_setspecific(exit_key, arr);
    }
    pthread_mutex_lock(&pool->grow);
    struct lpool *lp = lp_new(pool);
    if (lp != NULL) {
        lp->next = pool->locals.next;
        lp->prev = &pool->locals;
        pool->locals.next->prev = lp;
        pool->locals.next = lp;
        lp->slot = &arr->lp[pool->id];
        *lp->slot = lp;
    }
    pthread_mutex_unlock(&pool->grow);
    fa__unlock(&registry);
    return lp;
}

/* Give a local pool's free objects and block back to the pool (grow held). */
static void lp_retire(fa_pool *pool, struct lpool *lp)
{
    size_t n = pool->handover - (size_t)lp->room;
    if (n > 0) {
        fa__lock(&lp->g->lock);
        gpool_push_locked(pool, lp->g, lp->head, n);
        fa__unlock(&lp->g->lock);
    }
    lp->head = NULL;
    lp->room = (int32_t)pool->handover;
    if (lp->blk != NULL) {
        lp->blk->owned = 0;
        if (lp->blk->bump < lp->blk->end && !lp->blk->parked) {
            lp->blk->parked = 1;
            lp->blk->next_parked = pool->parked;
            pool->parked = lp->blk;
        }
        lp->blk = NULL;
    }
    pool->gets_retired += lp->gets;
    lp->gets = 0;
}

static void thread_exit(void *arg)
{
    struct tls_array *arr = arg;
    pool_tls_dead = 1;
    pool_tls = &empty_array;
    fa__lock(&registry);
    for (size_t i = 0; i < POOL_MAX; i++) {
        struct lpool *lp = arr->lp[i];
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
        arr->lp[i] = &empty_lp;
    }
    arr->next_spare = spare_arrays;
    spare_arrays = arr;
    fa__unlock(&registry);
}

/* ---- blocks ---- */

/* A block to cut from: a parked one, else a new one.  grow held.  NULL when
 * the pool is at its cap or the OS refuses. */
static struct block *block_get(fa_pool *pool)
{
    struct block *b = pool->parked;
    if (b != NULL) {
        pool->parked = b->next_parked;
        b->parked = 0;
        b->owned = 1;
        return b;
    }
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
        size_t n = CHUNK_BLOCKS;
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
    b = (struct block *)pool->spare;
    pool->spare += pool->block_size;
    pool->bytes_os += pool->block_size;
    if (pool->bytes_os > pool->bytes_peak)
        pool->bytes_peak = pool->bytes_os;
    pool->reserved += objs;
    b->bump = (uintptr_t)b + pool->data_off;
    b->end = b->bump + objs * pool->slot;
    b->owned = 1;
    b->next = pool->blocks;
    pool->blocks = b;
    return b;
}

/* Cut up to n objects from the local pool's block into a list. */
static size_t carve(fa_pool *pool, struct block *b, void **head, size_t n)
{
    void *list = NULL;
    size_t got = 0;
    while (got < n && b->bump < b->end) {
        void *o = (void *)b->bump;
        b->bump += pool->slot;
        b->carved++;
        if (pool->ctor)
            pool->ctor((char *)o + pool->link_off, pool->arg);
        NEXT(o) = list;
        list = o;
        got++;
    }
    *head = list;
    return got;
}

/* ---- get / put ---- */

static void *debug_get(fa_pool *pool);
static void debug_put(fa_pool *pool, void *obj);

static FA_NOINLINE void *get_slow(fa_pool *pool)
{
    struct lpool *lp = my_lp(pool);
    if (lp == NULL) {
        if (pool->debug)
            return debug_get(pool);
        /* Exiting thread: one object straight from the pool. */
        pthread_mutex_lock(&pool->grow);
        void *o = NULL;
        for (unsigned i = 0; i < pool->ngpools && o == NULL; i++) {
            void *h;
            fa__lock(&pool->g[i].lock);
            size_t n = gpool_pop_locked(pool, &pool->g[i], &h);
            if (n > 0) {
                o = h;
                if (n > 1)
                    gpool_push_locked(pool, &pool->g[i], NEXT(h), n - 1);
            }
            fa__unlock(&pool->g[i].lock);
        }
        if (o == NULL) {
            struct block *b = block_get(pool);
            if (b != NULL) {
                carve(pool, b, &o, 1);
                b->owned = 0;
                if (b->bump < b->end && !b->parked) {
                    b->parked = 1;
                    b->next_parked = pool->parked;
                    pool->parked = b;
                }
            }
        }
        if (o != NULL)
            pool->gets_retired++;
        pthread_mutex_unlock(&pool->grow);
        if (o == NULL) {
            errno = ENOMEM;
            return NULL;
        }
        return (char *)o + pool->link_off;
    }
    void *head = NULL;
    size_t n = 0;
    /* 1. a whole list from our global pool, then from the others */
    unsigned first = (unsigned)(lp->g - pool->g);
    for (unsigned k = 0; k < pool->ngpools && n == 0; k++) {
        struct gpool *g = &pool->g[(first + k) % pool->ngpools];
        if (__atomic_load_n(&g->nfull, __ATOMIC_RELAXED) == 0 &&
            __atomic_load_n(&g->npartial, __ATOMIC_RELAXED) == 0)
            continue;
        fa__lock(&g->lock);
        n = gpool_pop_locked(pool, g, &head);
        fa__unlock(&g->lock);
    }
    /* Idle-trim bookkeeping: the fewest objects the global pools held. */
    size_t gf = n == 0 ? 0 : global_free(pool);
    if (gf < __atomic_load_n(&pool->low_water, __ATOMIC_RELAXED))
        __atomic_store_n(&pool->low_water, gf, __ATOMIC_RELAXED);
    if (n == 0) {
        /* 2. cut from our block; 3. a new block */
        if (lp->blk == NULL || lp->blk->bump >= lp->blk->end) {
            pthread_mutex_lock(&pool->grow);
            if (lp->blk != NULL)
                lp->blk->owned = 0;
            lp->blk = block_get(pool);
            pthread_mutex_unlock(&pool->grow);
            if (lp->blk == NULL) {
                errno = ENOMEM;
                return NULL;
            }
        }
        /* A plain pool cuts a whole list at once; one with a ctor or dtor cuts
         * one object a call, so that exactly the objects handed out have
         * been constructed. */
        n = carve(pool, lp->blk, &head, pool->ctor || pool->dtor ? 1 : pool->handover);
    }
    void *o = head;
    lp->head = NEXT(o);
    lp->room = (int32_t)(pool->handover - (n - 1));
    lp->gets++;
    return (char *)o + pool->link_off;
}

static size_t trim_locked(fa_pool *pool);

static void maybe_idle_trim(fa_pool *pool)
{
    if (pool->idle_ms < 0 ||
        (__atomic_add_fetch(&pool->tick, 1, __ATOMIC_RELAXED) % IDLE_CHECK_EVERY) != 0)
        return;
    uint64_t now = now_ms();
    if (now - __atomic_load_n(&pool->last_check_ms, __ATOMIC_RELAXED) < (uint64_t)pool->idle_ms)
        return;
    /* Objects that stayed free in the global pools for a whole interval are
     * not needed: the policy gives back the blocks they fill. */
    size_t low = __atomic_exchange_n(&pool->low_water, global_free(pool), __ATOMIC_RELAXED);
    __atomic_store_n(&pool->last_check_ms, now, __ATOMIC_RELAXED);
    if (low >= pool->per_block && pthread_mutex_trylock(&pool->grow) == 0) {
        trim_locked(pool);
        pthread_mutex_unlock(&pool->grow);
    }
}

static FA_NOINLINE void put_slow(fa_pool *pool, void *obj)
{
    struct lpool *lp = pool_tls->lp[pool->id];
    void *user = obj;
    obj = (char *)obj - pool->link_off;
    if (lp == &empty_lp) {
        empty_lp.room = FA_AVAIL_NEVER_POOL;
        lp = my_lp(pool);
        if (lp == NULL) {
            if (pool->debug) {
                debug_put(pool, user);
                return;
            }
            fa__lock(&pool->g[0].lock);
            NEXT(obj) = NULL;
            gpool_push_locked(pool, &pool->g[0], obj, 1);
            fa__unlock(&pool->g[0].lock);
            return;
        }
    } else {
        lp->room++; /* undo the fast path's decrement */
        if (lp->room <= 0) {
            /* The list is full: it moves whole to the global pool. */
            fa__lock(&lp->g->lock);
            gpool_push_locked(pool, lp->g, lp->head, pool->handover);
            fa__unlock(&lp->g->lock);
            lp->head = NULL;
            lp->room = (int32_t)pool->handover;
            maybe_idle_trim(pool);
        }
    }
    NEXT(obj) = lp->head;
    lp->head = obj;
    lp->room--;
}

void *fa_pool_get(fa_pool *pool)
{
    struct lpool *lp = pool_tls->lp[pool->id];
    void *o = lp->head;
    if (FA_UNLIKELY(o == NULL))
        return get_slow(pool);
    lp->head = NEXT(o);
    lp->room++;
    lp->gets++;
    return (char *)o + lp->link_off;
}

void fa_pool_put(fa_pool *pool, void *obj)
{
    struct lpool *lp = pool_tls->lp[pool->id];
    if (FA_UNLIKELY(--lp->room < 0)) {
        put_slow(pool, obj);
        return;
    }
    void *s = (char *)obj - lp->link_off;
    NEXT(s) = lp->head;
    lp->head = s;
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

static void *debug_get(fa_pool *pool)
{
    pthread_mutex_lock(&pool->grow);
    void *o = NULL;
    struct gpool *g = &pool->g[0];
    fa__lock(&g->lock);
    if (g->partial != NULL) { /* the most recent put is on top of it */
        o = g->partial;
        g->partial = NEXT(o);
        g->npartial--;
    } else if (g->full != NULL) {
        o = g->full;
        g->full = NEXT_LIST(o);
        g->nfull--;
        if (NEXT(o) != NULL) { /* the rest becomes the partial list */
            g->partial = NEXT(o);
            g->npartial = pool->handover - 1;
        }
    }
    fa__unlock(&g->lock);
    if (o == NULL) {
        struct block *b = pool->parked;
        if (b == NULL || b->bump >= b->end) {
            b = block_get(pool);
            if (b != NULL) {
                b->owned = 0;
                b->parked = 1;
                b->next_parked = pool->parked;
                pool->parked = b;
            }
        }
        if (b != NULL)
            carve(pool, b, &o, 1);
        if (b != NULL && b->bump >= b->end && pool->parked == b) {
            pool->parked = b->next_parked;
            b->parked = 0;
        }
    }
    if (o != NULL) {
        struct block *b = block_of(pool, o);
        size_t i = ((uintptr_t)o - (uintptr_t)b - pool->data_off) / pool->slot;
        b->bits[i / 64] |= (uint64_t)1 << (i % 64);
        pool->gets_retired++;
    } else {
        errno = ENOMEM;
    }
    pthread_mutex_unlock(&pool->grow);
    return o ? (char *)o + pool->link_off : NULL;
}

static void debug_put(fa_pool *pool, void *user)
{
    void *obj = (char *)user - pool->link_off;
    pthread_mutex_lock(&pool->grow);
    struct block *b = debug_find_block(pool, obj);
    uintptr_t off = b ? (uintptr_t)obj - (uintptr_t)b : 0;
    if (b == NULL || off < pool->data_off || (off - pool->data_off) % pool->slot != 0 ||
        (uintptr_t)obj >= b->bump)
        fa__fatal("fastalloc: fa_pool_put(): %p was not handed out by pool '%s'", user, pool->name);
    size_t i = (off - pool->data_off) / pool->slot;
    uint64_t bit = (uint64_t)1 << (i % 64);
    if (!(b->bits[i / 64] & bit))
        fa__fatal("fastalloc: fa_pool_put(): double put of %p in pool '%s'", user, pool->name);
    b->bits[i / 64] &= ~bit;
    fa__lock(&pool->g[0].lock);
    NEXT(obj) = NULL;
    gpool_push_locked(pool, &pool->g[0], obj, 1);
    fa__unlock(&pool->g[0].lock);
    pool->puts_slow++;
    pthread_mutex_unlock(&pool->grow);
}

/* ---- create / trim / destroy / stats ---- */

fa_pool *fa_pool_create(const fa_pool_options *opt)
{
    if (opt == NULL || opt->object_size == 0 || opt->object_size > ((size_t)1 << 30) ||
        (opt->object_align & (opt->object_align - 1)) != 0 || opt->object_align > 4096 ||
        (opt->block_size != 0 && ((opt->block_size & (opt->block_size - 1)) != 0 || opt->block_size < 4096))) {
        errno = EINVAL;
        return NULL;
    }
    fa__ensure_init();
    size_t align = opt->object_align ? opt->object_align : 16;
    if (align < sizeof(void *))
        align = sizeof(void *);
    size_t link_off = 0, slot = opt->object_size;
    if (opt->ctor || opt->dtor)
        link_off = (2 * sizeof(void *) + align - 1) & ~(align - 1);
    else if (slot < 2 * sizeof(void *))
        slot = 2 * sizeof(void *);
    slot = (link_off + slot + align - 1) & ~(align - 1);
    unsigned handover = opt->handover ? opt->handover : DEFAULT_HANDOVER;
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
    pool->handover = handover;
    pool->slot = slot;
    pool->link_off = link_off;
    pool->align = align;
    pool->block_size = bs;
    pool->data_off = hdr;
    pool->per_block = (uint32_t)((bs - hdr) / slot);
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
    pool->last_check_ms = now_ms();
    pool->low_water = SIZE_MAX;

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
    pools[id] = pool;
    fa__unlock(&registry);
    return pool;
}

/* Return every block whose objects are all free.  grow held. */
static size_t trim_locked(fa_pool *pool)
{
    pool->trims++;
    /* Gather every free object from the global pools. */
    void *all = NULL;
    for (unsigned i = 0; i < pool->ngpools; i++) {
        struct gpool *g = &pool->g[i];
        fa__lock(&g->lock);
        void *h;
        size_t n;
        while ((n = gpool_pop_locked(pool, g, &h)) > 0) {
            while (h != NULL) {
                void *next = NEXT(h);
                NEXT(h) = all;
                all = h;
                h = next;
            }
        }
        fa__unlock(&g->lock);
    }
    for (void *o = all; o != NULL; o = NEXT(o))
        block_of(pool, o)->free_seen++;
    size_t released = 0;
    for (struct block *b = pool->blocks; b != NULL; b = b->next)
        b->doomed = !b->owned && b->free_seen == b->carved;
    /* Objects of doomed blocks leave the pool: dtor, then the block goes. */
    void *keep = NULL;
    size_t nkeep = 0;
    while (all != NULL) {
        void *next = NEXT(all);
        if (block_of(pool, all)->doomed) {
            if (pool->dtor)
                pool->dtor((char *)all + pool->link_off, pool->arg);
        } else {
            NEXT(all) = keep;
            keep = all;
            nkeep++;
        }
        all = next;
    }
    struct block **pp = &pool->blocks;
    struct block **parked_pp = &pool->parked;
    while (*parked_pp != NULL) {
        if ((*parked_pp)->doomed) {
            (*parked_pp)->parked = 0;
            *parked_pp = (*parked_pp)->next_parked;
        } else {
            parked_pp = &(*parked_pp)->next_parked;
        }
    }
    while (*pp != NULL) {
        struct block *b = *pp;
        b->free_seen = 0;
        if (b->doomed) {
            *pp = b->next;
            size_t uncut = (b->end - b->bump) / pool->slot;
            pool->reserved -= b->carved + uncut;
            pool->bytes_os -= pool->block_size;
            released += pool->block_size;
            fa__os_unmap(b, pool->block_size);
        } else {
            pp = &b->next;
        }
    }
    /* Mapped blocks never handed out go too. */
    if (pool->spare != pool->spare_end) {
        fa__os_unmap(pool->spare, (size_t)(pool->spare_end - pool->spare));
        pool->spare = pool->spare_end = NULL;
    }
    /* Survivors go back in lists of `handover`. */
    for (unsigned i = 0; keep != NULL; i = (i + 1) % pool->ngpools) {
        void *h = keep;
        size_t n = 1;
        void *last = keep;
        while (n < pool->handover && NEXT(last) != NULL) {
            last = NEXT(last);
            n++;
        }
        keep = NEXT(last);
        NEXT(last) = NULL;
        fa__lock(&pool->g[i].lock);
        gpool_push_locked(pool, &pool->g[i], h, n);
        fa__unlock(&pool->g[i].lock);
    }
    (void)nkeep;
    return released;
}

size_t fa_pool_trim(fa_pool *pool)
{
    pthread_mutex_lock(&pool->grow);
    /* The caller's own local pool is handed over first, so a pool used by
     * one thread can be trimmed to nothing. */
    struct lpool *lp = pool_tls->lp[pool->id];
    if (lp != &empty_lp)
        lp_retire(pool, lp);
    size_t r = trim_locked(pool);
    pthread_mutex_unlock(&pool->grow);
    return r;
}

void fa_pool_destroy(fa_pool *pool)
{
    if (pool == NULL)
        return;
    fa__lock(&registry);
    pools[pool->id] = NULL;
    pthread_mutex_lock(&pool->grow);
    /* Every thread's local pool goes: its objects join the global pools. */
    while (pool->locals.next != &pool->locals) {
        struct lpool *lp = pool->locals.next;
        lp_retire(pool, lp);
        *lp->slot = &empty_lp;
        lp->prev->next = lp->next;
        lp->next->prev = lp->prev;
        lp->next = spare_lps;
        spare_lps = lp;
    }
    for (struct block *b = pool->blocks; b != NULL; b = b->next)
        b->owned = 0;
    /* dtor on every free object (objects still out get none). */
    for (unsigned i = 0; i < pool->ngpools; i++) {
        void *h;
        while (gpool_pop_locked(pool, &pool->g[i], &h) > 0) {
            for (void *o = h; o != NULL;) {
                void *next = NEXT(o);
                if (pool->dtor)
                    pool->dtor((char *)o + pool->link_off, pool->arg);
                o = next;
            }
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
    size_t local = 0;
    for (struct lpool *lp = pool->locals.next; lp != &pool->locals; lp = lp->next) {
        gets += __atomic_load_n(&lp->gets, __ATOMIC_RELAXED);
        int32_t room = __atomic_load_n(&lp->room, __ATOMIC_RELAXED);
        if (room >= 0)
            local += pool->handover - (size_t)room;
    }
    size_t global = global_free(pool);
    size_t carved = 0;
    for (struct block *b = pool->blocks; b != NULL; b = b->next)
        carved += b->carved;
    out->free_local = local;
    out->free_global = global;
    out->live = carved > local + global ? carved - local - global : 0;
    out->gets = gets;
    /* Every object got and no longer live was put. */
    out->puts = gets - out->live;
    out->bytes_os = pool->bytes_os;
    out->bytes_peak = pool->bytes_peak;
    out->trims = pool->trims;
    pthread_mutex_unlock(&pool->grow);
}
