/* Memory that comes back, read from /proc/self/statm (never timed):
 *   peak   1 GiB of small blocks over 4 threads, freed, threads gone, no
 *          further call: RSS under 5% of the peak within 3 s (defaults);
 *   trim   with automatic purging off, fa_trim() brings RSS under 10% of
 *          the peak at once;
 *   bound  1,000 threads alive together, each having allocated and freed
 *          1 MiB in small blocks: their caches stay within the global bound,
 *          and give their claims on it back when they exit;
 *   churn  10,000 allocate/free pairs of 8 MiB make fewer than 10 mmaps;
 *   inflight  4 threads allocate and free large blocks with every free purged
 *          at once: the heap does not grow while freed pages are being
 *          purged (at most 28 MiB mapped for 4 MiB in use);
 *   merged  a block freed beside clean free space makes only its own pages
 *          dirty: 1,000 allocate/free pairs of 1 MiB beside 40 MiB of purged
 *          space purge less than 8 times what they free.
 * Run as `test_decay NAME`: each case in a fresh process, so that one case's
 * peak does not hide another's. */
#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <stdio.h>
#include <time.h>

#include "check.h"
#include "fastalloc.h"
#include "os/os.h"
#include "util.h"

static size_t per_thread;
/* RSS before the peak: what the process holds besides the blocks (under a
 * sanitizer, its runtime's own tens of MiB). */
static size_t baseline;
static pthread_barrier_t all_live;

static void *fill_and_free(void *arg)
{
    (void)arg;
    /* Sizes 16..1024: the small classes, several spans each. */
    size_t avg = 520, n = per_thread / avg;
    void **v = fa_malloc(n * sizeof *v);
    CHECK(v != NULL);
    for (size_t i = 0; i < n; i++) {
        size_t s = 16 + (i * 37) % 1009;
        v[i] = fa_malloc(s);
        CHECK(v[i] != NULL);
        memset(v[i], (int)i, s);
    }
    /* All four threads hold their share at once: that is the peak. */
    pthread_barrier_wait(&all_live);
    for (size_t i = 0; i < n; i++) {
        size_t s = 16 + (i * 37) % 1009;
        CHECK(((unsigned char *)v[i])[s - 1] == (unsigned char)i);
        fa_free(v[i]);
    }
    fa_free(v);
    return NULL;
}

