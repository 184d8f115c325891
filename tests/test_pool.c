/* Object pool: patterns, ctor/dtor counts, LIFO, reuse (RSS), cross-thread
 * puts, thread exit, trim, destroy, the cap, and the debug checks. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "check.h"
#include "child.h"
#include "fastalloc.h"
#include "01-os/clock.h"
#include "util.h"

static long ctor_calls, dtor_calls;
/* Under valgrind, RSS is valgrind's: only the allocator's own figures count.
 * valgrind also runs the test some 50 times slower (test_pool_memcheck):
 * there, as under the sanitizers, the loops that only repeat work are cut
 * to a size valgrind runs in seconds; every check still runs. */
static int rss_meaningful = 1;
static int slow = FA_TEST_SLOW;

static void ctor(void *obj, void *arg)
{
    __atomic_fetch_add(&ctor_calls, 1, __ATOMIC_RELAXED);
    memset(obj, 0xc5, *(size_t *)arg);
}

static void dtor(void *obj, void *arg)
{
    (void)obj;
    (void)arg;
    __atomic_fetch_add(&dtor_calls, 1, __ATOMIC_RELAXED);
}

static void test_basic_and_lifo(void)
{
    size_t size = 48;
    fa_pool_options o = {.object_size = size, .ctor = ctor, .dtor = dtor, .arg = &size, .name = "basic"};
    ctor_calls = dtor_calls = 0;
    fa_pool *pool = fa_pool_create(&o);
    CHECK(pool != NULL);
    enum { N = 5000 };
    static void *objs[N];
    for (size_t i = 0; i < N; i++) {
        objs[i] = fa_pool_get(pool);
        CHECK(objs[i] != NULL);
        CHECK(((uintptr_t)objs[i] & 15) == 0);
        /* A fresh object is constructed: the ctor's fill is there. */
        CHECK(all_bytes(objs[i], size, 0xc5));
        pat_fill(objs[i], size, i);
    }
    CHECK(ctor_calls == N);
    for (size_t i = 0; i < N; i++)
        CHECKF(pat_ok(objs[i], size, i), "object %zu overwritten", i);
    /* LIFO: the last put is the next got, and it keeps its state. */
    memset((char *)objs[10] + 16, 0x10, size - 16);
    memset((char *)objs[20] + 16, 0x20, size - 16);
    fa_pool_put(pool, objs[10]);
    fa_pool_put(pool, objs[20]);
    void *a = fa_pool_get(pool);
    void *b = fa_pool_get(pool);
    CHECK(a == objs[20]);
    CHECK(b == objs[10]);
    /* The state put is the state got, beyond the two link words that the
     * pool uses while an object is free. */
    CHECK(all_bytes((char *)a + 16, size - 16, 0x20));
    CHECK(all_bytes((char *)b + 16, size - 16, 0x10));
    pat_fill(a, size, 20);
    pat_fill(b, size, 10);
    fa_pool_stats_t st;
    fa_pool_stats(pool, &st);
    CHECK(st.live == N);
    CHECK(strcmp(st.name, "basic") == 0);
    for (size_t i = 0; i < N; i++)
        fa_pool_put(pool, objs[i]);
    fa_pool_stats(pool, &st);
    CHECK(st.live == 0);
    CHECK(st.free_local + st.free_global == N);
    CHECK(st.gets == N + 2);
    CHECK(st.puts == N + 2);
    /* Recycled objects are not constructed again. */
    for (size_t i = 0; i < N; i++)
        objs[i] = fa_pool_get(pool);
    CHECK(ctor_calls == N);
    for (size_t i = 0; i < N; i++)
        fa_pool_put(pool, objs[i]);
    fa_pool_destroy(pool);
    /* Every constructed object was free at destroy: each got its dtor. */
    CHECK(dtor_calls == N);
}

static void test_state_kept(void)
{
    /* 64-byte objects: bytes past the first 16 survive a put/get. */
    fa_pool_options o = {.object_size = 64};
    fa_pool *pool = fa_pool_create(&o);
    char *p = fa_pool_get(pool);
    CHECK(p != NULL);
    memset(p + 16, 0x7e, 48);
    fa_pool_put(pool, p);
    char *q = fa_pool_get(pool);
    CHECK(q == p);
    CHECK(all_bytes(q + 16, 48, 0x7e));
    fa_pool_put(pool, q);
    fa_pool_destroy(pool);
}

