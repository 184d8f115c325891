/* Thread churn: 10,000 short-lived threads, run 4 at a time.  Each allocates
 * a few hundred small blocks of assorted sizes, frees most of them, checks
 * and frees the blocks the previous group left for it, and leaves some for
 * the next group (and, at the end, for the main thread).  A thread cache
 * that was not flushed or recycled at thread exit would leak with every
 * thread, and the allocator's own counters show each kind of leak exactly
 * (the test links the static archive to read them):
 *  - the cached blocks: once every block is freed and fa_trim() has run,
 *    no span may be left in use beyond what was in use before the first
 *    thread;
 *  - the cache records: metadata may not grow from 1,000 threads to the end
 *    by more than the span records of the heap's growth and one chunk.
 * The resident anonymous memory, read after a trim, is checked too (within
 * 4 MiB of what it was after the first 1,000 threads: 9,000 threads that
 * each left 512 B resident outside the heap would fail it), except under
 * sanitizers, whose runtimes grow it with every thread by themselves.  At
 * the end only the main thread may have a cache, and the dead threads'
 * claims on the global cache bound must have been given back (fa_stats). */
#include "check.h"
#include "util.h"

#include <fastalloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "01-os/clock.h"
#include "00-base/config.h"
#include "02-records/meta.h"
#include "04-pageheap/pageheap.h"

#define NTHREADS 10000
#define GROUP 4
#define ALLOCS 300
#define HANDOFF 16
/* The allocator's timed work runs on the test's clock: the purge delay is an
 * hour, and every TICK_EVERY threads the test moves the clock by half of it,
 * as the default delay of 1 s and tick of 500 ms do every few hundred
 * threads in real time. */
#define PURGE_DELAY_MS (3600 * 1000)
#define TICK_EVERY 256

struct blk {
    unsigned char *p;
    size_t size;
    uint64_t seed;
};

struct job {
    uint64_t id;
    struct blk in[HANDOFF];  /* left by the previous group: check and free */
    struct blk out[HANDOFF]; /* for the next group */
};

static size_t pick_size(uint64_t *rng)
{
    uint64_t r = rng_below(rng, 100);
    if (r < 60)
        return 1 + (size_t)rng_below(rng, 128);
    if (r < 90)
        return 129 + (size_t)rng_below(rng, 1024);
    if (r < 99)
        return 1153 + (size_t)rng_below(rng, 16 * KiB);
    return 20 * KiB + (size_t)rng_below(rng, 100 * KiB);
}

static void check_free(struct blk *b)
{
    if (b->p == NULL)
        return;
    size_t bad = pat_find_bad(b->p, b->size, b->seed);
    CHECKF(bad == (size_t)-1, "block of %zu corrupted at +%zu", b->size, bad);
    fa_free(b->p);
    b->p = NULL;
}

/* Bytes the page heap has taken from the OS for blocks. */
static size_t heap_mapped(void)
{
    struct fa__ph_stats st;
    fa__ph_get_stats(&st);
    return st.mapped_bytes;
}

/* Anonymous memory resident, in bytes (smaps_rollup, exact; the RSS where
 * the kernel lacks the field).  The RSS counts pages of the program's and
 * the C library's files too, which come and go with the page cache that the
 * machine's other processes share: a leak is anonymous. */
static size_t anon_bytes(void)
{
    size_t anon = smaps_rollup_bytes("\nAnonymous:");
    return anon != (size_t)-1 ? anon : rss_bytes();
}

/* Bytes in spans in use, small or large, after fa_trim(): with the calling
 * thread's cache flushed and the central caches' batches back in their
 * spans, every span whose blocks are all free has gone back to the page
 * heap, so what is left is held by blocks still allocated. */
static size_t spans_in_use_after_trim(void)
{
    fa_trim();
    fa_stats_t st;
    fa_stats(&st);
    return st.in_spans + st.large;
}

static void *thread_main(void *arg)
{
    struct job *j = arg;
    uint64_t rng = mix64(j->id + 1);
    struct blk mine[ALLOCS];
    for (size_t i = 0; i < ALLOCS; i++) {
        mine[i].size = pick_size(&rng);
        mine[i].seed = mix64(j->id * ALLOCS + i);
        mine[i].p = fa_malloc(mine[i].size);
        CHECK(mine[i].p != NULL);
        pat_fill(mine[i].p, mine[i].size, mine[i].seed);
        /* Some short-lived ones on the way. */
        if (i % 3 == 0)
            check_free(&mine[i]);
    }
    for (size_t i = 0; i < HANDOFF; i++)
        check_free(&j->in[i]);
    size_t k = 0;
    for (size_t i = 0; i < ALLOCS; i++) {
        if (mine[i].p != NULL && k < HANDOFF && i % 7 == 1)
            j->out[k++] = mine[i];
        else
            check_free(&mine[i]);
    }
    return NULL;
}

