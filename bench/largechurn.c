/*
 * largechurn: large buffers replaced one at a time, as a program that keeps
 * a few big working buffers (images, compression windows, query results)
 * and renews them.  --buffers N live buffers of random sizes (--min-mib ..
 * --max-mib MiB, uniform in bytes), each written whole right after its
 * malloc; then --replace R times a random one is checked, freed, and
 * replaced by a new buffer of a new random size, written whole; at the end
 * all are checked and freed.  One thread.
 *
 * What it shows: an allocator that hands such a buffer's pages back to the
 * kernel on free (munmap, or a purge right away) and maps fresh ones for the
 * next makes the program take a page fault on every page it writes, each
 * page zeroed by the kernel first; one that keeps them pays nothing more
 * than the writes.  run.py's runwrap reports the page faults (minor faults,
 * ru_minflt) and the peak RSS; the time says what the faults cost.
 *
 * Writing: each buffer is written in 4 KiB chunks counted from its start:
 * the first 8 bytes of chunk c hold bench_tag(tag, c) (chunk 0's is the
 * buffer's tag, its start stamp), the rest of the chunk the tag's fill byte,
 * and the last 8 bytes of the buffer the tag's complement (the end stamp).
 * A last chunk too short to hold its tag clear of the end stamp (under 16
 * bytes) holds only fill bytes.
 *
 * Validation, right before each free: every chunk's tag and the end stamp
 * (a buffer that overlaps another by a chunk or more, is too short, or was
 * handed out twice fails); every 16th buffer (by allocation) every byte.
 * Exit 3 on a mismatch.  "checked" in the output: blocks = buffers checked
 * (N + R), full and bytes = those checked in every byte and the bytes they
 * read, chunks = chunk tags checked.
 *
 * Output: elapsed_s, the whole run from the first malloc to the last free
 * (the writes and checks included: the same work under every allocator);
 * bytes_written.
 */
#include "bench_common.h"

#include <inttypes.h>

static const char usage[] =
    "usage: largechurn [--buffers N] [--replace R] [--min-mib M] [--max-mib M]\n"
    "  --buffers  live buffers (default 20)\n"
    "  --replace  buffers replaced, a random one each time (default 2000)\n"
    "  --min-mib, --max-mib  buffer sizes in MiB, uniform in bytes (default 5..25; min >= 1)\n";

#define CHUNK 4096
#define FULL_EVERY 16
#define MIB ((size_t)1 << 20)

struct buffer {
    unsigned char *p;
    size_t n;
    uint64_t tag;
    int full; /* check every byte before the free */
};

/* opt: the command line, over the defaults; cfg: its copy that the
 * measured code reads (see bench_options). */
static struct {
    size_t buffers;
    uint64_t replace;
    size_t min_mib, max_mib;
} opt = {.buffers = 20, .replace = 2000, .min_mib = 5, .max_mib = 25}, cfg;

static const struct bench_opt opts[] = {SIZE_OPT("buffers", &opt.buffers), COUNT_OPT("replace", &opt.replace),
                                        SIZE_OPT("min-mib", &opt.min_mib), SIZE_OPT("max-mib", &opt.max_mib),
                                        OPT_END};

static uint64_t rng, tag_base, allocated;
static uint64_t chunks_checked;
static uint64_t bytes_written;
static struct bench_checked chk;

static void fill(unsigned char *p, size_t n, uint64_t tag)
{
    const unsigned char b = bench_fill_byte(tag);
    for (size_t off = 0, c = 0; off < n; off += CHUNK, c++) {
        size_t len = n - off < CHUNK ? n - off : CHUNK;
        if (off + 16 <= n) {
            uint64_t t = bench_tag(tag, c);
            memcpy(p + off, &t, 8);
            memset(p + off + 8, b, len - 8);
        } else {
            memset(p + off, b, len);
        }
    }
    uint64_t end = ~tag;
    memcpy(p + n - 8, &end, 8);
}