static void test_reuse_rss(void)
{
    fa_pool_options o = {.object_size = 64, .idle_trim_ms = -1};
    fa_pool *pool = fa_pool_create(&o);
    size_t n = slow ? 200000 : 1000000;
    void **v = fa_malloc(n * sizeof *v);
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < n; i++) {
            v[i] = fa_pool_get(pool);
            ((uint64_t *)v[i])[3] = i;
        }
        for (size_t i = 0; i < n; i++) {
            CHECK(((uint64_t *)v[i])[3] == i);
            fa_pool_put(pool, v[i]);
        }
        fa_pool_stats_t st;
        fa_pool_stats(pool, &st);
        static size_t first_bytes;
        if (round == 0)
            first_bytes = st.bytes_os;
        /* A second round reuses the first round's memory. */
        CHECK(st.bytes_os == first_bytes);
        CHECK(st.bytes_os <= n * 64 + n * 64 / 20 + (2u << 20));
    }
    size_t before = rss_bytes();
    size_t released = fa_pool_trim(pool);
    size_t after = rss_bytes();
    CHECKF(released >= n * 64 * 9 / 10, "trim released %zu", released);
    if (rss_meaningful)
        CHECKF(after + n * 64 * 8 / 10 <= before, "RSS %zu -> %zu, released %zu", before, after, released);
    fa_pool_stats_t st;
    fa_pool_stats(pool, &st);
    CHECK(st.bytes_os < n * 64 / 10);
    fa_free(v);
    fa_pool_destroy(pool);
}

struct xarg {
    fa_pool *pool;
    void **slots;
    size_t n;
    int id;
};

static void *producer(void *p)
{
    struct xarg *a = p;
    for (size_t i = 0; i < a->n; i++) {
        uint64_t *o = fa_pool_get(a->pool);
        CHECK(o != NULL);
        o[2] = (uint64_t)a->id << 32 | i;
        o[3] = ~o[2];
        a->slots[i] = o;
    }
    return NULL;
}

static void *consumer(void *p)
{
    struct xarg *a = p;
    for (size_t i = 0; i < a->n; i++) {
        uint64_t *o = a->slots[i];
        CHECK(o[2] == ((uint64_t)a->id << 32 | i));
        CHECK(o[3] == ~o[2]);
        fa_pool_put(a->pool, o);
    }
    return NULL;
}

static void test_cross_thread_and_exit(void)
{
    enum { T = 8 };
    size_t n = slow ? 20000 : 100000;
    size_t osize = 32;
    fa_pool_options o = {.object_size = 32, .global_pools = 3, .handover = 64, .ctor = ctor,
                         .dtor = dtor, .arg = &osize};
    dtor_calls = ctor_calls = 0;
    fa_pool *pool = fa_pool_create(&o);
    struct xarg args[T];
    pthread_t th[T];
    for (int round = 0; round < 3; round++) {
        for (int t = 0; t < T; t++) {
            args[t] = (struct xarg){pool, fa_malloc(n * sizeof(void *)), n, t};
            CHECK(pthread_create(&th[t], NULL, producer, &args[t]) == 0);
        }
        for (int t = 0; t < T; t++)
            pthread_join(th[t], NULL);
        /* Each thread's objects are put by another thread, which then exits
         * with objects in its local pool. */
        for (int t = 0; t < T; t++) {
            struct xarg *a = &args[(t + 1) % T];
            CHECK(pthread_create(&th[t], NULL, consumer, a) == 0);
        }
        for (int t = 0; t < T; t++)
            pthread_join(th[t], NULL);
        for (int t = 0; t < T; t++)
            fa_free(args[t].slots);
        fa_pool_stats_t st;
        fa_pool_stats(pool, &st);
        CHECK(st.live == 0);
        /* Exited threads left nothing in local pools. */
        CHECK(st.free_local == 0);
        CHECK(st.free_global >= (size_t)T * n);
        CHECK(st.gets == (unsigned long long)(round + 1) * T * n);
        /* Later rounds reuse the first round's blocks.  A producer that
         * runs out while the others still cut their current blocks takes a
         * new one: at most one block per thread more, never cumulative. */
        static size_t bytes0;
        if (round == 0)
            bytes0 = st.bytes_os;
        CHECKF(st.bytes_os <= bytes0 + T * (64u << 10), "round %d bytes %zu, first %zu", round,
               st.bytes_os, bytes0);
    }
    size_t released = fa_pool_trim(pool);
    CHECK(released > 0);
    fa_pool_stats_t st;
    fa_pool_stats(pool, &st);
    CHECK(st.bytes_os == 0);
    /* Every object constructed was free and in a fully free block: each got
     * its dtor.  (A producer can find the shared lists empty while another
     * holds a partial list locally, and construct a few more than T * n.) */
    CHECK(ctor_calls >= (long)T * (long)n);
    CHECKF(dtor_calls == ctor_calls, "dtor %ld ctor %ld", dtor_calls, ctor_calls);
    fa_pool_destroy(pool);
}

