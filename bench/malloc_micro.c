/*
 * malloc_micro: malloc/free micro-benchmark.
 *
 * Links against libc and pthread only, so one binary measures every allocator
 * by LD_PRELOAD (bench/run.py drives it).  Every block handed out is stamped
 * (an 8-byte tag at the start, its complement in the last 8 bytes) and the
 * stamps are checked right before the block is freed, so an allocator that
 * hands out overlapping, undersized, misaligned or NULL blocks fails loudly
 * (exit 3) instead of looking fast.  In the untimed warm-up (and the window
 * fill) every byte of every block is written and checked, which also catches
 * overlaps that miss the stamps.
 *
 * Modes (per thread; threads never share blocks):
 *   reuse   malloc one block, stamp it, check it, free it; repeat.
 *   window  keep a ring of --live blocks; each step checks and frees the
 *           oldest block and allocates a new one in its place.
 *
 * Sizes: --sizes 64 (fixed), 16-1024 (16, 32, ..., 1024: step 16), 16-1024:8
 * (explicit step) or 16,64,200 (a list).  With more than one size, --order
 * shuffle (default) cycles through a fixed pseudo-random sequence of the sizes
 * with a prime period, so a window slot does not keep getting the same size;
 * --order seq cycles through them in ascending order.
 *
 * Output: one JSON line on stdout.  "ops" are malloc+free pairs;
 *   checked     = blocks checked before their free (every one: warm-up,
 *                 timed pairs, and the window's fill), full = those checked
 *                 in every byte, bytes = the bytes those full checks read
 *   ns_per_pair = elapsed_s * threads / total_ops  (time one thread spends
 *                                                    per pair, in ns)
 *   ops_per_s   = total_ops / elapsed_s             (pairs per second, all
 *                                                    threads together)
 * elapsed_s is the CLOCK_MONOTONIC wall time of the timed phase, from the
 * first thread's start to the last thread's end (each thread reads the clock
 * itself); the window fill, the warm-up and the final drain are not timed.
 */
#include "bench_common.h"

#include <inttypes.h>

static const char usage[] =
    "usage: malloc_micro [options]\n"
    "  --mode reuse|window   reuse: malloc then free at once; window: ring of --live\n"
    "                        blocks, free the oldest and allocate a new one (default reuse)\n"
    "  --sizes SPEC          64 | 16-1024 (step 16) | 16-1024:STEP | 16,64,200 (default 64)\n"
    "  --order shuffle|seq   order of the sizes (default shuffle)\n"
    "  --live N              live blocks per thread in window mode (default 64)\n"
    "  --threads N           threads, each with its own blocks (default 1; 1 runs in main)\n"
    "  --ops N               timed malloc+free pairs per thread; k/M/G suffixes (default 1M)\n"
    "  --warmup N            untimed pairs per thread before timing, every byte of every\n"
    "                        block checked (default ops/10, at most 200k)\n"
    "  --seed N              seed for the size order and the stamps (default 1)\n"
    "Prints one JSON line; exits 3 if the allocator misbehaves, 2 on bad usage.\n";

#define SEQ_PERIOD 4099u /* prime: the shuffled size sequence repeats after this */
#define MAX_SIZE (1u << 20)
#define MAX_SIZES 4096

enum mode { MODE_REUSE, MODE_WINDOW };

struct config {
    int mode; /* enum mode */
    const char *sizes_spec;
    int shuffle;
    long live;
    int threads;
    uint64_t ops;    /* timed pairs per thread */
    uint64_t warmup; /* untimed pairs per thread, before timing; WARMUP_AUTO: ops/10 */
    uint64_t seed;
};

struct slot {
    unsigned char *p;
    size_t n;
    uint64_t tag;
    int full; /* filled entirely (fill and warm-up phases), not just stamped */
};

/* Per-thread state, one per 128-byte line pair so that the threads never
 * share a cache line (false sharing would slow down every run with threads). */
struct worker {
    int id;
    pthread_t th;
    uint64_t tag_base;
    uint64_t step; /* pairs done so far, timed and untimed */
    unsigned seq_pos;
    struct slot *ring; /* mmap'd: the harness's own memory stays out of the allocator */
    size_t ring_bytes;
    long ring_pos;
    struct bench_checked chk; /* what this thread checked */
    struct bench_span span;   /* this thread's timed phase */
} __attribute__((aligned(128)));

