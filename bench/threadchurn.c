/*
 * threadchurn: short-lived threads that allocate, hand half of their blocks
 * to the next thread and exit, as a server's per-request or per-task threads
 * do.  --threads L lineages run at once; each is a chain of --gens threads,
 * one after the other.  A thread of the chain:
 *   1. allocates --blocks K blocks and writes every byte of each;
 *   2. checks and frees the K/2 blocks its predecessor handed it (blocks of
 *      a thread that has exited: remote frees into a dead thread's memory);
 *   3. checks and frees its own even-numbered blocks;
 *   4. hands its odd-numbered ones to its successor, starts it and exits.
 * So at most two threads of a lineage are alive at a time (the one exiting
 * and its successor), and every thread starts with empty caches, while its
 * predecessor's cached memory is being given back.  The last thread's
 * blocks are checked and freed by the main thread after the timing.
 *
 * Sizes: log-uniform from --min to --max bytes (a power-of-two range picked
 * at random, then uniform in it), and 1 block in --large-every of --large
 * .. --large + --large/16 bytes (default ~270 KB: just above the 256 KiB
 * where fastalloc and tcmalloc stop using size classes, so each is a large
 * block of its own pages; above glibc's initial mmap threshold of 128 KiB,
 * which glibc raises once such blocks are freed).
 *
 * Validation: every block is filled (bench_fill: tag at the start,
 * complement at the end, fill byte between) when allocated, and checked
 * before its free: the stamps of every block, every byte of 2 blocks in 16
 * (one kept, one handed over).  Exit 3 on a mismatch.  "checked" in the
 * output: blocks = L x gens x K, full and bytes, threads = threads run,
 * handed = blocks freed by another thread than the one that allocated them.
 *
 * Output: elapsed_s, from the start of the first threads until the last
 * lineage's last thread finished.
 */
#include "bench_common.h"

#include <inttypes.h>

static const char usage[] =
    "usage: threadchurn [--threads L] [--gens G] [--blocks K] [--min B] [--max B] [--large B]\n"
    "                   [--large-every N]\n"
    "  --threads      lineages running at once (default 2)\n"
    "  --gens         threads per lineage, one after the other (default 500)\n"
    "  --blocks       blocks each thread allocates; it hands K/2 to the next (default 256, even)\n"
    "  --min, --max   sizes of the small blocks, log-uniform (default 16..65536; min >= 16)\n"
    "  --large        size of the large blocks: large .. large + large/16 (default 270000)\n"
    "  --large-every  1 block in N is large (default 32)\n";

struct blk {
    unsigned char *p;
    size_t n;
    uint64_t tag;
    int full;
};

struct lineage {
    int id;
    struct blk *mine;   /* K: this thread's blocks */
    struct blk *in;     /* K/2: handed over by the predecessor */
    size_t nin;
    size_t map_mine, map_in;
    uint64_t rng, tag_base, step;
    unsigned gens;      /* threads run so far */
    uint64_t handed;    /* blocks freed by another thread than their allocator's */
    struct bench_checked chk;
    double end;
} __attribute__((aligned(128)));

/* opt: the command line, over the defaults; cfg: its copy that the
 * measured code reads (see bench_options).  gens and large_every are
 * read as ints (gens_arg, every_arg), so that main refuses a value below 1
 * before it becomes unsigned. */
static struct {
    int threads;
    unsigned gens;
    size_t blocks;
    size_t min, max, large;
    unsigned large_every;
} opt = {.threads = 2, .blocks = 256, .min = 16, .max = 65536, .large = 270000}, cfg;
static int gens_arg = 500, every_arg = 32;

static const struct bench_opt opts[] = {
    INT_OPT("threads", &opt.threads), INT_OPT("gens", &gens_arg), SIZE_OPT("blocks", &opt.blocks),
    SIZE_OPT("min", &opt.min), SIZE_OPT("max", &opt.max), SIZE_OPT("large", &opt.large),
    INT_OPT("large-every", &every_arg), OPT_END};

static unsigned size_classes; /* power-of-two ranges between min and max */
static struct lineage *lines;
static struct bench_chains chains;

static size_t pick_size(uint64_t *rng)
{
    if (rng_below(rng, cfg.large_every) == 0)
        return rng_range(rng, cfg.large, cfg.large + cfg.large / 16);
    size_t lo = cfg.min << rng_below(rng, size_classes);
    size_t hi = lo * 2 - 1 < cfg.max ? lo * 2 - 1 : cfg.max;
    return rng_range(rng, lo, hi);
}

