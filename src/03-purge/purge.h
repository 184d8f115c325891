/* Purge policy: when, and how much, the page heap gives dirty free pages
 * back to the OS.  The page heap owns the mechanism (which spans, madvise
 * outside its lock, coalescing); it asks these functions, with its lock
 * held, at each event that may call for a purge.  They read the options
 * and the clock, and touch nothing else, so a new policy is this file. */
#ifndef FA_PURGE_PURGE_H
#define FA_PURGE_PURGE_H

#include "00-base/config.h"

/* "Purge nothing now." */
#define FA_PURGE_NONE SIZE_MAX

/* The policy keeps a little state of its own (the recent peak of the memory
 * in use), guarded by the page heap's lock: every function below is called
 * with it held. */

/* The memory in use just grew to in_use bytes. */
void fa__purge_note_use(size_t in_use) FA_HIDDEN;

/* A span was just freed: purge dirty memory down to the bytes returned, or
 * FA_PURGE_NONE.  in_use: bytes in spans in use; dirty: dirty free bytes. */
size_t fa__purge_after_free(size_t in_use, size_t dirty) FA_HIDDEN;

/* A thread exited: the same question.  replaced: a new thread came since
 * the exits just before (the policy then keeps what it held, unless use has
 * fallen). */
size_t fa__purge_at_exit(size_t in_use, size_t dirty, bool replaced) FA_HIDDEN;

/* The page heap's timed look at its dirty spans, at now, with in_use bytes
 * in use: the policy's clock for forgetting old peaks. */
void fa__purge_note_look(uint64_t now_ms, size_t in_use) FA_HIDDEN;

/* Is the page heap's timed look at old dirty spans due?  last_ms: when it
 * last looked.  Reads the clock only when a look could purge. */
bool fa__purge_look_due(uint64_t last_ms, uint64_t *now_ms) FA_HIDDEN;

/* Is a span dirty since free_since (the low 32 bits of fa__now_ms())
 * old enough at now to be purged? */
bool fa__purge_span_aged(uint64_t now_ms, uint32_t free_since) FA_HIDDEN;

/* How often the decay tick (07-decay/decay.c) runs, in ms. */
uint64_t fa__purge_tick_interval_ms(void) FA_HIDDEN;

#endif
