/*
 * manyclasses: one thread, about a megabyte live, spread over many size
 * classes, the way a single-threaded program such as the espresso logic
 * minimizer uses its heap (make bench's onethread-many-classes).
 *
 * --slots slots, all empty at the start.  Each step picks a random slot: a
 * full one has its block checked and freed, an empty one gets a new block
 * whose size is drawn 60% from 16..127 B, 30% from 128..1023 B and 10% from
 * 1..8 KiB (uniform within each band), written whole (memset) and stamped.
 * A slot is full about half the time, so about slots / 2 blocks of 676 B on
 * average are live: 1.3 MiB for 4,000 slots, 1.5 MiB at the peak.  --steps
 * steps, all timed; the blocks left at the end are checked and freed after
 * the clock stopped.
 *
 * Validation: every block is filled between an 8-byte tag at its start and
 * the tag's complement in its last 8 bytes; the stamps are checked before
 * each free, and every 16th block (by allocation number) is checked in
 * every byte.  Exit 3 on a mismatch.  "checked" counts the blocks checked
 * before their free: every block allocated, since those left at the end
 * are checked too.
 *
 * Output: ns_per_step (the timed steps, a free or a malloc with its fill
 * each), elapsed_s, allocs and frees (of the steps: allocs + frees =
 * steps), and peak_live_bytes: the most bytes asked for and not yet freed
 * at any moment (peak_live_kib: the same in KiB).
 */
#include "bench_common.h"

#include <inttypes.h>

static const char usage[] =
    "usage: manyclasses [--slots N] [--steps N] [--seed N]\n"
    "  --slots  slots, each empty or holding one block (default 4000)\n"
    "  --steps  steps: a random slot's block freed, or a new one put there (default 5M)\n"
    "  --seed   the random sequence (default 1)\n";

struct slot {
    unsigned char *p; /* NULL: empty */
    uint32_t n;
    uint32_t full; /* checked in every byte before its free */
    uint64_t tag;
};

static struct {
    size_t slots;
    uint64_t steps, seed;
} opt = {.slots = 4000, .steps = 5000000, .seed = 1}, cfg;

static const struct bench_opt opts[] = {SIZE_OPT("slots", &opt.slots), COUNT_OPT("steps", &opt.steps),
                                        COUNT_OPT("seed", &opt.seed), OPT_END};

/* A size from the three bands: r is one draw of the generator, its low 32
 * bits pick the band, the high ones the size within it. */
static inline size_t draw_size(uint64_t r)
{
    uint32_t band = (uint32_t)r % 10, within = (uint32_t)(r >> 32);
    if (band < 6)
        return 16 + within % 112; /* 16..127 */
    if (band < 9)
        return 128 + within % 896; /* 128..1023 */
    return 1024 + within % 7169;   /* 1024..8192 */
}

static void check_free(struct slot *s, struct bench_checked *chk)
{
    long bad = bench_check(s->p, s->n, s->tag, (int)s->full, chk);
    if (bad >= 0)
        BENCH_FAIL("block %p of %u bytes was overwritten while live (byte %ld)", (void *)s->p, s->n, bad);
    free(s->p);
    s->p = NULL;
}

int main(int argc, char **argv)
{
    bench_options("manyclasses", argc, argv, opts, usage, usage);
    cfg = opt;
    if (optind != argc || cfg.slots < 1 || cfg.slots > (1u << 24) || cfg.steps < 1)
        bench_usage_error(usage);
    const char *allocator = bench_detect_allocator();
    const size_t nslots = cfg.slots;
    const uint64_t steps = cfg.steps;
    const size_t slot_bytes = nslots * sizeof(struct slot);
    struct slot *slots = bench_map(slot_bytes, 1);
    uint64_t rng = mix64(0xe5e2e550 + cfg.seed);
    const uint64_t tag_base = mix64(cfg.seed << 20);
    uint64_t allocs = 0, frees = 0;
    size_t live = 0, peak = 0;
    struct bench_checked chk = {0};

    double t0 = now_s();
    for (uint64_t i = 0; i < steps; i++) {
        uint64_t r = rng_next(&rng);
        struct slot *s = &slots[r % nslots];
        if (s->p != NULL) {
            live -= s->n;
            check_free(s, &chk);
            frees++;
            continue;
        }
        size_t n = draw_size(rng_next(&rng));
        unsigned char *p = malloc(n);
        if (p == NULL)
            BENCH_FAIL("malloc(%zu) returned NULL", n);
        uint64_t tag = bench_tag(tag_base, allocs);
        /* The whole block is written, as a program fills what it asked
         * for: its pages are resident from here on. */
        bench_fill(p, n, tag);
        *s = (struct slot){p, (uint32_t)n, (allocs % 16) == 0, tag};
        allocs++;
        live += n;
        if (live > peak)
            peak = live;
    }
    double elapsed = now_s() - t0;
    for (size_t k = 0; k < nslots; k++)
        if (slots[k].p != NULL)
            check_free(&slots[k], &chk);
    bench_unmap(slots, slot_bytes);
    printf("{\"bench\": \"manyclasses\", \"slots\": %zu, \"steps\": %" PRIu64 ", \"allocs\": %" PRIu64 ", "
           "\"frees\": %" PRIu64 ", \"peak_live_bytes\": %zu, \"peak_live_kib\": %.1f, \"elapsed_s\": %.6f, "
           "\"ns_per_step\": %.2f, \"allocator\": \"%s\", " BENCH_CHECKED_FMT "}\n",
           nslots, steps, allocs, frees, peak, (double)peak / 1024.0, elapsed, elapsed * 1e9 / (double)steps,
           allocator, BENCH_CHECKED_ARGS(chk, ""));
    return 0;
}