#define MAX_THREADS 1024
static struct worker workers[MAX_THREADS];

/* No --warmup given (bench_count never returns more than 1e15). */
#define WARMUP_AUTO UINT64_MAX

/* opt: the command line, over the defaults; cfg: its copy that the
 * measured code reads (see bench_options). */
static struct config opt = {.mode = MODE_REUSE, .sizes_spec = "64", .shuffle = 1, .live = 64, .threads = 1,
                            .ops = 1000000, .warmup = WARMUP_AUTO, .seed = 1};
static struct config cfg;

static const struct bench_opt opts[] = {
    CHOICE_OPT("mode", &opt.mode, "reuse|window", "reuse or window"), /* MODE_REUSE, MODE_WINDOW */
    STRING_OPT("sizes", &opt.sizes_spec), CHOICE_OPT("order", &opt.shuffle, "seq|shuffle", "shuffle or seq"),
    LONG_OPT("live", &opt.live), INT_OPT("threads", &opt.threads), COUNT_OPT("ops", &opt.ops),
    COUNT_OPT("warmup", &opt.warmup), COUNT_OPT("seed", &opt.seed), OPT_END};

static uint32_t *size_seq; /* the size of each allocation, cycled */
static unsigned seq_len;
static pthread_barrier_t start_barrier;

/* Every block gets a tag (bench_tag: distinct for every block of a run) at
 * its start and the tag's complement in its last 8 bytes.  With full != 0
 * (the untimed fill and warm-up phases) the bytes between are filled too
 * (bench_fill's pattern), and all of them are checked at free: that catches
 * blocks that overlap by any amount, while the timed phase only pays for the
 * two stamps. */
static inline __attribute__((always_inline)) unsigned char *
alloc_stamped(struct worker *w, size_t n, uint64_t tag, int full)
{
    unsigned char *p = malloc(n);
    if (p == NULL)
        BENCH_FAIL("thread %d: malloc(%zu) returned NULL (errno %d)",
            w->id, n, errno);
    if (((uintptr_t)p & 15) != 0)
        BENCH_FAIL("thread %d: malloc(%zu) = %p is not 16-byte aligned",
            w->id, n, (void *)p);
    uint64_t tail = ~tag;
    memcpy(p, &tag, 8);
    if (full)
        memset(p + 8, bench_fill_byte(tag), n - 16);
    memcpy(p + n - 8, &tail, 8);
    return p;
}

static __attribute__((noinline)) void check_fill(struct worker *w, const unsigned char *p, size_t n,
                                                 uint64_t tag)
{
    long i = bench_fill_bad(p, n, tag);
    if (i >= 0)
        BENCH_FAIL("thread %d: block %p of %zu bytes was overwritten while live "
            "(byte %ld is %02x, expected %02x)", w->id, (const void *)p, n, i, p[i], bench_fill_byte(tag));
}

/* Counts the block in *c once its check passed.  c points at a local of
 * the caller's loop: a counter in *w would be stored to memory around
 * every malloc and free. */
static inline __attribute__((always_inline)) void
check_free(struct worker *w, unsigned char *p, size_t n, uint64_t tag, int full, struct bench_checked *c)
{
    uint64_t head, tail;
    /* Make the compiler really reload the stamps (and not fold the
     * stamp-check-free sequence of reuse mode into nothing). */
    __asm__ volatile("" : : "r"(p) : "memory");
    memcpy(&head, p, 8);
    memcpy(&tail, p + n - 8, 8);
    if (head != tag || tail != ~tag)
        BENCH_FAIL("thread %d: block %p of %zu bytes was overwritten "
            "while live (head %016" PRIx64 " expected %016" PRIx64 ", tail %016" PRIx64 " expected %016" PRIx64 ")",
            w->id, (void *)p, n, head, tag, tail, ~tag);
    c->blocks++;
    if (full) {
        check_fill(w, p, n, tag);
        bench_checked_full(c, n);
    }
    free(p);
}

