/* fa_pool_get + fa_pool_put N times on one pool of 64-byte objects; the
 * callgrind companion of pairloop.c (see icount.sh --pool). */
#include <fastalloc.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    fa_pool_options o = {.object_size = 64};
    fa_pool *pool = fa_pool_create(&o);
    void *volatile sink;
    for (long i = 0; i < n; i++) {
        void *p = fa_pool_get(pool);
        sink = p;
        fa_pool_put(pool, sink);
    }
    fa_pool_destroy(pool);
    return 0;
}
