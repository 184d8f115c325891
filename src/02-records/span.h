/* Spans: runs of pages, each with one record.  The page heap hands them out
 * and takes them back (04-pageheap); a span cut into blocks of one size
 * class (a small span) then changes hands between thread caches and the
 * central cache by the protocol below, whose primitives live here
 * (span.c), so that every layer above takes and gives spans the same way.
 *
 * A small span is, at any time, in one of three states:
 *  - owned by one thread: the page map names its cache as the owner of the
 *    span's pages; the span is on that cache's list of its class; its
 *    freelist and used are that thread's alone;
 *  - listed by the central cache: no owner; freelist and used belong to
 *    whoever holds the class lock; xfree carries FA_XFREE_LISTED, and
 *    other threads' frees go on freelist under that lock;
 *  - detached: no owner, on no list, every block live or on xfree; its
 *    xfree has the FA_XFREE_DETACHED bit.
 * Any thread may push a block on any span's xfree, with one
 * compare-and-swap.  A thread whose free finds the detached bit takes the
 * span instead, clearing the word with that compare-and-swap: the span
 * becomes its own, and the block goes on its freelist; a thread that
 * allocates nothing of the class gives it to the central cache instead
 * (08-tcache/remote.c).  An owner gives a
 * span up by clearing the page map first and then, for a full span, setting
 * the detached bit on an empty xfree (fa__span_detach); if a block arrived
 * in between, the owner keeps the span.  Blocks on xfree stay counted in
 * used until the owner collects them (fa__span_collect).  These are the
 * only ways a span changes hands; a span whose blocks are all free is never
 * on xfree's side of that race, since used counts xfree. */
#ifndef FA_RECORDS_SPAN_H
#define FA_RECORDS_SPAN_H

#include "00-base/config.h"
#include "00-base/list.h"
#include "02-records/sizeclass.h"

/* FA_SPAN_CACHED: a freed large block that a thread keeps for its next
 * large allocation (06-large); still in use for the page heap, freed for
 * everyone else. */
enum { FA_SPAN_FREE = 0, FA_SPAN_SMALL = 1, FA_SPAN_LARGE = 2, FA_SPAN_PURGING = 3, FA_SPAN_CACHED = 4 };

/* Where a small span's record is linked: nowhere (a full span, detached),
 * on a central cache's list, or on its owner thread's list of the class. */
enum { FA_LISTED_NONE = 0, FA_LISTED_CENTRAL = 1, FA_LISTED_THREAD = 2 };

/* A small span's marks, which only its owner reads and writes, and which
 * a new owner clears, and all but FA_SPAN_SHARED when the span is all
 * free and kept (08-tcache):
 *  - FA_SPAN_SEEN_FULL: the owner found it full once; a walk that finds it
 *    full again may detach it;
 *  - FA_SPAN_SHARED: threads that allocate its class freed blocks into it
 *    since the owner took it (the owner collected an xfree list with
 *    FA_XFREE_PEER), or the owner took it from another thread, and the
 *    owner shares the class (08-tcache/own.c, fa__tc_shares: the spans of
 *    it that it detached went to other threads); it is detached the moment
 *    it is full, so that a thread that frees its blocks takes it, and
 *    allocates from it what it freed;
 *  - FA_SPAN_RETAKEN: the owner detached it full, and took it back itself
 *    with a free of its own: a thread that frees and allocates its own
 *    blocks at random; a walk keeps it while the thread has few spans of
 *    the class (08-tcache/slow.c). */
enum { FA_SPAN_SEEN_FULL = 1, FA_SPAN_SHARED = 2, FA_SPAN_RETAKEN = 4 };

/* Low bit of xfree: the span is full and no thread owns it; the next free
 * of one of its blocks takes it.  The other bits name the thread cache that
 * gave it up (none for the central cache): a thread that takes back a span
 * it gave up is freeing its own blocks, one that takes another's is not
 * (FA_SPAN_SHARED). */
#define FA_XFREE_DETACHED ((uintptr_t)1)
/* Second bit of a list on xfree: a thread that allocates the span's class
 * (it has a current span of it) pushed blocks on it.  Its owner marks the
 * span FA_SPAN_SHARED when it collects such a list, if it shares the
 * class, and so detaches it the moment it is full, for that thread to
 * take; blocks freed by threads that allocate nothing of the class
 * (consumers) leave the span its owner's (#53). */
#define FA_XFREE_PEER ((uintptr_t)2)
/* Third bit: the central cache lists the span.  A free that finds it puts
 * its blocks on the span's freelist under the class lock instead
 * (fa__central_free_list), so that the central cache counts them, and a
 * span whose last block comes back goes to the page heap at once, for any
 * class.  Only a holder of the class lock sets or clears it (05-central). */
