/* A floor for objpool-shuffle, not an allocator: fa_pool_get hands each
 * thread the slots of one mapping in address order, round after round, and
 * fa_pool_put does nothing.  No allocator can do less work on that
 * benchmark, so its times bound what any pool can reach there.
 *
 *   cc -O2 -shared -fPIC -o /tmp/libnullpool.so tools/nullpool.c
 *   LD_PRELOAD=/tmp/libnullpool.so build/bench/objpool --mode shuffle --api pool \
 *       --threads 4 --objects 100k --rounds 5
 *
 * Valid only for --size 64 and at most NULLPOOL_SLOTS objects per thread:
 * each thread gets exactly that many per round, then puts them all back. */
#include <stddef.h>
#include <sys/mman.h>

#define NULLPOOL_SLOTS 100000
#define NULLPOOL_SIZE 64

#define IE __attribute__((tls_model("initial-exec")))
static __thread char *ring IE, *next IE, *end IE;

void *fa_pool_create(const void *opt)
{
    (void)opt;
    return (void *)1;
}

void *fa_pool_get(void *pool)
{
    (void)pool;
    if (__builtin_expect(next == end, 0)) {
        if (ring == NULL) {
            ring = mmap(NULL, (size_t)NULLPOOL_SLOTS * NULLPOOL_SIZE, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (ring == MAP_FAILED)
                return NULL;
        }
        next = ring;
        end = ring + (size_t)NULLPOOL_SLOTS * NULLPOOL_SIZE;
    }
    void *r = next;
    next += NULLPOOL_SIZE;
    return r;
}

void fa_pool_put(void *pool, void *obj)
{
    (void)pool;
    (void)obj;
}

size_t fa_pool_trim(void *pool)
{
    (void)pool;
    return 0;
}
