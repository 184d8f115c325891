/* Thread cache: per-thread free lists, one per size class.  The fast paths of
 * malloc and free (api/fastpath.h) touch only heads[] and avail[] of the calling
 * thread's cache. */
#ifndef FA_TCACHE_H
#define FA_TCACHE_H

#include "core/freelist.h"
#include "core/sizeclass.h"

/* avail[] value that no run of decrements brings to zero: the slow path
 * stores it back rather than adding, so lost updates in a shared cache do not
 * matter. */
#define FA_AVAIL_NEVER (INT32_MIN / 2)

/* Large blocks a thread keeps: at most this many, of at most
 * FA_TC_LARGE_MAX bytes each. */
#define FA_TC_LARGE_SLOTS 8
#define FA_TC_LARGE_MAX ((size_t)1 << 20)

struct fa__tcache {
    /* --- read and written by the fast paths; avail first so that its
     * offset is 0 and the free path indexes it without an extra add --- */
    /* Room left in each list before it is full (maxlen - length).  A free
     * decrements it and goes to the slow path when it turns negative, which
     * folds "list full", "class 0 / not a small block", "no cache yet" and
     * "debug or hook mode" into one sign test. */
    int32_t avail[FA_NUM_CLASSES];
    void *heads[FA_NUM_CLASSES];
    /* --- slow paths only --- */
    uint32_t maxlen[FA_NUM_CLASSES];
    void *snap[FA_NUM_CLASSES]; /* heads at the last scavenge */
    unsigned epoch;    /* scavenge epoch this cache last saw */
    /* Large blocks this thread freed, kept for its next large allocations
     * (oldest first): the block comes back warm in this core's cache, with
     * no page-heap lock.  They have a share of their own (tcache.c,
     * large_share), and no claim on the global bound. */
    struct fa__span *large[FA_TC_LARGE_SLOTS];
    unsigned nlarge;
    size_t large_bytes;
    bool large_used;   /* taken from since the last scavenge */
    size_t max_bytes;  /* sum of maxlen * size: bounds what the cache holds,
                          and is this cache's claim on the global bound */
    struct fa__tcache *next, *prev; /* registry of live caches */
    uint8_t kind;      /* FA_TC_* */
} FA_ALIGNED_CL;

enum { FA_TC_REAL = 0, FA_TC_EMPTY = 1, FA_TC_DEAD = 2 };

/* The calling thread's cache.  It starts at a shared, permanently empty
 * cache, so a thread's first malloc or free falls into the slow path with no
 * separate "initialised?" test on the fast path. */
extern __thread struct fa__tcache *fa__tls_cache
    __attribute__((tls_model("initial-exec"))) FA_HIDDEN;

/* &tc->heads[cls], spelled so that the compiler folds the array's offset into
 * one addressing mode instead of adding it to the index first. */
FA_INLINE void **fa__tc_head(struct fa__tcache *tc, size_t cls)
{
    return (void **)((char *)tc + __builtin_offsetof(struct fa__tcache, heads) + cls * sizeof(void *));
}

/* Slow paths: the list was empty / full, or the thread has no cache.  The
 * allocation slow path expects the allocator initialised (the api layer
 * sees to it); the free slow path hands a block that is not small to the
 * large-block layer. */
void *fa__tc_alloc_slow(size_t size) FA_HIDDEN;
void fa__tc_free_slow(void *p) FA_HIDDEN;

void fa__tc_init(void) FA_HIDDEN;

/* Bytes held in all live thread caches (approximate while threads run), and
 * what they may hold together (their lists' claims on the global bound, and
 * the large blocks they keep). */
size_t fa__tc_cached_bytes(void) FA_HIDDEN;
size_t fa__tc_claimed_bytes(void) FA_HIDDEN;
unsigned fa__tc_live_threads(void) FA_HIDDEN;

/* A large block of at least size bytes (at most FA_TC_LARGE_MAX, page
 * alignment) from the calling thread's cache, or NULL. */
void *fa__tc_large_alloc(size_t size) FA_HIDDEN;

/* Give back everything the calling thread caches (fa_trim). */
void fa__tc_flush_mine(void) FA_HIDDEN;

/* For fork. */
void fa__tc_lock_registry(void) FA_HIDDEN;
void fa__tc_unlock_registry(void) FA_HIDDEN;

#endif
