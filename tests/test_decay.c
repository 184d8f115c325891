/* Memory that comes back, read from /proc/self/smaps_rollup (never timed):
 *   peak   1 GiB of small blocks over 4 threads, freed, threads gone, no
 *          further call: RSS under 5% of the peak at once (defaults; fall:
 *          the same with a purge delay of a minute); then 8 MiB freed under
 *          an hour's purge delay go once the test moves the allocator's
 *          clock past it, purged by the main thread's next slow path or,
 *          with FASTALLOC_BACKGROUND=1, by the background thread alone;
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
 *          space purge less than 8 times what they free;
 *   unreplaced  8 threads free 4 MiB each and exit, with no new thread and
 *          no fall (64 MiB stay in use): the exits give the freed memory
 *          back, down to 1/8 of the memory in use (RSS from /proc).
 * And the options no other test sets, each run under its environment
 * variable (tests/CMakeLists.txt) and checked by its effect:
 *   tc_bytes     THREAD_CACHE_BYTES=64K: one thread's cache holds and claims
 *          at most 64 KiB, after bursts of frees and after taking a span's
 *          whole free list;
 *   tc_max       THREAD_CACHE_MAX=256K: 8 threads' caches together too;
 *   madv_free    PURGE=free: fa_trim's pages show as LazyFree;
 *   huge_purge   HUGEPAGES=1: a purge keeps a huge page that a live block
 *          shares (mincore), releases the whole one, and RSS falls back
 *          after fa_trim;
 *   huge_advice  HUGEPAGES=1: the heap's mappings carry MADV_HUGEPAGE;
 *   calloc_zero  (under each of the purge modes) calloc of a purged large
 *          block reads zeros.
 * Run as `test_decay NAME`: each case in a fresh process, so that one case's
 * peak does not hide another's, and its options are those it starts with. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <stdio.h>
#include <time.h>

#include "check.h"
#include "fastalloc.h"
#include "01-os/clock.h"
#include "01-os/os.h"
#include "06-large/large.h"
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
    run_threads(4, fill_and_free, 0, 0);
    /* The peak: the process's highest RSS, which the blocks the threads
     * wrote made. */
    struct rusage ru;
    CHECK(getrusage(RUSAGE_SELF, &ru) == 0);
    size_t peak = (size_t)ru.ru_maxrss * 1024;
    CHECKF(peak >= total + before, "peak %zu for %zu", peak, total);
    return peak;
}

/* Frees the large block p into the page heap.  The hardened library's
 * shared keeper (06-large/large.c) holds a freed block of up to
 * TEST_SHARED_MAX first, guarded, until a decay tick or a trim gives it on:
 * the cases about the page heap's own policy hand it on at once, so that
 * their frees reach the page heap as the default library's do. */
static void free_to_page_heap(void *p)
{
    fa_free(p);
    if (FA_TEST_SECURE_LIB)
        fa__large_shared_trim(true);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The timed purge: an 8 MiB block freed under every rule's threshold stays
 * dirty until the purge delay has passed, then goes with the next tick.  The
 * delay is an hour, far longer than the test runs, and the test moves the
 * allocator's clock past it: what is checked does not hang on how fast the
 * machine runs.  The tick is the main thread's to run, at its next slow
 * path; with FASTALLOC_BACKGROUND=1 it is the background thread's, and the
 * main thread makes no allocator call until the purge is seen: only the
 * background thread can have done it. */
static void timed_purge(void)
{
    long long background = -1;
    CHECK(fa_option_get("background", &background) == 0);
    const long long delay = 3600 * 1000;
    CHECK(fa_option_set("purge_delay_ms", delay) == 0);
    fa_trim();
    const size_t n = 8u << 20;
    unsigned char *p = fa_malloc(n);
    CHECK(p != NULL);
    memset(p, 1, n);
    free_to_page_heap(p);
    fa_stats_t st;
    fa_stats(&st);
    size_t dirty0 = st.dirty;
    /* Under the 16 MiB that a free keeps dirty: no rule purges it. */
    CHECKF(dirty0 >= n, "%zu KiB dirty after an 8 MiB free: purged before the delay", dirty0 >> 10);
    fa__clock_advance_ms((uint64_t)delay);
    double waited = 0;
    if (background == 0) {
        /* A block of a class this thread has not used since the trim:
         * the allocation's slow path runs the tick. */
        void *q = fa_malloc(200u << 10);
        CHECK(q != NULL);
        fa_free(q);
        fa_stats(&st);
    } else {
        /* The background thread sleeps a tick interval (5 s at this delay)
         * between ticks.  Two minutes: only a thread that never ticks
         * waits that long. */
        double t0 = now_s();
        do {
            sleep_ms(1);
            fa_stats(&st);
            waited = now_s() - t0;
        } while (st.dirty + n > dirty0 && waited < 120);
    }
    printf("8 MiB freed under an hour's purge delay: %zu KiB dirty; the clock moved by the delay and a tick "
           "of the %s: %zu KiB dirty\n",
           dirty0 >> 10, background ? "background thread" : "main thread's slow path", st.dirty >> 10);
    CHECKF(st.dirty + n <= dirty0, "%zu KiB dirty after the delay, %zu KiB before (%s; waited %.0f s)",
           st.dirty >> 10, dirty0 >> 10, background ? "the background thread" : "the main thread's slow path",
           waited);
}

/* The cases that bound the process's resident memory or its page faults:
 * under ThreadSanitizer every heap page has shadow pages of its own, resident
 * and faulted in beside it, so no such bound holds there.  A visible skip
 * (tests/skips.txt lists each). */
static int tsan_skip(const char *name)
{
    printf("SKIP: test_decay %s bounds RSS or page faults, which ThreadSanitizer's shadow memory multiplies\n",
           name);
    return 77;
}

static int peak_case(const char *name)
{
    /* 1 GiB in every build: the page heap keeps up to 16 MiB of dirty pages
     * after a fall (docs/MEMORY.md), and more than 1/8 of what is in use
     * during it, which is more than 5% of a smaller peak. */
    size_t total = (size_t)1 << 30;
    size_t peak = peak_phase(total);
    /* No allocator call since the threads exited: the policy's rules at the
     * frees and the exits gave the memory back, and a background thread
     * could only have given back more.  Counted above the baseline, so that
     * a sanitizer runtime's resident memory is not taken for blocks that
     * were not given back. */
    size_t rss = rss_bytes();
    printf("peak %zu MiB, RSS after %zu MiB (%zu MiB before the peak)\n", peak >> 20, rss >> 20,
           baseline >> 20);
    if (!TEST_TSAN)
        CHECKF(rss < baseline + (peak - baseline) / 20, "RSS %zu MiB of a %zu MiB peak (baseline %zu MiB)",
               rss >> 20, peak >> 20, baseline >> 20);
    timed_purge();
    if (TEST_TSAN) {
        /* The threads, the fall and the timed purge ran, for the sanitizer
         * to watch; the RSS bound did not. */
        check_done(name);
        return tsan_skip(name + strlen("test_decay "));
    }
    return check_done(name);
}

static int case_peak(void)
{
    return peak_case("test_decay peak");
}

/* The same with a purge delay of a minute: only the purge policy's rules at
 * the frees and the threads' exits can give the memory back in time, not
 * the timer (test_decay_fall_background runs it with the background thread
 * running the ticks). */
static int case_fall(void)
{
    CHECK(fa_option_set("purge_delay_ms", 60 * 1000) == 0);
    return peak_case("test_decay fall");
}

static int case_trim(void)
{
    if (TEST_TSAN)
        return tsan_skip("trim");
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
        free_to_page_heap(p);
    }
    return NULL;
}

