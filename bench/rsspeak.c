/*
 * rsspeak: how much memory an allocator gives back after a peak, and when.
 *
 * --threads T workers each allocate small blocks (--min..--max bytes,
 * uniform) until their share of --peak-mib MiB (requested bytes) is live,
 * then wait until all are there (the main thread reads RSS: rss_peak),
 * then free everything and exit.  The main thread samples RSS every
 * --interval-ms from the moment the frees start, joins the workers once they
 * are all done, and keeps sampling while the process sits idle (no allocator
 * call at all from the harness) for --idle-s seconds after the last free.
 *
 * Reported (KiB, and MiB for the table): rss_base before any allocation,
 * rss_peak with everything live, rss_freed right after the last free
 * (threads exited), rss_1s and rss_end: 1 s and --idle-s after the last free
 * (the last sample at or before that moment).  "series" holds every sample
 * as [seconds since the frees started, MiB]; "free_s" is when the last free
 * ended on that clock.
 *
 * Validation: every block is stamped (tag at the start, complement at the
 * end) and every 64th block filled entirely; all are checked before their
 * free.  Exit 3 on a mismatch.  "checked" in the output counts them (blocks:
 * all of them; full and bytes: the filled ones).  A RSS read that fails
 * ends the program (exit 2).
 */
#include "bench_common.h"

#include <inttypes.h>

static const char usage[] =
    "usage: rsspeak [--threads T] [--peak-mib M] [--min B] [--max B] [--idle-s S]\n"
    "               [--interval-ms MS]\n"
    "  defaults: 4 threads, 1024 MiB, 16..1024 B, 5 s idle, a sample every 100 ms\n";

struct worker {
    int id;
    pthread_t th;
    unsigned char **ptrs;
    uint16_t *sizes;
    size_t cap, count;
    size_t map_ptrs, map_sizes;
    uint64_t rng, tag_base;
    struct bench_checked chk;
} __attribute__((aligned(128)));

/* opt: the command line, over the defaults; cfg: its copy that the
 * measured code reads (see bench_options). */
static struct {
    int threads;
    double peak_mib;
    size_t min, max;
    double idle_s;
    int interval_ms;
} opt = {.threads = 4, .peak_mib = 1024, .min = 16, .max = 1024, .idle_s = 5, .interval_ms = 100}, cfg;

static const struct bench_opt opts[] = {
    INT_OPT("threads", &opt.threads), DOUBLE_OPT("peak-mib", &opt.peak_mib), SIZE_OPT("min", &opt.min),
    SIZE_OPT("max", &opt.max), DOUBLE_OPT("idle-s", &opt.idle_s), INT_OPT("interval-ms", &opt.interval_ms),
    OPT_END};

static struct worker *workers;
static pthread_barrier_t bar; /* workers + main */
static int workers_done;

