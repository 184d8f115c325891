/* The page heap's internals: what its files share, and only they (the rest
 * of the allocator uses pageheap.h).
 *
 * The files, from the bottom up; each calls only the ones before it, so no
 * two call each other:
 *   spans.c    the heap's state and its lock; span records; the free lists
 *              (by length) and the dirty list (by age); coalescing; init,
 *              statistics and the lock for fork
 *   grow.c     growth from the OS (the reserve above the heap's top) and
 *              the memory limit
 *   reclaim.c  the purge mechanism: dirty spans back to the OS, at a free,
 *              on a timed look, when forced, at thread exit
 *   pageheap.c the entry points that hand spans out and take them back:
 *              allocation (best fit, alignment, splitting), free, resize
 * grow.c and reclaim.c do not call each other.
 *
 * Every function here wants the heap's lock held, unless it says otherwise. */
#ifndef FA_PAGEHEAP_HEAP_INT_H
#define FA_PAGEHEAP_HEAP_INT_H

#include "04-pageheap/pageheap.h"

#define EXACT_LISTS 128 /* free spans of 1..128 pages have a list each */

/* One lock guards the page heap (spans.c says why one is enough). */
extern fa__lock_t fa__ph_lock FA_HIDDEN;

/* The state more than one file reads or writes; what one file alone uses
 * is static in that file. */
struct fa__ph_state {
    struct fa__list exact[EXACT_LISTS + 1]; /* free spans by length, [0] unused */
    struct fa__list big;                    /* free spans > EXACT_LISTS pages */
    struct fa__list spare;                  /* recycled span records */
    struct fa__list dirty;                  /* dirty spans (dlink), oldest first */
    /* Spans off the lists while a thread madvises them without the lock
     * (reclaim.c): an allocation that finds nothing while pages are in
     * flight waits for them instead of mapping more (each growth is up to
     * 64 MiB, and under preemption a purge can stay in flight long enough
     * for several). */
    size_t purging_pages;
    struct fa__ph_stats st;
};
extern struct fa__ph_state fa__ph FA_HIDDEN;

/* A free span's dirty pages (those that may be resident) are its first
 * ndirty pages: coalescing keeps them so (fa__ph_coalesce_insert), and a
 * span is always cut from its low end, so resident pages go out before
 * clean ones.  The first npages pages of s hold this many of them. */
static inline uint32_t dirty_part(uint32_t ndirty, size_t npages)
{
    return ndirty < npages ? ndirty : (uint32_t)npages;
}

/* The first npages pages of free span s (off the lists) are cut off: the
 * dirty pages left to the rest. */
static inline void dirty_cut(struct fa__span *s, size_t npages)
{
    s->ndirty -= dirty_part(s->ndirty, npages);
    s->dirty = s->ndirty > 0;
}

static inline size_t in_use(void)
{
    return fa__ph.st.small_bytes + fa__ph.st.large_bytes;
}

/* ---- spans.c ---- */

/* A blank span record (NULL without memory for one); one no longer used. */
struct fa__span *fa__ph_span_new(void) FA_HIDDEN;
void fa__ph_span_delete(struct fa__span *s) FA_HIDDEN;
/* A free span onto its lists, its ends published in the page map; and off
 * them again. */
void fa__ph_insert_free(struct fa__span *s) FA_HIDDEN;
void fa__ph_remove_free(struct fa__span *s) FA_HIDDEN;
/* A free span purged where it lies goes to the end of its list, behind
 * the dirty ones (find_free, pageheap.c). */
void fa__ph_requeue_clean(struct fa__span *s) FA_HIDDEN;
/* Off the dirty list (the span stays on its free list). */
void fa__ph_dirty_del(struct fa__span *s) FA_HIDDEN;
/* The free span that covers page_addr, or NULL. */
struct fa__span *fa__ph_free_neighbour(uintptr_t page_addr) FA_HIDDEN;
/* Merge s (not on any list) with its free neighbours and insert it. */
void fa__ph_coalesce_insert(struct fa__span *s) FA_HIDDEN;

/* ---- grow.c ---- */

/* Grow the heap so that a span of npages pages is free. */
bool fa__ph_grow(size_t npages) FA_HIDDEN;
/* Pages [lo, hi) are handed out: make them read-write if the hardened
 * build's growth left them without access.  false: the OS refused. */
bool fa__ph_commit_to(uintptr_t lo, uintptr_t hi) FA_HIDDEN;
/* Would taking npages pages out of span s break the memory limit? */
bool fa__ph_over_limit(const struct fa__span *s, size_t npages) FA_HIDDEN;

/* ---- reclaim.c ---- */

/* Give s's pages back to the OS (with huge pages on, only the whole huge
 * pages inside it); returns the bytes given.  Touches no shared structure:
 * callers may run it without the lock on a span no list holds. */
size_t fa__ph_release_pages(struct fa__span *s) FA_HIDDEN;

/* Drops the lock and takes it again, after at least one batch of spans in
 * flight to the OS has come back. */
void fa__ph_wait_for_purge(void) FA_HIDDEN;
/* Purge, oldest first, until dirty memory is at most down_to bytes. */
void fa__ph_purge_down_to(size_t down_to) FA_HIDDEN;
/* Purge every dirty span; returns bytes purged. */
size_t fa__ph_purge_all_locked(void) FA_HIDDEN;
/* The timed part of decay, amortized on page-heap calls. */
void fa__ph_decay_tick_locked(void) FA_HIDDEN;

#endif
