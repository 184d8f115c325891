/*
 * larson: a Larson-style server simulation.  --threads T lineages; each owns
 * a slot array of --slots live objects of random size (--min..--max bytes).
 * One operation picks a random slot, checks and frees its object and puts a
 * new object of a new random size there.  Every --gen-ops operations the
 * thread hands its slot array to a new thread and exits (as a server's
 * worker thread would be replaced), so objects allocated by one thread are
 * freed by its successor, and threads come and go all the time.  Each
 * lineage does --ops operations in all.
 *
 * Validation: every object carries a tag in its first 8 bytes and the
 * complement in its last 8 (objects under 16 bytes: in their last byte); the
 * stamps are checked right before each free, and at the end every remaining
 * object is checked and freed.  Exit 3 on a mismatch.  "checked" in the
 * output counts the objects checked before their free: lineages x (ops +
 * slots).
 *
 * Output: ops_per_s = operations (free + malloc) per second, all lineages
 * together; elapsed_s from the start until the last lineage finished;
 * threads = threads created in all.
 */
#include "bench_common.h"

#include <inttypes.h>

static const char usage[] =
    "usage: larson [--threads T] [--slots N] [--ops N] [--gen-ops N] [--min B] [--max B]\n"
    "  --threads  lineages running at once (default 2)\n"
    "  --slots    live objects per lineage (default 1000)\n"
    "  --ops      operations per lineage (default 2M)\n"
    "  --gen-ops  operations before a thread hands over to a new one (default 20000)\n"
    "  --min, --max  object sizes, uniform (default 10..1000; min >= 9)\n";

struct slot {
    unsigned char *p;
    uint32_t n;
    uint32_t pad;
    uint64_t tag;
};

struct lineage {
    int id;
    struct slot *slots;
    size_t slot_bytes;
    uint64_t rng;
    uint64_t tag_base;
    uint64_t done;  /* operations so far */
    uint64_t step;  /* objects allocated so far (tags) */
    unsigned gens;
    struct bench_checked chk; /* objects checked before their free */
    double end;
} __attribute__((aligned(128)));

/* opt: the command line, over the defaults; cfg: its copy that the
 * measured code reads (see bench_options). */
static struct {
    int threads;
    size_t slots;
    uint64_t ops, gen_ops;
    size_t min, max;
} opt = {.threads = 2, .slots = 1000, .ops = 2000000, .gen_ops = 20000, .min = 10, .max = 1000}, cfg;

static const struct bench_opt opts[] = {
    INT_OPT("threads", &opt.threads), SIZE_OPT("slots", &opt.slots), COUNT_OPT("ops", &opt.ops),
    COUNT_OPT("gen-ops", &opt.gen_ops), SIZE_OPT("min", &opt.min), SIZE_OPT("max", &opt.max), OPT_END};

static struct lineage *lines;
static struct bench_chains chains;

static void *worker(void *arg);

static void new_object(struct lineage *l, struct slot *s)
{
    size_t n = rng_range(&l->rng, cfg.min, cfg.max);
    unsigned char *p = malloc(n);
    if (p == NULL)
        BENCH_FAIL("lineage %d: malloc(%zu) returned NULL", l->id, n);
    uint64_t tag = bench_tag(l->tag_base, l->step++);
    bench_stamp(p, n, tag);
    s->p = p;
    s->n = (uint32_t)n;
    s->tag = tag;
}

static void check_free(struct lineage *l, struct slot *s)
{
    if (!bench_stamp_ok(s->p, s->n, s->tag))
        BENCH_FAIL("lineage %d: object %p of %u bytes was overwritten while live", l->id,
                   (void *)s->p, s->n);
    l->chk.blocks++;
    free(s->p);
}

static void *worker(void *arg)
{
    struct lineage *l = arg;
    uint64_t todo = cfg.ops - l->done;
    if (todo > cfg.gen_ops)
        todo = cfg.gen_ops;
    for (uint64_t i = 0; i < todo; i++) {
        struct slot *s = &l->slots[rng_below(&l->rng, cfg.slots)];
        check_free(l, s);
        new_object(l, s);
    }
    l->done += todo;
    l->gens++;
    if (l->done < cfg.ops) {
        bench_chain_next(&chains, worker, l); /* hand the slot array over, then exit */
    } else {
        l->end = now_s();
        bench_chain_end(&chains);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    bench_options("larson", argc, argv, opts, usage, usage);
    cfg = opt;
    if (optind != argc || cfg.threads < 1 || cfg.threads > 1024 || cfg.slots < 1 || cfg.ops < 1 ||
        cfg.gen_ops < 1 || cfg.min < 9 || cfg.max < cfg.min || cfg.max > (1u << 30))
        bench_usage_error(usage);
    const char *allocator = bench_detect_allocator();
    bench_chains_init(&chains);
    lines = bench_map((size_t)cfg.threads * sizeof *lines, 1);
    /* Fill the slot arrays (untimed), in the main thread. */
    for (int i = 0; i < cfg.threads; i++) {
        struct lineage *l = &lines[i];
        l->id = i;
        l->rng = mix64(0x1a2503 + (uint64_t)i);
        l->tag_base = mix64((uint64_t)(i + 1) << 32);
        l->slot_bytes = cfg.slots * sizeof *l->slots;
        l->slots = bench_map(l->slot_bytes, 1);
        for (size_t k = 0; k < cfg.slots; k++)
            new_object(l, &l->slots[k]);
    }
    double t0 = now_s();
    BENCH_CHAINS_START(&chains, lines, cfg.threads, worker);
    bench_chains_wait(&chains, cfg.threads);
    double t1 = t0;
    unsigned long threads = 0;
    for (int i = 0; i < cfg.threads; i++) {
        if (lines[i].end > t1)
            t1 = lines[i].end;
        threads += lines[i].gens;
    }
    /* Check and free what is left. */
    for (int i = 0; i < cfg.threads; i++) {
        for (size_t k = 0; k < cfg.slots; k++)
            check_free(&lines[i], &lines[i].slots[k]);
        bench_unmap(lines[i].slots, lines[i].slot_bytes);
    }
    double elapsed = t1 - t0;
    uint64_t total = cfg.ops * (uint64_t)cfg.threads;
    struct bench_checked chk = BENCH_CHECKED_SUM(lines, cfg.threads, chk);
    printf("{\"bench\": \"larson\", \"lineages\": %d, \"slots\": %zu, \"ops_per_lineage\": %" PRIu64 ", "
           "\"gen_ops\": %" PRIu64 ", \"min\": %zu, \"max\": %zu, \"threads_created\": %lu, "
           "\"spawn_retries\": %lu, \"total_ops\": %" PRIu64 ", \"elapsed_s\": %.6f, "
           "\"ops_per_s\": %.1f, \"allocator\": \"%s\", "
           BENCH_CHECKED_FMT "}\n",
           cfg.threads, cfg.slots, cfg.ops, cfg.gen_ops, cfg.min, cfg.max, threads,
           chains.retries, total, elapsed, (double)total / elapsed, allocator,
           BENCH_CHECKED_ARGS(chk, ""));
    return 0;
}
