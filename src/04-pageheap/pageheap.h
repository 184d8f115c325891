/* Page heap: runs of pages ("spans") taken from the OS, split on demand and
 * coalesced with free neighbours when they come back. */
#ifndef FA_PAGEHEAP_H
#define FA_PAGEHEAP_H

#include "00-base/lock.h"
#include "02-records/sizeclass.h"

/* FA_SPAN_CACHED: a freed large block kept by the thread that freed it
 * (08-tcache/tcache.c); still in use for the page heap, freed for everyone else. */
enum { FA_SPAN_FREE = 0, FA_SPAN_SMALL = 1, FA_SPAN_LARGE = 2, FA_SPAN_PURGING = 3, FA_SPAN_CACHED = 4 };

/* Where a small span's record is linked: nowhere (a full span, detached),
 * on a central cache's list, or on its owner thread's list of the class. */
enum { FA_LISTED_NONE = 0, FA_LISTED_CENTRAL = 1, FA_LISTED_THREAD = 2 };

/* Low bit of xfree: the span is full and no thread owns it; the next free
 * of one of its blocks takes it (08-tcache/tcache.c). */
#define FA_XFREE_DETACHED ((uintptr_t)1)

struct fa__span {
    uintptr_t start;  /* first byte, page aligned */
    struct fa__span *next, *prev; /* in a page-heap free list or a central list */
    uint32_t npages;
    uint32_t used;    /* small spans: blocks carved and not on freelist (live,
                         in the owner's heads[], or on xfree) */
    uint8_t state;    /* FA_SPAN_* */
    uint8_t cls;
    uint8_t zeroed;   /* every byte is known to be zero (fresh or purged) */
    uint8_t listed;   /* small spans: FA_LISTED_* (where the record is linked) */
    uint8_t dirty;    /* free, with pages that may be resident: to purge */
    uint8_t kept;     /* small spans: every block free, counted in its owner's
                         kept bytes (08-tcache/tcache.c) */
    uint8_t full_seen; /* small spans: its owner found it full once */
    /* A span is either in use or free, never both: the fields of each state
     * share memory, which keeps the record at one cache line (each is
     * allocated with an empty line after it: span_new, 04-pageheap/pageheap.c). */
    union {
        struct { /* small spans in use (the protocol: 08-tcache/tcache.c) */
            /* Blocks freed by the span's owner, or, for a span nobody owns,
             * blocks free under the central cache's class lock. */
            void *freelist;
            /* Blocks freed by other threads: a list pushed with one
             * compare-and-swap, its low bit FA_XFREE_DETACHED. */
            uintptr_t xfree;
            /* Blocks cut from the span so far: the rest is cut lazily, so
             * that a new span touches no page it does not hand out.  A
             * class has at most 65,535 blocks a span (sizeclass.c). */
            uint16_t carved;
            /* Blocks on freelist that the owner's statistics must not count
             * as its frees when it takes the list: blocks its slow paths
             * put back (from heads[], from xfree) and blocks already there
             * when it took the span.  The rest of the list is the owner's
             * own frees, which the free fast path does not count (tcache.c,
             * fold).  At most the list's length. */
            uint16_t nonuser;
            uint32_t touched; /* scavenge epoch when last allocated from */
        };
        struct { /* dirty free spans */
            /* ms, the low 32 bits of fa__now_ms(): ages are compared by
             * unsigned difference, exact for 49 days (03-purge/purge.c). */
            uint32_t free_since;
            /* Pages that may be resident, at most npages.  A freed span
             * merges with clean free space around it; counting the merged
             * span whole as dirty made the heap purge the same clean pages
             * again and again. */
            uint32_t ndirty;
            struct fa__span *dnext, *dprev; /* list of dirty free spans */
        };
    };
};

void fa__ph_init(void) FA_HIDDEN;
void fa__ph_after_fork_child(void) FA_HIDDEN;

/* A span of npages pages whose start is aligned to align_pages pages (1 for
 * none), mapped in the page map to itself with size class cls.  NULL when the
 * OS has no more memory. */
struct fa__span *fa__ph_alloc(size_t npages, size_t align_pages, unsigned state, unsigned cls) FA_HIDDEN;

/* Give a span back; it is coalesced with free neighbours. */
void fa__ph_free(struct fa__span *s) FA_HIDDEN;

/* Resize an in-use large span in place to npages.  Shrinking always works;
 * growing works when the pages after it are free.  Returns success. */
bool fa__ph_resize(struct fa__span *s, size_t npages) FA_HIDDEN;

struct fa__ph_stats {
    size_t mapped_bytes; /* grown into: the reserve above the top not counted */
    size_t free_bytes;   /* in free spans */
    size_t dirty_bytes;  /* in free spans not purged yet */
    size_t purged_bytes; /* given back to the OS so far, in total */
    uint64_t purges;     /* madvise calls */
    size_t large_bytes;  /* in use by large blocks */
    size_t small_bytes;  /* in spans cut into small blocks */
    size_t peak_used_bytes; /* the most of large_bytes + small_bytes at once */
    uint32_t spans[FA_NUM_CLASSES]; /* spans of each size class in use */
};
void fa__ph_get_stats(struct fa__ph_stats *st) FA_HIDDEN;

/* Purge free spans that have been free for the purge delay (all of them when
 * force is set).  Takes the lock; returns bytes purged. */
size_t fa__ph_purge(bool force) FA_HIDDEN;

/* A thread exited: purge as the policy says for that event. */
void fa__ph_shed(bool replaced) FA_HIDDEN;

/* For fork: take and drop the page heap's lock. */
void fa__ph_lock_for_fork(void) FA_HIDDEN;
void fa__ph_unlock_for_fork(void) FA_HIDDEN;

#endif
