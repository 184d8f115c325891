/*
 * manythreads: many threads, each with a small heap of its own.  --threads T
 * threads start together; each allocates blocks of --min..--max bytes
 * (uniform) until --live-kib KiB (requested bytes) are live, then frees them
 * all, and does that --repeat times.  With 256 threads of 1 MiB each on a
 * machine with few CPUs, this measures what an allocator spends per thread:
 * caches, arenas, metadata, and the memory it keeps after a thread's frees.
 *
 * The main thread samples VmRSS every --sample-ms while the threads run
 * (rss_max_sampled, and "series": [seconds, MiB] pairs for plots).
 *
 * Validation: every block stamped (tag at the start, complement at the end),
 * every 32nd filled entirely, all checked before the free.  Exit 3 on a
 * mismatch.
 *
 * Output: ops_per_s = malloc+free pairs per second, all threads together,
 * from the first thread's start to the last thread's end.
 */
#include "bench_common.h"

#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>

struct worker {
    int id;
    pthread_t th;
    unsigned char **ptrs;
    size_t cap;
    size_t map_bytes;
    uint64_t rng, tag_base;
    uint64_t pairs;
    double start, end;
} __attribute__((aligned(128)));

static struct {
    int threads;
    size_t live;
    size_t min, max;
    int repeat;
    int sample_ms;
} cfg;

static struct worker *workers;
static pthread_barrier_t start_bar;
static int done_count;

