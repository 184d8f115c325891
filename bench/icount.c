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
 *
 * The counted loop checks what it gets, so that a broken allocator cannot
 * look cheap: every pointer is compared with NULL (exit 3), and every block
 * gets a tag (tag i for the i-th allocation of measure(), counting the
 * window's initial blocks as 0..live-1) written into its first word and
 * read back: at once (reuse, pool), or right before its free (window, where
 * a block handed out twice while live has lost its tag by then).  The sum
 * of the tags read back is the checksum; icount compares it with the sum of
 * the tags it wrote (exit 3) and prints it, and run.py computes it again
 * from n and the size.  These checks are measure()'s own instructions,
 * which the allocator's count leaves out.
 *
 * Prints one JSON line when done, with "checked": pairs (n), checksum, and
 * the warm-up's and the final drain's checks (blocks, full, bytes); the
 * instruction counts come from callgrind's output file.
 */
#include "bench_common.h"

#include <inttypes.h>

/* fastalloc's pool API, found with dlsym (the program does not link it). */
static __typeof__(fa_pool_create) *pool_create;
static __typeof__(fa_pool_get) *pool_get;
static __typeof__(fa_pool_put) *pool_put;

enum { MODE_REUSE, MODE_WINDOW, MODE_POOL };

/* opt: the command line, over the defaults.  main copies mode, size and
 * live to the variables of those names, which measure() reads, and whose
 * instructions are what is counted (see bench_options). */
static struct {
    int mode;
    size_t size;
    long live, n, warm;
} opt = {.mode = MODE_REUSE, .size = 64, .live = 64, .n = 200000, .warm = 50000};

static const struct bench_opt opts[] = {
    CHOICE_OPT("mode", &opt.mode, "reuse|window|pool", NULL), /* MODE_REUSE, MODE_WINDOW, MODE_POOL */
    SIZE_OPT("size", &opt.size), LONG_OPT("live", &opt.live), LONG_OPT("n", &opt.n),
    LONG_OPT("warm", &opt.warm), OPT_END};

static int mode;
static size_t size;
static long live;
static fa_pool *pool;
static uint64_t **ring;
static struct bench_checked chk; /* the warm-up's and the drain's checks */

/* The tag of measure()'s i-th allocation (run.py computes the checksum of n
 * of them from the same formula). */
static uint64_t mtag_base(void)
{
    return mix64(0x1c0u ^ size);
}

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
            bench_fill((unsigned char *)ring[i], size, tags[i]);
        }
        for (long i = 0, k = 0; i < n; i++) {
            if (bench_fill_bad((unsigned char *)ring[k], size, tags[k]) >= 0)
                BENCH_FAIL("block %p of %zu bytes was overwritten while live", (void *)ring[k], size);
            bench_checked_full(&chk, size);
            chk.blocks++;
            free(ring[k]);
            ring[k] = malloc(size);
            if (ring[k] == NULL)
                BENCH_FAIL("malloc(%zu) returned NULL", size);
            tags[k] = bench_tag(base, (uint64_t)(i + live));
            bench_fill((unsigned char *)ring[k], size, tags[k]);
            if (++k == live)
                k = 0;
        }
        /* The ring stays full for measure().  Its step k (k < live) frees
         * slot k and reads the tag of its allocation k there. */
        for (long k = 0; k < live; k++)
            ring[k][0] = bench_tag(mtag_base(), (uint64_t)k);
        bench_unmap(tags, (size_t)live * sizeof *tags);
        return;
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
            bench_checked_full(&chk, size);
            chk.blocks++;
            if (mode == MODE_POOL)
                pool_put(pool, held[j]);
            else
                free(held[j]);
        }
        i += 7;
    }
}

/* Counted.  Global and noinline: callgrind toggles on its name.  Returns
 * the checksum: the sum of the tags read back.  The volatile accesses keep
 * the write and the read in the loop (without them the compiler may pass
 * the tag on in a register). */