static void test_cap(void)
{
    fa_pool_options o = {.object_size = 100, .max_objects = 1000};
    fa_pool *pool = fa_pool_create(&o);
    static void *v[1001];
    for (int i = 0; i < 1000; i++) {
        v[i] = fa_pool_get(pool);
        CHECK(v[i] != NULL);
    }
    errno = 0;
    CHECK(fa_pool_get(pool) == NULL);
    CHECK(errno == ENOMEM);
    fa_pool_put(pool, v[5]);
    CHECK(fa_pool_get(pool) == v[5]);
    for (int i = 0; i < 1000; i++)
        fa_pool_put(pool, v[i]);
    fa_pool_destroy(pool);

    fa_pool_options ob = {.object_size = 64, .max_bytes = 256 << 10};
    pool = fa_pool_create(&ob);
    CHECK(pool != NULL);
    size_t got = 0;
    /* errno is cleared before each get, so the ENOMEM read is the failing
     * get's, not the one left by the object cap above. */
    for (;;) {
        errno = 0;
        if (fa_pool_get(pool) == NULL)
            break;
        got++;
    }
    CHECKF(errno == ENOMEM, "errno %d", errno);
    /* 256 KiB is four blocks of 64 KiB: the cap is the blocks' bytes, so
     * nearly all of it holds objects. */
    CHECKF(got >= (256u << 10) / 64 * 9 / 10 && got * 64 <= (256u << 10), "%zu objects", got);
    fa_pool_destroy(pool);
}

static void test_bad_options(void)
{
    errno = 0;
    CHECK(fa_pool_create(NULL) == NULL && errno == EINVAL);
    fa_pool_options o = {.object_size = 0};
    errno = 0;
    CHECK(fa_pool_create(&o) == NULL && errno == EINVAL);
    fa_pool_options o2 = {.object_size = 8, .object_align = 24};
    errno = 0;
    CHECK(fa_pool_create(&o2) == NULL && errno == EINVAL);
    fa_pool_options o3 = {.object_size = 8, .block_size = 5000};
    errno = 0;
    CHECK(fa_pool_create(&o3) == NULL && errno == EINVAL);
    fa_pool_options o4 = {.object_size = 40, .object_align = 256};
    fa_pool *p = fa_pool_create(&o4);
    CHECK(p != NULL);
    static void *x[1000];
    for (int i = 0; i < 1000; i++) {
        x[i] = fa_pool_get(p);
        CHECK(x[i] != NULL);
        CHECK(((uintptr_t)x[i] & 255) == 0);
        pat_fill(x[i], 40, (uint64_t)i);
    }
    /* Aligned objects do not overlap. */
    for (int i = 0; i < 1000; i++)
        CHECKF(pat_ok(x[i], 40, (uint64_t)i), "object %d overwritten", i);
    fa_pool_destroy(p);
}

/* A debug pool catches a double put and a foreign pointer: run each in a
 * child and expect an abort with the message that names the fault (an abort
 * for another reason, a failed get say, would not be the check working). */
static void expect_abort(void (*fn)(void *), const char *message)
{
    struct child_out r;
    child_call(&r, fn, NULL);
    CHECKF(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT, "status %d", r.status);
    CHECKF(strstr(r.err, message) != NULL, "stderr \"%s\", not \"%s\"", r.err, message);
}

static void double_put(void *unused)
{
    (void)unused;
    fa_pool_options o = {.object_size = 64, .debug = 1, .name = "dbg"};
    fa_pool *pool = fa_pool_create(&o);
    void *a = fa_pool_get(pool);
    fa_pool_put(pool, a);
    fa_pool_put(pool, a);
}

static void foreign_put(void *unused)
{
    (void)unused;
    fa_pool_options o = {.object_size = 64, .debug = 1, .name = "dbg"};
    fa_pool *pool = fa_pool_create(&o);
    static char buf[128] __attribute__((aligned(64)));
    (void)fa_pool_get(pool);
    fa_pool_put(pool, buf);
}

/* A write to a put object, found when it leaves a quarantine of 64 KiB. */
static void write_after_put(void *unused)
{
    (void)unused;
    CHECK(fa_option_set("debug_quarantine", 64 << 10) == 0);
    fa_pool_options o = {.object_size = 64, .debug = 1, .name = "dbg"};
    fa_pool *pool = fa_pool_create(&o);
    char *a = fa_pool_get(pool);
    fa_pool_put(pool, a);
    a[40] = 'X';
    for (int i = 0; i < 2000; i++) /* 128 KiB of puts push a out */
        fa_pool_put(pool, fa_pool_get(pool));
}

static void test_debug(void)
{
    fa_pool_options o = {.object_size = 64, .debug = 1};
    fa_pool *pool = fa_pool_create(&o);
    static void *v[3000];
    for (int i = 0; i < 3000; i++) {
        v[i] = fa_pool_get(pool);
        CHECK(v[i] != NULL);
    }
    for (int i = 0; i < 3000; i++)
        fa_pool_put(pool, v[i]);
    /* Put objects wait in the quarantine (16 MiB): a get cuts a new one,
     * filled. */
    unsigned char *g = fa_pool_get(pool);
    CHECK(g != NULL);
    for (int i = 0; i < 3000; i++)
        CHECK(g != v[i]);
    for (int i = 0; i < 64; i++)
        CHECK(g[i] == 0xAA);
    /* A put object is filled but its link, the first word. */
    for (int i = 8; i < 64; i++)
        CHECK(((unsigned char *)v[0])[i] == 0xDD);
    fa_pool_put(pool, g);
    fa_pool_destroy(pool);
    expect_abort(double_put, "fastalloc: debug: double put of");
    expect_abort(foreign_put, "passed to fa_pool_put: not handed out by pool 'dbg'");
    expect_abort(write_after_put, "fastalloc: debug: write after put to");
}

