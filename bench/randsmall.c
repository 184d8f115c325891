/*
 * randsmall: threads that each replace random blocks of small random sizes,
 * the loop of glibc's benchtests/bench-malloc-thread.c (mimalloc-bench runs
 * it as glibc-thread), with a fixed number of iterations instead of a fixed
 * time (make bench's threads-random-small-Nt).
 *
 * Each of --threads threads keeps --slots blocks (its working set, filled
 * before the clock starts).  One iteration picks a random slot, checks and
 * frees its block, and puts a new block there.  The sizes follow an inverse
 * square law between --min and --max bytes, as glibc's benchmark draws
 * them: 1/size is uniform between 1/max and 1/min, so most blocks are small
 * (8..32768 B: half of them under 16 B, mean about 67 B, 1 in 65 above 512 B).  Like glibc's,
 * the sizes come from a table drawn once (4,096 of them) that the threads
 * index at random, so an iteration draws one random number and does no
 * division.  The threads start together (a barrier); the run lasts from the
 * first thread's start to the last thread's end; what is left is checked
 * and freed after that.
 *
 * Validation: every block gets an 8-byte tag at its start and the tag's
 * complement at its end (blocks of 9 to 15 bytes: in their last byte;
 * blocks of 8 bytes are the tag alone), checked before its free; every 16th
 * block a thread allocates is filled and checked in every byte.  Exit 3 on
 * a mismatch.  "checked" counts the blocks checked before their free:
 * threads x (iterations + slots).
 *
 * Output: ops_per_s = iterations (a free and a malloc) per second, all
 * threads together; elapsed_s.
 */
#include "bench_common.h"

#include <inttypes.h>

static const char usage[] =
    "usage: randsmall [--threads T] [--slots N] [--iters N] [--min B] [--max B] [--seed N]\n"
    "  --threads  threads, each with its own blocks (default 2)\n"
    "  --slots    blocks each thread keeps (default 1024)\n"
    "  --iters    iterations per thread: a random block freed and replaced (default 5M)\n"
    "  --min, --max  sizes, inverse square between them (default 8..32768; min >= 8)\n"
    "  --seed     the random sequences (default 1)\n";

#define NSIZES 4096 /* the table of sizes, a power of two */

struct slot {
    unsigned char *p;
    uint32_t n;
    uint32_t full;
    uint64_t tag;
};

struct worker {
    int id;
    pthread_t th;
    struct slot *slots;
    uint64_t rng, tag_base, allocs;
    struct bench_span span;
    struct bench_checked chk;
} __attribute__((aligned(128)));

static struct {
    int threads;
    size_t slots, min, max;
    uint64_t iters, seed;
} opt = {.threads = 2, .slots = 1024, .min = 8, .max = 32768, .iters = 5000000, .seed = 1}, cfg;

static const struct bench_opt opts[] = {INT_OPT("threads", &opt.threads), SIZE_OPT("slots", &opt.slots),
                                        COUNT_OPT("iters", &opt.iters), SIZE_OPT("min", &opt.min),
                                        SIZE_OPT("max", &opt.max), COUNT_OPT("seed", &opt.seed), OPT_END};

static uint32_t *sizes; /* NSIZES sizes, drawn once */
static pthread_barrier_t start_barrier;

/* Blocks of 8 bytes hold the tag alone (bench_stamp needs 9 bytes for its
 * two ends); the others are marked and checked as everywhere else. */
static inline void mark(unsigned char *p, size_t n, uint64_t tag, int full)
{
    if (n < 9)
        memcpy(p, &tag, 8);
    else
        bench_mark(p, n, tag, full);
}

static inline void check_free(struct worker *w, struct slot *s)
{
    long bad;
    if (s->n < 9) {
        bad = memcmp(s->p, &s->tag, 8) == 0 ? -1 : 0;
        if (bad < 0) {
            w->chk.blocks++;
            if (s->full)
                bench_checked_full(&w->chk, s->n);
        }
    } else {
        bad = bench_check(s->p, s->n, s->tag, (int)s->full, &w->chk);
    }
    if (bad >= 0)
        BENCH_FAIL("thread %d: block %p of %u bytes was overwritten while live (byte %ld)", w->id,
                   (void *)s->p, s->n, bad);
    free(s->p);
}

