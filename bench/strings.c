/*
 * strings: the string-buffer benchmark of seed 000.
 *
 * Each round creates --buffers zero-filled buffers of --size bytes (malloc +
 * memset, as std::string(1023, '\0') does; --zero calloc asks calloc
 * instead), keeps them all live, then frees them all.  The seed's figures
 * are for 10,000 buffers of 1,024 B and 1,000 rounds: 5.005 s for
 * std::string/malloc, 1.328 s for its slab pool at -O1.
 *
 * The same source is built twice: `strings` at -O2 and `strings_O0` at -O0.
 * The seed's pool lost all its advantage at -O0 because its allocation path
 * was compiled into the application; a malloc in its own library, built -O2,
 * costs the same whatever the application's flags, so only the harness loop
 * gets slower.
 *
 * --free sized frees with fastalloc's fa_free_sized(p, size) (found with
 * dlsym, so the binary still links only libc; exit 2 when not running under
 * fastalloc).
 *
 * Validation: the first round is an untimed warm-up in which every byte is
 * checked (zero after the zero fill) and then written with a per-buffer
 * pattern that is checked in full before the free.  In the timed rounds each
 * buffer's first, last and one rotating 8-byte word are checked to be zero,
 * then stamped with a per-buffer tag, and the stamps are checked right before
 * the free: memory that was not zeroed, or buffers that overlap, fail with
 * exit 3.
 *
 * Output (one JSON line): elapsed_s of the timed rounds, ns_per_buffer
 * (malloc + zero + free of one buffer), s_per_1000_rounds (the seed's unit,
 * scaled to 10,000 buffers), and "checked": buffers whose stamps were
 * checked before the free (blocks; full and bytes: the warm-up's, checked
 * in every byte) and buffers found zero after the zero fill (zeroed): each
 * (rounds + 1) x buffers when every round ran.
 */
#include "bench_common.h"

#include <inttypes.h>

static const char usage[] =
    "usage: strings [--buffers N] [--size B] [--rounds N] [--zero memset|calloc]\n"
    "               [--free plain|sized]\n"
    "  --buffers N   live buffers per round (default 10000)\n"
    "  --size B      bytes per buffer, >= 24 (default 1024)\n"
    "  --rounds N    timed rounds, after one untimed warm-up round (default 1000)\n"
    "  --zero HOW    memset: malloc then memset (default); calloc\n"
    "  --free HOW    plain: free (default); sized: fa_free_sized (fastalloc only)\n";

/* opt: the command line, over the defaults; main copies it to the
 * variables the timed loop reads (see bench_options). */
static struct {
    size_t buffers, size;
    uint64_t rounds;
    int calloc, sized;
} opt = {.buffers = 10000, .size = 1024, .rounds = 1000};

static const struct bench_opt opts[] = {SIZE_OPT("buffers", &opt.buffers), SIZE_OPT("size", &opt.size),
                                        COUNT_OPT("rounds", &opt.rounds),
                                        CHOICE_OPT("zero", &opt.calloc, "memset|calloc", NULL),
                                        CHOICE_OPT("free", &opt.sized, "plain|sized", NULL), OPT_END};

int main(int argc, char **argv)
{
    bench_options("strings", argc, argv, opts, usage, usage);
    const size_t nbuf = opt.buffers, size = opt.size;
    const uint64_t rounds = opt.rounds;
    const int use_calloc = opt.calloc, sized = opt.sized;
    if (optind != argc || nbuf < 1 || size < 24 || size > (1u << 24) || rounds < 1)
        bench_usage_error(usage);
    __typeof__(fa_free_sized) *free_sized = NULL; /* found with dlsym: not linked */
    if (sized)
        free_sized = (__typeof__(fa_free_sized) *)bench_fa_symbol("fa_free_sized");
    const char *allocator = bench_detect_allocator();

    unsigned char **bufs = bench_map(nbuf * sizeof *bufs, 1);
    const uint64_t base = mix64(0x5eed0000u + size);
    const size_t words = size / 8;
    double t0 = 0;
    struct bench_checked chk = {0};
    uint64_t zeroed = 0; /* buffers found zero after the zero fill */

    for (uint64_t r = 0; r <= rounds; r++) {
        const int warm = r == 0;
        if (r == 1)
            t0 = now_s(); /* round 0 is the untimed, fully checked warm-up */
        const uint64_t tag0 = bench_tag(base, r * nbuf);
        for (size_t j = 0; j < nbuf; j++) {
            unsigned char *p;
            if (use_calloc) {
                p = calloc(1, size);
            } else {
                p = malloc(size);
                if (p != NULL)
                    memset(p, 0, size);
            }
            if (p == NULL)
                BENCH_FAIL("round %" PRIu64 ": %s(%zu) returned NULL", r,
                           use_calloc ? "calloc" : "malloc", size);
            if (((uintptr_t)p & 15) != 0)
                BENCH_FAIL("%p is not 16-byte aligned", (void *)p);
            const uint64_t tag = tag0 + j * 0x9e3779b97f4a7c16ull;
            if (warm) {
                for (size_t i = 0; i < size; i++)
                    if (p[i] != 0)
                        BENCH_FAIL("buffer %p: byte %zu is %02x after the zero fill", (void *)p, i, p[i]);
                zeroed++;
                bench_fill(p, size, tag);
            } else {
                /* first, last and one rotating word must be zero */
                const size_t k = 1 + (j + r) % (words - 2);
                uint64_t a, b, c;
                memcpy(&a, p, 8);
                memcpy(&b, p + size - 8, 8);
                memcpy(&c, p + 8 * k, 8);
                if ((a | b | c) != 0)
                    BENCH_FAIL("buffer %p of %zu bytes is not zero after the zero fill", (void *)p, size);
                zeroed++;
                memcpy(p + 8 * k, &tag, 8); /* dirty it for the next user */
                bench_stamp(p, size, tag);
            }
            bufs[j] = p;
        }
        for (size_t j = 0; j < nbuf; j++) {
            unsigned char *p = bufs[j];
            const uint64_t tag = tag0 + j * 0x9e3779b97f4a7c16ull;
            if (warm) {
                long bad = bench_fill_bad(p, size, tag);
                if (bad >= 0)
                    BENCH_FAIL("buffer %p of %zu bytes was overwritten while live (byte %ld)",
                               (void *)p, size, bad);
                bench_checked_full(&chk, size);
            } else if (!bench_stamp_ok(p, size, tag)) {
                BENCH_FAIL("buffer %p of %zu bytes was overwritten while live", (void *)p, size);
            }
            chk.blocks++;
            if (sized)
                free_sized(p, size);
            else
                free(p);
        }
    }
    double elapsed = now_s() - t0;
    double per = elapsed * 1e9 / ((double)rounds * (double)nbuf);
    char extra[64];
    snprintf(extra, sizeof extra, ", \"zeroed\": %" PRIu64, zeroed);
    printf("{\"bench\": \"strings\", \"buffers\": %zu, \"size\": %zu, \"rounds\": %" PRIu64 ", "
           "\"zero\": \"%s\", \"free\": \"%s\", \"elapsed_s\": %.6f, \"ns_per_buffer\": %.3f, "
           "\"s_per_1000_rounds\": %.4f, \"allocator\": \"%s\", " BENCH_CHECKED_FMT "}\n",
           nbuf, size, rounds, use_calloc ? "calloc" : "memset", sized ? "sized" : "plain", elapsed,
           per, per * 1e-9 * 1000 * 10000, allocator, BENCH_CHECKED_ARGS(chk, extra));
    return 0;
}