static void test_destroy_rss(void)
{
    /* Destroy returns every block, even with objects still out. */
    fa_pool_options o = {.object_size = 64, .idle_trim_ms = -1};
    fa_pool *pool = fa_pool_create(&o);
    size_t n = ((rss_meaningful ? 64u : 16u) << 20) / 64;
    size_t before = rss_bytes();
    uint64_t **v = fa_malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        v[i] = fa_pool_get(pool);
        v[i][2] = i;
    }
    /* Half go back; the other half are still out at destroy. */
    for (size_t i = 1; i < n; i += 2)
        fa_pool_put(pool, v[i]);
    fa_free(v);
    size_t full = rss_bytes();
    fa_pool_stats_t st;
    fa_pool_stats(pool, &st);
    CHECKF(st.live == n / 2, "live %zu", st.live);
    CHECK(st.bytes_os >= n * 64);
    fa_pool_destroy(pool);
    size_t after = rss_bytes();
    if (rss_meaningful) {
        CHECKF(full >= before + (48u << 20), "RSS %zu -> %zu", before, full);
        CHECKF(after + (48u << 20) <= full, "RSS %zu -> %zu after destroy", full, after);
    }
}

static void test_many_pools(void)
{
    /* Ids are recycled: create and destroy more pools than there are ids. */
    for (int i = 0; i < 3000; i++) {
        fa_pool_options o = {.object_size = 16 + (size_t)(i % 7) * 8};
        fa_pool *p = fa_pool_create(&o);
        CHECK(p != NULL);
        void *x = fa_pool_get(p);
        memset(x, 1, o.object_size);
        fa_pool_put(p, x);
        fa_pool_destroy(p);
    }
}


static uint64_t shuffle_rng = 0x9e3779b97f4a7c15ull;

static void test_address_order(void)
{
    /* Objects put back in random order are handed out again in address
     * order, block by block (a single LIFO list would hand them out in the
     * random order they were put in): after the first block, nearly every
     * next object lies just after the one before. */
    fa_pool_options o = {.object_size = 64, .idle_trim_ms = -1};
    fa_pool *pool = fa_pool_create(&o);
    enum { N = 50000 };
    static char *v[N];
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < N; i++) {
            v[i] = fa_pool_get(pool);
            CHECK(v[i] != NULL);
            memset(v[i], (int)(i & 0xff), 64);
        }
        if (round == 1) {
            size_t next = 0;
            for (size_t i = 2000; i < N; i++)
                next += v[i] == v[i - 1] + 64;
            CHECKF(next >= (N - 2000) * 9 / 10, "%zu of %d in address order", next, N - 2000);
        }
        for (size_t i = N - 1; i > 0; i--) {
            size_t j = rng_below(&shuffle_rng, i + 1);
            char *t = v[i];
            v[i] = v[j];
            v[j] = t;
        }
        for (size_t i = 0; i < N; i++)
            fa_pool_put(pool, v[i]);
    }
    /* The object put last still comes first. */
    CHECK(fa_pool_get(pool) == v[N - 1]);
    fa_pool_destroy(pool);
}

/* Gets and puts on a few blocks: hand-overs are where a pool reads the
 * clock for its idle trim. */
static void churn_few(fa_pool *pool, void **v, int rounds)
{
    for (int k = 0; k < rounds; k++) {
        for (size_t i = 0; i < 3000; i++)
            v[i] = fa_pool_get(pool);
        for (size_t i = 0; i < 3000; i++)
            fa_pool_put(pool, v[i]);
    }
}

static void test_idle_trim(void)
{
    /* A pool with an idle delay gives back blocks that sat all free in its
     * global pools for that long, without fa_pool_trim().  The delay is a
     * minute, far longer than the test runs even under valgrind, and the
     * test moves the allocator's clock past it instead of sleeping: "not
     * before the delay" and "after it" then hold on a loaded machine. */
    fa_pool_options o = {.object_size = 64, .idle_trim_ms = 60 * 1000};
    fa_pool *pool = fa_pool_create(&o);
    enum { N = 64 * 1024 }; /* 4 MiB of objects */
    static void *v[N];
    for (size_t i = 0; i < N; i++)
        v[i] = fa_pool_get(pool);
    /* Read with every object out, when nothing can be trimmed. */
    fa_pool_stats_t st;
    fa_pool_stats(pool, &st);
    size_t peak = st.bytes_os;
    CHECK(peak >= (size_t)N * 64);
    for (size_t i = 0; i < N; i++)
        fa_pool_put(pool, v[i]);
    /* Activity that reads the clock (at hand-overs), before the delay. */
    churn_few(pool, v, 50);
    fa_pool_stats(pool, &st);
    CHECKF(st.trims == 0, "%llu trims before the delay", st.trims);
    CHECK(st.bytes_os == peak);
    fa__clock_advance_ms(60 * 1000 + 1);
    churn_few(pool, v, 200);
    fa_pool_stats(pool, &st);
    CHECK(st.trims > 0);
    CHECKF(st.bytes_os <= peak / 4, "bytes %zu of peak %zu", st.bytes_os, peak);
    fa_pool_destroy(pool);
}

