/* Test seams: the points of a race between two threads that a test cannot
 * reach by timing alone.  A test linked with the static archive sets
 * fa__seam_hook, and the code calls it at the named point, where the test
 * makes the other thread's move (a free, a put) at the worst moment, so
 * that the path that handles the race runs every time (tests/test_seams.c).
 * Only slow paths have seams: each costs a load and a branch not taken. */
#ifndef FA_BASE_SEAM_H
#define FA_BASE_SEAM_H

#include "00-base/config.h"

enum fa__seam {
    /* 08-tcache/own.c: a thread's span has nothing free (a refill), or it
     * gives a full span up (its exit), and is about to mark it detached,
     * which fails if another thread's free came first. */
    FA_SEAM_SPAN_DETACH,
    /* 13-pool/local.c: a pool block whose objects are all out is about to
     * be marked detached; a put that read the old owner may come now ... */
    FA_SEAM_POOL_DETACH,
    /* ... or just after the owner's last look for such puts. */
    FA_SEAM_POOL_DETACHED,
};

extern void (*fa__seam_hook)(enum fa__seam where, void *what) FA_HIDDEN;

FA_INLINE void fa__seam(enum fa__seam where, void *what)
{
    void (*h)(enum fa__seam, void *) = __atomic_load_n(&fa__seam_hook, __ATOMIC_ACQUIRE);
    if (FA_UNLIKELY(h != NULL))
        h(where, what);
}

#endif
