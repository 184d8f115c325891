/* Each part of the memory that `make bench`'s memory table splits the heap
 * into goes back (docs/DESIGN.md, "Where idle memory goes back"), read from
 * fa_stats (never timed; the allocator's clock is moved, not waited for):
 *   spare    all-free spans (of 4 pages: classes up to 4 KiB) that a thread
 *            gives up in one class are its spares, and the next spans of
 *            another class are cut from them: the heap's small spans do not grow (a span kept
 *            for its class alone made them grow by what the first class
 *            freed);
 *   owned    a class the thread no longer allocates from does not keep its
 *            spans: two scavenges later, the spare spans are back in the page
 *            heap (owned free memory with no age held them until the thread
 *            exited);
 *   central  blocks of a thread that exited, freed later by another thread,
 *            leave no span in the central cache once all are free;
 *   metadata 4,000 threads one after another, and 30 rounds of 1,000
 *            large blocks of many lengths among small blocks, allocated and
 *            freed in another order, add no metadata after the first round
 *            (thread caches and span records are reused).
 * The fifth part, free pages not yet purged, is test_decay's: its timed
 * purge (in peak and fall) fails when aged dirty pages stay.
 * Run as `test_parts NAME`, each case in a fresh process. */
#include <pthread.h>
#include <stdio.h>

#include "check.h"
#include "fastalloc.h"
#include "01-os/clock.h"
#include "util.h"

#define KIB(x) ((x) >> 10)

static fa_stats_t stats(void)
{
    fa_stats_t st;
    fa_stats(&st);
    return st;
}

/* n blocks of size bytes, each written whole; the pointers in a static
 * array, so that the heap holds the blocks alone. */
enum { MAXN = 1 << 20 };
static void *slots[2][MAXN];

static void **fill_in(void **v, size_t n, size_t size)
{
    CHECK(n <= MAXN);
    for (size_t i = 0; i < n; i++) {
        v[i] = fa_malloc(size);
        CHECK(v[i] != NULL);
        memset(v[i], (int)(i & 0xff), size);
    }
    return v;
}

static void drain(void **v, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        CHECK(((unsigned char *)v[i])[size - 1] == (unsigned char)(i & 0xff));
        fa_free(v[i]);
    }
}

static void **fill(size_t n, size_t size)
{
    return fill_in(slots[0], n, size);
}

enum { N64 = 8000 }; /* 8,000 blocks of 64 B: about 16 spans */

static int case_spare(void)
{
    void **v = fill(N64, 64);
    drain(v, N64, 64);
    fa_stats_t a = stats();
    printf("after freeing %d x 64 B: small spans %zu KiB, the thread keeps %zu KiB\n", N64, KIB(a.in_spans),
           KIB(a.thread_caches));
    /* All but the current span are all free, and the default share holds
     * them: kept for reuse, not given to the page heap. */
    CHECKF(a.thread_caches >= (size_t)N64 * 64 * 3 / 4, "the thread keeps %zu KiB of %zu KiB freed",
           KIB(a.thread_caches), KIB((size_t)N64 * 64));
    /* The same bytes in blocks of 48 B, another class with spans of the
     * same length: cut from the spares. */
    size_t n48 = (size_t)N64 * 64 / 48;
    void **w = fill_in(slots[1], n48, 48);
    fa_stats_t b = stats();
    printf("then %zu x 48 B: small spans %zu KiB, the thread keeps %zu KiB\n", n48, KIB(b.in_spans),
           KIB(b.thread_caches));
    /* Two spans of slack: the 48 B blocks fill one span more than the 64 B
     * ones left spare (their current span stays the thread's). */
    CHECKF(b.in_spans <= a.in_spans + (64u << 10), "small spans grew from %zu to %zu KiB: the 64 B class's "
           "free pages were not reused", KIB(a.in_spans), KIB(b.in_spans));
    CHECKF(b.thread_caches + (size_t)N64 * 64 / 2 <= a.thread_caches, "the thread still keeps %zu KiB",
           KIB(b.thread_caches));
    drain(w, n48, 48);
    return check_done("test_parts spare");
}

/* Allocations that leave the fast path: each takes a span of a class the
 * thread had none of, and so runs the slow path's housekeeping. */
static void slow_paths(void)
{
    static const size_t sizes[] = {1536, 1792, 2048, 2304};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        void **v = fill(16, sizes[k]);
        drain(v, 16, sizes[k]);
    }
}

