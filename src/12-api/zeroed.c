/* malloc and free with the hardened build's `secure_zero` option: the
 * fast paths of fastpath.h, with the zeroing of freed blocks and its
 * checks at hand-out compiled in.  A copy of their own, so that the common
 * paths test the option once, first, and carry nothing for it. */
#include "12-api/fastpath.h"

void *fa__api_malloc_zeroed(size_t size)
{
    return fa__malloc_body(size, true);
}

void fa__api_free_zeroed(void *p)
{
    fa__free_body(p, true);
}
