/*
 * manythreads: many threads, each with a small heap of its own.  --threads T
 * threads start together; each allocates blocks of --min..--max bytes
 * (uniform) until --live-kib KiB (requested bytes) are live, then frees them
 * all, and does that --repeat times.  With 256 threads of 1 MiB each on a
 * machine with few CPUs, this measures what an allocator spends per thread:
 * caches, arenas, metadata, and the memory it keeps after a thread's frees.
 *
 * The main thread samples RSS every --sample-ms while the threads run
 * (rss_max_sampled, and "series": [seconds, MiB] pairs for plots).
 *
 * Validation: every block stamped (tag at the start, complement at the end),
 * every 32nd filled entirely, all checked before the free.  Exit 3 on a
 * mismatch.  "checked" in the output counts them (blocks: every pair;
 * full and bytes: the filled ones).  A RSS read that fails ends the program
 * (exit 2).
 *
 * Output: ops_per_s = malloc+free pairs per second, all threads together,
 * from the first thread's start to the last thread's end.
 */
#include "bench_common.h"

#include <inttypes.h>

static const char usage[] =
    "usage: manythreads [--threads T] [--live-kib K] [--min B] [--max B] [--repeat N]\n"
    "                   [--sample-ms MS]\n"
    "  defaults: 256 threads, 1024 KiB live each, 16..512 B, 4 repeats, a sample every 10 ms\n";

struct worker {
    int id;
    pthread_t th;
    unsigned char **ptrs;
    size_t cap;
    size_t map_bytes;
    uint64_t rng, tag_base;
    uint64_t pairs;
    struct bench_checked chk;
    struct bench_span span;
} __attribute__((aligned(128)));

/* opt: the command line, over the defaults; cfg: its copy that the
 * measured code reads (see bench_options). */
static struct {
    int threads;
    size_t live; /* bytes: --live-kib, live_kib */
    size_t min, max;
    int repeat;
    int sample_ms;
} opt = {.threads = 256, .min = 16, .max = 512, .repeat = 4, .sample_ms = 10}, cfg;
static size_t live_kib = 1024;

static const struct bench_opt opts[] = {
    INT_OPT("threads", &opt.threads), SIZE_OPT("live-kib", &live_kib), SIZE_OPT("min", &opt.min),
    SIZE_OPT("max", &opt.max), INT_OPT("repeat", &opt.repeat), INT_OPT("sample-ms", &opt.sample_ms), OPT_END};

static struct worker *workers;
static pthread_barrier_t start_bar;
static int done_count;

#define FULL_EVERY 32

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    pthread_barrier_wait(&start_bar);
    w->span.start = now_s(); /* not the main thread's clock: it may run late */
    uint64_t step = 0;
    struct bench_checked chk = {0}; /* a local; into *w at the end */
    for (int r = 0; r < cfg.repeat; r++) {
        size_t live = 0, count = 0;
        uint64_t rng_start = w->rng, step_start = step;
        while (live < cfg.live) {
            if (count == w->cap)
                die(2, "thread %d: pointer array full", w->id);
            size_t n = rng_range(&w->rng, cfg.min, cfg.max);
            unsigned char *p = malloc(n);
            if (p == NULL)
                BENCH_FAIL("thread %d: malloc(%zu) returned NULL", w->id, n);
            bench_mark(p, n, bench_tag(w->tag_base, step++), count % FULL_EVERY == 0);
            w->ptrs[count++] = p;
            live += n;
        }
        /* replay the generator for the sizes */
        uint64_t rng = rng_start;
        for (size_t i = 0; i < count; i++) {
            size_t n = rng_range(&rng, cfg.min, cfg.max);
            uint64_t tag = bench_tag(w->tag_base, step_start + i);
            bench_check_free(w->id, w->ptrs[i], n, tag, i % FULL_EVERY == 0, &chk);
        }
        w->pairs += count;
    }
    w->span.end = now_s();
    w->chk = chk;
    __atomic_fetch_add(&done_count, 1, __ATOMIC_RELEASE);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_options("manythreads", argc, argv, opts, usage, usage);
    opt.live = live_kib * 1024;
    cfg = opt;
    if (optind != argc || cfg.threads < 1 || cfg.threads > 4096 || cfg.live < 1 || cfg.min < 16 ||
        cfg.max < cfg.min || cfg.repeat < 1 || cfg.sample_ms < 1)
        bench_usage_error(usage);
    const char *allocator = bench_detect_allocator();
    workers = bench_map((size_t)cfg.threads * sizeof *workers, 1);
    for (int i = 0; i < cfg.threads; i++) {
        struct worker *w = &workers[i];
        w->id = i;
        w->cap = cfg.live / cfg.min + 2;
        w->map_bytes = w->cap * sizeof *w->ptrs;
        w->ptrs = bench_map(w->map_bytes, 0);
        w->rng = mix64(0x3a77 + (uint64_t)i);
        w->tag_base = mix64((uint64_t)(i + 3) << 30);
    }
    size_t max_samples = 600u * 1000u / (unsigned)cfg.sample_ms + 16;
    struct bench_samples samples;
    bench_samples_init(&samples, max_samples, 0);
    long rss_base = bench_rss_kib(), rss_max = 0;

    bench_barrier_init(&start_bar, (unsigned)cfg.threads + 1);
    BENCH_START(workers, cfg.threads, th, worker_main, 256 * 1024);
    long rss_started = bench_rss_kib();
    pthread_barrier_wait(&start_bar);
    double t0 = now_s();
    for (long k = 1;; k++) {
        long rss = bench_rss_kib();
        bench_sample(&samples, now_s() - t0, rss);
        if (rss > rss_max)
            rss_max = rss;
        if (__atomic_load_n(&done_count, __ATOMIC_ACQUIRE) == cfg.threads)
            break;
        bench_sleep_until(t0 + (double)k * cfg.sample_ms / 1000.0);
    }
    BENCH_JOIN(workers, cfg.threads, th);
    struct bench_span all = BENCH_SPAN(workers, cfg.threads, span);
    uint64_t pairs = 0;
    for (int i = 0; i < cfg.threads; i++)
        pairs += workers[i].pairs;
    struct bench_checked chk = BENCH_CHECKED_SUM(workers, cfg.threads, chk);
    long rss_exit = bench_rss_kib();
    double elapsed = all.end - all.start;
    printf("{\"bench\": \"manythreads\", \"threads\": %d, \"live_kib\": %zu, \"min\": %zu, \"max\": %zu, "
           "\"repeat\": %d, \"total_ops\": %" PRIu64 ", \"elapsed_s\": %.6f, \"ops_per_s\": %.1f, "
           "\"rss_base_kib\": %ld, \"rss_started_kib\": %ld, \"rss_max_sampled_kib\": %ld, "
           "\"rss_max_sampled_mib\": %.2f, \"rss_exit_kib\": %ld, \"series\": [",
           cfg.threads, cfg.live / 1024, cfg.min, cfg.max, cfg.repeat, pairs, elapsed,
           (double)pairs / elapsed, rss_base, rss_started, rss_max, rss_max / 1024.0, rss_exit);
    bench_print_samples(&samples);
    printf("], \"allocator\": \"%s\", " BENCH_CHECKED_FMT "}\n", allocator, BENCH_CHECKED_ARGS(chk, ""));
    return 0;
}
