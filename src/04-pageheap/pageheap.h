/* Page heap: runs of pages ("spans") taken from the OS, split on demand and
 * coalesced with free neighbours when they come back. */
#ifndef FA_PAGEHEAP_PAGEHEAP_H
#define FA_PAGEHEAP_PAGEHEAP_H

#include "00-base/lock.h"
#include "02-records/sizeclass.h"
#include "02-records/span.h"

void fa__ph_init(void) FA_HIDDEN;
void fa__ph_after_fork_child(void) FA_HIDDEN;

/* A span of npages pages whose start is aligned to align_pages pages (1 for
 * none), mapped in the page map to itself with size class cls.  NULL when the
 * OS has no more memory. */
struct fa__span *fa__ph_alloc(size_t npages, size_t align_pages, unsigned state, unsigned cls) FA_HIDDEN;

/* Give a span back; it is coalesced with free neighbours. */
void fa__ph_free(struct fa__span *s) FA_HIDDEN;

/* The same for a span whose contents nobody needs again soon (a block that
 * realloc moved): its pages go back to the OS first, outside the lock, and
 * it comes back clean instead of waiting, dirty, for the purge policy. */
void fa__ph_free_released(struct fa__span *s) FA_HIDDEN;

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
/* small_bytes + large_bytes + dirty_bytes, read without the lock (a
 * moment's figure, for the statistics' peak sample). */
size_t fa__ph_resident_bytes(void) FA_HIDDEN;
/* s, a small span all of whose blocks are free, that its owner keeps,
 * becomes a span of class cls: the page map and the counts follow. */
void fa__ph_reclass(struct fa__span *s, unsigned cls) FA_HIDDEN;
/* Bytes of the heap's pages that are resident now (mincore; takes the lock
 * for a moment).  Less than fa__ph_resident_bytes when spans have pages
 * nobody touched yet. */
size_t fa__ph_heap_resident(void) FA_HIDDEN;

/* Purge free spans that have been free for the purge delay (all of them when
 * force is set).  Takes the lock; returns bytes purged. */
size_t fa__ph_purge(bool force) FA_HIDDEN;

/* A thread exited: purge as the policy says for that event. */
void fa__ph_shed(bool replaced) FA_HIDDEN;

/* For fork: take and drop the page heap's lock. */
void fa__ph_lock_for_fork(void) FA_HIDDEN;
void fa__ph_unlock_for_fork(void) FA_HIDDEN;

#endif
