/* Large blocks: requests above FA_MAX_SMALL are spans of their own, taken
 * from the page heap whole.  A large block starts at its span's first page,
 * which is how a free recognises one. */
#ifndef FA_CORE_LARGE_H
#define FA_CORE_LARGE_H

#include "00-base/config.h"

struct fa__span;

/* A block of at least size bytes aligned to align (0 or a power of two),
 * zeroed when zero is set; NULL with errno = ENOMEM. */
void *fa__large_alloc(size_t size, size_t align, bool zero) FA_HIDDEN;

/* Free a block that the page map does not know as a small one: a large
 * block goes back to the page heap; NULL is ignored; anything else is a
 * bad pointer and stops the program with one line naming it. */
void fa__large_free(void *p) FA_HIDDEN;
/* Give the large block s back to the page heap (its guard page made
 * ordinary again in the hardened build). */
void fa__large_release(struct fa__span *s) FA_HIDDEN;

/* The span of the large block at p; stops the program, naming the caller
 * `who`, when p is not the start of one. */
struct fa__span *fa__large_span_of(void *p, const char *who) FA_HIDDEN;

/* The usable size of the large block at p, or 0 (with one line) when p is
 * not one. */
size_t fa__large_usable(void *p) FA_HIDDEN;

/* Make the large block s hold size bytes (above FA_MAX_SMALL) without
 * moving it: a shrink by less than a quarter keeps its pages, a larger one
 * gives the tail back, a growth takes free pages that follow.  Returns
 * false when it would have to move. */
bool fa__large_resize(struct fa__span *s, size_t size) FA_HIDDEN;

/* Bytes the block of span s can hold. */
size_t fa__large_size(const struct fa__span *s) FA_HIDDEN;

#endif