__attribute__((noinline)) uint64_t measure(long n);
__attribute__((noinline)) uint64_t measure(long n)
{
    const uint64_t step = 0x9e3779b97f4a7c16ull; /* bench_tag's */
    uint64_t sum = 0;
    if (mode == MODE_REUSE) {
        uint64_t tag = bench_tag(mtag_base(), 0);
        for (long i = 0; i < n; i++) {
            uint64_t *p = malloc(size);
            if (p == NULL)
                BENCH_FAIL("measure: malloc(%zu) returned NULL at pair %ld", size, i);
            *(volatile uint64_t *)p = tag;
            sum += *(volatile uint64_t *)p;
            free(p);
            tag += step;
        }
    } else if (mode == MODE_WINDOW) {
        uint64_t **r = ring;
        uint64_t tag = bench_tag(mtag_base(), (uint64_t)live); /* the first new block's */
        for (long i = 0, k = 0; i < n; i++) {
            sum += r[k][0]; /* tag i, unless another allocation got this block too */
            free(r[k]);
            uint64_t *p = malloc(size);
            if (p == NULL)
                BENCH_FAIL("measure: malloc(%zu) returned NULL at pair %ld", size, i);
            p[0] = tag;
            r[k] = p;
            tag += step;
            if (++k == live)
                k = 0;
        }
    } else {
        fa_pool *pl = pool;
        uint64_t tag = bench_tag(mtag_base(), 0);
        for (long i = 0; i < n; i++) {
            uint64_t *p = pool_get(pl);
            if (p == NULL)
                BENCH_FAIL("measure: fa_pool_get returned NULL at pair %ld", i);
            *(volatile uint64_t *)p = tag;
            sum += *(volatile uint64_t *)p;
            pool_put(pl, p);
            tag += step;
        }
    }
    return sum;
}

static const char help[] =
    "usage: icount [--mode reuse|window|pool] [--size B] [--live N] [--n N] [--warm N]\n"
    "Run under callgrind with --collect-atstart=no --toggle-collect=measure.\n";

int main(int argc, char **argv)
{
    /* A bad option exits 2 after getopt's own message, with no usage. */
    bench_options("icount", argc, argv, opts, help, NULL);
    mode = opt.mode;
    size = opt.size;
    live = opt.live;
    const long n = opt.n, nwarm = opt.warm;
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
    const uint64_t checksum = measure(n);
    /* The tags measure() read back are those of allocations 0..n-1. */
    uint64_t expect = 0;
    for (long i = 0; i < n; i++)
        expect += bench_tag(mtag_base(), (uint64_t)i);
    if (checksum != expect)
        BENCH_FAIL("measure: checksum %" PRIu64 " of the tags read back, expected %" PRIu64
                   " (a block was not written, or handed out twice)", checksum, expect);
    if (mode == MODE_WINDOW) {
        /* The ring now holds allocations n..n+live-1, allocation m in slot m % live. */
        for (long m = n; m < n + live; m++) {
            uint64_t *p = ring[m % live];
            if (p[0] != bench_tag(mtag_base(), (uint64_t)m))
                BENCH_FAIL("block %p of %zu bytes was overwritten while live", (void *)p, size);
            chk.blocks++;
            free(p);
        }
    }
    char extra[96];
    snprintf(extra, sizeof extra, ", \"pairs\": %ld, \"checksum\": %" PRIu64, n, checksum);
    printf("{\"bench\": \"icount\", \"mode\": \"%s\", \"size\": %zu, \"live\": %ld, \"n\": %ld, "
           "\"allocator\": \"%s\", " BENCH_CHECKED_FMT "}\n",
           mode == MODE_REUSE ? "reuse" : mode == MODE_WINDOW ? "window" : "pool", size,
           mode == MODE_WINDOW ? live : 0L, n, allocator, BENCH_CHECKED_ARGS(chk, extra));
    return 0;
}