static void new_buffer(struct buffer *s)
{
    size_t n = rng_range(&rng, cfg.min_mib * MIB, cfg.max_mib * MIB);
    unsigned char *p = malloc(n);
    if (p == NULL)
        BENCH_FAIL("malloc(%zu) returned NULL", n);
    s->p = p;
    s->n = n;
    s->tag = bench_tag(tag_base, allocated);
    s->full = allocated % FULL_EVERY == 0;
    allocated++;
    fill(p, n, s->tag);
    bytes_written += n;
}

/* The offset of the first wrong byte of a buffer, or -1. */
static long bad_byte(const struct buffer *s)
{
    const unsigned char *p = s->p;
    uint64_t v;
    size_t n = s->n;
    memcpy(&v, p + n - 8, 8);
    if (v != ~s->tag)
        return (long)(n - 8);
    const unsigned char b = bench_fill_byte(s->tag);
    for (size_t off = 0, c = 0; off < n; off += CHUNK, c++) {
        int tagged = off + 16 <= n;
        if (tagged) {
            memcpy(&v, p + off, 8);
            if (v != bench_tag(s->tag, c))
                return (long)off;
            chunks_checked++;
        }
        if (!s->full)
            continue;
        /* Up to the end stamp (it may overwrite the chunk's last bytes). */
        size_t end = n - off <= CHUNK ? n - 8 : off + CHUNK;
        long bad = bench_bytes_bad(p, tagged ? off + 8 : off, end, b);
        if (bad >= 0)
            return bad;
    }
    return -1;
}

static void check_free(struct buffer *s)
{
    long bad = bad_byte(s);
    if (bad >= 0)
        BENCH_FAIL("buffer %p (%zu bytes) was overwritten while live (byte %ld)", (void *)s->p, s->n, bad);
    chk.blocks++;
    if (s->full)
        bench_checked_full(&chk, s->n);
    free(s->p);
    s->p = NULL;
}

int main(int argc, char **argv)
{
    bench_options("largechurn", argc, argv, opts, usage, usage);
    cfg = opt;
    if (optind != argc || cfg.buffers < 1 || cfg.buffers > 100000 || cfg.min_mib < 1 ||
        cfg.max_mib < cfg.min_mib || cfg.max_mib > 4096)
        bench_usage_error(usage);
    const char *allocator = bench_detect_allocator();
    rng = mix64(0x1a7e);
    tag_base = mix64(0xc477);
    size_t map_bytes = cfg.buffers * sizeof(struct buffer);
    struct buffer *bufs = bench_map(map_bytes, 1);

    double t0 = now_s();
    for (size_t i = 0; i < cfg.buffers; i++)
        new_buffer(&bufs[i]);
    for (uint64_t r = 0; r < cfg.replace; r++) {
        struct buffer *s = &bufs[rng_below(&rng, cfg.buffers)];
        check_free(s);
        new_buffer(s);
    }
    for (size_t i = 0; i < cfg.buffers; i++)
        check_free(&bufs[i]);
    double elapsed = now_s() - t0;
    bench_unmap(bufs, map_bytes);

    char extra[64];
    snprintf(extra, sizeof extra, ", \"chunks\": %" PRIu64, chunks_checked);
    printf("{\"bench\": \"largechurn\", \"buffers\": %zu, \"replace\": %" PRIu64 ", \"min_mib\": %zu, "
           "\"max_mib\": %zu, \"bytes_written\": %" PRIu64 ", \"elapsed_s\": %.6f, \"gb_per_s\": %.3f, "
           "\"allocator\": \"%s\", " BENCH_CHECKED_FMT "}\n",
           cfg.buffers, cfg.replace, cfg.min_mib, cfg.max_mib, bytes_written, elapsed,
           (double)bytes_written / elapsed * 1e-9, allocator, BENCH_CHECKED_ARGS(chk, extra));
    return 0;
}