static void check_free(struct lineage *l, struct blk *b)
{
    long bad = bench_check(b->p, b->n, b->tag, b->full, &l->chk);
    if (bad >= 0)
        BENCH_FAIL("lineage %d, thread %u: block %p (%zu bytes) was overwritten while live (byte %ld)",
                   l->id, l->gens, (void *)b->p, b->n, bad);
    free(b->p);
    b->p = NULL;
}

static void *worker(void *arg)
{
    struct lineage *l = arg;
    for (size_t j = 0; j < cfg.blocks; j++) {
        struct blk *b = &l->mine[j];
        b->n = pick_size(&l->rng);
        b->p = malloc(b->n);
        if (b->p == NULL)
            BENCH_FAIL("lineage %d: malloc(%zu) returned NULL", l->id, b->n);
        b->tag = bench_tag(l->tag_base, l->step++);
        b->full = j % 16 < 2; /* one kept (even), one handed over (odd) */
        bench_fill(b->p, b->n, b->tag);
    }
    for (size_t i = 0; i < l->nin; i++)
        check_free(l, &l->in[i]);
    l->handed += l->nin;
    for (size_t j = 0; j < cfg.blocks; j += 2)
        check_free(l, &l->mine[j]);
    l->nin = 0;
    for (size_t j = 1; j < cfg.blocks; j += 2)
        l->in[l->nin++] = l->mine[j];
    l->gens++;
    if (l->gens < cfg.gens) {
        /* Start the successor, then exit.  Everything above happens before
         * it runs (pthread_create orders it), so it may read l. */
        bench_chain_next(&chains, worker, l);
    } else {
        l->end = now_s();
        bench_chain_end(&chains);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    bench_options("threadchurn", argc, argv, opts, usage, usage);
    if (optind != argc || opt.threads < 1 || opt.threads > 1024 || gens_arg < 1 || opt.blocks < 2 ||
        opt.blocks % 2 != 0 || opt.blocks > 1000000 || opt.min < 16 || opt.max < opt.min ||
        opt.max > (1u << 30) || opt.large < 16 || opt.large > (1u << 30) || every_arg < 1)
        bench_usage_error(usage);
    opt.gens = (unsigned)gens_arg;
    opt.large_every = (unsigned)every_arg;
    cfg = opt;
    for (size_classes = 1; (cfg.min << size_classes) <= cfg.max; size_classes++) {
    }
    const char *allocator = bench_detect_allocator();
    bench_chains_init(&chains);
    lines = bench_map((size_t)cfg.threads * sizeof *lines, 1);
    for (int i = 0; i < cfg.threads; i++) {
        struct lineage *l = &lines[i];
        l->id = i;
        l->rng = mix64(0x7c4u + (uint64_t)i);
        l->tag_base = mix64((uint64_t)(i + 1) << 40);
        l->map_mine = cfg.blocks * sizeof *l->mine;
        l->map_in = cfg.blocks / 2 * sizeof *l->in;
        l->mine = bench_map(l->map_mine, 1);
        l->in = bench_map(l->map_in, 1);
    }
    double t0 = now_s();
    BENCH_CHAINS_START(&chains, lines, cfg.threads, worker);
    bench_chains_wait(&chains, cfg.threads);
    double t1 = t0;
    for (int i = 0; i < cfg.threads; i++)
        if (lines[i].end > t1)
            t1 = lines[i].end;
    /* The last threads' handed-over blocks: checked and freed here, untimed. */
    struct bench_checked chk = {0};
    uint64_t handed = 0, threads = 0;
    for (int i = 0; i < cfg.threads; i++) {
        struct lineage *l = &lines[i];
        for (size_t k = 0; k < l->nin; k++)
            check_free(l, &l->in[k]);
        l->handed += l->nin;
        bench_checked_add(&chk, &l->chk);
        handed += l->handed;
        threads += l->gens;
        bench_unmap(l->mine, l->map_mine);
        bench_unmap(l->in, l->map_in);
    }
    double elapsed = t1 - t0;
    char extra[96];
    snprintf(extra, sizeof extra, ", \"threads\": %" PRIu64 ", \"handed\": %" PRIu64, threads, handed);
    printf("{\"bench\": \"threadchurn\", \"lineages\": %d, \"gens\": %u, \"blocks\": %zu, \"min\": %zu, "
           "\"max\": %zu, \"large\": %zu, \"large_every\": %u, \"spawn_retries\": %lu, "
           "\"elapsed_s\": %.6f, \"us_per_gen\": %.2f, \"allocator\": \"%s\", " BENCH_CHECKED_FMT "}\n",
           cfg.threads, cfg.gens, cfg.blocks, cfg.min, cfg.max, cfg.large, cfg.large_every, chains.retries,
           elapsed, elapsed * 1e6 / (double)threads * cfg.threads, allocator,
           BENCH_CHECKED_ARGS(chk, extra));
    return 0;
}
