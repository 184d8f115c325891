/*
 * coding_bench: seed 004's measurement, on fastalloc's src/00-base/coding.h.
 * fa__encode_fixed64 / fa__decode_fixed64 (8 bytes, little-endian) against
 * the text route of the seed's first idea: sprintf("%llu") / strtoull.
 *
 * Each loop runs --n calls (--n-text for sprintf and strtoull) over a small
 * table of values (random 64-bit numbers with random bit lengths, so 1 to 20
 * decimal digits) and a 64 KiB output area.  A compiler barrier in every
 * iteration makes each call really happen (the seed's "0 seconds for 10^9
 * calls" was a loop the compiler had removed): what is left is what a
 * caller pays when it encodes values that it has in hand.
 *
 * Validation: after each encode loop every slot is read back and compared
 * with the value written last; each decode loop's sum is compared with the
 * sum of the expected values.  Exit 3 on a mismatch.  "checked" in the
 * output counts the slots read back (8192 binary + 1024 text) and the sums
 * compared (2).
 *
 * No allocator is involved (run.py runs this once, without a preload).
 * Output: ns per call of each function, and the ratios.
 */
#include "bench_common.h"
#include "00-base/coding.h"

#include <inttypes.h>

#define SLOTS 8192       /* 8-byte slots: 64 KiB */
#define TEXT_SLOTS 1024  /* 24-byte text slots */

static uint64_t values[SLOTS];
static char bin[SLOTS * 8];
static char text[TEXT_SLOTS * 24];

#define BARRIER() __asm__ volatile("" : : : "memory")

/* Slot s always receives values[s]: sum over i < reads of slot i % slots. */
static uint64_t expected_sum(uint64_t reads, size_t slots)
{
    uint64_t per_pass = 0, sum;
    for (size_t s = 0; s < slots; s++)
        per_pass += values[s];
    sum = per_pass * (reads / slots);
    for (size_t s = 0; s < reads % slots; s++)
        sum += values[s];
    return sum;
}

/* opt: the command line, over the defaults; main copies it to the counts
 * the timed loops read (see bench_options). */
static struct {
    uint64_t n, nt;
} opt = {100000000, 100000000};

static const struct bench_opt opts[] = {COUNT_OPT("n", &opt.n), COUNT_OPT("n-text", &opt.nt), OPT_END};

static const char help[] = "usage: coding_bench [--n CALLS] [--n-text CALLS]  (defaults 100M, 100M)\n";

int main(int argc, char **argv)
{
    /* A bad option exits 2 after getopt's own message, with no usage. */
    bench_options("coding_bench", argc, argv, opts, help, NULL);
    const uint64_t n = opt.n, nt = opt.nt;
    if (optind != argc || n < SLOTS || nt < TEXT_SLOTS)
        die(2, "--n must be >= %d and --n-text >= %d", SLOTS, TEXT_SLOTS);

    uint64_t rng = 4;
    for (size_t i = 0; i < SLOTS; i++) {
        unsigned bits = 1 + (unsigned)(rng_next(&rng) % 64);
        uint64_t v = rng_next(&rng);
        values[i] = bits == 64 ? v : v & ((UINT64_C(1) << bits) - 1);
    }

    /* EncodeFixed64 */
    double t0 = now_s();
    for (uint64_t i = 0; i < n; i++) {
        size_t s = (size_t)(i & (SLOTS - 1));
        fa__encode_fixed64(bin + 8 * s, values[s]);
        BARRIER();
    }
    double t_enc = now_s() - t0;
    uint64_t slots_checked = 0, sums_checked = 0;
    for (size_t s = 0; s < SLOTS; s++) {
        if (fa__decode_fixed64(bin + 8 * s) != values[s])
            BENCH_FAIL("encode/decode_fixed64 slot %zu: %" PRIu64 " != %" PRIu64, s,
                       fa__decode_fixed64(bin + 8 * s), values[s]);
        slots_checked++;
    }

    /* DecodeFixed64 */
    uint64_t sum = 0;
    t0 = now_s();
    for (uint64_t i = 0; i < n; i++) {
        sum += fa__decode_fixed64(bin + 8 * (size_t)(i & (SLOTS - 1)));
        BARRIER();
    }
    double t_dec = now_s() - t0;
    if (sum != expected_sum(n, SLOTS))
        BENCH_FAIL("decode_fixed64 sum %" PRIu64 " != %" PRIu64, sum, expected_sum(n, SLOTS));
    sums_checked++;

    /* sprintf("%llu") */
    t0 = now_s();
    for (uint64_t i = 0; i < nt; i++) {
        size_t s = (size_t)(i & (TEXT_SLOTS - 1));
        sprintf(text + 24 * s, "%llu", (unsigned long long)values[s]);
        BARRIER();
    }
    double t_spr = now_s() - t0;
    for (size_t s = 0; s < TEXT_SLOTS; s++) {
        if (strtoull(text + 24 * s, NULL, 10) != values[s])
            BENCH_FAIL("sprintf slot %zu holds '%s'", s, text + 24 * s);
        slots_checked++;
    }

    /* strtoull */
    uint64_t tsum = 0;
    t0 = now_s();
    for (uint64_t i = 0; i < nt; i++) {
        tsum += strtoull(text + 24 * (size_t)(i & (TEXT_SLOTS - 1)), NULL, 10);
        BARRIER();
    }
    double t_sto = now_s() - t0;
    if (tsum != expected_sum(nt, TEXT_SLOTS))
        BENCH_FAIL("strtoull sum %" PRIu64 " != %" PRIu64, tsum, expected_sum(nt, TEXT_SLOTS));
    sums_checked++;

    double enc = t_enc * 1e9 / (double)n, dec = t_dec * 1e9 / (double)n;
    double spr = t_spr * 1e9 / (double)nt, sto = t_sto * 1e9 / (double)nt;
    printf("{\"bench\": \"coding_bench\", \"n\": %" PRIu64 ", \"n_text\": %" PRIu64 ", "
           "\"encode_fixed64_ns\": %.4f, \"decode_fixed64_ns\": %.4f, \"sprintf_ns\": %.3f, "
           "\"strtoull_ns\": %.3f, \"encode_vs_sprintf\": %.5f, \"decode_vs_strtoull\": %.5f, "
           "\"encode_s\": %.4f, \"decode_s\": %.4f, \"sprintf_s\": %.4f, \"strtoull_s\": %.4f, "
           "\"allocator\": \"%s\", \"checked\": {\"slots\": %" PRIu64 ", \"sums\": %" PRIu64 "}}\n",
           n, nt, enc, dec, spr, sto, enc / spr, dec / sto, t_enc, t_dec, t_spr, t_sto,
           bench_detect_allocator(), slots_checked, sums_checked);
    return 0;
}