static int case_owned(void)
{
    long long delay = 0;
    CHECK(fa_option_get("purge_delay_ms", &delay) == 0);
    CHECK(delay > 0);
    void **v = fill(N64, 64);
    drain(v, N64, 64);
    fa_stats_t a = stats();
    CHECKF(a.thread_caches >= (size_t)N64 * 64 * 3 / 4, "the thread keeps %zu KiB", KIB(a.thread_caches));
    /* The thread goes on in other classes only.  Each tick moves the
     * scavenge epoch; a kept span no allocation took for a whole epoch
     * goes at the thread's next scavenge. */
    fa_stats_t b = a;
    for (int tick = 0; tick < 4 && b.thread_caches > (64u << 10); tick++) {
        fa__clock_advance_ms((uint64_t)delay);
        slow_paths();
        b = stats();
    }
    printf("after %d x 64 B freed: the thread kept %zu KiB; four ticks later, %zu KiB\n", N64,
           KIB(a.thread_caches), KIB(b.thread_caches));
    CHECKF(b.thread_caches <= (64u << 10), "the thread still keeps %zu KiB of a class it left",
           KIB(b.thread_caches));
    return check_done("test_parts owned");
}

enum { NC = 20000 }; /* 20,000 blocks of 128 B: about 2.5 MiB */
static void **handed;

static void *alloc_and_exit(void *arg)
{
    (void)arg;
    handed = fill_in(slots[1], NC, 128);
    return NULL;
}

static int case_central(void)
{
    pthread_t t;
    CHECK(pthread_create(&t, NULL, alloc_and_exit, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    fa_stats_t a = stats();
    /* The thread's spans, all their blocks live, left its cache. */
    CHECK(a.in_spans >= (size_t)NC * 128);
    drain(handed, NC, 128);
    long long delay = 0;
    CHECK(fa_option_get("purge_delay_ms", &delay) == 0);
    fa_stats_t b = stats();
    for (int tick = 0; tick < 4 && (b.central > 0 || b.in_spans > a.in_spans / 4); tick++) {
        fa__clock_advance_ms((uint64_t)delay);
        slow_paths();
        b = stats();
    }
    printf("%d x 128 B of a thread that exited, freed by another: small spans %zu KiB before, %zu KiB "
           "after; the central cache holds %zu KiB\n", NC, KIB(a.in_spans), KIB(b.in_spans), KIB(b.central));
    CHECKF(b.central <= (16u << 10), "the central cache holds %zu KiB of free blocks", KIB(b.central));
    CHECKF(b.in_spans <= a.in_spans / 4, "small spans %zu KiB of %zu KiB: the freed spans stayed",
           KIB(b.in_spans), KIB(a.in_spans));
    return check_done("test_parts central");
}

static void *short_life(void *arg)
{
    (void)arg;
    void *v[100];
    fill_in(v, 100, 200);
    drain(v, 100, 200);
    return NULL;
}

static int case_metadata(void)
{
    enum { THREADS = 4000, ROUNDS = 30 };
    size_t after_first = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, short_life, NULL) == 0);
        CHECK(pthread_join(t, NULL) == 0);
        if (i == 99)
            after_first = stats().metadata;
    }
    size_t after_threads = stats().metadata;
    printf("metadata after 100 threads %zu KiB, after %d: %zu KiB\n", KIB(after_first), THREADS,
           KIB(after_threads));
    /* One chunk of slack: records are carved from 1 MiB chunks. */
    CHECKF(after_threads <= after_first + (1u << 20), "metadata grew from %zu to %zu KiB over %d threads",
           KIB(after_first), KIB(after_threads), THREADS);
    /* Spans: large blocks of many lengths between spans of small blocks,
     * freed in another order than allocated, so that the page heap splits
     * its free spans and merges them again (a record for every split). */
    size_t first = 0;
    unsigned seed = 1;
    for (int r = 0; r < ROUNDS; r++) {
        enum { NB = 2000 };
        for (int i = 0; i < NB; i++) {
            seed = seed * 1103515245u + 12345u;
            size_t size = i % 2 ? 64 : (300u << 10) + (seed >> 8) % (700u << 10);
            slots[0][i] = fa_malloc(size);
            CHECK(slots[0][i] != NULL);
            memset(slots[0][i], 1, i % 2 ? 64 : 4096);
        }
        for (int i = 0; i < NB; i++) {
            int k = (i * 7919) % NB; /* every index once: 7919 is prime to NB */
            fa_free(slots[0][k]);
        }
        fa_trim(); /* the spans go back to the page heap, merged */
        if (r == 0)
            first = stats().metadata;
    }
    size_t last = stats().metadata;
    printf("metadata after one round of spans split and merged %zu KiB, after %d: %zu KiB\n", KIB(first), ROUNDS,
           KIB(last));
    CHECKF(last <= first + (1u << 20), "metadata grew from %zu to %zu KiB over %d rounds", KIB(first),
           KIB(last), ROUNDS);
    return check_done("test_parts metadata");
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"spare", case_spare},
        {"owned", case_owned},
        {"central", case_central},
        {"metadata", case_metadata},
    };
    return check_run_case("test_parts", cases, sizeof cases / sizeof cases[0], argc, argv);
}
