/* Blocks of no bytes (the hardened build): malloc(0) hands out an address
 * in a range of address space reserved with no access, so that a read or a
 * write through it faults at once, where a block of the smallest class
 * would take 16 bytes of either unseen.  hardened_malloc does the same with
 * a size class of its own whose pages have no access.  The addresses go out
 * in turn, 16 bytes apart, and are forgotten when freed: a range of 4 GiB
 * hands out 2^28 of them before it starts over, so two blocks of no bytes
 * alive at once share an address only after 268 million malloc(0) calls
 * between them.  The default build hands out a block of the smallest class
 * instead. */
#ifndef FA_LARGE_EMPTY_H
#define FA_LARGE_EMPTY_H

#include "00-base/config.h"

#if FA_SECURE
/* A block of no bytes, or NULL when no range could be reserved (the caller
 * hands out a block of one byte). */
void *fa__empty_alloc(void) FA_HIDDEN;

/* Whether p is a block of no bytes: free does nothing with it, and
 * malloc_usable_size says 0. */
bool fa__empty_has(const void *p) FA_HIDDEN;
#else
FA_INLINE bool fa__empty_has(const void *p)
{
    (void)p;
    return false;
}
#endif

#endif