#define FULL_EVERY 64

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    size_t budget = (size_t)(cfg.peak_mib * 1048576.0 / cfg.threads), live = 0;
    while (live < budget) {
        if (w->count == w->cap)
            die(2, "thread %d: pointer array full", w->id);
        size_t n = rng_range(&w->rng, cfg.min, cfg.max);
        unsigned char *p = malloc(n);
        if (p == NULL)
            BENCH_FAIL("thread %d: malloc(%zu) returned NULL after %zu bytes", w->id, n, live);
        bench_mark(p, n, bench_tag(w->tag_base, w->count), w->count % FULL_EVERY == 0);
        w->ptrs[w->count] = p;
        w->sizes[w->count] = (uint16_t)n;
        w->count++;
        live += n;
    }
    pthread_barrier_wait(&bar); /* all live: main reads the peak */
    pthread_barrier_wait(&bar); /* go: free */
    struct bench_checked chk = {0}; /* a local; into *w at the end */
    for (size_t i = 0; i < w->count; i++)
        bench_check_free(w->id, w->ptrs[i], w->sizes[i], bench_tag(w->tag_base, i), i % FULL_EVERY == 0,
                         &chk);
    w->chk = chk;
    bench_unmap(w->ptrs, w->map_ptrs);
    bench_unmap(w->sizes, w->map_sizes);
    __atomic_fetch_add(&workers_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_options("rsspeak", argc, argv, opts, usage, usage);
    cfg = opt;
    if (optind != argc || cfg.threads < 1 || cfg.threads > 256 || !(cfg.peak_mib > 0) ||
        cfg.min < 16 || cfg.max < cfg.min || cfg.max > 65535 || !(cfg.idle_s >= 1) ||
        cfg.interval_ms < 1)
        bench_usage_error(usage);
    const char *allocator = bench_detect_allocator();

    workers = bench_map((size_t)cfg.threads * sizeof *workers, 1);
    size_t share = (size_t)(cfg.peak_mib * 1048576.0 / cfg.threads);
    for (int i = 0; i < cfg.threads; i++) {
        struct worker *w = &workers[i];
        w->id = i;
        w->cap = share / cfg.min + 2;
        w->map_ptrs = w->cap * sizeof *w->ptrs;
        w->map_sizes = w->cap * sizeof *w->sizes;
        w->ptrs = bench_map(w->map_ptrs, 0); /* touched as it fills: part of the peak */
        w->sizes = bench_map(w->map_sizes, 0);
        w->rng = mix64(0x4b1d + (uint64_t)i);
        w->tag_base = mix64((uint64_t)(i + 7) << 36);
    }
    /* samples: room for the whole run at the interval, plus slack */
    size_t max_samples = (size_t)((cfg.idle_s + 600.0) * 1000.0 / cfg.interval_ms) + 16;
    struct bench_samples samples;
    bench_samples_init(&samples, max_samples, 1);

    bench_barrier_init(&bar, (unsigned)cfg.threads + 1);
    long rss_base = bench_rss_kib();
    BENCH_START(workers, cfg.threads, th, worker_main, 0);
    pthread_barrier_wait(&bar);
    long rss_peak = bench_rss_kib();
    size_t blocks = 0;
    for (int i = 0; i < cfg.threads; i++)
        blocks += workers[i].count;
    const double interval = cfg.interval_ms / 1000.0;
    double t0 = now_s();
    pthread_barrier_wait(&bar); /* the frees start */
    /* Samples on a grid from t0 while the frees run; once the workers are
     * done (and joined), one sample then, and a new grid from that moment,
     * so that there are samples exactly 1 s and idle_s after the last free. */
    double t_free = -1; /* when the last worker was done, on the t0 clock */
    long rss_freed = -1;
    double grid0 = 0;
    for (long k = 0;;) {
        double t = now_s() - t0;
        bench_sample(&samples, t, bench_rss_kib());
        if (t_free >= 0 && t >= t_free + cfg.idle_s - 1e-3)
            break;
        double next = t0 + grid0 + (double)++k * interval;
        if (t_free >= 0) {
            bench_sleep_until(next);
            continue;
        }
        while (now_s() < next && __atomic_load_n(&workers_done, __ATOMIC_ACQUIRE) < cfg.threads) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        if (__atomic_load_n(&workers_done, __ATOMIC_ACQUIRE) == cfg.threads) {
            BENCH_JOIN(workers, cfg.threads, th);
            t_free = now_s() - t0;
            rss_freed = bench_rss_kib();
            bench_sample(&samples, t_free, rss_freed);
            grid0 = t_free;
            k = 0;
            bench_sleep_until(t0 + grid0 + (double)++k * interval);
        }
    }
    pthread_barrier_destroy(&bar);
    struct bench_checked chk = BENCH_CHECKED_SUM(workers, cfg.threads, chk);

    /* RSS at 1 s and at idle_s after the last free: the samples nearest to
     * those moments (on the grid that starts at the last free). */
    long rss_1s = -1, rss_end = -1;
    double d1 = 1e9, d2 = 1e9;
    for (size_t i = 0; i < samples.n; i++) {
        double a = samples.t[i] - (t_free + 1.0), b = samples.t[i] - (t_free + cfg.idle_s);
        if (a < 0)
            a = -a;
        if (b < 0)
            b = -b;
        if (a < d1)
            d1 = a, rss_1s = samples.kib[i];
        if (b < d2)
            d2 = b, rss_end = samples.kib[i];
    }
    printf("{\"bench\": \"rsspeak\", \"threads\": %d, \"peak_mib_requested\": %.0f, \"min\": %zu, "
           "\"max\": %zu, \"blocks\": %zu, \"idle_s\": %.2f, \"interval_ms\": %d, "
           "\"rss_base_kib\": %ld, \"rss_peak_kib\": %ld, \"rss_freed_kib\": %ld, \"rss_1s_kib\": %ld, "
           "\"rss_end_kib\": %ld, \"rss_peak_mib\": %.2f, \"rss_1s_mib\": %.2f, \"rss_end_mib\": %.2f, "
           "\"free_s\": %.4f, \"series\": [",
           cfg.threads, cfg.peak_mib, cfg.min, cfg.max, blocks, cfg.idle_s, cfg.interval_ms, rss_base,
           rss_peak, rss_freed, rss_1s, rss_end, rss_peak / 1024.0, rss_1s / 1024.0, rss_end / 1024.0,
           t_free);
    bench_print_samples(&samples);
    printf("], \"allocator\": \"%s\", " BENCH_CHECKED_FMT "}\n", allocator, BENCH_CHECKED_ARGS(chk, ""));
    return 0;
}