struct hop {
    fa_pool *pool;
    void **objs;
    size_t n;
};

static void *put_all(void *p)
{
    struct hop *h = p;
    for (size_t i = 0; i < h->n; i++) {
        CHECK(((uint64_t *)h->objs[i])[1] == i);
        fa_pool_put(h->pool, h->objs[i]);
    }
    return NULL;
}

static void test_remote_into_live_owner(void)
{
    /* Another thread puts back every object the getting thread got: the
     * getter's full blocks are no thread's, the putter takes them, and its
     * exit hands them to the global pools, where the getter finds them
     * again: it reuses them instead of growing. */
    fa_pool_options o = {.object_size = 48, .idle_trim_ms = -1};
    fa_pool *pool = fa_pool_create(&o);
    enum { N = 20000 };
    static void *v[N];
    size_t bytes0 = 0;
    for (int round = 0; round < 5; round++) {
        for (size_t i = 0; i < N; i++) {
            v[i] = fa_pool_get(pool);
            ((uint64_t *)v[i])[1] = i;
        }
        struct hop h = {pool, v, N};
        pthread_t th;
        CHECK(pthread_create(&th, NULL, put_all, &h) == 0);
        pthread_join(th, NULL);
        fa_pool_stats_t st;
        fa_pool_stats(pool, &st);
        CHECK(st.live == 0);
        CHECKF(st.free_local + st.free_global >= N, "local %zu global %zu", st.free_local, st.free_global);
        if (round == 0)
            bytes0 = st.bytes_os;
        CHECKF(st.bytes_os == bytes0, "round %d: %zu bytes, first %zu", round, st.bytes_os, bytes0);
    }
    fa_pool_destroy(pool);
}

static void *put_shuffled(void *p)
{
    struct hop *h = p;
    for (size_t i = h->n - 1; i > 0; i--) {
        size_t j = rng_below(&shuffle_rng, i + 1);
        void *t = h->objs[i];
        h->objs[i] = h->objs[j];
        h->objs[j] = t;
    }
    for (size_t i = 0; i < h->n; i++)
        fa_pool_put(h->pool, h->objs[i]);
    return NULL;
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

static void test_remote_untouched(void)
{
    /* Another thread puts a burst back in a shuffled order, through its
     * cache's spills: neither its puts nor the owner's taking them back
     * touch an object.  The objects' pages (all but each block's first,
     * which holds the header and the bits) are made inaccessible between
     * the puts and the owner's gets, so a link written into an object or
     * read from one faults; after the gets, every byte the program wrote
     * is still there, and the owner got every one of them back (the
     * burst's count and a few caches more: what it cut and did not hand
     * out before the burst comes first). */
    const size_t size = 192, block = (size_t)64 << 10;
    fa_pool_options o = {.object_size = size, .block_size = block, .idle_trim_ms = -1};
    fa_pool *pool = fa_pool_create(&o);
    CHECK(pool != NULL);
    enum { N = 3000, MORE = 1024 };
    static void *v[N], *back[N + MORE], *mine[N], *orig[N];
    for (size_t i = 0; i < N; i++) {
        v[i] = mine[i] = orig[i] = fa_pool_get(pool);
        CHECK(v[i] != NULL);
        memset(v[i], (int)(i % 251) + 1, size);
    }
    struct hop h = {pool, v, N};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, put_shuffled, &h) == 0);
    pthread_join(th, NULL);
    qsort(mine, N, sizeof mine[0], cmp_ptr);
    size_t nb = 0;
    static uintptr_t bases[N];
    for (size_t i = 0; i < N; i++) {
        uintptr_t base = (uintptr_t)mine[i] & ~(uintptr_t)(block - 1);
        if (nb == 0 || bases[nb - 1] != base)
            bases[nb++] = base;
    }
    for (size_t k = 0; k < nb; k++)
        CHECK(mprotect((void *)(bases[k] + 4096), block - 4096, PROT_NONE) == 0);
    for (size_t i = 0; i < N + MORE; i++)
        back[i] = fa_pool_get(pool);
    for (size_t k = 0; k < nb; k++)
        CHECK(mprotect((void *)(bases[k] + 4096), block - 4096, PROT_READ | PROT_WRITE) == 0);
    /* Every object of the burst is among those got back. */
    qsort(back, N + MORE, sizeof back[0], cmp_ptr);
    size_t found = 0;
    for (size_t i = 0, j = 0; i < N; i++) {
        while (j < N + MORE && (uintptr_t)back[j] < (uintptr_t)mine[i])
            j++;
        found += j < N + MORE && back[j] == mine[i];
    }
    CHECKF(found == N, "%zu of the burst's %d objects got back", found, N);
    /* Nothing was written into them while they were free. */
    size_t bad = 0;
    for (size_t i = 0; i < N; i++) {
        const unsigned char *b = orig[i];
        for (size_t k = 0; k < size; k++)
            bad += b[k] != (unsigned char)(i % 251 + 1);
    }
    CHECKF(bad == 0, "%zu bytes of free objects were written", bad);
    fa_pool_destroy(pool);
}