static inline void new_block(struct worker *w, struct slot *s, size_t n)
{
    unsigned char *p = malloc(n);
    if (p == NULL)
        BENCH_FAIL("thread %d: malloc(%zu) returned NULL", w->id, n);
    int full = (w->allocs % 16) == 0;
    uint64_t tag = bench_tag(w->tag_base, w->allocs++);
    mark(p, n, tag, full);
    *s = (struct slot){p, (uint32_t)n, (uint32_t)full, tag};
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    const size_t nslots = cfg.slots;
    const uint64_t iters = cfg.iters;
    for (size_t k = 0; k < nslots; k++)
        new_block(w, &w->slots[k], sizes[rng_next(&w->rng) % NSIZES]);
    pthread_barrier_wait(&start_barrier);
    w->span.start = now_s();
    for (uint64_t i = 0; i < iters; i++) {
        uint64_t r = rng_next(&w->rng);
        struct slot *s = &w->slots[(r >> 32) % nslots];
        check_free(w, s);
        new_block(w, s, sizes[r % NSIZES]);
    }
    w->span.end = now_s();
    for (size_t k = 0; k < nslots; k++)
        check_free(w, &w->slots[k]);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_options("randsmall", argc, argv, opts, usage, usage);
    cfg = opt;
    if (optind != argc || cfg.threads < 1 || cfg.threads > 1024 || cfg.slots < 1 || cfg.slots > (1u << 24) ||
        cfg.iters < 1 || cfg.min < 8 || cfg.max < cfg.min || cfg.max > (1u << 30))
        bench_usage_error(usage);
    const char *allocator = bench_detect_allocator();
    /* The table: 1/size uniform between 1/max and 1/min (the inverse
     * square density), rounded down, kept within min..max. */
    sizes = bench_map(NSIZES * sizeof *sizes, 1);
    uint64_t rng = mix64(0x61b7ead + cfg.seed);
    const double lo = 1.0 / (double)cfg.max, hi = 1.0 / (double)cfg.min;
    for (size_t i = 0; i < NSIZES; i++) {
        double u = (double)(rng_next(&rng) >> 11) * 0x1p-53;
        double n = 1.0 / (hi - u * (hi - lo));
        sizes[i] = n < (double)cfg.min ? (uint32_t)cfg.min : n > (double)cfg.max ? (uint32_t)cfg.max : (uint32_t)n;
    }
    const size_t ws_bytes = (size_t)cfg.threads * sizeof(struct worker);
    struct worker *ws = bench_map(ws_bytes, 1);
    const size_t slot_bytes = cfg.slots * sizeof(struct slot);
    for (int i = 0; i < cfg.threads; i++) {
        ws[i].id = i;
        ws[i].rng = mix64((cfg.seed << 16) + (uint64_t)i);
        ws[i].tag_base = mix64((uint64_t)(i + 1) << 40 ^ cfg.seed);
        ws[i].slots = bench_map(slot_bytes, 1);
    }
    bench_barrier_init(&start_barrier, (unsigned)cfg.threads);
    BENCH_START(ws, cfg.threads, th, worker_main, 0);
    BENCH_JOIN(ws, cfg.threads, th);
    pthread_barrier_destroy(&start_barrier);
    struct bench_span all = BENCH_SPAN(ws, cfg.threads, span);
    struct bench_checked chk = BENCH_CHECKED_SUM(ws, cfg.threads, chk);
    for (int i = 0; i < cfg.threads; i++)
        bench_unmap(ws[i].slots, slot_bytes);
    double elapsed = all.end - all.start;
    uint64_t total = cfg.iters * (uint64_t)cfg.threads;
    printf("{\"bench\": \"randsmall\", \"threads\": %d, \"slots\": %zu, \"iters\": %" PRIu64 ", \"min\": %zu, "
           "\"max\": %zu, \"elapsed_s\": %.6f, \"ops_per_s\": %.1f, \"allocator\": \"%s\", " BENCH_CHECKED_FMT
           "}\n",
           cfg.threads, cfg.slots, cfg.iters, cfg.min, cfg.max, elapsed, (double)total / elapsed, allocator,
           BENCH_CHECKED_ARGS(chk, ""));
    bench_unmap(ws, ws_bytes);
    bench_unmap(sizes, NSIZES * sizeof *sizes);
    return 0;
}
