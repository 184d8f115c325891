/*
 * prodcons: remote frees.  --pairs P producer/consumer pairs; each producer
 * allocates --ops objects of --min..--max bytes (uniform random) and passes
 * every one of them through a bounded single-producer single-consumer ring
 * (--ring slots, mmap'd) to its consumer, which checks the object's contents
 * and frees it: every free is a free of a block another thread allocated.
 *
 * A full or empty ring makes the waiting thread spin a little, then
 * sched_yield(): with more threads than CPUs the other side must get to run.
 *
 * Validation: the consumer knows the sequence of sizes and tags (it runs the
 * producer's random generator with the same seed), so it checks that objects
 * arrive in order, with the tag in the first word and its complement in the
 * last 8 bytes; every 16th object is filled entirely and checked entirely.
 * Any mismatch exits 3.  "checked" in the output counts the objects the
 * consumers checked (blocks: pairs x ops) and those checked entirely (full,
 * with their bytes).
 *
 * Output: ops_per_s = objects passed (allocated, handed over and freed) per
 * second, all pairs together; elapsed_s from the first producer's start to
 * the last consumer's end.
 */
#include "bench_common.h"

#include <inttypes.h>
#include <sched.h>

static const char usage[] =
    "usage: prodcons [--pairs P] [--ops N] [--min B] [--max B] [--ring N]\n"
    "  --pairs  producer/consumer pairs (default 1)\n"
    "  --ops    objects per producer (default 1M)\n"
    "  --min, --max  object sizes, uniform (default 16..512; min >= 16)\n"
    "  --ring   slots per ring, a power of two (default 256)\n";

struct ring {
    _Alignas(128) unsigned long head; /* written by the producer */
    _Alignas(128) unsigned long tail; /* written by the consumer */
    _Alignas(128) void **slot;
    unsigned long mask;
    int id;
    uint64_t seed;
    pthread_t prod, cons;
    struct bench_checked chk; /* what the consumer checked */
    struct bench_span span;   /* first object made .. last one freed */
};

/* opt: the command line, over the defaults; cfg: its copy that the
 * measured code reads (see bench_options). */
static struct {
    int pairs;
    uint64_t ops;
    size_t min, max;
    size_t ring;
} opt = {.pairs = 1, .ops = 1000000, .min = 16, .max = 512, .ring = 256}, cfg;

static const struct bench_opt opts[] = {INT_OPT("pairs", &opt.pairs), COUNT_OPT("ops", &opt.ops),
                                        SIZE_OPT("min", &opt.min), SIZE_OPT("max", &opt.max),
                                        SIZE_OPT("ring", &opt.ring), OPT_END};

static struct ring *rings;
static pthread_barrier_t start_bar;

#define FULL_EVERY 16

static inline void wait_a_little(unsigned *spins)
{
    if (++*spins < 64)
        bench_cpu_relax();
    else
        sched_yield();
}

static void *producer(void *arg)
{
    struct ring *r = arg;
    uint64_t rng = r->seed;
    const uint64_t base = mix64(r->seed ^ 0xabcdef);
    unsigned long head = 0;
    pthread_barrier_wait(&start_bar);
    r->span.start = now_s(); /* not the main thread's clock: it may run late */
    for (uint64_t i = 0; i < cfg.ops; i++) {
        size_t n = rng_range(&rng, cfg.min, cfg.max);
        uint64_t tag = bench_tag(base, i);
        unsigned char *p = malloc(n);
        if (p == NULL)
            BENCH_FAIL("producer %d: malloc(%zu) returned NULL", r->id, n);
        bench_mark(p, n, tag, i % FULL_EVERY == 0);
        unsigned spins = 0;
        while (head - __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE) > r->mask)
            wait_a_little(&spins);
        r->slot[head & r->mask] = p;
        __atomic_store_n(&r->head, ++head, __ATOMIC_RELEASE);
    }
    return NULL;
}

static void *consumer(void *arg)
{
    struct ring *r = arg;
    uint64_t rng = r->seed; /* the producer's sizes, in the same order */
    const uint64_t base = mix64(r->seed ^ 0xabcdef);
    unsigned long tail = 0;
    struct bench_checked chk = {0}; /* a local, kept in registers; into *r at the end */
    pthread_barrier_wait(&start_bar);
    for (uint64_t i = 0; i < cfg.ops; i++) {
        size_t n = rng_range(&rng, cfg.min, cfg.max);
        uint64_t tag = bench_tag(base, i);
        unsigned spins = 0;
        while (__atomic_load_n(&r->head, __ATOMIC_ACQUIRE) == tail)
            wait_a_little(&spins);
        unsigned char *p = r->slot[tail & r->mask];
        __atomic_store_n(&r->tail, ++tail, __ATOMIC_RELEASE);
        long bad = bench_check(p, n, tag, i % FULL_EVERY == 0, &chk);
        if (bad >= 0)
            BENCH_FAIL("consumer %d: object %" PRIu64 " (%p, %zu bytes) is corrupt at byte %ld",
                       r->id, i, (void *)p, n, bad);
        free(p);
    }
    r->span.end = now_s();
    r->chk = chk;
    return NULL;
}

int main(int argc, char **argv)
{
    bench_options("prodcons", argc, argv, opts, usage, usage);
    cfg = opt;
    if (optind != argc || cfg.pairs < 1 || cfg.pairs > 512 || cfg.ops < 1 || cfg.min < 16 ||
        cfg.max < cfg.min || cfg.ring < 2 || (cfg.ring & (cfg.ring - 1)) != 0)
        bench_usage_error(usage);
    const char *allocator = bench_detect_allocator();
    rings = bench_map((size_t)cfg.pairs * sizeof *rings, 1);
    bench_barrier_init(&start_bar, (unsigned)(2 * cfg.pairs + 1));
    for (int i = 0; i < cfg.pairs; i++) {
        struct ring *r = &rings[i];
        r->id = i;
        r->seed = mix64(0x9c0ffee + (uint64_t)i);
        r->mask = cfg.ring - 1;
        r->slot = bench_map(cfg.ring * sizeof(void *), 1);
    }
    /* All of them wait at the start barrier: the order of the starts does not matter. */
    BENCH_START(rings, cfg.pairs, cons, consumer, 0);
    BENCH_START(rings, cfg.pairs, prod, producer, 0);
    pthread_barrier_wait(&start_bar);
    BENCH_JOIN(rings, cfg.pairs, prod);
    BENCH_JOIN(rings, cfg.pairs, cons);
    struct bench_span all = BENCH_SPAN(rings, cfg.pairs, span);
    double elapsed = all.end - all.start;
    uint64_t total = cfg.ops * (uint64_t)cfg.pairs;
    struct bench_checked chk = BENCH_CHECKED_SUM(rings, cfg.pairs, chk);
    printf("{\"bench\": \"prodcons\", \"pairs\": %d, \"ops_per_producer\": %" PRIu64 ", "
           "\"min\": %zu, \"max\": %zu, \"ring\": %zu, \"total_ops\": %" PRIu64 ", "
           "\"elapsed_s\": %.6f, \"ops_per_s\": %.1f, \"allocator\": \"%s\", "
           BENCH_CHECKED_FMT "}\n",
           cfg.pairs, cfg.ops, cfg.min, cfg.max, cfg.ring, total, elapsed, (double)total / elapsed,
           allocator, BENCH_CHECKED_ARGS(chk, ""));
    return 0;
}
