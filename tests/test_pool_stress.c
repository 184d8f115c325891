/* Object pool under concurrency: threads get, put their own objects, and
 * pass objects to other threads through mailboxes (remote puts into blocks
 * whose owner is alive, exiting or gone), while threads come and go and a
 * trimmer calls fa_pool_trim (each generation waits for one of its trims,
 * so that trims and workers overlap on any machine).  Every object carries
 * its holder's stamp in all its words: an object handed out twice, or
 * reused while held, breaks a stamp.  At the end the pool's counts must
 * balance, and the ctor and dtor counts must match. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fastalloc.h"
#include "util.h"

enum { WORDS = 6, SIZE = WORDS * 8, MAILBOXES = 8, SLOTS = 1024 };

static fa_pool *pool;
static long ctors, dtors;
static int stop;
/* fa_pool_trim calls the trimmer thread has finished. */
static unsigned long trimmer_trims;

static void ctor(void *obj, void *arg)
{
    (void)arg;
    __atomic_fetch_add(&ctors, 1, __ATOMIC_RELAXED);
    memset(obj, 0, SIZE);
}

static void dtor(void *obj, void *arg)
{
    (void)arg;
    __atomic_fetch_add(&dtors, 1, __ATOMIC_RELAXED);
    /* A free object is never stamped: whoever held it cleared the stamp. */
    CHECK(((uint64_t *)obj)[0] == 0);
}

struct mailbox {
    pthread_mutex_t mu;
    void *slot[SLOTS];
    size_t n;
} boxes[MAILBOXES];

static void stamp(uint64_t *o, uint64_t s)
{
    CHECKF(o[0] == 0, "object %p handed out while held (stamp %llx)", (void *)o,
           (unsigned long long)o[0]);
    for (int i = 0; i < WORDS; i++)
        o[i] = s + (uint64_t)i;
}

static void unstamp(uint64_t *o, uint64_t s)
{
    for (int i = 0; i < WORDS; i++)
        CHECKF(o[i] == s + (uint64_t)i, "object %p word %d overwritten while held", (void *)o, i);
    o[0] = 0;
}

struct worker {
    uint64_t rng;
    uint64_t id;
    long ops;
    int wait_trim; /* halfway through, wait for a whole trim */
};

/* Wait until the trimmer has begun and finished a trim after this call:
 * one trim at least runs while this worker, halfway through its run, holds
 * its objects, however the threads are scheduled.  The trimmer trims every
 * 2 ms; only a trimmer that hangs takes two minutes. */
