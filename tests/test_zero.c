/* calloc writes no zeros on pages known zero (#54, decision 1;
 * 02-records/span.h, fresh), and every block it hands out reads zero.
 *
 *   fresh   callocs of 32 blocks of each of 12 sizes from 4 KiB to 1 MiB,
 *           never written: the process faults in fewer than a quarter of
 *           their pages (clearing them whole faults them all in), and
 *           each reads zero at its first and last byte;
 *   reused  blocks of the sizes that spans hold several of (4 to 256 KiB)
 *           are written whole and freed: by their own thread in random
 *           order, by another thread, by a thread that then exits, all of
 *           a span's at once; each calloc after reads zero in every
 *           byte, whichever list of its span the block came back by
 *           (the refill, the gather, a span's freelist or xfree taken, the
 *           central cache's one block at a time to a thread whose cache
 *           is gone: each tried without its clear).
 *
 * Through the fa_ API, which the sanitizer builds (where the standard
 * names are left to the sanitizer's runtime) serve too. */
#include "check.h"
#include "util.h"

#include <fastalloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static long minor_faults(void)
{
    struct rusage ru;
    CHECK(getrusage(RUSAGE_SELF, &ru) == 0);
    return ru.ru_minflt;
}

/* Sizes of small classes of 4 KiB and up, and two large blocks. */
static const size_t fresh_sizes[] = {4096,   8192,   20000,  32768,  50000,  65536,
                                     100000, 131072, 200000, 262144, 300000, 1 << 20};
#define NFRESH (sizeof fresh_sizes / sizeof fresh_sizes[0])
enum { PER_SIZE = 32 };

static int case_fresh(void)
{
    static void *blocks[NFRESH][PER_SIZE];
    size_t pages = 0;
    long before = minor_faults();
    for (size_t i = 0; i < NFRESH; i++)
        for (size_t k = 0; k < PER_SIZE; k++) {
            blocks[i][k] = fa_calloc(1, fresh_sizes[i]);
            CHECK(blocks[i][k] != NULL);
            pages += (fresh_sizes[i] + 4095) / 4096;
        }
    long faults = minor_faults() - before;
    printf("%zu blocks of %zu pages: %ld page faults\n", NFRESH * PER_SIZE, pages, faults);
    /* Cleared whole, every page of every block faults in once. */
    CHECKF(faults < (long)(pages / 4), "%ld faults for %zu pages", faults, pages);
    for (size_t i = 0; i < NFRESH; i++)
        for (size_t k = 0; k < PER_SIZE; k++) {
            const unsigned char *b = blocks[i][k];
            CHECK(all_bytes(b, 64, 0));
            CHECK(b[fresh_sizes[i] / 2] == 0 && b[fresh_sizes[i] - 1] == 0);
            fa_free(blocks[i][k]);
        }
    return check_done("test_zero fresh");
}

/* ---- reused ---- */

static const size_t reuse_sizes[] = {4096, 6000, 8192, 16384, 24576, 40000, 57344, 65536, 81920, 114688, 131072, 250000};
#define NREUSE (sizeof reuse_sizes / sizeof reuse_sizes[0])
enum { N = 48 };

static void *slots[N]; /* blocks written whole */
static void *got[N];   /* blocks calloc'd */

static void fill_all(size_t size)
{
    for (int i = 0; i < N; i++) {
        slots[i] = fa_malloc(size);
        CHECK(slots[i] != NULL);
        memset(slots[i], 0xa5, size);
    }
}

static void calloc_all(size_t size, const char *how)
{
    for (int i = 0; i < N; i++) {
        got[i] = fa_calloc(size, 1);
        CHECK(got[i] != NULL);
        CHECKF(all_bytes(got[i], size, 0), "calloc(%zu) after %s: a byte not zero", size, how);
    }
}

static void free_some(uint64_t *rng, int keep_every)
{
    for (int i = N - 1; i > 0; i--) { /* shuffled */
        int j = (int)rng_below(rng, (uint64_t)i + 1);
        void *t = slots[i];
        slots[i] = slots[j];
        slots[j] = t;
    }
    for (int i = 0; i < N; i++)
        if (keep_every == 0 || i % keep_every != 0) {
            fa_free(slots[i]);
            slots[i] = NULL;
        }
}

static void free_rest(void)
{
    for (int i = 0; i < N; i++) {
        fa_free(slots[i]);
        fa_free(got[i]);
        slots[i] = got[i] = NULL;
    }
}

static void *free_there(void *arg)
{
    (void)arg;
    for (int i = 0; i < N; i++) {
        fa_free(slots[i]);
        slots[i] = NULL;
    }
    return NULL;
}

static void *fill_there(void *arg)
{
    fill_all(*(size_t *)arg);
    return NULL;
}

/* The same, and a third of them freed here before the thread exits: its
 * spans go to the central cache with those on their freelists. */
static void *fill_free_there(void *arg)
{
    fill_all(*(size_t *)arg);
    for (int i = 0; i < N; i += 3) {
        fa_free(slots[i]);
        slots[i] = NULL;
    }
    return NULL;
}

