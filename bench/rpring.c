/*
 * rpring: the pattern of rpmalloc's rptest (issue #53), rebuilt.  --threads T
 * threads in a ring each keep --slots S blocks live in a table and run
 * --loops L loops.  A loop frees the blocks of 80% of --ops N slots
 * (visited at one prime stride), frees every list of blocks the previous
 * thread of the ring handed it, allocates N blocks into slots (visited at
 * another prime stride, freeing what a slot held), and every --cross C
 * loops allocates N blocks more into a list that it hands to the next
 * thread (a lock-free stack per thread), which frees them in its next
 * loop; a thread whose neighbour holds 4 lists not yet freed waits for it,
 * freeing its own meanwhile.  So every thread allocates every size, frees its own blocks in a
 * scattered order, and frees blocks of its neighbour in runs.
 *
 * Sizes: --min to --max bytes (default 8..16,000), drawn per block from the
 * thread's seeded generator with a density that falls linearly from the
 * smallest to the largest (the difference of two uniform draws, as rptest's
 * "linear" size table does).  Every block is written at its first byte,
 * at its last, and at each 4 KiB between, as rptest does to count its
 * pages in the RSS.
 *
 * Validation: each block carries a stamp (bench_mark: a tag in its first
 * 8 bytes, the complement at its end) and every 16th of a thread's blocks
 * is filled and checked in every byte, right before its free.  Any
 * mismatch exits 3.  "checked": blocks = every block, each checked before
 * its free; lists = the lists handed over (T x ceil(L / C)).
 *
 * Output: ops_per_s = allocations and frees per second, all threads
 * together, from the first thread's start to the last one's end.
 */
#include "bench_common.h"

#include <inttypes.h>
#include <sched.h>

static const char usage[] =
    "usage: rpring [--threads T] [--loops L] [--slots S] [--ops N] [--cross C] [--min B] [--max B]\n"
    "  --threads  threads in the ring (default 2)\n"
    "  --loops    loops per thread (default 20k)\n"
    "  --slots    blocks each thread keeps live in its table (default 1000)\n"
    "  --ops      allocations per loop, and per list handed over (default 100)\n"
    "  --cross    a list to the next thread every C loops (default 2)\n"
    "  --min, --max  block sizes (default 8..16000; min >= 8)\n";

#define FULL_EVERY 16
#define MAX_PENDING 4

struct blk {
    unsigned char *p;
    uint32_t size;
    uint32_t full;
    uint64_t tag;
};

/* A list of blocks handed to the next thread. */
struct list {
    struct list *next;
    uint32_t count;
    struct blk b[];
};

struct thread {
    int id;
    pthread_t th;
    struct list *inbox; /* pushed by the previous thread, taken whole */
    unsigned pending;   /* lists pushed and not yet freed */
    struct blk *slots;
    uint64_t rng, tag_base, made, ops, lists;
    struct bench_checked chk;
    struct bench_span span;
} __attribute__((aligned(128)));

static struct {
    int threads;
    uint64_t loops;
    size_t slots, ops, cross, min, max;
} opt = {.threads = 2, .loops = 20000, .slots = 1000, .ops = 100, .cross = 2, .min = 8, .max = 16000}, cfg;

static const struct bench_opt opts[] = {INT_OPT("threads", &opt.threads), COUNT_OPT("loops", &opt.loops),
                                        SIZE_OPT("slots", &opt.slots),    SIZE_OPT("ops", &opt.ops),
                                        SIZE_OPT("cross", &opt.cross),    SIZE_OPT("min", &opt.min),
                                        SIZE_OPT("max", &opt.max),        OPT_END};

static struct thread *thr;
static pthread_barrier_t start_bar;
static int finished; /* threads done with their loops */

static uint64_t next_rand(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    return mix64(*s);
}

/* bench_mark needs 9 bytes for its two stamps: an 8-byte block holds the
 * tag alone, and is "full" once that is checked (as in xferbag). */
