/* Page heap: runs of pages ("spans") taken from the OS, split on demand and
 * coalesced with free neighbours when they come back. */
#ifndef FA_PAGEHEAP_H
#define FA_PAGEHEAP_H

#include "internal.h"

enum { FA_SPAN_FREE = 0, FA_SPAN_SMALL = 1, FA_SPAN_LARGE = 2 };

struct fa__span {
    uintptr_t start;  /* first byte, page aligned */
    size_t npages;
    struct fa__span *next, *prev; /* in a page-heap free list or a central list */
    /* Small spans only: blocks given back, and the never-used tail that is cut
     * into blocks lazily so that a new span touches no page it does not hand
     * out. */
    void *freelist;
    uintptr_t bump, limit;
    uint32_t used;    /* blocks out of the span (in thread caches or live) */
    uint8_t state;    /* FA_SPAN_* */
    uint8_t cls;
    uint8_t zeroed;   /* every byte is known to be zero (fresh from the OS) */
    uint8_t listed;   /* on a central cache's list of spans with free blocks */
};

void fa__ph_init(void) FA_HIDDEN;

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
    size_t mapped_bytes; /* taken from the OS */
    size_t free_bytes;   /* in free spans */
    size_t large_bytes;  /* in use by large blocks */
    size_t small_bytes;  /* in spans cut into small blocks */
};
void fa__ph_get_stats(struct fa__ph_stats *st) FA_HIDDEN;

extern fa__lock_t fa__ph_lock FA_HIDDEN;

#endif
