/* The long stress test (#15): threads make random malloc, calloc, realloc,
 * aligned (aligned_alloc, posix_memalign, memalign) and sized allocations
 * and frees, with sizes of a heavy tail up to 64 MiB; they hand blocks to
 * each other through a shared table, and each thread ends after a random
 * number of operations, its blocks left to the thread that replaces it.
 * Every block carries a pattern derived from its id and first address,
 * checked before every free and, for the part kept, after every realloc (a
 * large block: its first and last 4 KiB and one 64-byte line in each 64 KiB
 * between); an aligned block's address is checked against its alignment.
 *
 *   stress [--seconds S] [--seed N] [--threads T] [--soak] [--expect secure|default]
 *
 * It runs S seconds (120 by default; --soak: an hour) and prints its seed
 * first: a failure names the seed, the thread, the block and the byte, and
 * `stress --seed N` runs the same operations again in each thread (the
 * threads' interleaving is the scheduler's).  Live bytes are capped (512
 * MiB; 128 under a sanitizer), so a run fits a small machine.
 *
 * --expect: fail at once unless the library that serves the run is that
 * build (tests/which_build.h): stress_secure preloads the hardened library,
 * and a preload that did not take would test the default one under the
 * hardened one's name.
 *
 * The counts it prints are of calls made: a thread that reaches the
 * deadline stops counting where it stops working. */
#include "check.h"
#include "util.h"
#include "which_build.h"

#include <fastalloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 4096     /* the shared table */
#define STRIPES 64
#define LARGE_EDGE 4096 /* a large block's checked ends */
#define LARGE_STEP 65536

/* How a block is made. */
enum { K_MALLOC, K_CALLOC, K_ALIGNED, K_POSIX_MEMALIGN, K_MEMALIGN, KINDS };
static const char *const kind_name[KINDS] = {"malloc", "calloc", "aligned_alloc", "posix_memalign", "memalign"};

/* What a thread did, counted where each call is made. */
struct tally {
    uint64_t made[KINDS]; /* blocks asked for, by kind */
    uint64_t nulls;       /* of which a size of 0 got NULL: no block */
    uint64_t frees, reallocs, realloc_frees, handoffs;
};

struct blk {
    unsigned char *p;
    size_t size;   /* bytes that carry the pattern */
    uint64_t seed; /* from the block's id and first address */
    uint64_t id;
    size_t align;  /* what the block was made with; 0: malloc or calloc */
};

static struct blk slots[SLOTS];
static pthread_mutex_t stripe[STRIPES];
static uint64_t master_seed;
static double deadline;
static size_t live_cap;
static size_t live_bytes; /* atomic */
static uint64_t next_id, generations;

/* ---- patterns: the whole of a small block; a large one sampled ---- */

static bool sampled(size_t size)
{
    return size > 4 * LARGE_EDGE;
}

/* Fill or check bytes [from, to) of b with its pattern (sampled when
 * large); returns the first bad offset, or SIZE_MAX. */
static size_t pattern(const struct blk *b, size_t from, size_t to, bool fill)
{
    if (!sampled(b->size)) {
        if (fill) {
            pat_fill_range(b->p, from, to, b->seed);
            return SIZE_MAX;
        }
        for (size_t i = from; i < to && from != 0; i++)
            if (b->p[i] != pat_byte(b->seed, i))
                return i;
        return from != 0 ? SIZE_MAX : pat_find_bad(b->p, to, b->seed);
    }
    /* Regions: the first and last LARGE_EDGE bytes, and 64 bytes at every
     * LARGE_STEP between, each clipped to [from, to). */
    size_t last = b->size - LARGE_EDGE;
    for (size_t at = 0; at < b->size;) {
        size_t end = at == 0 ? LARGE_EDGE : at >= last ? b->size : at + 64;
        size_t lo = at > from ? at : from, hi = end < to ? end : to;
        if (lo < hi) {
            if (fill) {
                pat_fill_range(b->p, lo, hi, b->seed);
            } else {
                for (size_t i = lo; i < hi; i++)
                    if (b->p[i] != pat_byte(b->seed, i))
                        return i;
            }
        }
        at = at == 0 ? LARGE_STEP : at + LARGE_STEP >= last ? last : at + LARGE_STEP;
        if (end == b->size)
            break;
    }
    return SIZE_MAX;
}