static int case_inflight(void)
{
    CHECK(fa_option_set("purge_delay_ms", 0) == 0);
    /* Every free goes to the page heap: no thread keeps large blocks. */
    CHECK(fa_option_set("thread_cache_bytes", 0) == 0);
    enum { T = 4 };
    run_threads(T, alloc_free_large, 0, 0);
    fa_stats_t st;
    fa_stats(&st);
    printf("%d threads x 20000 large blocks of at most 1 MiB, purged at each free: %zu MiB mapped\n", T,
           st.mapped >> 20);
    /* Requests under 1 MiB grow the heap by 4, 8, 16, 32 MiB: 28 MiB is
     * room for 4 MiB in use and its fragmentation (12 MiB are mapped here),
     * not for growths taken while pages were in flight (60 MiB and more
     * when allocations do not wait). */
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
        free_to_page_heap(p);
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

/* ---- The options that no other test sets, each run from the environment
 * (tests/CMakeLists.txt sets it per case) and checked by its effect. */

/* The option's value in effect must be what the environment asked for: a
 * test that ran under the defaults would prove nothing. */
static void expect_option(const char *name, long long want)
{
    long long v = -12345;
    CHECK(fa_option_get(name, &v) == 0);
    CHECKF(v == want, "%s is %lld, want %lld: run this case with its environment (tests/CMakeLists.txt)",
           name, v, want);
}

/* A field of /proc/self/smaps_rollup ("LazyFree", "Rss", ...) in bytes, or
 * -1 when the kernel does not report it. */
static long long rollup_field(const char *name)
{
    static char buf[8192];
    int fd = open("/proc/self/smaps_rollup", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char key[64];
    snprintf(key, sizeof key, "\n%s:", name);
    const char *f = strstr(buf, key);
    if (f == NULL)
        return -1;
    return strtoll(f + strlen(key), NULL, 10) * 1024;
}

/* The huge page that FASTALLOC_HUGEPAGES=1 keeps whole (04-pageheap/reclaim.c). */
#define HUGE_PAGE ((size_t)2 << 20)

/* Three large blocks side by side, a | b | c, in a fresh heap: b starts
 * 1 MiB past a huge-page boundary and is 4 MiB + 16 KiB long, so its span
 * holds one whole huge page, [b + 1 MiB, b + 3 MiB), and covers two more
 * in part, shared with a and c.  a and c stay allocated while b is free: b's
 * free span is exactly b.  Each block holds its own pattern. */
struct pinned {
    unsigned char *a, *b, *c;
    size_t alen, blen, clen;
};

static void pinned_layout(struct pinned *l)
{
    /* One mapping of 32 MiB, shrunk to a: the rest is the free space b and
     * c are cut from (larger than any other free span of a fresh heap, so
     * best fit takes them from its start). */
    unsigned char *x = fa_malloc(32u << 20);
    CHECK(x != NULL);
    uintptr_t b0 = (uintptr_t)x + (1u << 20);
    size_t adj = (HUGE_PAGE + (1u << 20) - b0 % HUGE_PAGE) % HUGE_PAGE;
    l->alen = (1u << 20) + adj;
    l->blen = (4u << 20) + (16u << 10);
    l->clen = 8u << 20;
    l->a = fa_realloc(x, l->alen);
    CHECKF(l->a == x, "realloc shrinking a large block moved it");
    l->b = fa_malloc(l->blen);
    l->c = fa_malloc(l->clen);
    CHECK(l->b != NULL && l->c != NULL);
    /* Not a check of the allocator's placement as such: without this layout
     * the checks that follow would test nothing. */
    CHECKF(l->b == l->a + l->alen && l->c == l->b + l->blen,
           "blocks not side by side: a %p (%zu), b %p (%zu), c %p", (void *)l->a, l->alen,
           (void *)l->b, l->blen, (void *)l->c);
    CHECK((uintptr_t)l->b % HUGE_PAGE == (1u << 20));
    pat_fill(l->a, l->alen, 0xa);
    pat_fill(l->b, l->blen, 0xb);
    pat_fill(l->c, l->clen, 0xc);
}

static void pinned_release(struct pinned *l)
{
    CHECKF(pat_ok(l->a, l->alen, 0xa), "block a lost its pattern");
    CHECKF(pat_ok(l->c, l->clen, 0xc), "block c lost its pattern");
    fa_free(l->a);
    fa_free(l->c);
}

/* calloc skips its memset on a span the page heap marks zeroed (released
 * with MADV_DONTNEED, whole).  Pages released with MADV_FREE keep their old
 * bytes until the kernel needs the memory, and with huge pages the ends of
 * a span that only partly cover a huge page are not released at all: such
 * a span must not be marked zeroed.  Each time: a large block written
 * non-zero, freed, purged, and a calloc of the same size that gets the same
 * pages back must read all zeros.  Run under PURGE=free, HUGEPAGES=1, both,
 * and the defaults (where the memset is skipped, rightly). */
static void calloc_after_purge(unsigned char *p, size_t n, const char *how)
{
    unsigned char *q = fa_calloc(1, n);
    CHECK(q != NULL);
    CHECKF(q == p, "%s: calloc(%zu) got %p, not the freed block %p: nothing was tested", how, n,
           (void *)q, (void *)p);
    size_t bad = (size_t)-1;
    for (size_t i = 0; i < n && bad == (size_t)-1; i++)
        if (q[i] != 0)
            bad = i;
    CHECKF(bad == (size_t)-1, "%s: calloc(%zu) byte %zu of %zu is %#x, not 0", how, n, bad, n,
           bad == (size_t)-1 ? 0 : q[bad]);
    fa_free(q);
}

static int case_calloc_zero(void)
{
    /* Every free goes to the page heap: no thread keeps a large block. */
    CHECK(fa_option_set("thread_cache_bytes", 0) == 0);
    long long madv_free = 0, huge = 0;
    CHECK(fa_option_get("purge_madv_free", &madv_free) == 0);
    CHECK(fa_option_get("hugepages", &huge) == 0);
    const char *env_purge = getenv("FASTALLOC_PURGE"), *env_huge = getenv("FASTALLOC_HUGEPAGES");
    CHECK(madv_free == (env_purge != NULL && strcmp(env_purge, "free") == 0));
    CHECK(huge == (env_huge != NULL && strcmp(env_huge, "1") == 0));
    printf("purge with %s, huge pages %s\n", madv_free ? "MADV_FREE" : "MADV_DONTNEED", huge ? "on" : "off");

    /* A span partly covering huge pages, freed between two live blocks and
     * purged by fa_trim. */
    struct pinned l;
    pinned_layout(&l);
    fa_free(l.b);
    fa_trim();
    fa_stats_t st;
    fa_stats(&st);
    CHECK(st.dirty == 0);
    calloc_after_purge(l.b, l.blen, "between two blocks, after fa_trim");
    pinned_release(&l);

    /* A block with free space on its right, purged by fa_trim, then at the
     * free itself (purge_delay_ms = 0). */
    size_t n = (8u << 20) + (24u << 10);
    unsigned char *p = fa_malloc(n);
    CHECK(p != NULL);
    memset(p, 0xa5, n);
    fa_free(p);
    fa_trim();
    calloc_after_purge(p, n, "after fa_trim");
    CHECK(fa_option_set("purge_delay_ms", 0) == 0);
    unsigned char *p2 = fa_malloc(n);
    CHECK(p2 == p);
    memset(p2, 0x5a, n);
    fa_free(p2);
    fa_stats(&st);
    CHECK(st.dirty == 0);
    calloc_after_purge(p, n, "purged at the free");
    return check_done("test_decay calloc_zero");
}

/* FASTALLOC_PURGE=free: fa_trim gives pages back with MADV_FREE, which the
 * kernel counts as LazyFree (still resident until it needs the memory);
 * MADV_DONTNEED drops them at once and LazyFree does not move. */
static int case_madv_free(void)
{
    expect_option("purge_madv_free", 1);
    /* Visible skips: a kernel that refuses MADV_FREE (fastalloc then uses
     * MADV_DONTNEED, as documented), or that does not report LazyFree. */
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    void *probe = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(probe != MAP_FAILED);
    memset(probe, 1, pg);
#ifdef MADV_FREE
    int refused = madvise(probe, pg, MADV_FREE) != 0;
#else
    int refused = 1;
#endif
    munmap(probe, pg);
    if (refused) {
        printf("SKIP: the kernel refuses MADV_FREE\n");
        return 77;
    }
    if (rollup_field("LazyFree") < 0) {
        printf("SKIP: /proc/self/smaps_rollup has no LazyFree field (kernel before 4.14)\n");
        return 77;
    }
    /* Only fa_trim purges. */
    CHECK(fa_option_set("purge_delay_ms", -1) == 0);
    size_t n = 64u << 20;
    unsigned char *p = fa_malloc(n);
    CHECK(p != NULL);
    memset(p, 0x77, n);
    fa_free(p);
    long long lazy0 = rollup_field("LazyFree");
    size_t purged = fa_trim();
    long long lazy1 = rollup_field("LazyFree");
    /* The pages serve again, and writing cancels the lazy free. */
    unsigned char *q = fa_malloc(n);
    CHECK(q == p);
    printf("fa_trim purged %zu MiB; LazyFree %lld -> %lld MiB\n", purged >> 20, lazy0 >> 20, lazy1 >> 20);
    CHECK(purged >= n);
    /* Half: the kernel may take some under memory pressure meanwhile. */
    CHECKF(lazy1 - lazy0 >= (long long)(n / 2), "LazyFree rose by %lld KiB for %zu KiB purged",
           (lazy1 - lazy0) >> 10, purged >> 10);
    pat_fill(q, n, 77);
    CHECK(pat_ok(q, n, 77));
    fa_free(q);
    return check_done("test_decay madv_free");
}

/* FASTALLOC_HUGEPAGES=1: purging gives back only whole huge pages inside a
 * free span, so that none is split (mincore: the part a span shares with a
 * live block stays resident, the whole huge page inside goes); everything
 * else still works, and after fa_trim the resident set is back near where
 * it started. */
static int case_huge_purge(void)
{
    if (TEST_TSAN)
        return tsan_skip("huge_purge");
    expect_option("hugepages", 1);
    expect_option("purge_madv_free", 0);
    struct pinned l;
    pinned_layout(&l);
    fa_free(l.b);
    fa_trim();
    unsigned char *whole = l.b + (1u << 20), *tail = l.b + (3u << 20);
    size_t head_res = resident_bytes(l.b, 1u << 20), whole_res = resident_bytes(whole, HUGE_PAGE),
           tail_res = resident_bytes(tail, l.blen - (3u << 20));
    printf("freed span of %zu KiB at 1 MiB past a huge page: resident head %zu KiB, whole huge page "
           "%zu KiB, tail %zu KiB\n",
           l.blen >> 10, head_res >> 10, whole_res >> 10, tail_res >> 10);
    CHECKF(whole_res == 0, "%zu KiB of the whole huge page still resident", whole_res >> 10);
    /* (At least: with OS pages above 16 KiB, the tail's last page reaches
     * into c.) */
    CHECKF(head_res >= (1u << 20), "the head, in a huge page shared with a live block, lost %zu KiB",
           (((size_t)1 << 20) - head_res) >> 10);
    CHECKF(tail_res >= l.blen - (3u << 20), "the tail, in a huge page shared with a live block, lost %zu KiB",
           (l.blen - (3u << 20) - tail_res) >> 10);
    pinned_release(&l);

    /* The heap at work: small and large blocks with patterns, then all
     * freed and trimmed. */
    fa_trim();
    size_t before = rss_bytes();
    enum { NLARGE = 48, NSMALL = 20000 };
    static unsigned char *large[NLARGE], *small[NSMALL];
    uint64_t rng = 42;
    size_t total = 0;
    for (int i = 0; i < NLARGE; i++) {
        size_t s = (1u << 20) + (size_t)rng_below(&rng, 2u << 20);
        large[i] = fa_malloc(s);
        CHECK(large[i] != NULL);
        pat_fill(large[i], s, (uint64_t)i);
        total += s;
    }
    for (int i = 0; i < NSMALL; i++) {
        size_t s = 16 + (size_t)(i * 37) % 2000;
        small[i] = fa_malloc(s);
        CHECK(small[i] != NULL);
        pat_fill(small[i], s, 1000u + (uint64_t)i);
        total += s;
    }
    size_t peak = rss_bytes();
    rng = 42;
    for (int i = 0; i < NLARGE; i++) {
        size_t s = (1u << 20) + (size_t)rng_below(&rng, 2u << 20);
        CHECKF(pat_ok(large[i], s, (uint64_t)i), "large block %d lost its pattern", i);
        fa_free(large[i]);
    }
    for (int i = 0; i < NSMALL; i++) {
        size_t s = 16 + (size_t)(i * 37) % 2000;
        CHECKF(pat_ok(small[i], s, 1000u + (uint64_t)i), "small block %d lost its pattern", i);
        fa_free(small[i]);
    }
    fa_trim();
    size_t after = rss_bytes();
    printf("%zu MiB in blocks: RSS %zu MiB before, %zu MiB at the peak, %zu MiB after fa_trim\n",
           total >> 20, before >> 20, peak >> 20, after >> 20);
    /* Every block is resident at the peak; some may reuse pages that were
     * resident before (the page heap takes dirty pages first). */
    CHECKF(peak >= total, "RSS %zu KiB at the peak, %zu KiB in blocks", peak >> 10, total >> 10);
    /* The blocks' free spans merge into whole mappings, which go back whole;
     * what stays is huge pages shared with the allocator's own live spans. */
    CHECKF(after <= before + total / 10, "RSS %zu MiB after fa_trim, %zu MiB before the blocks",
           after >> 20, before >> 20);
    return check_done("test_decay huge_purge");
}

/* FASTALLOC_HUGEPAGES=1 asks the kernel for transparent huge pages on the
 * heap's mappings: their VmFlags in /proc/self/smaps carry "hg".  Turned
 * off from code, the next mapping does not. */
static int vma_has_flag(const void *p, const char *flag)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    CHECK(f != NULL);
    char line[512];
    int in = 0, found = -1;
    while (found < 0 && fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        size_t word = strcspn(line, " ");
        /* A mapping's first line starts "lo-hi "; its fields, "Name:". */
        if (word > 0 && line[word - 1] != ':' && sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
            found = 0;
            for (char *t = strtok(line + 8, " \n"); t != NULL; t = strtok(NULL, " \n"))
                if (strcmp(t, flag) == 0)
                    found = 1;
        }
    }
    fclose(f);
    CHECKF(found >= 0, "no VmFlags for %p in /proc/self/smaps", p);
    return found;
}

static int case_huge_advice(void)
{
    expect_option("hugepages", 1);
    if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) != 0) {
        printf("SKIP: this kernel has no transparent huge pages\n");
        return 77;
    }
    unsigned char *p = fa_malloc(16u << 20);
    CHECK(p != NULL);
    memset(p, 1, 16u << 20);
    CHECKF(vma_has_flag(p, "hg") == 1, "the heap's mapping was not advised MADV_HUGEPAGE");
    /* Off: the next growth of the heap (a block larger than all its free
     * space) is not advised.  The block may begin in the free space at the
     * heap's top, grown into with the option on: its end lies in the new
     * growth. */
    CHECK(fa_option_set("hugepages", 0) == 0);
    const size_t qn = 128u << 20;
    unsigned char *q = fa_malloc(qn);
    CHECK(q != NULL);
    q[qn - 1] = 1;
    CHECKF(vma_has_flag(q + qn - 1, "hg") == 0, "a growth made with hugepages 0 was advised MADV_HUGEPAGE");
    CHECKF(vma_has_flag(p, "hg") == 1, "the first mapping lost its advice");
    fa_free(q);
    fa_free(p);
    return check_done("test_decay huge_advice");
}

