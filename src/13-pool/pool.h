/* Object pool: what the pool's files share.
 *
 * Objects are cut from blocks (64 KiB by default, aligned to their size, a
 * header near the start: block_header()).  Each block marks its free
 * objects in a bitmap and belongs at any time to one thread's local pool or
 * to one of the pool's global pools.
 *
 * In front of the blocks, each thread keeps a cache: a stack of pointers to
 * free objects of any block, its own or another thread's, found in O(1) (a
 * per-thread array indexed by the pool's id).  A get pops from it and a put
 * pushes onto it, so the object put last is the next one got, and an object
 * put by another thread than its owner's is reused where it was put, with
 * no atomic operation and no trip back to its owner (tcmalloc's and
 * jemalloc's thread caches do the same for malloc).  An empty cache is
 * refilled from one of the thread's blocks: free objects lowest address
 * first, or objects never used, cut in address order.  A cache at its bound
 * gives its older half back to their blocks: a bit set in a block the
 * thread owns, a bit set with an atomic OR in the remote bits of any
 * other, which its owner takes a word at a time when its own blocks run
 * dry.
 *
 * Why a bitmap per block and not one free list per thread (seed 001's
 * design): a list threaded through objects freed in random order is walked
 * in random order, one cache miss and often one TLB miss per get, and
 * walked again to spill it.  A bit neither touches the object nor keeps an
 * order: objects leave a block in address order, which the hardware
 * prefetches, and neither a get, a put nor a spill reads an object.
 *
 * A block whose objects are all free is handed over whole to the thread's
 * global pool (one list push under a spinlock), beyond a small local spare.
 * Threads take blocks from their global pool, then from the others; an
 * exiting thread hands over every block it holds.  Growth takes the pool's
 * mutex, a longer and rarer critical section.
 *
 * Lock order: registry -> pool->grow -> gpool[i] (ascending) -> metadata.
 *
 * The files, from the bottom up; each calls only the files above it in
 * this list, so no two call each other:
 *   blocks.c   block lists; a block's life: new, cut, collect, release
 *   debug.c    debug pools, which check every call under the grow mutex
 *              (they have no local pools: blocks are all they use)
 *   trim.c     giving all-free blocks of the global pools back to the OS,
 *              a debug pool's through debug.c; the idle policy
 *   local.c    the per-thread arrays and the local pools in them (a
 *              hand-over looks at the idle policy); the registry's lock
 *   get_put.c  fa_pool_get and fa_pool_put, their fast and slow paths
 *   pool.c     create, destroy, trim, stats, the registry and fork
 * This header holds the records they all work on and the helpers small
 * enough to inline, then each file's declarations in that order; a
 * function one file uses alone stays static there. */
#ifndef FA_POOL_POOL_H
#define FA_POOL_POOL_H

#include "fastalloc.h"
#include "00-base/asan.h"
#include "00-base/config.h"
#include "00-base/lock.h"
#include "02-records/freelist.h"

#include <pthread.h>

#define POOL_MAX 1024            /* pools alive at once */
#define FAST_SLOTS 127           /* pools whose local pool TLS finds in one load */
#define CHUNK_FIRST 4            /* blocks mapped by a pool's first growth */
#define CHUNK_MAX 64             /* ... doubling up to this (4 MiB of 64 KiB blocks) */
#define DEFAULT_BLOCK ((size_t)64 << 10)
#define DEFAULT_IDLE_MS 1000
#define IDLE_CHECK_EVERY 16      /* hand-overs and growths between two looks at the clock */
#define GPOOLS_MAX 16
#define CUT_BATCH 64             /* objects a cache takes at once when a block is cut */
#define CACHE_BYTES ((size_t)32 << 10) /* a thread's cache bound, in objects' bytes ... */
#define CACHE_MIN 16             /* ... but at least this many objects */
#define CACHE_CAP 256            /* ... and at most this many */
#define SCAN 8                   /* blocks looked at per search for remote puts */
#define SWEEP 16                 /* blocks looked at per growth for stranded puts (trim.c) */
#define TAKE_MAX 4               /* blocks with free objects beyond which a thread
                                    leaves a detached block to a global pool */
/* Bytes of a block's fresh pages faulted in with one call, as a cut
 * reaches them: a call costs about what one page fault does here, and a
 * thread's last block holds at most this much that it has not cut yet. */