struct many_arg {
    fa_pool **pools;
    int n;
    int seed;
};

static void *use_many(void *p)
{
    struct many_arg *a = p;
    static __thread void *held[64];
    for (int r = 0; r < 20; r++) {
        for (int k = 0; k < a->n; k++) {
            fa_pool *pool = a->pools[(k + a->seed) % a->n];
            for (int i = 0; i < 64; i++) {
                held[i] = fa_pool_get(pool);
                CHECK(held[i] != NULL);
                memset(held[i], i, 32);
            }
            for (int i = 63; i >= 0; i--) {
                CHECK(all_bytes(held[i], 32, (unsigned char)i));
                fa_pool_put(pool, held[i]);
            }
        }
    }
    return NULL;
}

struct ring {
    fa_pool *pool;
    void **objs;
    size_t n;
    int rounds;
    pthread_barrier_t bar;
};

static void *get_in_rounds(void *p)
{
    struct ring *r = p;
    for (int round = 0; round < r->rounds; round++) {
        for (size_t i = 0; i < r->n; i++) {
            r->objs[i] = fa_pool_get(r->pool);
            ((uint64_t *)r->objs[i])[1] = i;
        }
        pthread_barrier_wait(&r->bar); /* got */
        pthread_barrier_wait(&r->bar); /* the other thread is done */
    }
    return NULL;
}

static void test_blocks_change_hands(void)
{
    /* A thread that stays alive gets a burst; this one puts it back,
     * shuffled, and gets as many: it gets the burst's objects, from the
     * blocks the other thread filled, and the pool grows by one block at
     * most.  The burst's objects in the block the other thread is still
     * cutting stay that thread's: one block's worth.  (When a full block
     * stayed its getter's, this thread's gets took 15 new blocks while
     * those sat free in the other thread's: 19,840 of 20,000 gets were
     * not the burst's.) */
    fa_pool_options o = {.object_size = 48, .idle_trim_ms = -1};
    struct ring r = {.pool = fa_pool_create(&o), .n = 20000, .rounds = 4};
    static void *theirs[20000], *mine[20000];
    r.objs = theirs;
    CHECK(pthread_barrier_init(&r.bar, NULL, 2) == 0);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, get_in_rounds, &r) == 0);
    for (int round = 0; round < r.rounds; round++) {
        pthread_barrier_wait(&r.bar);
        fa_pool_stats_t st;
        fa_pool_stats(r.pool, &st);
        size_t bytes_got = st.bytes_os;
        struct hop h = {r.pool, theirs, r.n};
        put_shuffled(&h);
        qsort(theirs, r.n, sizeof theirs[0], cmp_ptr);
        size_t foreign = 0;
        for (size_t i = 0; i < r.n; i++) {
            mine[i] = fa_pool_get(r.pool);
            if (bsearch(&mine[i], theirs, r.n, sizeof theirs[0], cmp_ptr) == NULL)
                foreign++;
        }
        fa_pool_stats(r.pool, &st);
        CHECKF(foreign <= 64 * 1024 / 48, "round %d: %zu of %zu gets not from the burst put back", round, foreign,
               r.n);
        CHECKF(st.bytes_os <= bytes_got + 64 * 1024, "round %d: %zu bytes after the gets, %zu before", round,
               st.bytes_os, bytes_got);
        for (size_t i = 0; i < r.n; i++)
            fa_pool_put(r.pool, mine[i]);
        pthread_barrier_wait(&r.bar);
    }
    pthread_join(th, NULL);
    pthread_barrier_destroy(&r.bar);
    fa_pool_destroy(r.pool);
}

static void test_pools_past_fast_slots(void)
{
    /* More pools alive than the TLS fast slots: the later ones take the slow
     * paths and must behave the same. */
    enum { P = 300, T = 4 };
    static fa_pool *ps[P];
    for (int i = 0; i < P; i++) {
        fa_pool_options o = {.object_size = 32, .idle_trim_ms = -1};
        ps[i] = fa_pool_create(&o);
        CHECK(ps[i] != NULL);
    }
    /* LIFO on a pool past the slots, too. */
    void *a = fa_pool_get(ps[P - 1]), *b = fa_pool_get(ps[P - 1]);
    CHECK(a != NULL && b != NULL && a != b);
    fa_pool_put(ps[P - 1], a);
    fa_pool_put(ps[P - 1], b);
    CHECK(fa_pool_get(ps[P - 1]) == b);
    CHECK(fa_pool_get(ps[P - 1]) == a);
    fa_pool_put(ps[P - 1], a);
    fa_pool_put(ps[P - 1], b);
    struct many_arg args[T];
    pthread_t th[T];
    for (int t = 0; t < T; t++) {
        args[t] = (struct many_arg){ps, P, t * 77};
        CHECK(pthread_create(&th[t], NULL, use_many, &args[t]) == 0);
    }
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);
    for (int i = 0; i < P; i++) {
        fa_pool_stats_t st;
        fa_pool_stats(ps[i], &st);
        CHECK(st.live == 0);
        CHECK(st.gets == (unsigned long long)T * 20 * 64 + (i == P - 1 ? 4 : 0));
        fa_pool_destroy(ps[i]);
    }
}