#define FA_XFREE_LISTED ((uintptr_t)4)
/* The blocks of an xfree word that holds a list. */
#define FA_XFREE_LIST(x) ((void *)((x) & ~(FA_XFREE_DETACHED | FA_XFREE_PEER | FA_XFREE_LISTED)))

struct fa__span {
    uintptr_t start;  /* first byte, page aligned */
    /* In a page-heap free list, a central list or its owner's list. */
    struct fa__list link;
    uint32_t npages;
    /* Small spans: blocks carved and not on freelist (live, in the owner's
     * heads[], or on xfree).  The owner's current span counts one more
     * (08-tcache), so that a free never finds it all free. */
    uint32_t used;
    uint8_t state;    /* FA_SPAN_* */
    uint8_t cls;
    uint8_t zeroed;   /* every byte is known to be zero (fresh or purged) */
    uint8_t listed;   /* small spans: FA_LISTED_* (where the record is linked) */
    uint8_t dirty;    /* free, with pages that may be resident: to purge */
    uint8_t kept;     /* small spans: every block free, counted in its owner's
                         kept bytes (08-tcache) */
    uint8_t marks;     /* small spans: FA_SPAN_SEEN_FULL, FA_SPAN_SHARED, its owner's */
    uint8_t sampled;   /* large blocks: a sample of the heap profile (09-diag/profile.c),
                          which clears it before the block is freed */
    /* A span is either in use or free, never both: the fields of each state
     * share memory, which keeps the record at one cache line (each is
     * allocated with an empty line after it: fa__ph_span_new, 04-pageheap/spans.c). */
    union {
        /* Large blocks of the hardened build: the bytes asked for, below
         * the canary (06-large/large.c). */
        size_t asked;
        struct { /* small spans in use (the protocol above) */
            /* Blocks freed by the span's owner, or, for a span nobody owns,
             * blocks free under the central cache's class lock. */
            void *freelist;
            /* Blocks freed by other threads: a list pushed with one
             * compare-and-swap, its low bit FA_XFREE_DETACHED. */
            uintptr_t xfree;
            /* Blocks cut from the span so far: the rest is cut lazily
             * (fa__span_carve), so that a new span touches no page it does
             * not hand out.  A class has at most 65,535 blocks a span
             * (sizeclass.c). */
            uint16_t carved;
            /* Blocks on freelist that the owner's statistics must not count
             * as its frees when it takes the list: blocks its slow paths
             * put back (from heads[], from xfree) and blocks already there
             * when it took the span.  The rest of the list is the owner's
             * own frees, which the free fast path does not count (08-tcache,
             * fold).  At most the list's length. */
            uint16_t nonuser;
            uint32_t touched; /* scavenge epoch when last allocated from */
        };
        struct { /* dirty free spans */
            /* ms, the low 32 bits of fa__now_ms(): ages are compared by
             * unsigned difference, exact for 49 days (03-purge). */
            uint32_t free_since;
            /* Pages that may be resident, at most npages.  A freed span
             * merges with clean free space around it; counting the merged
             * span whole as dirty made the heap purge the same clean pages
             * again and again. */
            uint32_t ndirty;
            struct fa__list dlink; /* in the list of dirty free spans */
        };
    };
    /* The record's second line (records come in pairs of lines, the
     * second empty, 04-pageheap/spans.c): what is written once, when a
     * span is cut for a class, and read at every free.  Small spans:
     * 2^64 / the class's size, rounded up: an offset n into the span (below
     * 2^32) is a block's start exactly when n * blockdiv, modulo 2^64, is
     * below blockdiv (Lemire, Kaser and Kurz, "Faster remainder by direct
     * computation", 2019): the default build's test of every free, a
     * multiply and a compare where the quotient would be two multiplies.
     * blocklim holds the same value: read from a field of its own, the
     * compare takes it from memory, where one field would be loaded into a
     * register first, an instruction more on the free path.  blockstart is
     * start again, so that the test reads this line alone and not the
     * first, which the span's owner writes at every free: another
     * thread's free that read it too slowed both. */
    uint64_t blockdiv __attribute__((aligned(64)));
    uint64_t blocklim;
    uintptr_t blockstart;
    /* Small spans of at most FA_SPAN_FRESH_OBJS blocks: bit i set says
     * that block i was cut from pages known zero and no list of the span's
     * was taken since, so that it was never handed out twice: calloc need
     * not clear it (12-api/alloc.c).  Written at a cut and when a list is
     * taken, by whoever may take the span's lists; calloc reads it for a
     * block it holds, and a bit can only be cleared under it meanwhile. */
    uint8_t fresh;
};