static void wait_for_a_trim(void)
{
    unsigned long t0 = __atomic_load_n(&trimmer_trims, __ATOMIC_ACQUIRE);
    double start = now_s();
    while (__atomic_load_n(&trimmer_trims, __ATOMIC_ACQUIRE) < t0 + 2) {
        CHECKF(now_s() - start < 120, "no trim finished in %.0f s", now_s() - start);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static void *work(void *arg)
{
    struct worker *w = arg;
    enum { HELD = 512 };
    uint64_t *held[HELD] = {0};
    uint64_t stamps[HELD];
    for (long op = 0; op < w->ops; op++) {
        if (w->wait_trim && op == w->ops / 2)
            wait_for_a_trim();
        uint64_t r = rng_next(&w->rng);
        size_t i = r % HELD;
        switch ((r >> 16) % 8) {
        case 0: case 1: case 2: /* get */
            if (held[i] == NULL) {
                held[i] = fa_pool_get(pool);
                CHECK(held[i] != NULL);
                stamps[i] = (w->id << 40) | ((uint64_t)op << 8);
                stamp(held[i], stamps[i]);
            }
            break;
        case 3: case 4: /* put our own */
            if (held[i] != NULL) {
                unstamp(held[i], stamps[i]);
                fa_pool_put(pool, held[i]);
                held[i] = NULL;
            }
            break;
        case 5: { /* mail one to another thread */
            if (held[i] == NULL)
                break;
            struct mailbox *b = &boxes[(r >> 24) % MAILBOXES];
            unstamp(held[i], stamps[i]);
            pthread_mutex_lock(&b->mu);
            if (b->n < SLOTS) {
                b->slot[b->n++] = held[i];
                held[i] = NULL;
            }
            pthread_mutex_unlock(&b->mu);
            if (held[i] != NULL) { /* box full: put it ourselves */
                fa_pool_put(pool, held[i]);
                held[i] = NULL;
            }
            break;
        }
        case 6: { /* put what others mailed: remote puts */
            struct mailbox *b = &boxes[(r >> 24) % MAILBOXES];
            pthread_mutex_lock(&b->mu);
            size_t n = b->n;
            void *take[SLOTS];
            memcpy(take, b->slot, n * sizeof *take);
            b->n = 0;
            pthread_mutex_unlock(&b->mu);
            for (size_t k = 0; k < n; k++) {
                CHECK(((uint64_t *)take[k])[0] == 0);
                fa_pool_put(pool, take[k]);
            }
            break;
        }
        default: /* put a run of ours, in random order */
            for (int k = 0; k < 32; k++) {
                size_t j = rng_below(&w->rng, HELD);
                if (held[j] != NULL) {
                    unstamp(held[j], stamps[j]);
                    fa_pool_put(pool, held[j]);
                    held[j] = NULL;
                }
            }
            break;
        }
    }
    /* Exit holding some objects half the time: another thread puts them. */
    for (size_t i = 0; i < HELD; i++) {
        if (held[i] == NULL)
            continue;
        unstamp(held[i], stamps[i]);
        struct mailbox *b = &boxes[i % MAILBOXES];
        int mailed = 0;
        if (w->id % 2) {
            pthread_mutex_lock(&b->mu);
            if (b->n < SLOTS) {
                b->slot[b->n++] = held[i];
                mailed = 1;
            }
            pthread_mutex_unlock(&b->mu);
        }
        if (!mailed)
            fa_pool_put(pool, held[i]);
    }
    return NULL;
}

static void *trimmer(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
        fa_pool_trim(pool);
        __atomic_add_fetch(&trimmer_trims, 1, __ATOMIC_RELEASE);
        fa_pool_stats_t st;
        fa_pool_stats(pool, &st);
        struct timespec ts = {0, 2 * 1000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int main(void)
{
    for (int i = 0; i < MAILBOXES; i++)
        pthread_mutex_init(&boxes[i].mu, NULL);
    fa_pool_options o = {.object_size = SIZE, .ctor = ctor, .dtor = dtor, .global_pools = 3,
                         .block_size = 16384, .idle_trim_ms = 5, .name = "stress"};
    pool = fa_pool_create(&o);
    CHECK(pool != NULL);
    pthread_t tt;
    CHECK(pthread_create(&tt, NULL, trimmer, NULL) == 0);
    enum { T = 8 };
    int generations = FA_TEST_SLOW ? 3 : 12;
    long ops = FA_TEST_SLOW ? 30000 : 300000;
    uint64_t id = 1;
    for (int gen = 0; gen < generations; gen++) {
        /* Threads come and go: each generation's exits hand their blocks
         * over while objects of those blocks sit in mailboxes. */
        pthread_t th[T];
        struct worker w[T];
        for (int t = 0; t < T; t++) {
            w[t] = (struct worker){.rng = mix64(id), .id = id, .ops = ops, .wait_trim = t == 0};
            id++;
            CHECK(pthread_create(&th[t], NULL, work, &w[t]) == 0);
        }
        for (int t = 0; t < T; t++)
            pthread_join(th[t], NULL);
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    pthread_join(tt, NULL);
    /* Whatever is still mailed goes back from the main thread. */
    for (int i = 0; i < MAILBOXES; i++) {
        for (size_t k = 0; k < boxes[i].n; k++)
            fa_pool_put(pool, boxes[i].slot[k]);
        boxes[i].n = 0;
    }
    fa_pool_stats_t st;
    fa_pool_stats(pool, &st);
    CHECKF(st.live == 0, "live %zu", st.live);
    CHECKF(st.gets == st.puts, "gets %llu puts %llu", st.gets, st.puts);
    CHECK(st.gets > 0);
    /* Every object built is free: the counts of the two kinds of free
     * objects add up to what the ctor built minus what trims destroyed. */
    CHECKF(st.free_local + st.free_global == (size_t)(ctors - dtors), "free %zu + %zu, built %ld - %ld",
           st.free_local, st.free_global, ctors, dtors);
    /* Each generation saw a trim of the trimmer's while it ran, and every
     * fa_pool_trim call is counted (the idle trims that released memory
     * come on top). */
    unsigned long made = __atomic_load_n(&trimmer_trims, __ATOMIC_ACQUIRE);
    CHECKF(made >= (unsigned long)generations, "the trimmer trimmed %lu times over %d generations", made,
           generations);
    CHECKF(st.trims >= made, "%llu trims counted, the trimmer made %lu", st.trims, made);
    /* All free now: a trim from here (the main thread's own blocks handed
     * over first) leaves nothing. */
    fa_pool_trim(pool);
    fa_pool_stats(pool, &st);
    CHECKF(st.bytes_os == 0, "bytes %zu after the last trim", st.bytes_os);
    CHECKF(ctors == dtors, "ctor %ld dtor %ld", ctors, dtors);
    fa_pool_destroy(pool);
    return check_done("test_pool_stress");
}