__attribute__((noreturn)) static void corrupt(int t, const struct blk *b, size_t off, const char *when)
{
    die(1, "seed %llu, thread %d: block %llu (%zu bytes at %p) has byte %zu = 0x%02x, expected 0x%02x, %s",
        (unsigned long long)master_seed, t, (unsigned long long)b->id, b->size, (void *)b->p, off, b->p[off],
        pat_byte(b->seed, off), when);
}

static void check(int t, const struct blk *b, const char *when)
{
    size_t bad = pattern(b, 0, b->size, false);
    if (bad != SIZE_MAX)
        corrupt(t, b, bad, when);
}

/* ---- sizes: most small, a tail to 64 MiB ---- */

static size_t pick_size(uint64_t *r)
{
    uint64_t x = rng_below(r, 1000);
    if (x < 700)
        return rng_range(r, 0, 128);
    if (x < 900)
        return rng_range(r, 129, 4096);
    if (x < 990)
        return rng_range(r, 4097, 256 << 10);
    if (x < 999)
        return rng_range(r, (256 << 10) + 1, 4 << 20);
    return rng_range(r, (4 << 20) + 1, 64 << 20);
}

static bool reserve(size_t n)
{
    size_t now = __atomic_add_fetch(&live_bytes, n, __ATOMIC_RELAXED);
    if (now <= live_cap)
        return true;
    __atomic_sub_fetch(&live_bytes, n, __ATOMIC_RELAXED);
    return false;
}

static void unreserve(size_t n)
{
    __atomic_sub_fetch(&live_bytes, n, __ATOMIC_RELAXED);
}

/* A new block in *b, or false (over the cap: no call made). */
static bool make(int t, uint64_t *r, struct blk *b, struct tally *n)
{
    size_t size = pick_size(r), cnt = 1 + rng_below(r, 8);
    unsigned x = (unsigned)rng_below(r, 20);
    unsigned kind = x < 12 ? K_MALLOC : x < 16 ? K_CALLOC : x < 18 ? K_ALIGNED : x < 19 ? K_POSIX_MEMALIGN : K_MEMALIGN;
    size_t align = 0, asked = 0;
    if (kind == K_CALLOC) {
        size = size / cnt * cnt; /* calloc(cnt, size / cnt) */
    } else if (kind == K_MEMALIGN) {
        /* 16 B .. 64 KiB (above 8 KiB, a large block); one time in four
         * not a power of two, which memalign rounds up to one. */
        align = (size_t)16 << rng_below(r, 13);
        asked = rng_below(r, 4) == 0 ? align - rng_below(r, align / 2) : align;
    } else if (kind != K_MALLOC) {
        align = (size_t)16 << rng_below(r, 9); /* 16 .. 4096 */
        if (kind == K_ALIGNED)
            size = (size + align - 1) / align * align; /* aligned_alloc wants a multiple */
    }
    if (!reserve(size))
        return false;
    b->align = align;
    switch (kind) {
    case K_MALLOC:
        b->p = fa_malloc(size);
        break;
    case K_CALLOC:
        b->p = fa_calloc(cnt, size / cnt);
        for (size_t i = 0; b->p != NULL && i < size; i += sampled(size) ? LARGE_STEP : 1)
            if (b->p[i] != 0)
                die(1, "seed %llu, thread %d: calloc(%zu) byte %zu is not 0", (unsigned long long)master_seed,
                    t, size, i);
        break;
    case K_ALIGNED:
        b->p = fa_aligned_alloc(align, size);
        break;
    case K_POSIX_MEMALIGN:
        if (fa_posix_memalign((void **)&b->p, align, size) != 0)
            b->p = NULL;
        break;
    default:
        b->p = fa_memalign(asked, size);
        break;
    }
    n->made[kind]++;
    if (b->p != NULL && align != 0 && (uintptr_t)b->p % align != 0)
        die(1, "seed %llu, thread %d: %s gave %p, which is not %zu-aligned", (unsigned long long)master_seed,
            t, kind_name[kind], (void *)b->p, align);
    if (b->p == NULL && size != 0)
        die(1, "seed %llu, thread %d: no memory for %zu bytes", (unsigned long long)master_seed, t, size);
    if (b->p == NULL)
        n->nulls++;
    b->size = size;
    b->id = __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED);
    b->seed = mix64(b->id ^ (uintptr_t)b->p) ^ master_seed;
    if (b->p != NULL && fa_malloc_usable_size(b->p) < size)
        die(1, "seed %llu, thread %d: usable size %zu < %zu", (unsigned long long)master_seed, t,
            fa_malloc_usable_size(b->p), size);
    pattern(b, 0, size, true);
    return true;
}