static inline __attribute__((always_inline)) void run_pairs_impl(struct worker *w, uint64_t count,
                                                                  const int full)
{
    /* Keep the hot state in locals (registers), not in *w: the compiler must
     * assume malloc and free may change *w. */
    const uint32_t *seq = size_seq;
    const unsigned seq_n = seq_len;
    unsigned seq_pos = w->seq_pos;
    uint64_t tag = bench_tag(w->tag_base, w->step);
    const uint64_t tag_step = 0x9e3779b97f4a7c16ull; /* even: tags stay odd, never 0 */
    struct bench_checked chk = w->chk;
    if (cfg.mode == MODE_REUSE) {
        for (uint64_t i = 0; i < count; i++) {
            size_t n = seq[seq_pos];
            if (++seq_pos == seq_n)
                seq_pos = 0;
            unsigned char *p = alloc_stamped(w, n, tag, full);
            check_free(w, p, n, tag, full, &chk);
            tag += tag_step;
        }
    } else {
        struct slot *ring = w->ring;
        long pos = w->ring_pos, live = cfg.live;
        for (uint64_t i = 0; i < count; i++) {
            struct slot *s = &ring[pos];
            /* A block from the fill or warm-up phase is fully checked. */
            check_free(w, s->p, s->n, s->tag, full || s->full, &chk);
            size_t n = seq[seq_pos];
            if (++seq_pos == seq_n)
                seq_pos = 0;
            s->n = n;
            s->tag = tag;
            s->full = full;
            s->p = alloc_stamped(w, n, tag, full);
            tag += tag_step;
            if (++pos == live)
                pos = 0;
        }
        w->ring_pos = pos;
    }
    w->seq_pos = seq_pos;
    w->step += count;
    w->chk = chk;
}

/* Timed: stamps only. */
static void run_pairs(struct worker *w, uint64_t count)
{
    run_pairs_impl(w, count, 0);
}

/* Untimed warm-up: every byte checked. */
static void run_pairs_full(struct worker *w, uint64_t count)
{
    run_pairs_impl(w, count, 1);
}

