/* Thread cache: the spans a thread owns, per size class, and the slow paths
 * behind the inlined fast paths.  The fast path of malloc (12-api/fastpath.h)
 * touches only heads[] of the calling thread's cache; the fast path of free
 * touches the page map and the block's span.  The layer's files, from the
 * bottom (internal.h says what each holds): claim.c, own.c, remote.c,
 * seen.c, life.c, slow.c. */
#ifndef FA_TCACHE_TCACHE_H
#define FA_TCACHE_TCACHE_H

#include "02-records/freelist.h"
#include "02-records/sizeclass.h"
#include "02-records/span.h"
#include "06-large/large.h"

/* The span length of every class up to 4 KiB (02-records/sizeclass.c):
 * an all-free span of this length is a spare of its thread's, which the
 * next span of any such class is cut from. */
#define FA_SPARE_PAGES 4u

/* Remote frees wait in a thread's outbox, one span per class, until a
 * batch is full (either bound), the slot is needed for another span, all
 * batches together pass FA_TC_OUTBOX_ALL, or the thread scavenges, trims
 * or exits.  What waits there is memory its owner cannot reuse, and cuts
 * fresh blocks for instead: a consumer of many classes held up to the
 * whole bound (#39: 256 KiB took prodcons-4+4, 16..512 B, to 4.2 MiB of
 * peak RSS, 128 KiB to 3.5; no time change beyond the rows' spread). */
#define FA_TC_OUTBOX_ALL ((size_t)128 << 10)
#define FA_TC_OUTBOX_BLOCKS 64
#define FA_TC_OUTBOX_BYTES ((uint32_t)64 << 10)
struct fa__outbox {
    struct fa__span *s; /* NULL: empty */
    void *head, *tail;
    uint32_t n, bytes;
};

/* A thread's cache is the spans it owns, per class.  One of them, cur[cls],
 * is the one it allocates from: heads[cls] is a list of that span's free
 * blocks (after a gather, of a few of the thread's spans: slow.c), which
 * malloc pops.  A free of a block whose span the thread owns
 * pushes it on that span's own freelist (12-api/fastpath.h); any other free is
 * a remote one and goes to the span's xfree list.  When heads[cls] runs
 * dry, the slow path takes cur's freelist whole, then its xfree, then cuts
 * fresh blocks, and only then moves to another span.  So blocks are handed
 * out span by span, in whatever order they were freed, and a program that
 * frees in random order still allocates within one span at a time. */
/* What a thread did, counted where it happens and summed when read
 * (10-stats/stats.c), with no atomics: each counter has one writer. */
struct fa__tc_counts {
    uint64_t allocs[FA_NUM_CLASSES]; /* small blocks handed out (malloc's fast path counts) */
    /* Small blocks freed: a remote free at once; a free of a block of the
     * thread's own span when the thread takes the span's freelist (fold,
     * own.c): the free fast path counts nothing. */
    uint64_t frees[FA_NUM_CLASSES];
    uint64_t slow[FA_NUM_CLASSES];   /* allocations that left the fast path */
    /* Large blocks, in calls and bytes (a block's bytes are its pages). */
    uint64_t large_allocs, large_frees, large_alloc_bytes, large_free_bytes;
};

