/* Spans changing hands (docs/DESIGN.md, the hand-over protocol): blocks
 * freed after the thread that allocated them exited, threads that come and
 * go by the thousand while blocks pass between them, and fork() while
 * remote frees are on their way.  Every block carries a pattern checked
 * before its free, and at the end every span must have come back: a span
 * still in use after fa_trim() holds a block whose free was lost (a free
 * pushed on a detached span's xfree and never collected, a span abandoned
 * to nobody), and one still owned by a thread that exited would keep it for
 * good.
 *
 *   test_handover exited | churn | fork | dormant */
#include "check.h"
#include "util.h"

#include <fastalloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "01-os/clock.h"

struct blk {
    unsigned char *p;
    size_t size;
    uint64_t seed;
};

static void blk_make(struct blk *b, size_t size, uint64_t seed)
{
    b->size = size;
    b->seed = seed;
    b->p = fa_malloc(size);
    CHECK(b->p != NULL);
    pat_fill(b->p, size, seed);
}

static void blk_free(struct blk *b)
{
    size_t bad = pat_find_bad(b->p, b->size, b->seed);
    CHECKF(bad == (size_t)-1, "block %p of %zu B corrupted at +%zu", (void *)b->p, b->size, bad);
    fa_free(b->p);
    b->p = NULL;
}

/* Sizes: mostly small, some up to 32 KiB, in many classes. */
static size_t some_size(uint64_t *rng)
{
    uint64_t r = rng_below(rng, 100);
    return r < 90 ? 1 + (size_t)rng_below(rng, 1024) : 1025 + (size_t)rng_below(rng, 31 * KiB);
}

/* Spans in use after fa_trim() (as test_remote): with every block free,
 * only the C library's own blocks hold any. */
static size_t spans_in_use(void)
{
    fa_trim();
    fa_stats_t st;
    fa_stats(&st);
    return st.in_spans + st.large;
}

/* ---- exited: blocks outlive the threads that allocated them ---- */

enum { EX_THREADS = 8 };
static size_t ex_per;
static struct blk *ex_blocks;
static size_t ex_bytes; /* the blocks' sizes, summed */

static void *ex_alloc(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    uint64_t rng = mix64(id + 1);
    size_t bytes = 0;
    for (size_t i = 0; i < ex_per; i++) {
        size_t size = some_size(&rng);
        blk_make(&ex_blocks[id * ex_per + i], size, mix64(id << 32 | i));
        bytes += size;
    }
    __atomic_add_fetch(&ex_bytes, bytes, __ATOMIC_RELAXED);
    return NULL; /* exits holding every block: its spans are given up */
}

static void *ex_free_and_alloc(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    /* Frees every other block of slice id (the first pass freed the rest
     * from the main thread), allocating as many as it frees on the way:
     * they come from spans the exited threads gave up. */
    uint64_t rng = mix64(id + 100);
    static __thread struct blk mine[64];
    size_t n = 0;
    for (size_t i = 1; i < ex_per; i += 2) {
        blk_free(&ex_blocks[id * ex_per + i]);
        if (n == 64) {
            while (n > 0)
                blk_free(&mine[--n]);
        }
        blk_make(&mine[n++], some_size(&rng), mix64(id << 40 | i));
    }
    while (n > 0)
        blk_free(&mine[--n]);
    return NULL;
}