#define POPULATE_STEP ((uintptr_t)8 << 10)

enum where { W_NONE, W_AVAIL, W_FRESH, W_SPARE, W_GPART, W_GEMPTY, W_DEBUG };
#define NLISTS (W_SPARE - W_AVAIL + 1) /* a local pool's lists, W_AVAIL to W_SPARE */

struct blist {
    struct block *head, *tail;
    size_t n;
};

/* A block's owner while it is full and no thread's: its last owner with
 * the low bit set (local.c, fa__pool_place).  The first thread to put one
 * of its objects back takes it with a compare-and-swap. */
#define DETACHED(lp) ((struct lpool *)((uintptr_t)(lp) | 1))
#define detached(o) (((uintptr_t)(o) & 1) != 0)

struct block {
    /* The owner's fields, read and written only by the owning thread, or
     * under the global pool's lock while nobody owns the block.  Giving an
     * object back to a block touches this line and one of its bits'. */
    struct lpool *owner;   /* NULL: in a global pool, or a debug pool's;
                              DETACHED(last owner): full, and no
                              thread's (local.c) */
    int64_t out;           /* objects cut and not free here (those in a
                              cache count as out) */
    uint8_t where;
    uint8_t doomed;
    uint32_t scan;         /* no bit below this word of the bits is set */
    uintptr_t bump, end;   /* next object to cut (those below have entered
                              the pool: ctor run); end of the block's objects */
    uintptr_t pop_end;     /* pages below are populated (fa__pool_populate) */
    uint64_t stamp_ms;     /* when it entered a global pool all free */
    /* The lists' line, written on slow paths. */
    struct block *lnext, *lprev; /* in the list `where` names */
    struct block *next;    /* every block of the pool (grow) */
    /* Then, in the room the header moves in (block_bits), one bit per slot:
     * set while the object is free in this block (a debug pool's: while it
     * is out).  A free object keeps no link, so giving it back writes
     * nothing into it, and a cache takes the free objects in address order
     * whatever order they came back in.  After the header and the bits, as
     * many remote bits (block_rbits): set by other threads' puts, with an
     * atomic OR, on lines of their own, so that the owner's gets and puts
     * do not share a line with them. */
} FA_ALIGNED_CL;
#define HEADER_LINES (sizeof(struct block) / FA_CACHELINE)

struct gpool {
    fa__lock_t lock;
    struct blist part;     /* blocks with objects out, from exited threads */
    struct blist empty;    /* blocks whose objects are all free */
} FA_ALIGNED_CL;

struct lpool {
    /* fast-path fields, one cache line */
    size_t n;              /* objects in the cache: cache[0..n), the newest last */
    size_t max;            /* the cache's bound (0 in the stand-in) */
    uint64_t puts;
    /* Objects into the cache from blocks, and back to them: with puts
     * and n, they give the gets (lp_gets). */
    uint64_t taken, spilled;
    union { /* lists[where - W_AVAIL] */
        struct {
            struct blist avail; /* blocks with free objects (built) */
            struct blist fresh; /* blocks with only objects never cut */
            struct blist spare; /* blocks all free, at most spare_max */
        };
        struct blist lists[NLISTS];
    };
    size_t spare_max;
    struct gpool *g;
    struct fa_pool *pool;
    struct lpool *next, *prev; /* the pool's local pools */
    struct lpool **slot;   /* where the owning thread's array points to us */
    /* The cache: a stack of pointers, so that neither a get nor a put
     * touches the object, and a spill reads them in order.  Objects put in
     * random order are each touched once, by the program. */
    void *cache[CACHE_CAP] FA_ALIGNED_CL;
} FA_ALIGNED_CL;
/* A local pool has a page of its own, which a dropped one gives back whole,
 * and starts 1 to LP_COLOURS lines into it (local.c).  At the page's start,
 * its first line shared an L1 set with every page-aligned hot line (the
 * pool's own first line among them) and missed, which slowed every get
 * (docs/HISTORY.md, #25). */
#define LP_PAGE 4096
#define LP_COLOURS 16
_Static_assert(sizeof(struct lpool) + LP_COLOURS * FA_CACHELINE <= LP_PAGE, "a local pool fits its page");