static void drop(int t, uint64_t *r, struct blk *b, struct tally *n)
{
    check(t, b, "before its free");
    if (b->align == 0 && rng_below(r, 4) == 0)
        fa_free_sized(b->p, b->size);
    else
        fa_free(b->p);
    n->frees++;
    unreserve(b->size);
    b->p = NULL;
    b->size = 0;
}

/* Returns false when nothing was done (over the cap). */
static bool resize(int t, uint64_t *r, struct blk *b, struct tally *n)
{
    if (b->align != 0) { /* realloc keeps only 16-byte alignment */
        drop(t, r, b, n);
        make(t, r, b, n);
        return true;
    }
    size_t size = pick_size(r);
    if (size > b->size && !reserve(size - b->size))
        return false;
    check(t, b, "before its realloc");
    unsigned char *p = fa_realloc(b->p, size);
    n->reallocs++;
    if (p == NULL && size != 0)
        die(1, "seed %llu, thread %d: realloc to %zu failed", (unsigned long long)master_seed, t, size);
    if (size < b->size)
        unreserve(b->size - size);
    size_t kept = size < b->size ? size : b->size;
    /* The kept part, as the old block's regions had it ... */
    struct blk old = *b;
    old.p = p;
    size_t bad = pattern(&old, 0, kept, false);
    if (bad != SIZE_MAX)
        corrupt(t, &old, bad, "after its realloc");
    /* ... then all that the new size's checks will read. */
    b->p = p;
    b->size = size;
    if (sampled(old.size) || sampled(size))
        pattern(b, 0, size, true);
    else if (size > kept)
        pattern(b, kept, size, true);
    if (size == 0) {
        /* realloc(p, 0) freed it (glibc's choice, fastalloc's too). */
        b->p = NULL;
        b->size = 0;
        n->realloc_frees++;
    }
    return true;
}

/* ---- threads ---- */

/* One per thread slot, on a cache line of its own: its tally is written by
 * one thread at a time, on every operation. */
struct lineage {
    int id;
    uint64_t rng;
    pthread_t th;
    struct tally n;
} __attribute__((aligned(64)));

