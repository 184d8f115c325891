/* Start-up and fork.  Initialisation is lazy: the first allocation of the
 * process (which may come from a constructor before main, or from the
 * dynamic loader) runs it.  It reads the options and maps memory, nothing
 * that can allocate, so a nested call cannot find the allocator half built.
 *
 * Start-up and fork code call every layer below, through their headers. */
#ifndef FA_INIT_INIT_H
#define FA_INIT_INIT_H

#include "00-base/config.h"

extern int fa__initialized FA_HIDDEN;
void fa__global_init(void) FA_HIDDEN;

FA_INLINE void fa__ensure_init(void)
{
    if (FA_UNLIKELY(!__atomic_load_n(&fa__initialized, __ATOMIC_ACQUIRE)))
        fa__global_init();
}

/* A layer above start-up (the object pools) joins fork handling: its
 * prepare runs before the heap's locks are taken, because it takes the
 * metadata lock below its own; its release (child set in the child) runs
 * after they are dropped.  One layer at most; set once. */
void fa__init_fork_hooks(void (*prepare)(void), void (*release)(int child)) FA_HIDDEN;

#endif