static void *calloc_there(void *arg)
{
    calloc_all(*(size_t *)arg, "a new thread's callocs");
    return NULL;
}

/* calloc_all from the thread's exit, once its cache is given up (a
 * destructor that arms itself once more runs after the allocator's; a
 * thread that had no cache would get one): blocks come one at a time from
 * the central cache's spans. */
static pthread_key_t late_key;
static size_t late_size;
static int late_runs;

static void late_calloc(void *arg)
{
    if (arg == (void *)1) {
        CHECK(pthread_setspecific(late_key, (void *)2) == 0);
        return;
    }
    late_runs++;
    calloc_all(late_size, "callocs at a thread's exit");
}

static void *exit_calloc_there(void *arg)
{
    late_size = *(size_t *)arg;
    fa_free(fa_malloc(16)); /* a cache, for its exit to give up */
    CHECK(pthread_setspecific(late_key, (void *)1) == 0);
    return NULL;
}

/* Three threads, alive at once, each writes N blocks whole and frees a
 * third of them, then all exit: a cache is left to the next thread for
 * two exits after the last one created (08-tcache/life.c), so the third
 * gives its spans, their freelists written, to the central cache. */
enum { BANKS = 3 };
static void *bank[BANKS][N];
static pthread_barrier_t banks_met;
static size_t bank_size;

static void *fill_bank(void *arg)
{
    void **b = arg;
    for (int i = 0; i < N; i++) {
        b[i] = fa_malloc(bank_size);
        CHECK(b[i] != NULL);
        memset(b[i], 0xa5, bank_size);
    }
    for (int i = 0; i < N; i += 3) {
        fa_free(b[i]);
        b[i] = NULL;
    }
    pthread_barrier_wait(&banks_met);
    return NULL;
}

static void fill_banks(size_t size)
{
    pthread_t t[BANKS];
    bank_size = size;
    for (int k = 0; k < BANKS; k++)
        CHECK(pthread_create(&t[k], NULL, fill_bank, bank[k]) == 0);
    for (int k = 0; k < BANKS; k++)
        CHECK(pthread_join(t[k], NULL) == 0);
}

static void free_banks(void)
{
    for (int k = 0; k < BANKS; k++)
        for (int i = 0; i < N; i++) {
            fa_free(bank[k][i]);
            bank[k][i] = NULL;
        }
}

static void other_thread(void *(*fn)(void *), size_t *size)
{
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fn, size) == 0);
    CHECK(pthread_join(t, NULL) == 0);
}

static int case_reused(void)
{
    uint64_t rng = 54;
    CHECK(pthread_key_create(&late_key, late_calloc) == 0);
    CHECK(pthread_barrier_init(&banks_met, NULL, BANKS) == 0);
    /* Under a sanitizer, one round of each kind. */
    const int rounds = FA_TEST_SLOW ? 2 : 3;
    for (int round = 0; round < rounds; round++) {
        /* Rounds 1 and 2 purge free pages at once and keep no span in the
         * cache, so that every span a scenario gets is known zero again
         * and its blocks fresh when cut: in round 0 most come back from
         * the page heap written, and none is. */
        if (round == 1) {
            CHECK(fa_option_set("purge_delay_ms", 0) == 0);
            CHECK(fa_option_set("thread_cache_bytes", 0) == 0);
        }
        for (size_t i = 0; i < NREUSE; i++) {
            size_t size = reuse_sizes[i];
            /* The thread's own frees, in random order, some of each span
             * left live: its freelists. */
            fill_all(size);
            free_some(&rng, 3);
            calloc_all(size, "own frees");
            free_rest();
            /* All of them: spans that empty and are cut again. */
            fill_all(size);
            free_rest();
            calloc_all(size, "all freed");
            free_rest();
            /* Another thread's frees: xfree lists, taken spans. */
            fill_all(size);
            other_thread(free_there, &size);
            calloc_all(size, "another thread's frees");
            free_rest();
            /* Blocks of a thread that exited, freed here: spans nobody
             * owns, then the central cache's. */
            other_thread(fill_there, &size);
            free_some(&rng, 2);
            calloc_all(size, "an exited thread's blocks");
            free_rest();
            /* The same, the blocks calloc'd by a new thread: the exited
             * thread's spans, from the central cache. */
            other_thread(fill_free_there, &size);
            other_thread(calloc_there, &size);
            free_rest();
            /* Calloc'd by a thread that is exiting, its cache given up:
             * one block at a time from the central cache, which holds
             * the spans of the third of three threads that exited. */
            fill_banks(size);
            other_thread(exit_calloc_there, &size);
            free_rest();
            free_banks();
        }
    }
    CHECK(late_runs == rounds * (int)NREUSE);
    return check_done("test_zero reused");
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {{"fresh", case_fresh}, {"reused", case_reused}};
    return check_run_case("test_zero", cases, sizeof cases / sizeof cases[0], argc, argv);
}