static fa_pool *fork_pool;
static int fork_stop;

static void *fork_churn(void *arg)
{
    (void)arg;
    static __thread void *v[256];
    while (!__atomic_load_n(&fork_stop, __ATOMIC_ACQUIRE)) {
        for (int i = 0; i < 256; i++)
            v[i] = fa_pool_get(fork_pool);
        for (int i = 0; i < 256; i++)
            fa_pool_put(fork_pool, v[(i * 37) % 256]);
        fa_pool_trim(fork_pool);
    }
    return NULL;
}

static void test_fork_busy(void)
{
    /* fork() while another thread is inside the pool's locks: the child
     * uses the pool (get, put, trim, create, destroy) and must not hang. */
    fa_pool_options o = {.object_size = 40, .idle_trim_ms = 1};
    fork_pool = fa_pool_create(&o);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, fork_churn, NULL) == 0);
    int forks = slow ? 6 : 30; /* each child is a new valgrind process */
    for (int k = 0; k < forks; k++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            /* A deadlock in the child fails the test, not hangs it.  The
             * child's work takes milliseconds; two minutes is reached by a
             * hang alone, not by valgrind on a loaded machine. */
            alarm(120);
            void *a[1000];
            for (int i = 0; i < 1000; i++) {
                a[i] = fa_pool_get(fork_pool);
                if (a[i] == NULL)
                    _exit(3);
                memset(a[i], 0x5a, 40);
            }
            for (int i = 0; i < 1000; i++)
                fa_pool_put(fork_pool, a[i]);
            fa_pool_trim(fork_pool);
            fa_pool_options o2 = {.object_size = 24};
            fa_pool *p2 = fa_pool_create(&o2);
            if (p2 == NULL || fa_pool_get(p2) == NULL)
                _exit(4);
            fa_pool_destroy(p2);
            _exit(0);
        }
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    }
    __atomic_store_n(&fork_stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    fa_pool_destroy(fork_pool);
}

static void *trim_thread(void *arg)
{
    fa_pool_trim(arg);
    return NULL;
}

static void test_block_handed_over_and_trimmed(void)
{
    /* A block that a put emptied, then handed over and trimmed away by
     * another thread, must leave no trace in the local pool: a later put
     * that empties another block must not look at it. */
    fa_pool_options o = {.object_size = 64, .handover = 1 /* no spare */, .idle_trim_ms = -1};
    fa_pool *pool = fa_pool_create(&o);
    enum { N = 4000 }; /* about 4 blocks of 64 KiB */
    static char *v[N];
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < N; i++) {
            v[i] = fa_pool_get(pool);
            CHECK(v[i] != NULL);
        }
#define BLK(p) ((uintptr_t)(p) & ~(uintptr_t)0xffff)
        size_t k1 = 0, k2, k3;
        while (BLK(v[k1]) == BLK(v[0]))
            k1++;
        k2 = k1;
        while (BLK(v[k2]) == BLK(v[k1]))
            k2++;
        k3 = k2;
        while (k3 < N - 1 && BLK(v[k3]) == BLK(v[k2]))
            k3++;
#undef BLK
        CHECK(k3 < N - 1);
        /* Empty two blocks with puts while another block is current. */
        for (size_t i = 0; i < k2; i++)
            fa_pool_put(pool, v[i]);
        /* A get takes the last emptied block back; the object goes back; a
         * put elsewhere closes the block, which is handed over (no spare). */
        char *x = fa_pool_get(pool);
        CHECK(x == v[k2 - 1]);
        fa_pool_put(pool, x);
        fa_pool_put(pool, v[N - 1]);
        /* Another thread trims: both emptied blocks are unmapped. */
        pthread_t th;
        CHECK(pthread_create(&th, NULL, trim_thread, pool) == 0);
        pthread_join(th, NULL);
        /* Empty the next block: its put must not touch the unmapped ones. */
        for (size_t i = k2; i < N - 1; i++)
            fa_pool_put(pool, v[i]);
        fa_pool_stats_t st;
        fa_pool_stats(pool, &st);
        CHECK(st.live == 0);
    }
    fa_pool_destroy(pool);
}

/* A thread whose pool has already said goodbye (its exit handler ran) gets
 * and puts from another thread-exit destructor: the gets come from blocks
 * nobody owns, and the objects come back. */