static void *worker(void *arg)
{
    struct lineage *l = arg;
    uint64_t *r = &l->rng;
    struct tally *n = &l->n;
    /* This generation lives a random number of operations, or until the
     * deadline. */
    uint64_t todo = 2000 + rng_below(r, 20000);
    for (uint64_t i = 0; i < todo && now_s() < deadline; i++) {
        size_t k = (size_t)rng_below(r, SLOTS);
        pthread_mutex_t *m = &stripe[k % STRIPES];
        pthread_mutex_lock(m);
        struct blk *b = &slots[k];
        unsigned op = (unsigned)rng_below(r, 10);
        if (b->p == NULL && b->size == 0) {
            make(l->id, r, b, n);
        } else if (op < 5) {
            drop(l->id, r, b, n);
        } else if (op < 8) {
            resize(l->id, r, b, n);
        } else {
            check(l->id, b, "when another thread took it");
            n->handoffs++;
        }
        pthread_mutex_unlock(m);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    double seconds = 120;
    int threads = 4;
    const char *expect = NULL;
    die_prefix = "stress";
    master_seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            master_seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--soak") == 0)
            seconds = 3600;
        else if (strcmp(argv[i], "--expect") == 0 && i + 1 < argc &&
                 (strcmp(argv[i + 1], "secure") == 0 || strcmp(argv[i + 1], "default") == 0))
            expect = argv[++i];
        else
            die(2, "usage: stress [--seconds S] [--seed N] [--threads T] [--soak] [--expect secure|default]");
    }
    /* Before the work: a run on the wrong library fails at once. */
    struct which_build wb;
    which_build_read(&wb);
    const char *build = which_build_name(&wb);
    char why[1200];
    which_build_describe(&wb, why, sizeof why);
    if (expect != NULL && (build == NULL || strcmp(build, expect) != 0))
        die(1, "--expect %s, but %s", expect, why);
    if (threads < 1 || threads > 64)
        threads = 4;
#ifdef FA_TEST_SANITIZED
    live_cap = (size_t)128 << 20;
#else
    live_cap = (size_t)512 << 20;
#endif
    printf("stress: seed %llu, %d threads, %.0f s; library: %s (%s)\n", (unsigned long long)master_seed, threads,
           seconds, build != NULL ? build : "unknown", why);
    fflush(stdout);
    for (int i = 0; i < STRIPES; i++)
        pthread_mutex_init(&stripe[i], NULL);
    deadline = now_s() + seconds;
    static struct lineage lines[64];
    bool alive[64];
    for (int t = 0; t < threads; t++) {
        lines[t].id = t;
        lines[t].rng = mix64(master_seed + (uint64_t)t * 0x9E3779B97F4A7C15ULL) | 1;
        CHECK(pthread_create(&lines[t].th, NULL, worker, &lines[t]) == 0);
        alive[t] = true;
    }
    /* Each thread that ends is replaced by one that goes on with its
     * random stream, until the time is up. */
    for (bool any = true; any;) {
        any = false;
        for (int t = 0; t < threads; t++) {
            if (!alive[t])
                continue;
            CHECK(pthread_join(lines[t].th, NULL) == 0);
            alive[t] = false;
            if (now_s() >= deadline)
                continue;
            __atomic_fetch_add(&generations, 1, __ATOMIC_RELAXED);
            CHECK(pthread_create(&lines[t].th, NULL, worker, &lines[t]) == 0);
            alive[t] = any = true;
        }
    }
    /* Every thread's tally, then every block, checked and freed. */
    struct tally sum = {0}, end = {0};
    for (int t = 0; t < threads; t++) {
        for (int k = 0; k < KINDS; k++)
            sum.made[k] += lines[t].n.made[k];
        sum.nulls += lines[t].n.nulls;
        sum.frees += lines[t].n.frees;
        sum.reallocs += lines[t].n.reallocs;
        sum.realloc_frees += lines[t].n.realloc_frees;
        sum.handoffs += lines[t].n.handoffs;
    }
    uint64_t r = master_seed | 1, blocks = 0;
    for (int k = 0; k < SLOTS; k++) {
        if (slots[k].p != NULL || slots[k].size != 0) {
            drop(-1, &r, &slots[k], &end);
            blocks++;
        }
    }
    CHECK(__atomic_load_n(&live_bytes, __ATOMIC_RELAXED) == 0);
    uint64_t made = 0;
    for (int k = 0; k < KINDS; k++)
        made += sum.made[k];
    /* Exact counts add up: every block made is freed once, by a thread, by
     * a realloc to 0, or here at the end. */
    CHECKF(made - sum.nulls == sum.frees + sum.realloc_frees + blocks,
           "%llu blocks made (%llu of them NULL for 0 bytes), %llu freed, %llu freed by realloc, %llu left",
           (unsigned long long)made, (unsigned long long)sum.nulls, (unsigned long long)sum.frees,
           (unsigned long long)sum.realloc_frees, (unsigned long long)blocks);
    /* Each kind has at least 1 chance in 20: a run of this many blocks that
     * never made one of them has lost that kind. */
    for (int k = 0; k < KINDS; k++)
        CHECKF(made < 2000 || sum.made[k] > 0, "no block made by %s in %llu", kind_name[k], (unsigned long long)made);
    printf("stress: %llu operations in %llu threads: %llu blocks made (malloc %llu, calloc %llu, aligned_alloc %llu, "
           "posix_memalign %llu, memalign %llu), %llu frees, %llu reallocs, %llu hand-offs; %llu blocks at the "
           "end, all checked\n",
           (unsigned long long)(made + sum.frees + sum.reallocs + sum.handoffs),
           (unsigned long long)(generations + (uint64_t)threads), (unsigned long long)made,
           (unsigned long long)sum.made[K_MALLOC], (unsigned long long)sum.made[K_CALLOC],
           (unsigned long long)sum.made[K_ALIGNED], (unsigned long long)sum.made[K_POSIX_MEMALIGN],
           (unsigned long long)sum.made[K_MEMALIGN], (unsigned long long)sum.frees,
           (unsigned long long)sum.reallocs, (unsigned long long)sum.handoffs, (unsigned long long)blocks);
    return check_done("stress");
}
