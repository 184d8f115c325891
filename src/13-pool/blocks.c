/* Blocks, the pool's unit of memory: the lists that hold them, and a
 * block's life from its mapping (new, then cut object by object) to its
 * unmapping (release).  Every caller either owns the block or holds the
 * lock that guards it, as each function says.  The remote-put protocol is
 * in pool.h, beside the records it works on: the get and put paths, trims
 * and destroy all use it. */
#include "13-pool/pool.h"
#include "00-base/asan.h"
#include "01-os/os.h"

/* ---- block lists ---- */

void fa__pool_bl_add(struct blist *l, struct block *b, int where, bool at_tail)
{
    if (at_tail) {
        b->lnext = NULL;
        b->lprev = l->tail;
        *(l->tail != NULL ? &l->tail->lnext : &l->head) = b;
        l->tail = b;
    } else {
        b->lprev = NULL;
        b->lnext = l->head;
        *(l->head != NULL ? &l->head->lprev : &l->tail) = b;
        l->head = b;
    }
    __atomic_store_n(&l->n, l->n + 1, __ATOMIC_RELAXED); /* peeked without the lock */
    b->where = (uint8_t)where;
}

void fa__pool_bl_remove(struct blist *l, struct block *b)
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
}

void fa__pool_to_global(struct gpool *g, struct block *b, uint64_t now)
{
    __atomic_store_n(&b->owner, NULL, __ATOMIC_RELAXED);
    b->stamp_ms = now;
    if (b->out == 0)
        fa__pool_bl_add(&g->empty, b, W_GEMPTY, false);
    else
        fa__pool_bl_add(&g->part, b, W_GPART, false);
}

/* ---- blocks ---- */

static uintptr_t os_page_up(uintptr_t a)
{
    return (a + 4095) & ~(uintptr_t)4095;
}

/* Mark a block's remote puts free: each word of its remote bits that has
 * any, taken with an exchange (the protocol: pool.h). */
void fa__pool_block_collect(fa_pool *pool, struct block *b)
{
    uint64_t *rb = block_rbits(pool, b), *bits = block_bits(pool, b);
    size_t words = (pool->per_block + 63) / 64;
    int64_t n = 0;
    for (size_t w = 0; w < words; w++) {
        if (__atomic_load_n(&rb[w], __ATOMIC_RELAXED) == 0)
            continue;
        uint64_t x = __atomic_exchange_n(&rb[w], 0, __ATOMIC_ACQUIRE);
        bits[w] |= x;
        n += __builtin_popcountll(x);
        if (w < b->scan)
            b->scan = (uint32_t)w;
    }
    b->out -= n;
}

/* A new block, not in any list.  grow held.  NULL when the pool is at its
 * cap or the OS refuses. */
struct block *fa__pool_block_new(fa_pool *pool, struct lpool *owner)
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
    /* Fresh from mmap or from a trimmed-away spare range: zero.  Whatever
     * poison an earlier mapping there left goes (00-base/asan.h). */
    FA_UNPOISON(pool->spare, pool->block_size);
    struct block *b = (struct block *)block_header((uintptr_t)pool->spare);
    pool->spare += pool->block_size;
    pool->bytes_os += pool->block_size;
    if (pool->bytes_os > pool->bytes_peak)
        pool->bytes_peak = pool->bytes_os;
    pool->reserved += objs;
    __atomic_store_n(&b->owner, owner, __ATOMIC_RELAXED);
    b->bump = first_obj(pool, b);
    b->end = b->bump + objs * pool->slot;
    /* The pool's first block faults page by page, so that a pool of a few
     * objects holds a page or two; a pool past it is in bulk use.  Objects
     * larger than a page are not populated: a cut writes only their first
     * page, and the program may never touch the rest. */
    b->pop_end = pool->blocks == NULL || pool->slot > 4096 ? b->end : os_page_up((uintptr_t)(b + 1));
    b->next = pool->blocks;
    pool->blocks = b;
    return b;
}

void fa__pool_populate(struct block *b, uintptr_t top)
{
    uintptr_t from = b->pop_end, to = os_page_up(top > from + POPULATE_STEP ? top : from + POPULATE_STEP);
    if (to > os_page_up(b->end))
        to = os_page_up(b->end);
    fa__os_populate((void *)from, to - from);
    b->pop_end = to;
}

/* Cut one object from b's uncut part, constructing it. */
void *fa__pool_cut_one(fa_pool *pool, struct block *b)
{
    uintptr_t u = b->bump;
    if (u >= b->end)
        return NULL;
    b->bump = u + pool->slot;
    if (pool->ctor)
        pool->ctor((void *)u, pool->arg);
    return (void *)u;
}

size_t fa__pool_take(fa_pool *pool, struct block *b, size_t want, void **out)
{
    uintptr_t first = first_obj(pool, b);
    uint64_t *bits = block_bits(pool, b);
    size_t words = (pool->per_block + 63) / 64, w = b->scan, k = 0;
    for (; w < words; w++) {
        uint64_t m = bits[w];
        for (; m != 0 && k < want; k++) {
            out[k] = (void *)(first + (w * 64 + (size_t)__builtin_ctzll(m)) * pool->slot);
            m &= m - 1;
        }
        bits[w] = m;
        if (k == want)
            break;
    }
    b->scan = (uint32_t)w;
    for (size_t i = 0; i < k / 2; i++) {
        void *t = out[i];
        out[i] = out[k - 1 - i];
        out[k - 1 - i] = t;
    }
    b->out += (int64_t)k;
    return k;
}

/* ---- release ---- */

/* Unmap a block (grow held, in no list) after dtor on its objects, which
 * are all free. */
static size_t block_release(fa_pool *pool, struct block *b)
{
    FA_UNPOISON((void *)block_base(pool, b), pool->block_size);
    if (pool->dtor)
        for (uintptr_t u = first_obj(pool, b); u < b->bump; u += pool->slot)
            pool->dtor((void *)u, pool->arg);
    pool->reserved -= (b->end - first_obj(pool, b)) / pool->slot;
    pool->bytes_os -= pool->block_size;
    fa__os_unmap((void *)block_base(pool, b), pool->block_size);
    return pool->block_size;
}

/* Unmap every block marked doomed, taking it off the pool's list of blocks
 * (grow held; each in no other list, its objects all free).  Returns the
 * bytes given back. */
size_t fa__pool_release_doomed(fa_pool *pool)
{
    size_t released = 0;
    struct block **pp = &pool->blocks;
    while (*pp != NULL) {
        struct block *b = *pp;
        if (b->doomed) {
            *pp = b->next;
            pool->sweep = NULL;
            released += block_release(pool, b);
        } else {
            pp = &b->next;
        }
    }
    return released;
}