static int case_exited(void)
{
    ex_per = FA_TEST_SLOW ? 5000 : 20000;
    ex_blocks = calloc(EX_THREADS * ex_per, sizeof *ex_blocks);
    CHECK(ex_blocks != NULL);
    size_t before = spans_in_use();
    run_threads(EX_THREADS, ex_alloc, 0, 0);
    fa_stats_t st;
    fa_stats(&st);
    size_t mapped1 = st.mapped;
    /* Half of them from a thread that never allocated them. */
    for (size_t i = 0; i < EX_THREADS * ex_per; i += 2)
        blk_free(&ex_blocks[i]);
    /* The other half from new threads, which allocate as they go. */
    run_threads(EX_THREADS, ex_free_and_alloc, 0, 0);
    fa_stats(&st);
    size_t after = spans_in_use();
    printf("%d threads x %zu blocks (%zu MiB) freed after their exit: mapped %zu -> %zu MiB; spans in use "
           "%zu KiB (%zu before)\n",
           EX_THREADS, ex_per, ex_bytes / MiB, mapped1 / MiB, st.mapped / MiB, after / KiB, before / KiB);
    /* 325 MiB of blocks took 384 MiB of heap (81 MiB took 124 MiB under
     * sanitizers): the class sizes round up, spans are partly full, and the
     * heap grows in steps of up to 64 MiB.  Room for about twice that
     * overhead; blocks twice their class's size would take 700 MiB. */
    CHECKF(mapped1 <= ex_bytes + ex_bytes / 4 + 64 * MiB, "%zu MiB mapped for %zu MiB of blocks",
           mapped1 / MiB, ex_bytes / MiB);
    /* The new threads' blocks fit in what was freed. */
    CHECKF(st.mapped <= mapped1 + 16 * MiB, "mapped grew from %zu to %zu MiB", mapped1 / MiB, st.mapped / MiB);
    CHECKF(after <= before + 1 * MiB, "%zu KiB in spans in use after trim, %zu KiB before: frees lost",
           after / KiB, before / KiB);
    free(ex_blocks);
    return check_done("test_handover exited");
}

/* ---- churn: 10,000 threads, blocks handed down through a mailbox ---- */

enum { BOX = 256, CH_BLOCKS = 64, CH_WAVE = 8 };
static struct blk box[BOX];
static pthread_mutex_t box_lock = PTHREAD_MUTEX_INITIALIZER;

static void *ch_thread(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    uint64_t rng = mix64(id * 3 + 7);
    struct blk mine[CH_BLOCKS];
    for (int i = 0; i < CH_BLOCKS; i++)
        blk_make(&mine[i], some_size(&rng), mix64(id << 20 | (uint64_t)i));
    /* Half go into the mailbox, for threads to come; what they replace was
     * left by threads that have mostly exited, and is freed here. */
    for (int i = 0; i < CH_BLOCKS / 2; i++) {
        size_t k = (size_t)rng_below(&rng, BOX);
        pthread_mutex_lock(&box_lock);
        struct blk old = box[k];
        box[k] = mine[i];
        pthread_mutex_unlock(&box_lock);
        if (old.p != NULL)
            blk_free(&old);
    }
    /* The other half freed here, in a shuffled order. */
    for (int i = CH_BLOCKS / 2; i < CH_BLOCKS; i++) {
        int j = i + (int)rng_below(&rng, (uint64_t)(CH_BLOCKS - i));
        struct blk tmp = mine[i];
        mine[i] = mine[j];
        mine[j] = tmp;
        blk_free(&mine[i]);
    }
    return NULL;
}

static int case_churn(void)
{
    size_t threads = FA_TEST_SLOW ? 2000 : 10000;
    fa_free(fa_malloc(1)); /* the main thread's cache exists from here */
    size_t before = spans_in_use();
    fa_stats_t st0;
    fa_stats(&st0);
    for (size_t w = 0; w < threads; w += CH_WAVE)
        run_threads(CH_WAVE, ch_thread, w, 256 << 10);
    fa_stats_t st;
    fa_stats(&st);
    size_t mapped_mid = st.mapped;
    for (size_t k = 0; k < BOX; k++)
        if (box[k].p != NULL)
            blk_free(&box[k]);
    size_t after = spans_in_use();
    fa_stats(&st);
    printf("%zu threads: mapped %zu MiB, metadata %zu -> %zu KiB, %u caches; spans in use after trim %zu KiB "
           "(%zu before)\n",
           threads, mapped_mid / MiB, st0.metadata / KiB, st.metadata / KiB, st.threads, after / KiB,
           before / KiB);
    CHECKF(st.threads == st0.threads, "%u caches, %u before", st.threads, st0.threads);
    /* At most BOX + a wave's blocks are live at once (a few MiB), and the
     * threads' caches come on top: 28 MiB are mapped, at every purge delay
     * and on a loaded machine (the heap grows by 4, 8, 16, then 32 MiB).
     * 64 MiB allow one more growth; a span kept by each exited thread would
     * need GiBs. */
    CHECKF(mapped_mid <= 64 * MiB, "mapped %zu MiB", mapped_mid / MiB);
    /* Metadata comes in chunks of 1 MiB: one chunk holds it all, before the
     * threads and after (measured).  A cache record (about 9 KiB) not
     * recycled at each thread's exit would take 87 MiB over 10,000
     * threads, 17 MiB over 2,000. */
    CHECKF(st0.metadata <= st.metadata, "metadata shrank from %zu to %zu KiB", st0.metadata / KiB,
           st.metadata / KiB);
    CHECKF(st.metadata <= 2 * MiB, "metadata %zu KiB after %zu threads, %zu KiB before", st.metadata / KiB,
           threads, st0.metadata / KiB);
    CHECKF(after <= before + 1 * MiB, "%zu KiB in spans in use after trim, %zu KiB before: frees lost",
           after / KiB, before / KiB);
    return check_done("test_handover churn");
}

