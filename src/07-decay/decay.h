/* The timed work: at most once per tick interval (03-purge/purge.c), and run
 * by whichever thread reaches a thread-cache slow path first once it is due,
 * or by a background thread (the `background` option).  A tick:
 *  - collects the remote frees of the spans the central caches list, and
 *    gives those that are then all free to the page heap;
 *  - purges the pages dirty for the purge delay (none when the delay is -1);
 *  - moves the scavenge epoch: each thread cache then scavenges at its next
 *    slow path (08-tcache/slow.c): it sends its outbox, collects its spans'
 *    remote frees, gives the page heap the all-free spans and the large
 *    blocks it did not allocate from lately, and gives back the part of its
 *    claim on the global bound that it no longer needs. */
#ifndef FA_DECAY_DECAY_H
#define FA_DECAY_DECAY_H

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