/* FASTALLOC_THREAD_CACHE_BYTES=64K: after bursts of frees in many classes,
 * the one thread's cache holds at most 64 KiB (under the default, 2 MiB,
 * these bursts leave over 1 MiB in it). */
static int case_tc_bytes(void)
{
    const size_t cap = 64u << 10;
    expect_option("thread_cache_bytes", (long long)cap);
    static const size_t sizes[] = {16, 48, 128, 400, 1024, 3072, 8192, 32768};
    enum { N = 256 };
    static void *v[N];
    size_t most = 0, claimed_most = 0;
    for (int round = 0; round < 4; round++) {
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            for (int i = 0; i < N; i++) {
                v[i] = fa_malloc(sizes[k]);
                CHECK(v[i] != NULL);
                memset(v[i], i, sizes[k]);
            }
            for (int i = 0; i < N; i++) {
                CHECK(((unsigned char *)v[i])[sizes[k] - 1] == (unsigned char)i);
                fa_free(v[i]);
            }
            fa_stats_t st;
            fa_stats(&st);
            CHECK(st.threads == 1);
            if (st.thread_caches > most)
                most = st.thread_caches;
            if (st.thread_caches_claimed > claimed_most)
                claimed_most = st.thread_caches_claimed;
            CHECKF(st.thread_caches <= cap, "round %d, %zu-byte blocks: the cache holds %zu KiB", round,
                   sizes[k], st.thread_caches >> 10);
            CHECKF(st.thread_caches_claimed <= cap, "round %d, %zu-byte blocks: the cache claims %zu KiB",
                   round, sizes[k], st.thread_caches_claimed >> 10);
        }
    }
    printf("one thread, bursts of %d frees: the cache held at most %zu KiB, claimed %zu KiB (cap %zu KiB)\n",
           N, most >> 10, claimed_most >> 10, cap >> 10);
    /* The cache still caches. */
    CHECK(most > 0);

    /* A list that runs dry takes a span's whole free list at once, however
     * long.  Spans of 32 KiB blocks (8 to a span) with every other block
     * free, and the cache emptied by fa_trim: the next allocation gets 4
     * blocks, 128 KiB, and may keep only what fits in 64 KiB. */
    enum { M = 64 };
    static void *w[M];
    for (int i = 0; i < M; i++) {
        w[i] = fa_malloc(32u << 10);
        CHECK(w[i] != NULL);
        memset(w[i], i, 32u << 10);
    }
    for (int i = 0; i < M; i += 2)
        fa_free(w[i]);
    fa_trim();
    void *one = fa_malloc(32u << 10);
    CHECK(one != NULL);
    fa_stats_t st;
    fa_stats(&st);
    printf("after taking a span's free list of 32 KiB blocks: the cache holds %zu KiB, claims %zu KiB\n",
           st.thread_caches >> 10, st.thread_caches_claimed >> 10);
    CHECKF(st.thread_caches <= cap, "the cache holds %zu KiB", st.thread_caches >> 10);
    CHECKF(st.thread_caches_claimed <= cap, "the cache claims %zu KiB", st.thread_caches_claimed >> 10);
    fa_free(one);
    for (int i = 1; i < M; i += 2)
        fa_free(w[i]);
    return check_done("test_decay tc_bytes");
}