struct fa_pool {
    /* Where the calling thread finds its local pool: the entry tls_idx of
     * fa__pool_lp, as an offset from the thread pointer (the same in every
     * thread for initial-exec TLS), so that a fast path reads it with one
     * %fs-relative load instead of three (FAST_LP). */
    uintptr_t tls_off;
    /* The id below FAST_SLOTS, else FAST_SLOTS (a stand-in). */
    uint32_t tls_idx;
    uint32_t id;
    size_t slot;           /* bytes per slot, a multiple of the alignment */
    uint64_t slot_inv;     /* 2^64 / slot, rounded up (slot_index) */
    size_t link_off;       /* object = slot + link_off */
    size_t align;
    size_t block_size;
    size_t data_off;       /* first slot's offset in a block (after the
                              header, the room it moves in and the bits) */
    size_t bits_lines;     /* cache lines of a block's bits */
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
    uint64_t trims;

    /* debug pools: one LIFO list and the block being cut, under grow; the
     * objects put lately wait in a FIFO (the quarantine) before the list */
    void *dbg_free;
    struct block *dbg_blk;
    void *dbg_qhead, *dbg_qtail;
    size_t dbg_qbytes;

    /* where the next sweep for stranded detached blocks starts (grow;
     * trim.c), NULL: at the first block */
    struct block *sweep;

    /* idle trim */
    unsigned tick;
    uint64_t last_check_ms;

    unsigned rr;           /* next global pool to assign */
    struct gpool g[];
};

/* ---- blocks ---- */

/* A block's header is not at its start but up to COLOURS - 1 cache lines
 * in, by bits 16 and 17 of the block's address: consecutive blocks of 64
 * KiB (the default size) take the four places in turn.  At the start, every
 * header fell in the same L1 set and in 2 of the L2's 2,048, and the header
 * line a put reads missed at almost every put in random order.  Four places
 * made puts in random order much faster, and eight or sixteen did no better
 * (docs/HISTORY.md).  The bits are fixed, so that
 * the put path shifts by a constant: blocks of 128 KiB take two of the
 * places, larger ones keep their header at the start, and smaller ones
 * change place every 64 KiB.  The bits of a block's slots take lines of
 * that room the header leaves free (block_bits), so the objects start
 * after 5 lines for 64 B slots in 64 KiB, not after 3 + 2 + 2. */
#define COLOURS 4
#define COLOUR_MASK ((uintptr_t)(COLOURS - 1) << 6)

static inline uintptr_t block_header(uintptr_t base)
{
    return base + ((base >> (16 - 6)) & COLOUR_MASK);
}

/* Where a block with its header c lines in keeps its bits (bits_lines of
 * them): just before the header when they fit there, else just after it.
 * Never at the block's start, where every block's bits would share an L1
 * set again (half the blocks' were, and puts in random order missed on
 * them: docs/HISTORY.md, #25). */
static inline size_t bits_line(size_t c, size_t bits_lines)
{
    return c >= bits_lines ? c - bits_lines : c + HEADER_LINES;
}

static inline struct block *block_of(const fa_pool *pool, const void *obj)
{
    return (struct block *)block_header((uintptr_t)obj & ~(uintptr_t)(pool->block_size - 1));
}

/* The address a block was mapped at (its header is in it). */
static inline uintptr_t block_base(const fa_pool *pool, const struct block *b)
{
    return (uintptr_t)b & ~(uintptr_t)(pool->block_size - 1);
}

static inline uint64_t *block_bits(const fa_pool *pool, const struct block *b)
{
    uintptr_t base = block_base(pool, b);
    return (uint64_t *)(base + bits_line(((uintptr_t)b - base) / FA_CACHELINE, pool->bits_lines) * FA_CACHELINE);
}

/* Where a block with its header c lines in keeps its remote bits: just
 * after the header and the bits, whichever ends last; so the lines move
 * with the header and never hold the owner's fields or bits. */
static inline size_t rbits_line(size_t c, size_t bits_lines)
{
    return c >= bits_lines ? c + HEADER_LINES : c + HEADER_LINES + bits_lines;
}

static inline uint64_t *block_rbits(const fa_pool *pool, const struct block *b)
{
    uintptr_t base = block_base(pool, b);
    return (uint64_t *)(base + rbits_line(((uintptr_t)b - base) / FA_CACHELINE, pool->bits_lines) * FA_CACHELINE);
}

