/* The timed work: at most once per tick interval (03-purge/purge.c), and run
 * by whichever thread reaches a thread-cache slow path first, or by a
 * background thread (the `background` option):
 *  - pages dirty for the purge delay are purged;
 *  - batches that the central caches kept but nobody fetched go back to
 *    their spans;
 *  - the scavenge epoch moves, and each thread cache halves the lists it
 *    did not use, at its next slow path. */
#ifndef FA_POLICY_DECAY_H
#define FA_POLICY_DECAY_H

#include "00-base/config.h"

/* Run the tick if it is due (or start the background thread). */
void fa__decay_maybe(void) FA_HIDDEN;

/* Bumped by each tick: a thread cache that sees it move scavenges itself. */
extern unsigned fa__scavenge_epoch FA_HIDDEN;

/* Ask every thread cache to scavenge at its next slow path (an option that
 * bounds the caches was lowered). */
void fa__decay_scavenge_soon(void) FA_HIDDEN;

/* A child of fork has no background thread; it starts one when needed. */
void fa__decay_after_fork_child(void) FA_HIDDEN;

#endif