/* FASTALLOC_THREAD_CACHE_MAX=256K: 8 threads alive together, each having
 * freed bursts of small blocks, hold at most 256 KiB together (under the
 * default, 64 MiB, they hold over 1 MiB). */
enum { TC_THREADS = 8 };
static pthread_barrier_t tc_done, tc_go;

static void *burst_and_wait(void *arg)
{
    (void)arg;
    enum { N = 256 };
    void *v[N];
    for (size_t s = 64; s <= 1024; s *= 2) {
        for (int i = 0; i < N; i++) {
            v[i] = fa_malloc(s);
            CHECK(v[i] != NULL);
            memset(v[i], i, s);
        }
        for (int i = 0; i < N; i++)
            fa_free(v[i]);
    }
    pthread_barrier_wait(&tc_done);
    pthread_barrier_wait(&tc_go);
    return NULL;
}

static int case_tc_max(void)
{
    const size_t bound = 256u << 10;
    expect_option("thread_cache_max", (long long)bound);
    CHECK(pthread_barrier_init(&tc_done, NULL, TC_THREADS + 1) == 0);
    CHECK(pthread_barrier_init(&tc_go, NULL, TC_THREADS + 1) == 0);
    pthread_t t[TC_THREADS];
    for (int i = 0; i < TC_THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, burst_and_wait, NULL) == 0);
    pthread_barrier_wait(&tc_done);
    fa_stats_t st;
    fa_stats(&st);
    printf("%u threads: caches hold %zu KiB, claim %zu KiB, bound %zu KiB\n", st.threads,
           st.thread_caches >> 10, st.thread_caches_claimed >> 10, st.thread_caches_bound >> 10);
    CHECK(st.threads >= TC_THREADS);
    CHECK(st.thread_caches_bound == bound);
    CHECKF(st.thread_caches <= bound, "the caches hold %zu KiB", st.thread_caches >> 10);
    CHECKF(st.thread_caches_claimed <= bound, "the caches claim %zu KiB", st.thread_caches_claimed >> 10);
    /* They still cache. */
    CHECK(st.thread_caches > 0);
    pthread_barrier_wait(&tc_go);
    for (int i = 0; i < TC_THREADS; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    return check_done("test_decay tc_max");
}