struct fa__tcache {
    /* --- read and written by the fast paths: at offset 0, so that malloc
     * indexes it without an add --- */
    void *heads[FA_NUM_CLASSES];
#if FA_SECURE
    /* fa__classes[].size, for the hardened malloc's tail: read as heads[]
     * is, where the table costs a lea and a shift more. */
    uint32_t bsize[FA_NUM_CLASSES];
    /* The block the thread freed last into a span of its own, or into
     * its batch of remote frees: a refill does not hand it out first
     * (fa__tc_not_last). */
    void *last_free;
#endif
    /* FA_TC_*: beside heads[], so that a stand-in's slow path reads the
     * same page as its fast path (life.c). */
    uint8_t kind;
    struct fa__tc_counts n;
    /* --- slow paths only --- */
    struct fa__span *cur[FA_NUM_CLASSES];
    /* The spans this thread owns, per class (cur among them), linked
     * through their link; newest first. */
    struct fa__list spans[FA_NUM_CLASSES];
    uint32_t nspans[FA_NUM_CLASSES]; /* length of each spans[] list */
    /* Detached spans of each class taken at frees since the class's last
     * collection (own.c, fa__tc_took). */
    uint32_t taken[FA_NUM_CLASSES];
    /* Spans of each class the thread detached full, and those of them it
     * took back itself with a free of its own, halved together as they
     * grow; and a count that samples sharing where they say no (own.c,
     * fa__tc_shares). */
    uint16_t detached[FA_NUM_CLASSES], retaken[FA_NUM_CLASSES];
    uint8_t sample[FA_NUM_CLASSES];
    void *snap[FA_NUM_CLASSES]; /* heads at the last scavenge */
    struct fa__outbox out[FA_NUM_CLASSES];
    size_t out_bytes;  /* in all batches */
    /* Bytes of owned spans whose every block is free (span->kept): what the
     * thread holds that nobody uses.  Within max_bytes, this cache's claim
     * on the global bound, which is within its share of it. */
    size_t kept_bytes;
    size_t max_bytes;
    /* All-free spans of FA_SPARE_PAGES pages, of any class, linked through
     * their link (newest first), counted in kept_bytes: the next such span
     * of any class is cut from one of these (own.c, fa__tc_spare_take). */
    struct fa__list spare;
    unsigned epoch;    /* scavenge epoch this cache last saw */
    /* Large blocks this thread freed, kept for its next large allocations
     * (06-large/large.h).  They have a share of their own (claim.c,
     * fa__tc_large_share), and no claim on the global bound. */
    struct fa__large_cache large;
    struct fa__tcache *next, *prev; /* registry of live caches */
} FA_ALIGNED_CL;

/* A stand-in (life.c) is all zero: kind 0. */
enum { FA_TC_STANDIN = 0, FA_TC_REAL = 1 };

/* The calling thread's cache.  It starts at a shared, permanently empty
 * cache, so a thread's first malloc or free falls into the slow path with no
 * separate "initialised?" test on the fast path. */
extern __thread struct fa__tcache *fa__tls_cache
    __attribute__((tls_model("initial-exec"))) FA_HIDDEN;

/* Slow paths.  Allocation: heads[] was empty, or the thread has no cache;
 * it expects the allocator initialised (the api layer sees to it).  Free: p
 * is not in a span the thread owns (a remote free, a large block, NULL, a
 * pointer that is not the allocator's, or no cache yet); a block that is
 * not small goes to the large-block layer, which stops the program on a
 * pointer that is no block's start.
 * Span empty: a free made every block of s, which the calling thread owns,
 * free. */
void *fa__tc_alloc_slow(size_t size) FA_HIDDEN;
/* A list of n blocks, p first, that is the block freed last alone: the
 * hardened build cuts fresh blocks ahead of it while the span has some. */
#if FA_SECURE
#define FA_TC_LAST_ALONE(tc, p, n) ((n) == 1 && (p) == (tc)->last_free)
#else
#define FA_TC_LAST_ALONE(tc, p, n) false
#endif
/* p, the first block of a refill of heads[cls] (taken off it), or the
 * next one if p is the block the thread freed last and heads[cls] has
 * another (then p goes back on, second): in the hardened build, malloc,
 * free and malloc of a size get two blocks, not one, wherever the refill
 * found the freed block (on top of its span's list, the block pushed
 * last).  A list that holds that block alone is not taken here: the slow
 * path cuts fresh blocks ahead of it, or takes another block from another
 * span (slow.c).  The hardened build used to cut every span to its end
 * before it handed out a freed block of it, which held twice the default
 * build's memory where 4 threads replace random blocks of 8 B to 32 KiB
 * (threads-random-small-4t: 9.5 MiB at its peak, 4.7), and let a block
 * freed alone on a span cut to its end come back at once. */
FA_INLINE void *fa__tc_not_last(struct fa__tcache *tc, unsigned cls, void *p)
{
#if FA_SECURE
    void *q = tc->heads[cls];
    if (FA_UNLIKELY(p == tc->last_free) && q != NULL) {
        fa__fl_set_next(p, fa__fl_next(q));
        tc->heads[cls] = p;
        return q;
    }
#else
    (void)tc;
    (void)cls;
#endif
    return p;
}

