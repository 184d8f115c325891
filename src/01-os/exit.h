/* The one thread-exit registry.  Three parts of the library keep state per
 * thread that must be handed back when the thread exits; each arms its part
 * the first time a thread needs it, and one pthread key's destructor calls
 * the armed parts in this fixed order:
 *
 *   1. FA_EXIT_POOL    the object pool (13-pool/local.c): the thread's local
 *                      pools go to the global pools;
 *   2. FA_EXIT_TRACE   the allocation trace (09-diag/trace.c): the thread's
 *                      buffer of records is written out;
 *   3. FA_EXIT_TCACHE  the thread cache (08-tcache/life.c): its spans, its
 *                      outbox of remote frees and its large blocks go back.
 *
 * Highest layer first: a part may still call the parts below it while it
 * winds down (a debug pool frees through malloc, and any free is recorded
 * in the trace), so the trace is written after the pool is done and the
 * thread cache, which everything allocates through, goes last.  A part
 * that runs after its exit (another library's destructor calling malloc)
 * works without its per-thread state: each part marks the thread as gone.
 *
 * Three keys whose destructors pthread runs in no fixed order were the old
 * way; one key is one order. */
#ifndef FA_OS_EXIT_H
#define FA_OS_EXIT_H

#include "00-base/config.h"

enum fa__exit_part {
    FA_EXIT_POOL,
    FA_EXIT_TRACE,
    FA_EXIT_TCACHE,
    FA_EXIT_PARTS
};

/* Arm part for the calling thread: at its exit, fn(arg) runs once, in the
 * order above.  arg must not be NULL; arming again replaces it.  Callable
 * from inside another part's exit (pthread then runs the destructor again).
 * False when no key could be made: the part then gets no call. */
bool fa__os_exit_arm(enum fa__exit_part part, void (*fn)(void *), void *arg) FA_HIDDEN;

/* Exits run per part since start-up, for tests. */
uint64_t fa__os_exit_runs(enum fa__exit_part part) FA_HIDDEN;

#endif