/* Page faults of this process so far. */
static long minor_faults(void)
{
    struct rusage ru;
    CHECK(getrusage(RUSAGE_SELF, &ru) == 0);
    return ru.ru_minflt;
}

/* A heap that churns large blocks keeps its pages: after a warm-up, reusing
 * freed memory takes at most a few page faults per replacement, not one
 * per page (a 2-8 MiB block has 512-2048 pages).  The purge delay is a
 * minute, so that only the rules at a free are tested, not the timer. */
static int case_reuse(void)
{
    if (TEST_TSAN)
        return tsan_skip("reuse");
    CHECK(fa_option_set("purge_delay_ms", 60 * 1000) == 0);
    enum { LIVE = 16, WARM = 200, ROUNDS = 1000 };
    static unsigned char *live[LIVE];
    static size_t size[LIVE];
    uint64_t rng = 42;
    long faults = 0;
    for (int r = 0; r < WARM + ROUNDS; r++) {
        if (r == WARM)
            faults = minor_faults();
        unsigned i = (unsigned)rng_below(&rng, LIVE);
        if (live[i] != NULL) {
            CHECK(live[i][0] == (unsigned char)i && live[i][size[i] - 1] == (unsigned char)i);
            fa_free(live[i]);
        }
        size[i] = (2u << 20) + (size_t)rng_below(&rng, 6u << 20);
        live[i] = fa_malloc(size[i]);
        CHECK(live[i] != NULL);
        memset(live[i], (int)i, size[i]); /* every page, as a program would */
    }
    faults = minor_faults() - faults;
    fa_stats_t st;
    fa_stats(&st);
    printf("%d replacements of 2-8 MiB blocks among %d: %ld page faults (%.1f each), "
           "%zu MiB mapped, %zu MiB purged\n", ROUNDS, LIVE, faults, (double)faults / ROUNDS,
           st.mapped >> 20, st.purged_total >> 20);
    /* A few faults a replacement, and a fixed allowance for what is not the
     * heap's (a sanitizer's shadow memory, the page map's leaves).  The
     * hardened library's guard pages add up to two (06-large/large.c): a
     * guard made over a free page discards what was there, and the page
     * comes back empty when the guard is undone, each a fault at its next
     * use. */
    const long per_round = FA_TEST_SECURE_LIB ? 4 + 2 : 4;
    CHECKF(faults <= 1024 + per_round * ROUNDS, "%ld page faults for %d replacements", faults, ROUNDS);
    /* At most 16 blocks of 8 MiB live: 128 MiB mapped is measured, twice
     * that is a heap that did not reuse its free ranges.  Nothing is purged
     * (0 MiB measured) while every freed range is taken again at once; a
     * purge of one in eight replacements would be 300 MiB. */
    CHECKF(st.mapped <= (size_t)LIVE * (16u << 20), "%zu MiB mapped for %d blocks of at most 8 MiB",
           st.mapped >> 20, LIVE);
    CHECKF(st.purged_total <= (32u << 20), "%zu MiB purged while every freed block was taken again",
           st.purged_total >> 20);
    for (unsigned i = 0; i < LIVE; i++)
        fa_free(live[i]);
    return check_done("test_decay reuse");
}

