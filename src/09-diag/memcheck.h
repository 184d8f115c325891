/* Valgrind's client requests, when its header was there at build time:
 * memcheck then sees each checked block as a heap block
 * (MALLOCLIKE/FREELIKE), with its own checks of uninitialized reads, use
 * after free and leaks.  Each request costs a few instructions outside
 * valgrind, and runs only in the diagnostic modes, off the fast paths.
 *
 * Macros, not functions of a file of their own: memcheck takes a block's
 * allocation and free stacks where the request is made, and a call of ours
 * around it would be one more allocator frame in every stack it prints. */
#ifndef FA_DIAG_MEMCHECK_H
#define FA_DIAG_MEMCHECK_H

#include "00-base/config.h"

#include <stdlib.h>
#include <string.h>

#ifdef FA_HAVE_VALGRIND
#include <valgrind/memcheck.h>
#include <valgrind/valgrind.h>
#define FA_ON_VALGRIND() RUNNING_ON_VALGRIND
#define FA_VG_ALLOC(p, n, zero) VALGRIND_MALLOCLIKE_BLOCK(p, n, 0, zero)
#define FA_VG_FREE(p) VALGRIND_FREELIKE_BLOCK(p, 0)
#else
#define FA_ON_VALGRIND() 0
#define FA_VG_ALLOC(p, n, zero) ((void)0)
#define FA_VG_FREE(p) ((void)0)
#endif

/* Under valgrind's memcheck, which alone uses the block requests.  Other
 * tools (callgrind counting the fast paths' instructions, for one) must see
 * fastalloc as it runs outside valgrind.  valgrind names its tool's preload
 * in the program's LD_PRELOAD; getenv does not allocate. */
static inline bool fa__dbg_under_memcheck(void)
{
    if (!FA_ON_VALGRIND())
        return false;
    const char *pre = getenv("LD_PRELOAD");
    return pre != NULL && strstr(pre, "vgpreload_memcheck") != NULL;
}

#endif