int main(void)
{
    static struct job jobs[2][GROUP];
    size_t nthreads = env_size("FA_CHURN_THREADS", NTHREADS);
    size_t anon_early = 0, map_early = 0, meta_early = 0;
    memset(jobs, 0, sizeof jobs);
    CHECK(fa_option_set("purge_delay_ms", PURGE_DELAY_MS) == 0);
    /* Spans in use before any thread: with malloc overridden, libc's own
     * blocks. */
    size_t spans_before = spans_in_use_after_trim();
    for (size_t t = 0; t < nthreads; t += GROUP) {
        struct job *cur = jobs[(t / GROUP) & 1], *prev = jobs[((t / GROUP) & 1) ^ 1];
        pthread_t th[GROUP];
        for (size_t g = 0; g < GROUP; g++) {
            cur[g].id = t + g;
            /* Blocks of a thread of the previous group go to a thread of this
             * one. */
            memcpy(cur[g].in, prev[(g + 1) % GROUP].out, sizeof cur[g].in);
            memset(prev[(g + 1) % GROUP].out, 0, sizeof prev[0].out);
            memset(cur[g].out, 0, sizeof cur[g].out);
            CHECK(pthread_create(&th[g], NULL, thread_main, &cur[g]) == 0);
        }
        for (size_t g = 0; g < GROUP; g++)
            CHECK(pthread_join(th[g], NULL) == 0);
        /* A tick is due at the next slow path, and what was dirty two moves
         * ago is old enough to purge.  (The tick still comes every 5 s of
         * real time too, with nothing old enough to purge unless the clock
         * has moved.) */
        if ((t + GROUP) % TICK_EVERY == 0)
            fa__clock_advance_ms(PURGE_DELAY_MS / 2);
        if (t + GROUP == 1000) {
            /* Memory is read after a trim, here and at the end: without it,
             * it swings by up to 14 MiB with the free pages that happen to
             * be dirty (28 MiB of heap, purged on a timer). */
            fa_trim();
            anon_early = anon_bytes();
            map_early = heap_mapped();
            meta_early = fa__meta_bytes();
        }
        if (getenv("FA_CHURN_TRACE") && (t + GROUP) % 1000 == 0)
            printf("%zu threads: anonymous %zu KiB, heap %zu KiB, metadata %zu KiB\n", t + GROUP,
                   anon_bytes() / KiB, heap_mapped() / KiB, fa__meta_bytes() / KiB);
    }
    /* The last group's leftovers: checked and freed by the main thread. */
    for (int h = 0; h < 2; h++)
        for (size_t g = 0; g < GROUP; g++)
            for (size_t i = 0; i < HANDOFF; i++) {
                check_free(&jobs[h][g].in[i]);
                check_free(&jobs[h][g].out[i]);
            }
    size_t map_end = heap_mapped(), meta_end = fa__meta_bytes();

    /* No cache outlives its thread: only the main thread has one, and the
     * dead threads gave their share of the global cache bound back. */
    fa_stats_t st;
    fa_stats(&st);
    long long per_thread = 0;
    CHECK(fa_option_get("thread_cache_bytes", &per_thread) == 0 && per_thread > 0);
    /* Read before anything else allocates: printf's buffer would be a block
     * of its own. */
    size_t spans_after = spans_in_use_after_trim();
    size_t anon_end = anon_bytes();
    printf("%zu threads: anonymous memory after 1000 threads %zu KiB, at the end %zu KiB; heap %zu KiB -> "
           "%zu KiB; metadata %zu KiB -> %zu KiB; spans in use after trim %zu KiB, before the threads %zu KiB\n",
           nthreads, anon_early / KiB, anon_end / KiB, map_early / KiB, map_end / KiB, meta_early / KiB,
           meta_end / KiB, spans_after / KiB, spans_before / KiB);
    printf("caches: %u threads, %zu KiB held, %zu KiB claimed\n", st.threads, st.thread_caches / KiB,
           st.thread_caches_claimed / KiB);
    CHECKF(st.threads <= 1, "%u thread caches after all threads exited", st.threads);
    CHECKF(st.thread_caches_claimed <= (size_t)per_thread, "dead threads still claim %zu KiB",
           st.thread_caches_claimed / KiB);
    CHECK(st.thread_caches <= st.thread_caches_claimed);

    /* Every block the test allocated is free, so spans still in use hold
     * blocks that no one freed: a thread's cached blocks lost at its exit
     * (about 500 KiB a thread here).  With malloc overridden, libc keeps a
     * few blocks of its own made during the run (the thread stacks it caches
     * have their TLS vectors), each in a span of 32 KiB or so: 1 MiB is room
     * for 32 such spans. */
    CHECKF(spans_after <= spans_before + 1 * MiB, "%zu KiB in spans in use after trim, %zu KiB before the threads",
           spans_after / KiB, spans_before / KiB);
    if (nthreads > 1000) {
        /* The heap grows in steps of up to 64 MiB (virtual until used): the
         * hand-offs can fragment it enough for one step, after which it stays
         * flat (30,000 threads: 29 -> 61 MiB at 12,000 threads, then flat). */
        CHECKF(map_end <= map_early + 64 * MiB, "heap grew by %zu KiB", (map_end - map_early) / KiB);
        /* Metadata is mapped in chunks of 1 MiB, for span records (one per
         * span, recycled) and cache records (one per live thread, recycled
         * through spare_caches at thread exit).  A heap that grew needs at
         * most a span record (two cache lines) per new page, and the chunk
         * in use may be full: anything beyond is records not recycled (a
         * cache record per thread, about 9 KiB, is 80 MiB for 9,000
         * threads). */
        size_t grown = map_end > map_early ? map_end - map_early : 0;
        size_t meta_room = 1 * MiB + grown / FA_PAGE_SIZE * 2 * sizeof(struct fa__span);
        CHECKF(meta_end <= meta_early + meta_room, "metadata grew by %zu KiB, room for %zu KiB",
               (meta_end - meta_early) / KiB, meta_room / KiB);
        if (!FA_TEST_SLOW)
            CHECKF(anon_end <= anon_early + 4 * MiB, "anonymous memory grew by %zu KiB",
                   (anon_end - anon_early) / KiB);
    }

    /* The main thread can still allocate, and the memory is all reusable. */
    void *p = fa_malloc(100);
    CHECK(p != NULL && fa_owns(p));
    fa_free(p);
    return check_done("test_churn");
}