/* A program that allocates its working set, frees it all and allocates it
 * again (a compiler's passes, a batch job's rounds) faults its pages once:
 * the page heap hands out pages that are resident before clean ones.  Best
 * fit alone took the clean top of the grown heap over the freed pages below
 * it, and a second and a fourth round faulted 565 and 560 pages (#39). */
static int case_rounds(void)
{
    if (TEST_TSAN)
        return tsan_skip("rounds");
    CHECK(fa_option_set("purge_delay_ms", 60 * 1000) == 0);
    enum { N = 10000, SIZE = 1024, ROUNDS = 6 };
    static unsigned char *b[N];
    long first = 0, later = 0;
    for (int r = 0; r < ROUNDS; r++) {
        long f0 = minor_faults();
        for (int i = 0; i < N; i++) {
            b[i] = fa_malloc(SIZE);
            CHECK(b[i] != NULL);
            memset(b[i], r + 1, SIZE);
        }
        for (int i = 0; i < N; i++) {
            CHECK(b[i][0] == r + 1 && b[i][SIZE - 1] == r + 1);
            fa_free(b[i]);
        }
        long f = minor_faults() - f0;
        if (r == 0)
            first = f;
        else
            later += f;
    }
    printf("%d rounds of %d blocks of %d B: %ld page faults in the first, %ld in the %d after it\n",
           ROUNDS, N, SIZE, first, later, ROUNDS - 1);
    /* The first round faults its 10 MB (2,500 pages of 4 KiB); the later
     * ones only what the first left uncut (a span's end: 4 measured), and a
     * sanitizer's shadow of what they cut. */
    CHECKF(first >= (long)N * SIZE / 2 / 4096, "%ld page faults for %d KiB: is RSS measured?", first,
           N * SIZE / 1024);
    CHECKF(later <= 64, "%ld page faults in rounds that reuse the first one's memory", later);
    return check_done("test_decay rounds");
}

