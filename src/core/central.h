/* Central cache: one per size class, shared by all threads, guarded by one
 * lock per class.  Blocks move between it and the thread caches in batches,
 * as singly linked lists threaded through the blocks themselves. */
#ifndef FA_CENTRAL_H
#define FA_CENTRAL_H

#include "base/config.h"

void fa__central_init(void) FA_HIDDEN;

/* Take up to n blocks of class cls; returns how many, the list in *head.  0
 * means the OS has no more memory.  With whole set, a span's entire free list
 * may come instead, more than n blocks. */
unsigned fa__central_fetch(unsigned cls, void **head, unsigned n, bool whole) FA_HIDDEN;

/* Give back a list of n blocks of class cls (NULL-terminated).  A whole
 * batch is kept as it is for the next fetch unless to_spans is set. */
void fa__central_release(unsigned cls, void *head, unsigned n, bool to_spans) FA_HIDDEN;

/* Give the batches kept for fetches back to their spans: all of them, or
 * (idle_only) those that no fetch needed since the last call. */
void fa__central_drain(bool idle_only) FA_HIDDEN;

/* Bytes of free blocks held by the central caches. */
size_t fa__central_free_bytes(void) FA_HIDDEN;

/* For fork: take and drop every class lock in order. */
void fa__central_lock_all(void) FA_HIDDEN;
void fa__central_unlock_all(void) FA_HIDDEN;

#endif
