/* Diagnostics: one line on stderr, formatted on the stack and written with
 * write(2), so that reporting never allocates and works from inside the
 * allocator with any lock held. */
#ifndef FA_BASE_DIAG_H
#define FA_BASE_DIAG_H

#include "00-base/config.h"

/* Diagnostic modes (src/09-diag/): 0 in a normal run; set at start-up
 * (debug mode, running under valgrind, recording a trace, the heap
 * profile) or from code (hooks).  While any is on, every slow path sees
 * it, in the test it makes anyway (fa__diag_on).  The modes of
 * FA_DIAG_EVERY see every call too: each thread's cache is hidden from
 * the fast paths, which then miss on every call.  The heap profile alone
 * leaves the caches in view and sees the slow paths only: the refills of
 * the thread caches, large blocks and frees that leave the fast path.
 * Read with a relaxed load, off the fast paths only. */
enum { FA_DIAG_DEBUG = 1, FA_DIAG_VALGRIND = 2, FA_DIAG_HOOKS = 4, FA_DIAG_TRACE = 8, FA_DIAG_PROFILE = 16 };
#define FA_DIAG_EVERY (FA_DIAG_DEBUG | FA_DIAG_VALGRIND | FA_DIAG_HOOKS | FA_DIAG_TRACE)
extern int fa__diag_mode FA_HIDDEN;

FA_INLINE int fa__diag_on(void)
{
    return __atomic_load_n(&fa__diag_mode, __ATOMIC_RELAXED);
}

/* A mode of FA_DIAG_EVERY is on: every call goes to 09-diag/debug.h. */
FA_INLINE bool fa__diag_every(void)
{
    return (fa__diag_on() & FA_DIAG_EVERY) != 0;
}

void fa__diag(const char *fmt, ...) FA_HIDDEN __attribute__((format(printf, 1, 2)));
_Noreturn void fa__fatal(const char *fmt, ...) FA_HIDDEN __attribute__((format(printf, 1, 2)));
/* The words for errno value e, in English, for a diagnostic: never
 * strerror, which takes the C library's locale lock, a lock the program
 * may hold when its malloc starts the allocator up (a first malloc inside
 * setlocale, with a trace file that cannot be written, hung bash). */
const char *fa__errno_words(int e) FA_HIDDEN;

#endif