/* Threads that start, allocate, hand blocks to the next thread and exit:
 * an exit is no fall in use when the next thread allocates as much again,
 * so it must not purge what the next thread reuses. */
enum { HAND = 24 };
static void *hand_on(void *arg)
{
    unsigned char **blocks = arg;
    for (int i = 0; i < HAND; i++) {
        if (blocks[i] != NULL) {
            CHECK(blocks[i][0] == 0x5a);
            fa_free(blocks[i]);
        }
        blocks[i] = fa_malloc(300u << 10);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], 0x5a, 300u << 10);
    }
    /* And a burst of its own, freed before it exits. */
    void *own[64];
    for (int i = 0; i < 64; i++) {
        own[i] = fa_malloc(300u << 10);
        CHECK(own[i] != NULL);
        memset(own[i], 1, 300u << 10);
    }
    for (int i = 0; i < 64; i++)
        fa_free(own[i]);
    return NULL;
}

static int case_thread_reuse(void)
{
    if (TEST_TSAN)
        return tsan_skip("thread_reuse");
    CHECK(fa_option_set("purge_delay_ms", 60 * 1000) == 0);
    enum { WARM = 10, GENS = FA_TEST_SLOW ? 40 : 200 };
    static unsigned char *blocks[HAND];
    long faults = 0;
    for (int g = 0; g < WARM + GENS; g++) {
        if (g == WARM)
            faults = minor_faults();
        pthread_t t;
        CHECK(pthread_create(&t, NULL, hand_on, blocks) == 0);
        CHECK(pthread_join(t, NULL) == 0);
    }
    faults = minor_faults() - faults;
    /* Each generation writes 88 blocks of 300 KiB: 6,600 pages. */
    fa_stats_t st;
    fa_stats(&st);
    printf("%d thread generations: %ld page faults (%.1f each), %zu MiB mapped, %zu MiB purged\n", GENS,
           faults, (double)faults / GENS, st.mapped >> 20, st.purged_total >> 20);
    CHECKF(faults <= 100 * GENS, "%ld page faults for %d generations", faults, GENS);
    /* 24 + 64 blocks of 300 KiB are live at once (26 MiB): 28 MiB mapped
     * is measured.  Purged: 36 MiB, over 200 generations as over 40 (the
     * sanitizer build), from the first generations' bursts; a purge of what
     * the next generation reuses would be 7 MiB a generation, 280 MiB in 40. */
    CHECKF(st.mapped <= (64u << 20), "%zu MiB mapped for 26 MiB live at most", st.mapped >> 20);
    CHECKF(st.purged_total <= (96u << 20), "%zu MiB purged in %d generations", st.purged_total >> 20, GENS);
    for (int i = 0; i < HAND; i++)
        fa_free(blocks[i]);
    return check_done("test_decay thread_reuse");
}