static size_t peak_phase(size_t total)
{
    per_thread = total / 4;
    size_t before = rss_bytes();
    baseline = before;
    CHECK(pthread_barrier_init(&all_live, NULL, 4) == 0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, fill_and_free, NULL) == 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    /* The peak: the process's highest RSS, which the blocks the threads
     * wrote made. */
    struct rusage ru;
    CHECK(getrusage(RUSAGE_SELF, &ru) == 0);
    size_t peak = (size_t)ru.ru_maxrss * 1024;
    CHECKF(peak >= total + before, "peak %zu for %zu", peak, total);
    return peak;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int case_peak(void)
{
    /* 1 GiB in every build: the page heap keeps up to 16 MiB of dirty pages
     * after a fall (docs/MEMORY.md), and more than 1/8 of what is in use
     * during it, which is more than 5% of a smaller peak. */
    size_t total = (size_t)1 << 30;
    size_t peak = peak_phase(total);
    /* Wait with no allocator call: the RSS read is two syscalls. */
    size_t rss = 0;
    /* Counted above the baseline, so that a sanitizer runtime's resident
     * memory is not taken for blocks that were not given back. */
    for (int i = 0; i < 30; i++) {
        rss = rss_bytes();
        if (rss < baseline + (peak - baseline) / 20)
            break;
        sleep_ms(100);
    }
    printf("peak %zu MiB, RSS after %zu MiB (%zu MiB before the peak)\n", peak >> 20, rss >> 20,
           baseline >> 20);
    CHECKF(rss < baseline + (peak - baseline) / 20, "RSS %zu MiB of a %zu MiB peak (baseline %zu MiB)",
           rss >> 20, peak >> 20, baseline >> 20);
    return check_done("test_decay peak");
}

static int case_trim(void)
{
    CHECK(fa_option_set("purge_delay_ms", -1) == 0);
    long long v = 0;
    CHECK(fa_option_get("purge_delay_ms", &v) == 0 && v == -1);
    size_t total = FA_TEST_SLOW ? (128u << 20) : (512u << 20);
    size_t peak = peak_phase(total);
    size_t rss = rss_bytes();
    /* Nothing purged by itself: the freed memory is still resident. */
    CHECKF(rss > peak / 2, "RSS %zu MiB already below half of %zu MiB", rss >> 20, peak >> 20);
    size_t purged = fa_trim();
    rss = rss_bytes();
    printf("peak %zu MiB, purged %zu MiB, RSS after trim %zu MiB\n", peak >> 20, purged >> 20, rss >> 20);
    CHECK(purged > peak / 2);
    CHECKF(rss < peak / 10, "RSS %zu MiB of a %zu MiB peak", rss >> 20, peak >> 20);
    fa_stats_t st;
    fa_stats(&st);
    CHECK(st.dirty == 0);
    /* The memory is still usable after a trim. */
    void *p = fa_malloc(100);
    memset(p, 1, 100);
    fa_free(p);
    return check_done("test_decay trim");
}

enum { NTHREADS = 1000 };
static pthread_barrier_t done, go;

static void *churn_1m(void *arg)
{
    (void)arg;
    enum { N = 4096 }; /* 4096 x 256 B = 1 MiB */
    void *v[N];
    for (int i = 0; i < N; i++) {
        v[i] = fa_malloc(64 + (size_t)(i % 4) * 64);
        CHECK(v[i] != NULL);
        memset(v[i], 3, 64);
    }
    for (int i = 0; i < N; i++)
        fa_free(v[i]);
    pthread_barrier_wait(&done);
    pthread_barrier_wait(&go);
    return NULL;
}

static int case_bound(void)
{
    long long bound = 0;
    CHECK(fa_option_get("thread_cache_max", &bound) == 0);
    CHECK(bound > 0);
    CHECK(pthread_barrier_init(&done, NULL, NTHREADS + 1) == 0);
    CHECK(pthread_barrier_init(&go, NULL, NTHREADS + 1) == 0);
    static pthread_t t[NTHREADS];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 128 << 10);
    for (int i = 0; i < NTHREADS; i++)
        CHECK(pthread_create(&t[i], &attr, churn_1m, NULL) == 0);
    pthread_barrier_wait(&done);
    fa_stats_t st;
    fa_stats(&st);
    printf("%u threads: caches hold %zu KiB, claim %zu KiB, bound %zu KiB\n", st.threads,
           st.thread_caches >> 10, st.thread_caches_claimed >> 10, st.thread_caches_bound >> 10);
    CHECK(st.threads >= NTHREADS);
    CHECK(st.thread_caches_bound == (size_t)bound);
    CHECK(st.thread_caches <= st.thread_caches_claimed);
    CHECK(st.thread_caches_claimed <= (size_t)bound);
    /* Unbounded, these caches would hold about 150 MiB (256 blocks in each
     * of four classes, a thread): the bound is what held them, so the claims
     * reached it. */
    CHECK(st.thread_caches <= (size_t)bound);
    CHECKF(st.thread_caches_claimed >= (size_t)bound / 2, "claims %zu KiB: the bound did not bind",
           st.thread_caches_claimed >> 10);
    pthread_barrier_wait(&go);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    fa_stats(&st);
    /* The threads that exited gave their claims back: what is left is the
     * main thread's (it has a cache when malloc is overridden, as libc's
     * allocations are then fastalloc's), within one thread's cap.  Claims
     * left behind would be the whole bound, and threads to come would find
     * no room for their caches. */
    long long per_thread = 0;
    CHECK(fa_option_get("thread_cache_bytes", &per_thread) == 0 && per_thread > 0);
    CHECKF(st.threads <= 1, "%u caches after the threads exited", st.threads);
    CHECKF(st.thread_caches_claimed <= (st.threads == 1 ? (size_t)per_thread : 0),
           "%u caches claim %zu KiB after the threads exited", st.threads, st.thread_caches_claimed >> 10);
    return check_done("test_decay bound");
}