#define FULL_EVERY 32

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    pthread_barrier_wait(&start_bar);
    w->start = bench_now(); /* not the main thread's clock: it may run late */
    uint64_t step = 0;
    for (int r = 0; r < cfg.repeat; r++) {
        size_t live = 0, count = 0;
        uint64_t rng_start = w->rng, step_start = step;
        while (live < cfg.live) {
            if (count == w->cap)
                bench_die(2, "thread %d: pointer array full", w->id);
            size_t n = bench_rand_range(&w->rng, cfg.min, cfg.max);
            unsigned char *p = malloc(n);
            if (p == NULL)
                BENCH_FAIL("thread %d: malloc(%zu) returned NULL", w->id, n);
            uint64_t tag = bench_tag(w->tag_base, step++);
            if (count % FULL_EVERY == 0)
                bench_fill(p, n, tag);
            else
                bench_stamp(p, n, tag);
            w->ptrs[count++] = p;
            live += n;
        }
        /* replay the generator for the sizes */
        uint64_t rng = rng_start;
        for (size_t i = 0; i < count; i++) {
            size_t n = bench_rand_range(&rng, cfg.min, cfg.max);
            unsigned char *p = w->ptrs[i];
            uint64_t tag = bench_tag(w->tag_base, step_start + i);
            if (i % FULL_EVERY == 0) {
                long bad = bench_fill_bad(p, n, tag);
                if (bad >= 0)
                    BENCH_FAIL("thread %d: block %p (%zu bytes) corrupt at byte %ld", w->id, (void *)p, n, bad);
            } else if (!bench_stamp_ok(p, n, tag)) {
                BENCH_FAIL("thread %d: block %p (%zu bytes) was overwritten while live", w->id, (void *)p, n);
            }
            free(p);
        }
        w->pairs += count;
    }
    w->end = bench_now();
    __atomic_fetch_add(&done_count, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: manythreads [--threads T] [--live-kib K] [--min B] [--max B] [--repeat N]\n"
        "                   [--sample-ms MS]\n"
        "  defaults: 256 threads, 1024 KiB live each, 16..512 B, 4 repeats, a sample every 10 ms\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"threads", required_argument, 0, 't'}, {"live-kib", required_argument, 0, 'l'},
        {"min", required_argument, 0, 'a'},     {"max", required_argument, 0, 'b'},
        {"repeat", required_argument, 0, 'r'},  {"sample-ms", required_argument, 0, 's'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    bench_name = "manythreads";
    cfg.threads = 256;
    cfg.live = 1024 * 1024;
    cfg.min = 16;
    cfg.max = 512;
    cfg.repeat = 4;
    cfg.sample_ms = 10;
    for (;;) {
        int c = getopt_long(argc, argv, "", opts, NULL);
        if (c == -1)
            break;
        switch (c) {
        case 't': cfg.threads = (int)bench_count("--threads", optarg); break;
        case 'l': cfg.live = (size_t)bench_count("--live-kib", optarg) * 1024; break;
        case 'a': cfg.min = (size_t)bench_count("--min", optarg); break;
        case 'b': cfg.max = (size_t)bench_count("--max", optarg); break;
        case 'r': cfg.repeat = (int)bench_count("--repeat", optarg); break;
        case 's': cfg.sample_ms = (int)bench_count("--sample-ms", optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc || cfg.threads < 1 || cfg.threads > 4096 || cfg.live < 1 || cfg.min < 16 ||
        cfg.max < cfg.min || cfg.repeat < 1 || cfg.sample_ms < 1) {
        usage(stderr);
        return 2;
    }
    const char *allocator = bench_detect_allocator();
    workers = bench_map((size_t)cfg.threads * sizeof *workers, 1);
    for (int i = 0; i < cfg.threads; i++) {
        struct worker *w = &workers[i];
        w->id = i;
        w->cap = cfg.live / cfg.min + 2;
        w->map_bytes = w->cap * sizeof *w->ptrs;
        w->ptrs = bench_map(w->map_bytes, 0);
        w->rng = bench_mix64(0x3a77 + (uint64_t)i);
        w->tag_base = bench_mix64((uint64_t)(i + 3) << 30);
    }
    size_t max_samples = 600u * 1000u / (unsigned)cfg.sample_ms + 16;
    double *st = bench_map(max_samples * sizeof *st, 0);
    long *sr = bench_map(max_samples * sizeof *sr, 0);
    size_t ns = 0;
    long rss_base = bench_vmrss_kib(), rss_max = 0;

    if (pthread_barrier_init(&start_bar, NULL, (unsigned)cfg.threads + 1) != 0)
        bench_die(2, "pthread_barrier_init failed");
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (int i = 0; i < cfg.threads; i++) {
        int e = pthread_create(&workers[i].th, &attr, worker_main, &workers[i]);
        if (e != 0)
            bench_die(2, "pthread_create (thread %d): %s", i, strerror(e));
    }
    long rss_started = bench_vmrss_kib();
    pthread_barrier_wait(&start_bar);
    double t0 = bench_now();
    for (long k = 1;; k++) {
        long rss = bench_vmrss_kib();
        if (ns < max_samples) {
            st[ns] = bench_now() - t0;
            sr[ns] = rss;
            ns++;
        }
        if (rss > rss_max)
            rss_max = rss;
        if (__atomic_load_n(&done_count, __ATOMIC_ACQUIRE) == cfg.threads)
            break;
        bench_sleep_until(t0 + (double)k * cfg.sample_ms / 1000.0);
    }
    double t_first = workers[0].start, t1 = workers[0].end;
    uint64_t pairs = 0;
    for (int i = 0; i < cfg.threads; i++) {
        pthread_join(workers[i].th, NULL);
        if (workers[i].start < t_first)
            t_first = workers[i].start;
        if (workers[i].end > t1)
            t1 = workers[i].end;
        pairs += workers[i].pairs;
    }
    t0 = t_first;
    long rss_exit = bench_vmrss_kib();
    double elapsed = t1 - t0;
    printf("{\"bench\": \"manythreads\", \"threads\": %d, \"live_kib\": %zu, \"min\": %zu, \"max\": %zu, "
           "\"repeat\": %d, \"total_ops\": %" PRIu64 ", \"elapsed_s\": %.6f, \"ops_per_s\": %.1f, "
           "\"rss_base_kib\": %ld, \"rss_started_kib\": %ld, \"rss_max_sampled_kib\": %ld, "
           "\"rss_max_sampled_mib\": %.2f, \"rss_exit_kib\": %ld, \"series\": [",
           cfg.threads, cfg.live / 1024, cfg.min, cfg.max, cfg.repeat, pairs, elapsed,
           (double)pairs / elapsed, rss_base, rss_started, rss_max, rss_max / 1024.0, rss_exit);
    for (size_t i = 0; i < ns; i++)
        printf("%s[%.4f, %.2f]", i ? ", " : "", st[i], sr[i] / 1024.0);
    printf("], \"allocator\": \"%s\", \"valid\": true}\n", allocator);
    return 0;
}