/* Threads that exit and are not replaced: their memory comes back at their
 * exits, though the memory in use never fell to half its peak.  (Exits that
 * are replaced keep it: thread_reuse.) */
enum { UNREPLACED = 8 };
static pthread_barrier_t unreplaced_bar;

static void *free_and_wait(void *arg)
{
    (void)arg;
    enum { N = 4096 };
    static __thread unsigned char *v[N];
    for (int i = 0; i < N; i++) {
        v[i] = fa_malloc(1024);
        CHECK(v[i] != NULL);
        memset(v[i], i, 1024);
    }
    for (int i = 0; i < N; i++) {
        CHECK(v[i][1023] == (unsigned char)i);
        fa_free(v[i]);
    }
    /* Every thread has its cache before the first one exits. */
    pthread_barrier_wait(&unreplaced_bar);
    return NULL;
}

/* The process's resident bytes, from /proc/self/statm; the test stops if
 * it cannot be read, so that no missing value passes a bound. */
static size_t process_rss(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, rss = -1;
    CHECK(f != NULL);
    if (f != NULL) {
        CHECK(fscanf(f, "%ld %ld", &size, &rss) == 2);
        fclose(f);
    }
    CHECK(rss >= 0);
    return (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
}

static int case_unreplaced(void)
{
    if (TEST_TSAN)
        return tsan_skip("unreplaced");
    CHECK(fa_option_set("purge_delay_ms", 60 * 1000) == 0); /* no timed purge */
    enum { LIVE = 64 << 20, BLOCK = 4096 };
    static unsigned char *live[LIVE / BLOCK];
    for (size_t i = 0; i < LIVE / BLOCK; i++) {
        live[i] = fa_malloc(BLOCK);
        CHECK(live[i] != NULL);
        memset(live[i], 1, BLOCK);
    }
    size_t rss0 = process_rss();
    CHECK(pthread_barrier_init(&unreplaced_bar, NULL, UNREPLACED) == 0);
    run_threads(UNREPLACED, free_and_wait, 0, 0);
    size_t rss1 = process_rss();
    fa_stats_t st;
    fa_stats(&st);
    size_t in_use = st.in_spans + st.large;
    printf("%d threads freed %d MiB and exited: %zu MiB in use, %zu MiB dirty, %zu MiB purged, RSS %zu -> %zu MiB\n",
           UNREPLACED, UNREPLACED * 4, in_use >> 20, st.dirty >> 20, st.purged_total >> 20, rss0 >> 20,
           rss1 >> 20);
    /* No fall: 64 MiB of 96 stayed in use. */
    CHECK(in_use >= (size_t)LIVE && in_use <= (size_t)LIVE + (16u << 20));
    /* The exits gave the threads' 32 MiB back: the process holds no more
     * than before the threads came, but for what may stay dirty (bounded
     * below) and the threads' own leftovers (up to 3 MiB measured, under
     * AddressSanitizer; a 21 MiB rise when exits kept their spans).  The
     * check was purged_total once, which counts whole spans, resident or
     * not: 13 to 116 MiB over runs that all gave the memory back. */
    CHECKF(rss1 <= rss0 + in_use / 8 + (4u << 20), "RSS %zu MiB after %d threads freed %d MiB and exited, %zu before",
           rss1 >> 20, UNREPLACED, UNREPLACED * 4, rss0 >> 20);
    CHECKF(st.dirty <= in_use / 8, "%zu MiB dirty after the threads exited, more than 1/8 of %zu MiB in use",
           st.dirty >> 20, in_use >> 20);
    for (size_t i = 0; i < LIVE / BLOCK; i++)
        fa_free(live[i]);
    return check_done("test_decay unreplaced");
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"peak", case_peak},           {"trim", case_trim},
        {"bound", case_bound},         {"churn", case_churn},
        {"inflight", case_inflight},   {"merged", case_merged},
        {"calloc_zero", case_calloc_zero}, {"madv_free", case_madv_free},
        {"huge_purge", case_huge_purge}, {"huge_advice", case_huge_advice},
        {"tc_bytes", case_tc_bytes},   {"tc_max", case_tc_max},
        {"reuse", case_reuse},         {"thread_reuse", case_thread_reuse},
        {"rounds", case_rounds},
        {"fall", case_fall},           {"unreplaced", case_unreplaced},
    };
    /* What ran before main (expect_build.c's blocks, fa_test SECURE) gives
     * its pages back first: free pages below a case's blocks would take
     * their next allocation at a lower address (madv_free and calloc_zero
     * count on the same block coming back), and the cases' bounds are of a
     * heap that held nothing before them. */
    fa_trim();
    return check_run_case("test_decay", cases, sizeof cases / sizeof cases[0], argc, argv);
}
