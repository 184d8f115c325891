/* Diagnostics: one line on stderr, formatted on the stack and written with
 * write(2), so that reporting never allocates and works from inside the
 * allocator with any lock held. */
#ifndef FA_BASE_DIAG_H
#define FA_BASE_DIAG_H

#include "base/config.h"

void fa__diag(const char *fmt, ...) FA_HIDDEN __attribute__((format(printf, 1, 2)));
_Noreturn void fa__fatal(const char *fmt, ...) FA_HIDDEN __attribute__((format(printf, 1, 2)));

#endif
