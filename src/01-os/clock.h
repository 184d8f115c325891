/* The platform's clocks.
 *
 * The allocator's clock: milliseconds on a coarse monotonic clock (a vDSO
 * read, no syscall), for everything timed: purge delays, the decay tick,
 * the pools' idle trim.  Tests move it forward with fa__clock_advance_ms()
 * instead of sleeping, so that "not before the delay" and "after the delay"
 * hold on a loaded machine too: a test sets a delay far longer than it
 * runs, then jumps.
 *
 * A fine clock, in nanoseconds, for the trace's time stamps (which the test
 * hook does not move: a trace records real time). */
#ifndef FA_OS_CLOCK_H
#define FA_OS_CLOCK_H

#include "00-base/config.h"

uint64_t fa__now_ms(void) FA_HIDDEN;

/* Add ms to every later reading (tests; reachable from the static library). */
void fa__clock_advance_ms(uint64_t ms) FA_HIDDEN;

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t fa__os_now_ns(void) FA_HIDDEN;

/* Sleep for ms milliseconds (the background thread's tick). */
void fa__os_sleep_ms(uint64_t ms) FA_HIDDEN;

#endif
