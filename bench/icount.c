/*
 * icount: the loop whose instructions bench/run.py counts with callgrind
 * (workload "fast-path instructions"):
 *
 *   valgrind --tool=callgrind --collect-atstart=no --toggle-collect=measure \
 *       icount --mode reuse --size 64 --n 200000
 *
 * warm() runs --warm pairs first, uncounted, with every block filled and
 * checked (exit 3 on a mismatch), so the allocator is in its steady state;
 * measure() then runs --n pairs and is the only function callgrind counts.
 * Total instructions / n = one pair with the loop around it; minus the
 * instructions executed in measure() itself (its own loop and calls) = the
 * allocator's instructions per pair (callgrind_annotate shows measure's
 * self cost; run.py does the sums).
 *
 * Modes:  reuse   p = malloc(size); free(p)
 *         window  a ring of --live blocks: free the oldest, malloc a new one
 *         pool    fa_pool_get + fa_pool_put on a pool of --size-byte objects
 *                 (fastalloc only; found with dlsym)
 * Prints one JSON line (allocator, valid) when done; the counts come from
 * callgrind's output file.
 */
#include "bench_common.h"

#include <inttypes.h>

/* fastalloc's pool API, found with dlsym (the program does not link it). */
static __typeof__(fa_pool_create) *pool_create;
static __typeof__(fa_pool_get) *pool_get;
static __typeof__(fa_pool_put) *pool_put;

enum { MODE_REUSE, MODE_WINDOW, MODE_POOL };

static int mode = MODE_REUSE;
static size_t size = 64;
static long live = 64;
static fa_pool *pool;
static void **ring;
static void *volatile sink;

/* Uncounted warm-up: every block filled and checked. */
static void warm(long n)
{
    uint64_t base = mix64(size);
    if (mode == MODE_WINDOW) {
        uint64_t *tags = bench_map((size_t)live * sizeof *tags, 1);
        for (long i = 0; i < live; i++) {
            ring[i] = malloc(size);
            if (ring[i] == NULL)
                BENCH_FAIL("malloc(%zu) returned NULL", size);
            tags[i] = bench_tag(base, (uint64_t)i);
            bench_fill(ring[i], size, tags[i]);
        }
        for (long i = 0, k = 0; i < n; i++) {
            if (bench_fill_bad(ring[k], size, tags[k]) >= 0)
                BENCH_FAIL("block %p of %zu bytes was overwritten while live", ring[k], size);
            free(ring[k]);
            ring[k] = malloc(size);
            if (ring[k] == NULL)
                BENCH_FAIL("malloc(%zu) returned NULL", size);
            tags[k] = bench_tag(base, (uint64_t)(i + live));
            bench_fill(ring[k], size, tags[k]);
            if (++k == live)
                k = 0;
        }
        return; /* the ring stays full for measure() */
    }
    /* reuse and pool: a few live at once, so that overlaps show */
    unsigned char *held[8];
    for (long i = 0; i < n; i++) {
        for (int j = 0; j < 8; j++) {
            held[j] = mode == MODE_POOL ? pool_get(pool) : malloc(size);
            if (held[j] == NULL || ((uintptr_t)held[j] & 15) != 0)
                BENCH_FAIL("allocation of %zu bytes returned %p", size, (void *)held[j]);
            bench_fill(held[j], size, bench_tag(base, (uint64_t)(i * 8 + j)));
        }
        for (int j = 0; j < 8; j++) {
            if (bench_fill_bad(held[j], size, bench_tag(base, (uint64_t)(i * 8 + j))) >= 0)
                BENCH_FAIL("block %p of %zu bytes was overwritten while live", (void *)held[j], size);
            if (mode == MODE_POOL)
                pool_put(pool, held[j]);
            else
                free(held[j]);
        }
        i += 7;
    }
}

/* Counted.  Global and noinline: callgrind toggles on its name. */
__attribute__((noinline)) void measure(long n);
__attribute__((noinline)) void measure(long n)
{
    if (mode == MODE_REUSE) {
        for (long i = 0; i < n; i++) {
            sink = malloc(size);
            free(sink);
        }
    } else if (mode == MODE_WINDOW) {
        void **r = ring;
        for (long i = 0, k = 0; i < n; i++) {
            free(r[k]);
            r[k] = malloc(size);
            if (++k == live)
                k = 0;
        }
    } else {
        fa_pool *pl = pool;
        for (long i = 0; i < n; i++) {
            sink = pool_get(pl);
            pool_put(pl, sink);
        }
    }
}

static const char help[] =
    "usage: icount [--mode reuse|window|pool] [--size B] [--live N] [--n N] [--warm N]\n"
    "Run under callgrind with --collect-atstart=no --toggle-collect=measure.\n";

int main(int argc, char **argv)
{
    die_prefix = "icount";
    long n = 200000, nwarm = 50000;
    /* Parsed into copies (see bench_options), then copied over: measure()
     * reads mode, size and live, and its instructions are what is counted. */
    int opt_mode = mode;
    size_t opt_size = size;
    long opt_live = live;
    const struct bench_opt opts[] = {
        {"mode", OPT_CHOICE, &opt_mode, "reuse|window|pool", NULL}, /* MODE_REUSE, MODE_WINDOW, MODE_POOL */
        {"size", OPT_SIZE, &opt_size, NULL, NULL},
        {"live", OPT_LONG, &opt_live, NULL, NULL},
        {"n", OPT_LONG, &n, NULL, NULL},
        {"warm", OPT_LONG, &nwarm, NULL, NULL},
        {NULL, 0, NULL, NULL, NULL}};
    /* A bad option exits 2 after getopt's own message, with no usage. */
    bench_options(argc, argv, opts, help, NULL);
    mode = opt_mode;
    size = opt_size;
    live = opt_live;
    if (optind != argc || size < 16 || live < 1 || n < 1 || nwarm < 8)
        die(2, "bad arguments (--help)");
    if (mode == MODE_POOL) {
        pool_create = (__typeof__(fa_pool_create) *)bench_fa_symbol("fa_pool_create");
        pool_get = (__typeof__(fa_pool_get) *)bench_fa_symbol("fa_pool_get");
        pool_put = (__typeof__(fa_pool_put) *)bench_fa_symbol("fa_pool_put");
        pool = pool_create(&(fa_pool_options){.object_size = size});
        if (pool == NULL)
            BENCH_FAIL("fa_pool_create failed");
    }
    if (mode == MODE_WINDOW)
        ring = bench_map((size_t)live * sizeof *ring, 1);
    const char *allocator = bench_detect_allocator();
    warm(nwarm);
    measure(n);
    if (mode == MODE_WINDOW)
        for (long i = 0; i < live; i++)
            free(ring[i]);
    printf("{\"bench\": \"icount\", \"mode\": \"%s\", \"size\": %zu, \"live\": %ld, \"n\": %ld, "
           "\"allocator\": \"%s\", \"valid\": true}\n",
           mode == MODE_REUSE ? "reuse" : mode == MODE_WINDOW ? "window" : "pool", size,
           mode == MODE_WINDOW ? live : 0L, n, allocator);
    return 0;
}