/* ---- fork: remote frees on their way in the parent's other threads ---- */

enum { FK_PAIRS = 2, FK_RING = 1024 };
static struct blk ring[FK_PAIRS][FK_RING];
static size_t ring_head[FK_PAIRS], ring_tail[FK_PAIRS]; /* producer writes head */
static int fk_stop;
/* Every 8th block a producer makes also goes here, for the main thread. */
enum { STASH = 256 };
static struct blk stash[STASH];
static size_t stash_n;
static pthread_mutex_t stash_lock = PTHREAD_MUTEX_INITIALIZER;

static void *fk_producer(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    uint64_t rng = mix64(id + 55);
    for (uint64_t i = 0; !__atomic_load_n(&fk_stop, __ATOMIC_ACQUIRE); i++) {
        size_t h = __atomic_load_n(&ring_head[id], __ATOMIC_RELAXED);
        while (h - __atomic_load_n(&ring_tail[id], __ATOMIC_ACQUIRE) == FK_RING) {
            if (__atomic_load_n(&fk_stop, __ATOMIC_ACQUIRE))
                return NULL;
            sched_yield();
        }
        blk_make(&ring[id][h % FK_RING], some_size(&rng), mix64(id << 48 | i));
        __atomic_store_n(&ring_head[id], h + 1, __ATOMIC_RELEASE);
        if (i % 8 == 0) {
            struct blk b;
            blk_make(&b, some_size(&rng), mix64(id << 56 | i));
            pthread_mutex_lock(&stash_lock);
            if (stash_n < STASH) {
                stash[stash_n++] = b;
                b.p = NULL;
            }
            pthread_mutex_unlock(&stash_lock);
            if (b.p != NULL)
                blk_free(&b);
        }
    }
    return NULL;
}

static void *fk_consumer(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    for (;;) {
        size_t t = __atomic_load_n(&ring_tail[id], __ATOMIC_RELAXED);
        while (__atomic_load_n(&ring_head[id], __ATOMIC_ACQUIRE) == t) {
            if (__atomic_load_n(&fk_stop, __ATOMIC_ACQUIRE))
                return NULL;
            sched_yield();
        }
        blk_free(&ring[id][t % FK_RING]);
        __atomic_store_n(&ring_tail[id], t + 1, __ATOMIC_RELEASE);
    }
}

/* The child: frees blocks the parent's producers made (their spans belong
 * to threads that do not exist here), then allocates and frees on. */
static void fk_child(struct blk *held, size_t n)
{
    for (size_t i = 0; i < n; i++)
        blk_free(&held[i]);
    uint64_t rng = mix64(getpid());
    static struct blk b[4096];
    for (int round = 0; round < 4; round++) {
        for (size_t i = 0; i < 4096; i++)
            blk_make(&b[i], some_size(&rng), mix64((uint64_t)round << 32 | i));
        for (size_t i = 0; i < 4096; i++)
            blk_free(&b[(i * 2654435761u) % 4096]);
    }
    _exit(0); /* a failed check ends the child with status 1 */
}

/* ---- dormant: a replaced thread's spans wait for its successor, and go
 * back on their own when none comes ---- */

static void *dm_thread(void *arg)
{
    struct blk *keep = arg;
    struct blk b[64];
    for (int i = 0; i < 64; i++)
        blk_make(&b[i], 3000, mix64(0xd0u + (uint64_t)i));
    for (int i = 1; i < 64; i++)
        blk_free(&b[i]);
    *keep = b[0]; /* one block stays live in its span */
    return NULL;
}