/* Spans of at most this many blocks (classes of 4 KiB and up) keep fresh:
 * a calloc of 4 KiB or more, which would clear pages the program may never
 * touch, skips them where they are known zero. */
#define FA_SPAN_FRESH_OBJS 8u

/* A list of s's blocks (its freelist, or its xfree) is taken to be handed
 * out again: none of s's blocks cut so far is fresh any longer.  A load
 * and a branch for spans of small blocks, whose fresh stays 0. */
FA_INLINE void fa__span_reused(struct fa__span *s)
{
    if (FA_UNLIKELY(__atomic_load_n(&s->fresh, __ATOMIC_RELAXED) != 0))
        __atomic_store_n(&s->fresh, 0, __ATOMIC_RELAXED);
}

/* Whether a, in the small span s, is a block's start. */
FA_INLINE bool fa__span_at_block(const struct fa__span *s, uintptr_t a)
{
    return (a - s->blockstart) * s->blockdiv < s->blocklim;
}

/* The blockdiv of blocks of size bytes (above). */
FA_INLINE uint64_t fa__span_blockdiv(size_t size)
{
    return UINT64_MAX / size + 1;
}

/* The span whose link (or dlink) is the node n. */
FA_INLINE struct fa__span *fa__span_of(struct fa__list *n)
{
    return fa__list_entry(n, struct fa__span, link);
}

FA_INLINE struct fa__span *fa__span_of_dirty(struct fa__list *n)
{
    return fa__list_entry(n, struct fa__span, dlink);
}

/* The first span on the list h, and the one after s on it: NULL past the
 * end.  The next span is read before s leaves the list, so a walk may take
 * s off. */
FA_INLINE struct fa__span *fa__span_first(struct fa__list *h)
{
    return h->next == h ? NULL : fa__span_of(h->next);
}

FA_INLINE struct fa__span *fa__span_after(struct fa__list *h, const struct fa__span *s)
{
    return s->link.next == h ? NULL : fa__span_of(s->link.next);
}

/* The index in the small span s of the block that holds a. */
FA_INLINE uint64_t fa__span_block_index(const struct fa__span *s, uintptr_t a)
{
    return ((a - s->start) * fa__classes[s->cls].recip) >> 42;
}

/* Whether the block at a, of the small span s, which the caller was just
 * handed, holds zeros past its first two words (the link and the free
 * mark): fresh (above). */
FA_INLINE bool fa__span_fresh(const struct fa__span *s, uintptr_t a)
{
    return (__atomic_load_n(&s->fresh, __ATOMIC_RELAXED) >> fa__span_block_index(s, a)) & 1;
}

/* Whether a is the start of a block of s that has been cut (the hardened
 * build's check of every free).  Any thread's free asks, while the owner
 * may be cutting more (fa__span_carve stores carved atomically): a block
 * that was handed out was cut before, so an older count still covers it. */
FA_INLINE bool fa__span_block_start(const struct fa__span *s, uintptr_t a)
{
    uint64_t q = fa__span_block_index(s, a);
    return q * fa__classes[s->cls].size == a - s->start && q < __atomic_load_n(&s->carved, __ATOMIC_RELAXED);
}

/* The most blocks one fa__span_carve cuts. */
#define FA_SPAN_CARVE_MAX 256u

/* Cut up to n fresh blocks off s (at most FA_SPAN_CARVE_MAX, at least one
 * must be left), linked and followed by tail; returns the first.  They
 * count in used.  Each is marked free (02-records/freelist.h): a free of a
 * block that was never handed out is a double free.  In the hardened
 * build, with its options, they are zeroed (`secure_zero`) and linked in
 * a random order (`secure_shuffle`). */
void *fa__span_carve(struct fa__span *s, uint32_t n, void *tail) FA_HIDDEN;

/* Move the blocks on a span's xfree list to its freelist and count them
 * out of used; the caller owns the span or holds its class's lock.  Returns
 * how many moved; *peer (unless NULL) says whether a thread that allocates
 * the class pushed some (FA_XFREE_PEER). */
unsigned fa__span_collect(struct fa__span *s, bool *peer) FA_HIDDEN;
/* The same for a list taken off xfree already. */
unsigned fa__span_absorb(struct fa__span *s, void *head) FA_HIDDEN;

/* Set the detached bit on s's xfree if it is empty: s, which nobody owns
 * now and whose every block is live, goes to the next thread that frees
 * into it.  False when a block arrived on xfree first: the caller keeps s. */
bool fa__span_detach(struct fa__span *s, const void *by) FA_HIDDEN;

#endif
