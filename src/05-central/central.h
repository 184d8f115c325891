/* Central cache: one per size class, shared by all threads, guarded by one
 * lock per class.  It holds the spans of its class that no thread owns and
 * that have free blocks: spans a thread gave up (it exited, or trimmed), and
 * the spans it hands to a thread that needs one.  Spans move between it and
 * the thread caches whole, so a thread takes the lock once per span, not per
 * block. */
#ifndef FA_CENTRAL_CENTRAL_H
#define FA_CENTRAL_CENTRAL_H

#include "00-base/config.h"

struct fa__span;

/* A span of class cls with free blocks for the calling thread to own: the
 * fullest the central cache has (its blocks are the ones least likely to
 * all come free), else a new span from the page heap.  NULL when the OS has
 * no more memory.  The span is unlisted and unowned; its freelist and xfree
 * are the taker's to collect. */
struct fa__span *fa__central_take(unsigned cls) FA_HIDDEN;

/* A span no thread owns any more, with blocks in use or free: the central
 * cache lists it, or gives it to the page heap when every block is free. */
void fa__central_put(struct fa__span *s) FA_HIDDEN;
/* The same, with a list of its blocks that were in use until now. */
void fa__central_put_list(struct fa__span *s, void *head) FA_HIDDEN;

/* A span whose every block is free and that no one owns or lists: to the
 * page heap. */
void fa__central_retire(struct fa__span *s) FA_HIDDEN;

/* The list head..tail of n blocks of s, freed by threads that do not own
 * it, goes on its freelist under the class lock, when the central cache
 * lists s (FA_XFREE_LISTED); a span whose every block is then free goes to
 * the page heap.  False when s is no longer listed: the blocks go on its
 * xfree instead. */
bool fa__central_free_list(struct fa__span *s, void *head, void *tail, uint32_t n) FA_HIDDEN;

/* One block of class cls for a thread that has no cache (it is exiting): cut
 * from a central span under the class lock.  NULL when out of memory. */
void *fa__central_alloc_one(unsigned cls) FA_HIDDEN;

/* Collect the blocks other threads freed into the listed spans, and give
 * the spans that are all free to the page heap. */
void fa__central_drain(void) FA_HIDDEN;

/* Bytes of free blocks in the spans the central caches list (as of their
 * last collection). */
size_t fa__central_free_bytes(void) FA_HIDDEN;

/* For fork: take and drop every class lock in order. */
void fa__central_lock_all(void) FA_HIDDEN;
void fa__central_unlock_all(void) FA_HIDDEN;

#endif