static inline uintptr_t first_obj(const fa_pool *pool, const struct block *b)
{
    return block_base(pool, b) + pool->data_off + pool->link_off;
}

/* A free object's link on a debug pool's lists (through the free-list
 * seam): at the object, or in a header before it when a ctor or dtor has
 * the free object keep all its state. */
static inline intptr_t negoff(const fa_pool *pool)
{
    return -(intptr_t)pool->link_off;
}

/* The slot of object u of b: a multiply, not a divide (u - first is a
 * multiple of slot, below 2^64 / slot_inv). */
static inline size_t slot_index(const fa_pool *pool, const struct block *b, uintptr_t u)
{
    return (size_t)(((unsigned __int128)(u - first_obj(pool, b)) * pool->slot_inv) >> 64);
}

/* Free objects already built (not counting uncut ones). */
static inline int has_built_free(const fa_pool *pool, const struct block *b)
{
    return (int64_t)slot_index(pool, b, b->bump) > b->out;
}

/* Object u is free in b again (its owner, or a global pool's lock). */
static inline void set_free(const fa_pool *pool, struct block *b, uintptr_t u)
{
    size_t i = slot_index(pool, b, u);
    block_bits(pool, b)[i / 64] |= (uint64_t)1 << (i % 64);
    if (i / 64 < b->scan)
        b->scan = (uint32_t)(i / 64);
}

/* Remote puts: a thread that gives an object back to a block another
 * thread owns sets the object's bit in the block's remote bits with an
 * atomic OR, several objects of one word at once, and writes nothing into
 * the object.  The OR is the put's last touch of the block.  The owner,
 * or the holder of the global pool's lock for an unowned block, takes the
 * bits a word at a time with an exchange: before it cuts new objects from
 * the block, when the block has no other free object, and before it
 * detaches the block (local.c).  A collect counts exactly the puts it
 * takes, and `out` == 0 means every object is free in the block.  Linked
 * remote lists (this pool's design before) had the owner walk every object
 * another thread had just written, one cache miss each: half the time of
 * bursts put back by another thread (docs/HISTORY.md, #40).  A put into a
 * detached block takes the block instead (local.c). */
static inline void remote_put_word(const fa_pool *pool, struct block *b, size_t word, uint64_t mask)
{
    __atomic_fetch_or(&block_rbits(pool, b)[word], mask, __ATOMIC_RELEASE);
}

/* Any remote puts in b not collected yet (a look, not a take). */
static inline int block_has_remote(const fa_pool *pool, const struct block *b)
{
    const uint64_t *rb = block_rbits(pool, b);
    for (size_t w = 0; w < (pool->per_block + 63) / 64; w++)
        if (__atomic_load_n(&rb[w], __ATOMIC_RELAXED) != 0)
            return 1;
    return 0;
}

/* blocks.c: the lists (linking a block in also sets its `where`), and a
 * block's life.  fa__pool_block_new and fa__pool_release_doomed want grow
 * held. */
void fa__pool_bl_add(struct blist *l, struct block *b, int where, bool at_tail) FA_HIDDEN;
void fa__pool_bl_remove(struct blist *l, struct block *b) FA_HIDDEN;
/* b, in no list, leaves its thread (or none) for g, which is locked: onto
 * its empty list when all its objects are free, else onto its list of
 * blocks with objects out. */
void fa__pool_to_global(struct gpool *g, struct block *b, uint64_t now) FA_HIDDEN;
void fa__pool_block_collect(fa_pool *pool, struct block *b) FA_HIDDEN;
struct block *fa__pool_block_new(fa_pool *pool, struct lpool *owner) FA_HIDDEN;
void *fa__pool_cut_one(fa_pool *pool, struct block *b) FA_HIDDEN;
/* Up to `want` of b's free objects (it has some) into out[], highest
 * address first (a cache pops from its end); returns how many. */
size_t fa__pool_take(fa_pool *pool, struct block *b, size_t want, void **out) FA_HIDDEN;
/* Fault in b's pages from pop_end to at least top (a cut is about to reach
 * it), POPULATE_STEP at a time. */
void fa__pool_populate(struct block *b, uintptr_t top) FA_HIDDEN;
size_t fa__pool_release_doomed(fa_pool *pool) FA_HIDDEN;

/* ---- debug pools ---- */