static void put(unsigned char *p, size_t n, uint64_t tag, int full)
{
    if (n >= 9)
        bench_mark(p, n, tag, full);
    else
        memcpy(p, &tag, 8);
}

static struct blk make(struct thread *t)
{
    uint64_t a = next_rand(&t->rng) % 65536, b = next_rand(&t->rng) % 65536;
    size_t n = cfg.min + (size_t)((cfg.max - cfg.min) * (a > b ? a - b : b - a) / 65535);
    struct blk k = {.size = (uint32_t)n, .full = t->made % FULL_EVERY == 0, .tag = bench_tag(t->tag_base, t->made)};
    t->made++;
    k.p = malloc(n);
    if (k.p == NULL)
        BENCH_FAIL("thread %d: malloc(%zu) returned NULL", t->id, n);
    for (size_t off = 4096; off + 8 < n; off += 4096)
        k.p[off] = 1; /* rptest's page touches; the stamps and fill go over them */
    put(k.p, n, k.tag, (int)k.full);
    t->ops++;
    return k;
}

static void drop(struct thread *t, struct blk *k)
{
    if (k->p == NULL)
        return;
    if (k->size >= 9) {
        bench_check_free(t->id, k->p, k->size, k->tag, (int)k->full, &t->chk);
    } else {
        uint64_t h;
        memcpy(&h, k->p, 8);
        if (h != k->tag)
            BENCH_FAIL("thread %d: block %p (8 bytes) was overwritten while live", t->id, (void *)k->p);
        t->chk.blocks++;
        if (k->full)
            bench_checked_full(&t->chk, k->size);
        free(k->p);
    }
    k->p = NULL;
    t->ops++;
}

static void drain_inbox(struct thread *t)
{
    struct list *l = __atomic_exchange_n(&t->inbox, NULL, __ATOMIC_ACQUIRE);
    while (l != NULL) {
        struct list *next = l->next;
        __atomic_fetch_sub(&t->pending, 1, __ATOMIC_RELEASE);
        for (uint32_t i = 0; i < l->count; i++)
            drop(t, &l->b[i]);
        free(l);
        t->ops++;
        l = next;
    }
}

static void *worker(void *arg)
{
    struct thread *t = arg;
    struct thread *to = &thr[(t->id + 1) % cfg.threads];
    const size_t s = cfg.slots, n = cfg.ops, nfree = n * 8 / 10;
    /* Strides prime to the table's size, as rptest's scatters are. */
    size_t as = 7, fs = 13;
    while (s % as == 0)
        as += 2;
    while (s % fs == 0 || fs == as)
        fs += 2;
    size_t ai = 0, fi = 0;
    pthread_barrier_wait(&start_bar);
    t->span.start = now_s();
    for (uint64_t loop = 0; loop < cfg.loops; loop++) {
        for (size_t i = 0; i < nfree; i++, fi = (fi + fs) % s)
            drop(t, &t->slots[fi]);
        drain_inbox(t);
        for (size_t i = 0; i < n; i++, ai = (ai + as) % s) {
            drop(t, &t->slots[ai]);
            t->slots[ai] = make(t);
        }
        if (cfg.threads > 1 && loop % cfg.cross == 0) {
            struct list *l = malloc(sizeof *l + n * sizeof l->b[0]);
            if (l == NULL)
                BENCH_FAIL("thread %d: malloc of a list returned NULL", t->id);
            l->count = (uint32_t)n;
            for (size_t i = 0; i < n; i++)
                l->b[i] = make(t);
            /* At most MAX_PENDING lists wait for a thread: one that ran
             * ahead (its neighbour off the CPU) would otherwise pile up
             * lists, and the peak RSS would measure the scheduler. */
            while (__atomic_load_n(&to->pending, __ATOMIC_ACQUIRE) >= MAX_PENDING) {
                drain_inbox(t);
                sched_yield();
            }
            __atomic_fetch_add(&to->pending, 1, __ATOMIC_RELAXED);
            l->next = __atomic_load_n(&to->inbox, __ATOMIC_RELAXED);
            while (!__atomic_compare_exchange_n(&to->inbox, &l->next, l, 1, __ATOMIC_RELEASE,
                                                __ATOMIC_RELAXED))
                ;
            t->lists++;
            t->ops++;
        }
    }
    /* Done: free what the others still hand over until all are done (a
     * thread that waited idle would let their lists pile up), then the
     * last lists. */
    __atomic_fetch_add(&finished, 1, __ATOMIC_RELEASE);
    while (__atomic_load_n(&finished, __ATOMIC_ACQUIRE) < cfg.threads) {
        drain_inbox(t);
        sched_yield();
    }
    drain_inbox(t);
    for (size_t i = 0; i < s; i++)
        drop(t, &t->slots[i]);
    t->span.end = now_s();
    return NULL;
}