static int case_churn(void)
{
    size_t before = fa__os_map_calls;
    for (int i = 0; i < 10000; i++) {
        char *p = fa_malloc(8u << 20);
        CHECK(p != NULL);
        p[0] = 1;
        p[(8u << 20) - 1] = 2;
        fa_free(p);
    }
    size_t calls = fa__os_map_calls - before;
    printf("10000 x 8 MiB: %zu mmap calls\n", calls);
    CHECK(calls < 10);
    return check_done("test_decay churn");
}

/* Every free of a large block purges at once, outside the lock, and the
 * freed span has merged with the free space around it: while the madvise
 * runs, that whole space is off the lists.  Another thread allocating then
 * must wait for it, not map a new 64 MiB. */
static void *alloc_free_large(void *arg)
{
    uint64_t rng = (uintptr_t)arg + 1;
    for (int i = 0; i < 20000; i++) {
        size_t n = (256u << 10) + (size_t)rng_below(&rng, 768u << 10);
        unsigned char *p = fa_malloc(n);
        CHECK(p != NULL);
        p[0] = 1;
        p[n - 1] = 2;
        fa_free(p);
    }
    return NULL;
}

static int case_inflight(void)
{
    CHECK(fa_option_set("purge_delay_ms", 0) == 0);
    enum { T = 4 };
    pthread_t t[T];
    for (uintptr_t i = 0; i < T; i++)
        CHECK(pthread_create(&t[i], NULL, alloc_free_large, (void *)i) == 0);
    for (int i = 0; i < T; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    fa_stats_t st;
    fa_stats(&st);
    printf("%d threads x 20000 large blocks of at most 1 MiB, purged at each free: %zu MiB mapped\n", T,
           st.mapped >> 20);
    /* The heap grows by 4, 8, 16, 32 MiB: 28 MiB is room for 4 MiB in use
     * and its fragmentation (12 MiB are mapped here), not for growths taken
     * while pages were in flight (60 MiB before allocations waited). */
    CHECKF(st.mapped <= (28u << 20), "%zu MiB mapped", st.mapped >> 20);
    return check_done("test_decay inflight");
}

static int case_merged(void)
{
    /* 40 MiB of free space, all purged. */
    void *big = fa_malloc(40u << 20);
    CHECK(big != NULL);
    memset(big, 1, 40u << 20);
    fa_free(big);
    fa_trim();
    fa_stats_t st;
    fa_stats(&st);
    CHECK(st.dirty == 0);
    size_t purged0 = st.purged_total;
    enum { N = 1000 };
    size_t freed = 0;
    for (int i = 0; i < N; i++) {
        unsigned char *p = fa_malloc(1u << 20);
        CHECK(p != NULL);
        memset(p, i, 1u << 20);
        fa_free(p);
        freed += 1u << 20;
    }
    fa_stats(&st);
    size_t purged = st.purged_total - purged0;
    printf("%d x 1 MiB freed beside 40 MiB of clean space: %zu MiB purged, %zu MiB dirty\n", N,
           purged >> 20, st.dirty >> 20);
    /* Each free merges its 1 MiB with the clean space.  Counted whole as
     * dirty, the merged span passed the 16 MiB floor at every free and all
     * 41 MiB were purged each time (40x what was freed).  Counted by its
     * dirty pages, it passes the floor every 16 frees or so. */
    CHECKF(purged < 8 * freed, "%zu MiB purged for %zu MiB freed", purged >> 20, freed >> 20);
    CHECK(st.dirty <= (16u << 20));
    return check_done("test_decay merged");
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    if (strcmp(c, "peak") == 0)
        return case_peak();
    if (strcmp(c, "trim") == 0)
        return case_trim();
    if (strcmp(c, "bound") == 0)
        return case_bound();
    if (strcmp(c, "churn") == 0)
        return case_churn();
    if (strcmp(c, "inflight") == 0)
        return case_inflight();
    if (strcmp(c, "merged") == 0)
        return case_merged();
    fprintf(stderr, "usage: test_decay peak|trim|bound|churn|inflight|merged\n");
    return 2;
}