/* The main thread's own churn, in a class of its own: its slow paths run
 * the timed work, as any thread's do. */
static void churn_64(void)
{
    static struct blk b[4096];
    for (size_t i = 0; i < 4096; i++)
        blk_make(&b[i], 64, i);
    for (size_t i = 0; i < 4096; i++)
        blk_free(&b[i]);
}

static int case_dormant(void)
{
    /* The decay tick, which moves the scavenge epoch, comes every 5 s of
     * the allocator's clock at a delay this long (its longest interval,
     * 03-purge/purge.c), and the test moves that clock itself: a tick is due
     * when the test says so, however slowly the machine runs. */
    const long long delay = 3600 * 1000;
    CHECK(fa_option_set("purge_delay_ms", delay) == 0);
    churn_64();
    fa_stats_t st;
    fa_stats(&st);
    size_t base = st.in_spans;
    struct blk kept;
    pthread_t t;
    /* One thread at a time: each exit is replaced (a thread was created
     * since), so the thread's cache goes dormant with its span. */
    CHECK(pthread_create(&t, NULL, dm_thread, &kept) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    fa_stats(&st);
    size_t held = st.in_spans;
    blk_free(&kept); /* a remote free into the dormant cache's span */
    /* No new thread comes: the next tick moves the scavenge epoch, and the
     * main thread's next slow path gives the dormant cache's spans up (five
     * all free, one whose last block was just freed remotely).  One tick is
     * due once the clock has moved by the delay. */
    fa__clock_advance_ms((uint64_t)delay);
    churn_64();
    fa_stats(&st);
    size_t now = st.in_spans;
    printf("spans in use: %zu KiB before the thread, %zu KiB after its exit, %zu KiB after one tick\n",
           base / KiB, held / KiB, now / KiB);
    CHECKF(held > base, "the thread's span was not in use after its exit (%zu KiB, %zu before)", held / KiB,
           base / KiB);
    /* The C library keeps a block or two of its own per thread (its
     * thread stack cache): a span's worth of slack.  A dormant cache that
     * nobody flushed keeps its six spans. */
    CHECKF(now <= base + (held - base) / 4, "the dormant spans stayed in use: %zu KiB, %zu before the thread",
           now / KiB, base / KiB);
    return check_done("test_handover dormant");
}

static int case_fork(void)
{
    pthread_t p[FK_PAIRS], c[FK_PAIRS];
    for (uintptr_t i = 0; i < FK_PAIRS; i++) {
        CHECK(pthread_create(&c[i], NULL, fk_consumer, (void *)i) == 0);
        CHECK(pthread_create(&p[i], NULL, fk_producer, (void *)i) == 0);
    }
    int forks = FA_TEST_SLOW ? 10 : 40;
    enum { HELD = 256 };
    static struct blk held[HELD];
    for (int f = 0; f < forks; f++) {
        /* Blocks the producers made, from their spans: the child frees
         * them into spans whose owners it does not have. */
        size_t n = 0;
        while (n < HELD) {
            pthread_mutex_lock(&stash_lock);
            while (stash_n > 0 && n < HELD)
                held[n++] = stash[--stash_n];
            pthread_mutex_unlock(&stash_lock);
            if (n < HELD)
                sched_yield();
        }
        usleep(2000);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0)
            fk_child(held, n);
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork %d: the child ended with status %#x", f,
               status);
        for (size_t i = 0; i < n; i++)
            blk_free(&held[i]);
    }
    __atomic_store_n(&fk_stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < FK_PAIRS; i++) {
        CHECK(pthread_join(p[i], NULL) == 0);
        CHECK(pthread_join(c[i], NULL) == 0);
    }
    for (size_t id = 0; id < FK_PAIRS; id++)
        for (size_t t = ring_tail[id]; t != ring_head[id]; t++)
            blk_free(&ring[id][t % FK_RING]);
    while (stash_n > 0)
        blk_free(&stash[--stash_n]);
    printf("%d forks while %d producer/consumer pairs ran\n", forks, FK_PAIRS);
    return check_done("test_handover fork");
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"exited", case_exited}, {"churn", case_churn}, {"fork", case_fork}, {"dormant", case_dormant},
    };
    return check_run_case("test_handover", cases, sizeof cases / sizeof cases[0], argc, argv);
}