enum { LATE_N = 300 };
static fa_pool *late_pool;
static pthread_key_t late_key;
static int late_ok;

static void late_destructor(void *arg)
{
    if (arg == (void *)1) { /* first pass: run again, after the pool's handler */
        pthread_setspecific(late_key, (void *)2);
        return;
    }
    static void *v[LATE_N];
    int ok = 1;
    for (int i = 0; i < LATE_N; i++) {
        v[i] = fa_pool_get(late_pool);
        ok &= v[i] != NULL;
        if (v[i] != NULL)
            memset(v[i], i & 0xff, 64);
    }
    for (int i = 0; i < LATE_N; i++) {
        ok &= v[i] != NULL && all_bytes(v[i], 64, (unsigned char)(i & 0xff));
        if (v[i] != NULL)
            fa_pool_put(late_pool, v[i]);
    }
    late_ok = ok;
}

static void *late_thread(void *arg)
{
    (void)arg;
    fa_pool_put(late_pool, fa_pool_get(late_pool)); /* the thread has a local pool */
    pthread_setspecific(late_key, (void *)1);
    return NULL;
}

static void test_get_after_thread_exit(void)
{
    fa_pool_options o = {.object_size = 64, .idle_trim_ms = -1};
    late_pool = fa_pool_create(&o);
    CHECK(pthread_key_create(&late_key, late_destructor) == 0);
    for (int round = 0; round < 3; round++) {
        late_ok = 0;
        pthread_t th;
        CHECK(pthread_create(&th, NULL, late_thread, NULL) == 0);
        pthread_join(th, NULL);
        CHECK(late_ok);
        fa_pool_stats_t st;
        fa_pool_stats(late_pool, &st);
        CHECKF(st.live == 0 && st.gets == (unsigned long long)(round + 1) * (LATE_N + 1),
               "live %zu gets %llu", st.live, st.gets);
        /* The objects came back: later rounds need no more memory. */
        static size_t bytes0;
        if (round == 0)
            bytes0 = st.bytes_os;
        CHECKF(st.bytes_os == bytes0, "round %d: %zu bytes, first %zu", round, st.bytes_os, bytes0);
    }
    pthread_key_delete(late_key);
    fa_pool_destroy(late_pool);
}

/* Requests handed between threads: each thread puts objects another thread
 * got, and its next gets are those objects, last put first, with no new
 * memory and nothing sent back to the getting thread.  A pool that returned
 * each put to its owner (this pool before its caches) cut new objects here. */
struct relay {
    fa_pool *pool;
    void **objs;
    int n;
    int ok;
};

static void *relay_thread(void *p)
{
    struct relay *r = p;
    for (int i = 0; i < r->n; i++) {
        CHECK(((uint64_t *)r->objs[i])[2] == (uint64_t)i);
        fa_pool_put(r->pool, r->objs[i]);
    }
    r->ok = 1;
    for (int i = r->n - 1; i >= 0; i--) {
        void *o = fa_pool_get(r->pool);
        r->ok &= o == r->objs[i];
        ((uint64_t *)o)[2] = ~(uint64_t)i;
    }
    for (int i = 0; i < r->n; i++)
        fa_pool_put(r->pool, r->objs[i]);
    return NULL;
}

static void test_cross_thread_reuse(void)
{
    fa_pool_options o = {.object_size = 192, .idle_trim_ms = -1};
    fa_pool *pool = fa_pool_create(&o);
    enum { N = 40 };
    static void *v[N];
    for (int i = 0; i < N; i++) {
        v[i] = fa_pool_get(pool);
        ((uint64_t *)v[i])[2] = (uint64_t)i;
    }
    fa_pool_stats_t st;
    fa_pool_stats(pool, &st);
    size_t bytes0 = st.bytes_os;
    struct relay r = {pool, v, N, 0};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, relay_thread, &r) == 0);
    pthread_join(th, NULL);
    CHECK(r.ok);
    fa_pool_stats(pool, &st);
    CHECKF(st.live == 0 && st.gets == 2 * N && st.puts == 2 * N, "live %zu gets %llu puts %llu", st.live,
           st.gets, st.puts);
    CHECKF(st.bytes_os == bytes0, "%zu bytes, %zu before", st.bytes_os, bytes0);
    fa_pool_destroy(pool);
}

int main(void)
{
    rss_meaningful = getenv("FA_TEST_UNDER_VALGRIND") == NULL;
    slow = FA_TEST_SLOW || !rss_meaningful;
    test_basic_and_lifo();
    test_state_kept();
    test_reuse_rss();
    test_cross_thread_and_exit();
    test_cap();
    test_bad_options();
    test_debug();
    test_destroy_rss();
    test_many_pools();
    test_address_order();
    test_idle_trim();
    test_remote_into_live_owner();
    test_remote_untouched();
    test_blocks_change_hands();
    test_pools_past_fast_slots();
    test_fork_busy();
    test_block_handed_over_and_trimmed();
    test_get_after_thread_exit();
    test_cross_thread_reuse();
    return check_done("test_pool");
}