/* The short way out of an empty heads[cls]: the current span's freelist,
 * taken whole, which a loop that frees and allocates again needs once per
 * turn of the span.  The list's blocks leave used's complement, so used
 * becomes carved (plus the current span's one) without reading the list.
 * NULL when there is none, or no cache: take the slow path. */
FA_INLINE void *fa__tc_refill(unsigned cls)
{
    struct fa__tcache *tc = fa__tls_cache;
    struct fa__span *s = tc->cur[cls];
    if (s == NULL)
        return NULL;
    void *p = s->freelist;
    /* A short list on a span still being cut: the slow path cuts more
     * ahead of it, so that a loop with a window of live blocks does not come
     * back here at every allocation (used counts the current span's one). */
    uint32_t carved = s->carved;
    const struct fa__class_info *ci = &fa__classes[cls];
    uint32_t n = carved + 1 - s->used;
    if (p == NULL || FA_TC_LAST_ALONE(tc, p, n) || (n < ci->carve_min && carved < ci->objs))
        return NULL;
    /* The list's blocks, but those the slow paths put there, are the
     * thread's own frees: counted now (own.c, fold). */
    FA_COUNT_ADD(tc->n.frees[cls], carved + 1 - s->used - s->nonuser);
    s->nonuser = 0;
    s->freelist = NULL;
    fa__span_reused(s);
    s->used = carved + 1;
    FA_COUNT_ADD(tc->n.allocs[cls], 1);
    tc->heads[cls] = fa__fl_next_of(p, cls);
    return fa__tc_not_last(tc, cls, p);
}
void fa__tc_free_slow(void *p) FA_HIDDEN;
/* Give the blocks of tc's heads[cls] from the n-th on (n = 0: all) back to
 * their spans, never handed out: the heap profile's cut (09-diag/profile.c). */
void fa__tc_heads_cut(struct fa__tcache *tc, unsigned cls, size_t n) FA_HIDDEN;
/* Stop the program with one line that names the call who ("free",
 * "realloc", "malloc_usable_size"): p, in the small span s, is not a block
 * handed out (fa__span_block_start said so). */
_Noreturn FA_COLD void fa__tc_bad_block(const void *p, const struct fa__span *s, const char *who) FA_HIDDEN;
#define fa__tc_free_bad(p, s) fa__tc_bad_block((p), (s), "free")
/* p, a block of a span the calling thread owns, carries its free mark
 * (02-records/freelist.h): stop the program if p is on a free list, else free it
 * as the fast path would. */
void fa__tc_free_marked(void *p) FA_HIDDEN;
void fa__tc_span_empty(struct fa__span *s) FA_HIDDEN;

/* Bytes held in all live thread caches (approximate while threads run):
 * their all-free spans and the large blocks they keep; and what they may
 * hold together (their claims on the global bound, and the large blocks). */
size_t fa__tc_cached_bytes(void) FA_HIDDEN;
/* Every thread's counts, summed: the threads that exited, and the live
 * ones (a live thread's frees of its own blocks count once it takes them
 * back from its spans; the calling thread's count at once). */
void fa__tc_sum_counts(struct fa__tc_counts *out) FA_HIDDEN;
/* Count a large block the calling thread allocated (alloc) or freed, of
 * bytes; a large free is counted by the thread cache's free path itself. */
void fa__tc_count_large(bool alloc, size_t bytes) FA_HIDDEN;
size_t fa__tc_claimed_bytes(void) FA_HIDDEN;
unsigned fa__tc_live_threads(void) FA_HIDDEN;

/* A large block: one the calling thread keeps, else one from the page heap
 * (06-large), counted.  Every large allocation comes here; every large free
 * goes through fa__tc_free_slow. */
void *fa__tc_alloc_large(size_t size, size_t align, bool zero) FA_HIDDEN;

/* A diagnostic mode is on (src/00-base/diag.h): the calling thread's cache,
 * if it has one, is hidden from the fast paths, which then miss on every
 * call; the slow paths go on using it (and show it again once the mode is
 * off).  Cheap when there is nothing to hide. */
void fa__tc_leave(void) FA_HIDDEN;

/* Give back everything the calling thread caches (fa_trim). */
void fa__tc_flush_mine(void) FA_HIDDEN;

/* For fork. */
void fa__tc_lock_registry(void) FA_HIDDEN;
void fa__tc_unlock_registry(void) FA_HIDDEN;

#endif