int main(int argc, char **argv)
{
    bench_options("rpring", argc, argv, opts, usage, usage);
    cfg = opt;
    if (optind != argc || cfg.threads < 1 || cfg.threads > 512 || cfg.loops < 1 || cfg.slots < 1 ||
        cfg.slots > (1u << 24) || cfg.ops < 1 || cfg.ops > cfg.slots || cfg.cross < 1 || cfg.min < 8 ||
        cfg.max < cfg.min || cfg.max > (1u << 30))
        bench_usage_error(usage);
    const char *allocator = bench_detect_allocator();
    const size_t recs = (size_t)cfg.threads * sizeof(struct thread);
    thr = bench_map(recs, 1);
    for (int i = 0; i < cfg.threads; i++) {
        thr[i].id = i;
        thr[i].rng = 0x5eed + (uint64_t)i * 7919;
        thr[i].tag_base = mix64(0x4b1d + ((uint64_t)i << 20));
        thr[i].slots = bench_map(cfg.slots * sizeof(struct blk), 1);
    }
    bench_barrier_init(&start_bar, (unsigned)cfg.threads + 1);
    BENCH_START(thr, cfg.threads, th, worker, 0);
    pthread_barrier_wait(&start_bar);
    BENCH_JOIN(thr, cfg.threads, th);
    pthread_barrier_destroy(&start_bar);
    struct bench_span sp = BENCH_SPAN(thr, cfg.threads, span);
    double elapsed = sp.end - sp.start;
    uint64_t ops = 0, lists = 0, made = 0;
    for (int i = 0; i < cfg.threads; i++) {
        ops += thr[i].ops;
        lists += thr[i].lists;
        made += thr[i].made;
    }
    struct bench_checked chk = BENCH_CHECKED_SUM(thr, cfg.threads, chk);
    if (chk.blocks != made)
        BENCH_FAIL("%" PRIu64 " blocks made, %" PRIu64 " checked and freed", made, chk.blocks);
    char extra[48];
    snprintf(extra, sizeof extra, ", \"lists\": %" PRIu64, lists);
    printf("{\"bench\": \"rpring\", \"threads\": %d, \"loops\": %" PRIu64 ", \"slots\": %zu, \"ops\": %zu, "
           "\"cross\": %zu, \"min\": %zu, \"max\": %zu, \"operations\": %" PRIu64 ", \"elapsed_s\": %.6f, "
           "\"ops_per_s\": %.1f, \"allocator\": \"%s\", " BENCH_CHECKED_FMT "}\n",
           cfg.threads, cfg.loops, cfg.slots, cfg.ops, cfg.cross, cfg.min, cfg.max, ops, elapsed,
           (double)ops / elapsed, allocator, BENCH_CHECKED_ARGS(chk, extra));
    for (int i = 0; i < cfg.threads; i++)
        bench_unmap(thr[i].slots, cfg.slots * sizeof(struct blk));
    bench_unmap(thr, recs);
    return 0;
}