/* debug.c: a debug pool's get and put, and its part of a trim (grow held). */
void *fa__pool_debug_get(fa_pool *pool) FA_HIDDEN;
void fa__pool_debug_put(fa_pool *pool, void *obj) FA_HIDDEN;
size_t fa__pool_debug_trim_locked(fa_pool *pool) FA_HIDDEN;

/* ---- trim ---- */

/* trim.c: the idle policy, looked at on the pool's slow paths; and the
 * release of the unowned all-free blocks that entered a global pool at or
 * before `before` (UINT64_MAX: all), which fa_pool_trim (pool.c) calls too
 * (grow held; returns the bytes given back). */
void fa__pool_maybe_idle_trim(fa_pool *pool) FA_HIDDEN;
/* trim.c: up to `budget` blocks (SIZE_MAX: all) looked at for detached
 * blocks with remote puts, which go to a global pool (grow held; returns
 * how many went). */
size_t fa__pool_sweep_detached(fa_pool *pool, size_t budget) FA_HIDDEN;
size_t fa__pool_trim_locked(fa_pool *pool, uint64_t before) FA_HIDDEN;

/* ---- local pools: the per-thread arrays (local.c) ---- */

/* The thread's local pools of the first FAST_SLOTS pool ids, in static TLS:
 * one load finds a local pool (a pointer to a heap array would take two).
 * 1 KiB per thread, small enough that the library can still be dlopen()ed.
 * Pools with higher ids all map to the last slot, a permanent stand-in, so
 * their gets and puts always take the slow path, which finds their local
 * pool in a per-thread heap array (fa__pool_lp_more, NULL until needed). */
extern __thread struct lpool *fa__pool_lp[FAST_SLOTS + 1]
    __attribute__((tls_model("initial-exec"))) FA_HIDDEN;
extern __thread struct lpool **fa__pool_lp_more __attribute__((tls_model("initial-exec"))) FA_HIDDEN;
/* The calling thread's entry of fa__pool_lp for pool, on the fast paths.
 * Not in a sanitizer build: AddressSanitizer checks a %fs-relative load's
 * offset as if it were an address. */
#if defined(__x86_64__) && defined(__SEG_FS) && !defined(FA_ASAN) && !defined(__SANITIZE_THREAD__)
#define FAST_LP(pool) (*(struct lpool *__seg_fs const *)(pool)->tls_off)
#else
#define FAST_LP(pool) (fa__pool_lp[(pool)->tls_idx])
#endif
/* The stand-in for "no local pool yet"; no thread ever owns it. */
extern struct lpool fa__pool_empty_lp FA_HIDDEN;

/* Guards the pool ids (pool.c), the recycled local pools and the
 * per-thread arrays of other threads (local.c). */
extern fa__lock_t fa__pool_registry FA_HIDDEN;

/* The calling thread's local pool for pool, or &fa__pool_empty_lp. */
static inline struct lpool *find_lp(const fa_pool *pool)
{
    if (FA_LIKELY(pool->id < FAST_SLOTS))
        return fa__pool_lp[pool->id];
    return fa__pool_lp_more != NULL ? fa__pool_lp_more[pool->id] : &fa__pool_empty_lp;
}

/* Every object a get took came from a block or a put, and is in the cache
 * no more. */
static inline uint64_t lp_gets(const struct lpool *lp)
{
    return lp->taken - lp->spilled + lp->puts - lp->n;
}

/* local.c.  fa__pool_place files a block that is in no list (and may
 * hand it over); fa__pool_spill gives all but the `keep` newest objects of
 * lp's cache back to their blocks; fa__pool_my_lp finds or creates the
 * calling thread's local pool (NULL when it cannot have one);
 * fa__pool_lp_retire empties a local pool into its global pool (grow
 * held); fa__pool_lp_drop also unlinks it and keeps it for reuse (registry
 * and grow held). */
void fa__pool_place(fa_pool *pool, struct lpool *lp, struct block *b) FA_HIDDEN;
void fa__pool_spill(fa_pool *pool, struct lpool *lp, size_t keep) FA_HIDDEN;
struct lpool *fa__pool_my_lp(fa_pool *pool) FA_HIDDEN;
void fa__pool_lp_retire(fa_pool *pool, struct lpool *lp) FA_HIDDEN;
void fa__pool_lp_drop(fa_pool *pool, struct lpool *lp) FA_HIDDEN;

#endif