static void worker_setup(struct worker *w)
{
    w->tag_base = mix64(cfg.seed ^ ((uint64_t)(w->id + 1) << 48));
    w->seq_pos = (unsigned)(((uint64_t)w->id * 1031u) % seq_len);
    if (cfg.mode == MODE_WINDOW) {
        w->ring_bytes = (size_t)cfg.live * sizeof *w->ring;
        w->ring = mmap(NULL, w->ring_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (w->ring == MAP_FAILED)
            die(3, "mmap of the ring (%ld slots) failed: %s", cfg.live, strerror(errno));
        for (long i = 0; i < cfg.live; i++) {
            struct slot *s = &w->ring[i];
            s->n = size_seq[w->seq_pos];
            if (++w->seq_pos == seq_len)
                w->seq_pos = 0;
            s->tag = bench_tag(w->tag_base, w->step);
            s->full = 1;
            s->p = alloc_stamped(w, s->n, s->tag, 1);
            w->step++;
        }
    }
    run_pairs_full(w, cfg.warmup);
}

static void worker_drain(struct worker *w)
{
    if (cfg.mode == MODE_WINDOW) {
        for (long i = 0; i < cfg.live; i++)
            check_free(w, w->ring[i].p, w->ring[i].n, w->ring[i].tag, w->ring[i].full, &w->chk);
        munmap(w->ring, w->ring_bytes);
        w->ring = NULL;
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    worker_setup(w);
    pthread_barrier_wait(&start_barrier); /* all set up: go */
    /* Each thread reads the clock itself: with more threads than CPUs, the
     * main thread may only run again after some threads are done. */
    w->span.start = now_s();
    run_pairs(w, cfg.ops);
    w->span.end = now_s();
    pthread_barrier_wait(&start_barrier); /* all done */
    worker_drain(w);
    return NULL;
}

static void add_size(uint32_t *set, unsigned *count, unsigned long v)
{
    if (v < 16 || v > MAX_SIZE)
        die(2, "size %lu out of range (16..%u)", v, MAX_SIZE);
    if (*count == MAX_SIZES)
        die(2, "too many sizes (at most %d)", MAX_SIZES);
    set[(*count)++] = (uint32_t)v;
}

/* Parse the --sizes spec into the set of sizes, then lay out the sequence
 * that allocations cycle through. */
static void build_size_sequence(const char *spec)
{
    static uint32_t set[MAX_SIZES];
    unsigned count = 0;
    unsigned long a, b, step = 16;
    int used = 0;
    if (sscanf(spec, "%lu-%lu%n", &a, &b, &used) == 2 &&
        (spec[used] == '\0' || (spec[used] == ':' && sscanf(spec + used, ":%lu%n", &step, &used) == 1))) {
        if (b < a || step == 0)
            die(2, "bad size range '%s'", spec);
        for (unsigned long v = a; v <= b; v += step)
            add_size(set, &count, v);
    } else {
        const char *s = spec;
        for (;;) {
            char *end;
            errno = 0;
            unsigned long v = strtoul(s, &end, 10);
            if (errno || end == s || (*end != ',' && *end != '\0'))
                die(2, "bad --sizes '%s' (want 64, 16-1024, 16-1024:16 or 16,32,64)", spec);
            add_size(set, &count, v);
            if (*end == '\0')
                break;
            s = end + 1;
        }
    }
    if (count == 1 || !cfg.shuffle) {
        seq_len = count;
        size_seq = calloc(seq_len, sizeof *size_seq);
        if (size_seq == NULL)
            die(3, "calloc failed");
        memcpy(size_seq, set, count * sizeof *set);
    } else {
        /* Deterministic pseudo-random draw from the set, prime period. */
        seq_len = SEQ_PERIOD;
        size_seq = calloc(seq_len, sizeof *size_seq);
        if (size_seq == NULL)
            die(3, "calloc failed");
        uint64_t rng = cfg.seed;
        for (unsigned i = 0; i < seq_len; i++)
            size_seq[i] = set[rng_below(&rng, count)];
    }
}

int main(int argc, char **argv)
{
    bench_options("malloc_micro", argc, argv, opts, usage, usage);
    cfg = opt;
    if (optind != argc)
        bench_usage_error(usage);
    if (cfg.threads < 1 || cfg.threads > MAX_THREADS)
        die(2, "--threads must be 1..%d", MAX_THREADS);
    if (cfg.mode == MODE_WINDOW && (cfg.live < 1 || cfg.live > 100000000))
        die(2, "--live must be 1..100M");
    if (cfg.ops < 1)
        die(2, "--ops must be at least 1");
    if (cfg.warmup == WARMUP_AUTO)
        cfg.warmup = cfg.ops / 10 < 200000 ? cfg.ops / 10 : 200000;
    build_size_sequence(cfg.sizes_spec);

    const char *allocator = bench_detect_allocator();
    double t0, t1;
    struct worker *ws = workers;
    if (cfg.threads == 1) {
        /* In the main thread, with no other thread ever created: the plain
         * single-threaded program. */
        worker_setup(&ws[0]);
        t0 = now_s();
        run_pairs(&ws[0], cfg.ops);
        t1 = now_s();
        worker_drain(&ws[0]);
    } else {
        bench_barrier_init(&start_barrier, (unsigned)cfg.threads + 1);
        for (int i = 0; i < cfg.threads; i++)
            ws[i].id = i;
        BENCH_START(ws, cfg.threads, th, worker_main, 0);
        pthread_barrier_wait(&start_barrier);
        pthread_barrier_wait(&start_barrier);
        BENCH_JOIN(ws, cfg.threads, th);
        /* from the first thread's start to the last thread's end */
        struct bench_span all = BENCH_SPAN(ws, cfg.threads, span);
        t0 = all.start;
        t1 = all.end;
        pthread_barrier_destroy(&start_barrier);
    }
    free(size_seq);
    struct bench_checked chk = BENCH_CHECKED_SUM(ws, cfg.threads, chk);

    double elapsed = t1 - t0;
    uint64_t total = cfg.ops * (uint64_t)cfg.threads;
    if (elapsed <= 0)
        elapsed = 1e-9;
    printf("{\"bench\": \"malloc_micro\", \"mode\": \"%s\", \"sizes\": \"%s\", \"order\": \"%s\", "
           "\"live\": %ld, \"threads\": %d, \"ops_per_thread\": %" PRIu64 ", \"total_ops\": %" PRIu64 ", "
           "\"warmup_per_thread\": %" PRIu64 ", \"elapsed_s\": %.6f, \"ns_per_pair\": %.3f, \"ops_per_s\": %.1f, "
           "\"allocator\": \"%s\", " BENCH_CHECKED_FMT "}\n",
           cfg.mode == MODE_REUSE ? "reuse" : "window", cfg.sizes_spec, cfg.shuffle ? "shuffle" : "seq",
           cfg.mode == MODE_WINDOW ? cfg.live : 0L, cfg.threads, cfg.ops, total, cfg.warmup, elapsed,
           elapsed * 1e9 * cfg.threads / (double)total, (double)total / elapsed, allocator,
           BENCH_CHECKED_ARGS(chk, ""));
    return 0;
}
