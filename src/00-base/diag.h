/* Diagnostics: one line on stderr, formatted on the stack and written with
 * write(2), so that reporting never allocates and works from inside the
 * allocator with any lock held. */
#ifndef FA_BASE_DIAG_H
#define FA_BASE_DIAG_H

#include "00-base/config.h"

/* Diagnostic modes (src/09-diag/): while any is on, every malloc and free
 * leaves the fast paths, where the mode sees it.  0 in a normal run; set
 * at start-up (debug mode, running under valgrind, recording a trace, the
 * heap profile) or from code (hooks).
 * Read with a relaxed load, off the fast paths only. */
enum { FA_DIAG_DEBUG = 1, FA_DIAG_VALGRIND = 2, FA_DIAG_HOOKS = 4, FA_DIAG_TRACE = 8, FA_DIAG_PROFILE = 16 };
extern int fa__diag_mode FA_HIDDEN;

FA_INLINE int fa__diag_on(void)
{
    return __atomic_load_n(&fa__diag_mode, __ATOMIC_RELAXED);
}

void fa__diag(const char *fmt, ...) FA_HIDDEN __attribute__((format(printf, 1, 2)));
_Noreturn void fa__fatal(const char *fmt, ...) FA_HIDDEN __attribute__((format(printf, 1, 2)));

#endif
