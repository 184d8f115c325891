/* A server-like workload for the object pool (#25's outside workload, rebuilt
 * from its description): 2 threads; each keeps 4,096 live sessions of 1 KiB
 * and, every iteration, replaces one at random (a put and a get on its own
 * blocks), then gets a 192 B request and sends it to the other thread
 * through a ring; each thread puts back the requests it receives (puts
 * into blocks the other thread owns).  Prints the milliseconds from the
 * threads' start to their end.
 *
 *   cc -O2 -Iinclude -o /tmp/poolserver tools/poolserver.c -lpthread -ldl
 *   LD_PRELOAD=build/libfastalloc.so /tmp/poolserver pool 1000000
 *   LD_PRELOAD=<a malloc> /tmp/poolserver malloc 1000000
 *
 * `pool` uses fa_pool (two pools: sessions and requests), found with dlsym;
 * `malloc` uses malloc and free.  Every object carries a tag that its last
 * user checks: an object handed out twice, or reused while live, stops the
 * program with exit 3. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fastalloc.h>

#define SESSIONS 4096
#define RING 1024 /* requests in flight each way */

static fa_pool *(*pool_create)(const fa_pool_options *);
static void *(*pool_get)(fa_pool *);
static void (*pool_put)(fa_pool *, void *);
static int use_pool;
static fa_pool *sessions, *requests;
static long iters = 1000000;
static int finished;

struct ring {
    void *slot[RING];
    _Alignas(64) uint64_t head; /* written by the sender */
    _Alignas(64) uint64_t tail; /* written by the receiver */
};
static struct ring rings[2]; /* rings[i]: thread i sends */

static void *get(fa_pool *p, size_t n)
{
    void *o = use_pool ? pool_get(p) : malloc(n);
    if (o == NULL) {
        fprintf(stderr, "poolserver: out of memory\n");
        exit(2);
    }
    return o;
}

static void put(fa_pool *p, void *o)
{
    if (use_pool)
        pool_put(p, o);
    else
        free(o);
}

static void check(const uint64_t *o, uint64_t tag)
{
    if (o[0] != tag || o[1] != ~tag) {
        fprintf(stderr, "poolserver: object %p overwritten while live\n", (const void *)o);
        exit(3);
    }
}

/* Put back every request that arrived. */
static void drain(struct ring *in)
{
    uint64_t t = in->tail, h = __atomic_load_n(&in->head, __ATOMIC_ACQUIRE);
    for (; t != h; t++) {
        uint64_t *q = in->slot[t % RING];
        check(q, q[2]);
        put(requests, q);
    }
    __atomic_store_n(&in->tail, t, __ATOMIC_RELEASE);
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    struct ring *out = &rings[id], *in = &rings[1 - id];
    static __thread uint64_t *live[SESSIONS];
    uint64_t tags[SESSIONS];
    uint64_t r = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1), tag = (uint64_t)id << 56;
    for (int i = 0; i < SESSIONS; i++) {
        live[i] = get(sessions, 1024);
        tags[i] = ++tag;
        live[i][0] = tag;
        live[i][1] = ~tag;
    }
    for (long i = 0; i < iters; i++) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        size_t k = r % SESSIONS;
        check(live[k], tags[k]);
        put(sessions, live[k]);
        live[k] = get(sessions, 1024);
        tags[k] = ++tag;
        live[k][0] = tag;
        live[k][1] = ~tag;
        live[k][64] = tag; /* a write further in, as a session's use would */
        uint64_t *q = get(requests, 192);
        q[0] = ++tag;
        q[1] = ~tag;
        q[2] = tag;
        while (out->head - __atomic_load_n(&out->tail, __ATOMIC_ACQUIRE) >= RING)
            drain(in); /* the other side is behind: serve it meanwhile */
        out->slot[out->head % RING] = q;
        __atomic_store_n(&out->head, out->head + 1, __ATOMIC_RELEASE);
        if ((i & 31) == 0)
            drain(in);
    }
    __atomic_add_fetch(&finished, 1, __ATOMIC_ACQ_REL);
    while (__atomic_load_n(&finished, __ATOMIC_ACQUIRE) < 2 ||
           in->tail != __atomic_load_n(&in->head, __ATOMIC_ACQUIRE))
        drain(in);
    for (int i = 0; i < SESSIONS; i++) {
        check(live[i], tags[i]);
        put(sessions, live[i]);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "pool") != 0 && strcmp(argv[1], "malloc") != 0)) {
        fprintf(stderr, "usage: poolserver pool|malloc [iterations a thread]\n");
        return 2;
    }
    use_pool = strcmp(argv[1], "pool") == 0;
    if (argc > 2)
        iters = atol(argv[2]);
    if (use_pool) {
        pool_create = (fa_pool * (*)(const fa_pool_options *)) dlsym(RTLD_DEFAULT, "fa_pool_create");
        pool_get = (void *(*)(fa_pool *))dlsym(RTLD_DEFAULT, "fa_pool_get");
        pool_put = (void (*)(fa_pool *, void *))dlsym(RTLD_DEFAULT, "fa_pool_put");
        if (pool_create == NULL || pool_get == NULL || pool_put == NULL) {
            fprintf(stderr, "poolserver: no fa_pool here (run it under libfastalloc.so)\n");
            return 2;
        }
        sessions = pool_create(&(fa_pool_options){.object_size = 1024, .name = "sessions"});
        requests = pool_create(&(fa_pool_options){.object_size = 192, .name = "requests"});
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.1f\n", (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6);
    return 0;
}
