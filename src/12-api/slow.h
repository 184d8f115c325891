/* The slow paths of the public functions (slow.c): where the inlined fast
 * paths (fastpath.h) leave, through one unlikely branch each.  They call
 * only the layers below; the fast paths call them, never the reverse, so
 * that slow.c needs nothing of fastpath.h. */
#ifndef FA_API_SLOW_H
#define FA_API_SLOW_H

#include "00-base/config.h"

/* malloc's: start-up, then the thread cache's refill; and a block too
 * large for the size classes.  Never inlined: the fast path would pay for
 * their stack frame. */
FA_NOINLINE void *fa__api_alloc_slow(size_t size, unsigned cls) FA_HIDDEN;
FA_NOINLINE void *fa__api_alloc_large(size_t size, size_t align, bool zero) FA_HIDDEN;
/* Free's: a block the thread does not own (a large block among them, and
 * a pointer in no page-map leaf: NULL, a foreign one).  A diagnostic mode
 * takes it. */
FA_NOINLINE void fa__api_free_slow(void *p) FA_HIDDEN;
/* A pointer that is not 16-byte aligned (no block's start), and a block of
 * the thread's own span that already carries the free mark: a second free,
 * unless the slow path finds the block on no free list (02-records/freelist.h). */
FA_NOINLINE void fa__api_free_misaligned(void *p) FA_HIDDEN;
/* The default build: p, in a span the thread owns, is not a block's start
 * (misaligned, or inside a block): the program stops.  Not declared
 * _Noreturn: a call that returns not is made with a call instruction, for
 * which clang aligns the stack on the fast path (a push and a pop); this
 * one is a jump. */
FA_NOINLINE void fa__api_free_bad(void *p) FA_HIDDEN;
FA_NOINLINE void fa__api_free_marked(void *p) FA_HIDDEN;
/* malloc and free in the hardened build with `secure_zero` or
 * `secure_tails` (zeroed.c): the fast paths with the zeroing and its
 * checks, or the tails, compiled in. */
FA_NOINLINE void *fa__api_malloc_rare(size_t size) FA_HIDDEN;
FA_NOINLINE void fa__api_free_rare(void *p) FA_HIDDEN;
/* free in the hardened build of a block first in its span, or whose tail
 * or its neighbour's looked bad (zeroed.c): the tails' full check, then
 * the rest of the free. */
FA_NOINLINE void fa__api_free_tails(void *p) FA_HIDDEN;
/* An allocation while a diagnostic mode is on: the calling thread's cache
 * hidden first, then the mode's own path (09-diag/debug.h). */
FA_NOINLINE void *fa__api_alloc_diag(size_t size, size_t align, bool zero) FA_HIDDEN;

#endif
