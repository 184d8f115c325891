/*
 * reallocgrow: many live objects grown by appending, as a program's lists
 * and string builders grow.  --threads T workers, each with --objects N
 * objects per round, --rounds R rounds.  In a round a worker starts all N
 * objects empty and appends to them in random interleaved order (each step
 * picks one of the unfinished objects at random) until each has reached its
 * final length; then it checks and frees all N, in the order they were
 * started.
 *
 * Two kinds of object, half and half (by a bit of the object's hash):
 *   - a list of 8-byte elements, appended one at a time, whose capacity
 *     grows the way Python's list does: when it is full, to n + (n >> 3) + 6
 *     elements for the n it must hold (a first malloc, then realloc);
 *   - a string builder, appended a chunk of 1..32 bytes at a time (the
 *     object's own chunk size; the last chunk cut to the final length),
 *     whose capacity starts at 16 bytes and doubles until the chunk fits.
 * Final lengths are heavy-tailed: 2^52 / u / u bytes for u uniform in
 * 1..2^24 (a Pareto tail of index 1/2: median 64 bytes, 1 object in 128
 * above 256 KiB), at least 16 bytes, at most --max-kib KiB (default 512), so
 * that a few grow through the size classes into large blocks.  Lists hold
 * the length / 8 elements.
 *
 * Every object's kind, final length, chunk size and content come from a hash
 * of (--seed, thread, the object's number in the thread), not from the order
 * of the steps: how many reallocs a run does and how many bytes it checks
 * are fixed by the command line, and bench/fabench/verify.py computes them
 * again.  The steps' order comes from each thread's own generator.
 *
 * Contents: an object's bytes are a sequence of 64-bit words tag + q * step
 * (word q, little-endian as the machine stores it), written as the object
 * grows.  Validation: after every realloc, whether it moved the object or
 * not, all the bytes the object held before it are compared with that
 * sequence; before the free, all of them again.  A NULL, or a byte that
 * differs, exits 3.  "checked" in the output: blocks = objects checked
 * before their free (T x N x R), reallocs = reallocs checked after, full =
 * both (every check reads every byte), bytes = the bytes those checks read.
 *
 * Output: elapsed_s, from the first worker's start to the last one's end
 * (the appends, the checks, the reallocs, the frees: the same work under
 * every allocator but the copying a moving realloc does); reallocs; moves,
 * the reallocs that returned a new address (the allocator copied the
 * object); appends; final_bytes, the objects' final lengths added up.
 */
#include "bench_common.h"

#include <inttypes.h>

static const char usage[] =
    "usage: reallocgrow [--threads T] [--objects N] [--rounds R] [--max-kib K] [--seed S]\n"
    "  --threads  worker threads (default 1)\n"
    "  --objects  objects grown at once per thread, each round (default 2000)\n"
    "  --rounds   rounds: N objects grown, checked, freed (default 10)\n"
    "  --max-kib  longest object, KiB (default 512; 1..65536)\n"
    "  --seed     seed of the objects' lengths, kinds and contents (default 1)\n";

#define WORD_STEP 0x9e3779b97f4a7c16ull

struct object {
    unsigned char *p;
    size_t len, cap;   /* bytes held, bytes allocated */
    size_t final;      /* bytes when finished */
    uint64_t tag;      /* word q of the content is tag + q * WORD_STEP */
    unsigned chunk;    /* bytes per append (8 for a list) */
    int list;          /* grows like a Python list (else doubles) */
};

struct worker {
    int id;
    pthread_t th;
    struct object *objs;
    uint32_t *open;    /* the unfinished objects of the round */
    uint64_t rng;
    uint64_t reallocs, moves, appends, final_bytes;
    struct bench_checked chk;
    struct bench_span span;
} __attribute__((aligned(128)));

/* opt: the command line, over the defaults; cfg: its copy that the
 * measured code reads (see bench_options). */
static struct {
    int threads;
    size_t objects;
    uint64_t rounds;
    size_t max_kib;
    uint64_t seed;
} opt = {.threads = 1, .objects = 2000, .rounds = 10, .max_kib = 512, .seed = 1}, cfg;

static const struct bench_opt opts[] = {
    INT_OPT("threads", &opt.threads), SIZE_OPT("objects", &opt.objects), COUNT_OPT("rounds", &opt.rounds),
    SIZE_OPT("max-kib", &opt.max_kib), COUNT_OPT("seed", &opt.seed), OPT_END};

static struct worker *workers;
static pthread_barrier_t start_bar;

/* The hash every property of object k of thread t comes from (verify.py's
 * reallocgrow_objects computes the same). */
static uint64_t object_hash(int t, uint64_t k)
{
    uint64_t base = mix64(cfg.seed * 0x9e3779b97f4a7c15ull + (uint64_t)t + 1);
    return mix64(base ^ (k * 0xd1b54a32d192ed03ull));
}

static void start_object(struct object *o, int t, uint64_t k)
{
    uint64_t h = object_hash(t, k);
    uint64_t u = (h >> 40) + 1; /* 1 .. 2^24 */
    size_t len = (size_t)(((uint64_t)1 << 52) / u / u);
    size_t max = cfg.max_kib << 10;
    if (len > max)
        len = max;
    o->list = (h & 1) == 0;
    o->chunk = o->list ? 8 : 1 + (unsigned)((h >> 1) & 31);
    o->final = o->list ? len / 8 * 8 : len;
    o->tag = mix64(h ^ 0x5eed);
    o->p = NULL;
    o->len = o->cap = 0;
}

/* Bytes [from, to) of the content of tag. */
static void write_content(unsigned char *p, size_t from, size_t to, uint64_t tag)
{
    size_t q = from;
    while (q < to) {
        uint64_t word = tag + (q >> 3) * WORD_STEP;
        unsigned char b[8];
        memcpy(b, &word, 8);
        size_t off = q & 7, n = 8 - off < to - q ? 8 - off : to - q;
        memcpy(p + q, b + off, n);
        q += n;
    }
}

/* The first of bytes [0, n) that differs from the content of tag, or -1. */
static long bad_content(const unsigned char *p, size_t n, uint64_t tag)
{
    size_t q = 0;
    uint64_t word = tag;
    for (; q + 8 <= n; q += 8, word += WORD_STEP) {
        uint64_t v;
        memcpy(&v, p + q, 8);
        if (v != word)
            break;
    }
    unsigned char b[8];
    memcpy(b, &word, 8);
    for (; q < n; q++) {
        if ((q & 7) == 0) {
            word = tag + (q >> 3) * WORD_STEP;
            memcpy(b, &word, 8);
        }
        if (p[q] != b[q & 7])
            return (long)q;
    }
    return -1;
}

static void check_object(struct worker *w, const struct object *o, const char *when)
{
    long bad = bad_content(o->p, o->len, o->tag);
    if (bad >= 0)
        BENCH_FAIL("thread %d: object %p (%zu of %zu bytes, %s) lost byte %ld %s", w->id, (void *)o->p, o->len,
                   o->cap, o->list ? "list" : "string", bad, when);
    bench_checked_full(&w->chk, o->len);
}

/* The capacity an append of `need` bytes in all calls for. */
static size_t grown_capacity(const struct object *o, size_t need)
{
    if (o->list) {
        size_t n = need / 8; /* elements */
        return (n + (n >> 3) + 6) * 8;
    }
    size_t cap = o->cap ? o->cap : 16;
    while (cap < need)
        cap *= 2;
    return cap;
}

/* One append; returns 1 when the object has reached its final length. */
static int append(struct worker *w, struct object *o)
{
    size_t n = o->final - o->len < o->chunk ? o->final - o->len : o->chunk;
    size_t need = o->len + n;
    if (need > o->cap) {
        size_t cap = grown_capacity(o, need);
        if (o->p == NULL) {
            o->p = malloc(cap);
            if (o->p == NULL)
                BENCH_FAIL("thread %d: malloc(%zu) returned NULL", w->id, cap);
        } else {
            unsigned char *old = o->p;
            unsigned char *p = realloc(old, cap);
            if (p == NULL)
                BENCH_FAIL("thread %d: realloc(%p, %zu) returned NULL", w->id, (void *)old, cap);
            o->p = p;
            w->reallocs++;
            w->moves += p != old;
            check_object(w, o, p != old ? "in a realloc that moved it" : "in a realloc in place");
        }
        o->cap = cap;
    }
    write_content(o->p, o->len, need, o->tag);
    o->len = need;
    w->appends++;
    return need == o->final;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    const size_t n = cfg.objects;
    pthread_barrier_wait(&start_bar);
    w->span.start = now_s();
    for (uint64_t r = 0; r < cfg.rounds; r++) {
        for (size_t j = 0; j < n; j++) {
            start_object(&w->objs[j], w->id, r * n + j);
            w->open[j] = (uint32_t)j;
        }
        size_t open = n;
        while (open > 0) {
            size_t i = (size_t)rng_below(&w->rng, open);
            if (append(w, &w->objs[w->open[i]]))
                w->open[i] = w->open[--open];
        }
        for (size_t j = 0; j < n; j++) {
            struct object *o = &w->objs[j];
            check_object(w, o, "before its free");
            w->chk.blocks++;
            w->final_bytes += o->len;
            free(o->p);
            o->p = NULL;
        }
    }
    w->span.end = now_s();
    return NULL;
}

int main(int argc, char **argv)
{
    bench_options("reallocgrow", argc, argv, opts, usage, usage);
    cfg = opt;
    if (optind != argc || cfg.threads < 1 || cfg.threads > 1024 || cfg.objects < 1 ||
        cfg.objects > ((size_t)1 << 31) || cfg.rounds < 1 || cfg.max_kib < 1 || cfg.max_kib > 65536)
        bench_usage_error(usage);
    const char *allocator = bench_detect_allocator();

    workers = bench_map((size_t)cfg.threads * sizeof *workers, 1);
    for (int i = 0; i < cfg.threads; i++) {
        struct worker *w = &workers[i];
        w->id = i;
        w->objs = bench_map(cfg.objects * sizeof *w->objs, 1);
        w->open = bench_map(cfg.objects * sizeof *w->open, 1);
        w->rng = mix64(cfg.seed * 1000003u + (uint64_t)i + 0x57e9);
    }
    bench_barrier_init(&start_bar, (unsigned)cfg.threads);
    BENCH_START(workers, cfg.threads, th, worker_main, 0);
    BENCH_JOIN(workers, cfg.threads, th);
    pthread_barrier_destroy(&start_bar);
    struct bench_span all = BENCH_SPAN(workers, cfg.threads, span);

    struct bench_checked chk = {0};
    uint64_t reallocs = 0, moves = 0, appends = 0, final_bytes = 0;
    for (int i = 0; i < cfg.threads; i++) {
        struct worker *w = &workers[i];
        bench_checked_add(&chk, &w->chk);
        reallocs += w->reallocs;
        moves += w->moves;
        appends += w->appends;
        final_bytes += w->final_bytes;
    }
    char extra[64];
    snprintf(extra, sizeof extra, ", \"reallocs\": %" PRIu64, reallocs);
    printf("{\"bench\": \"reallocgrow\", \"threads\": %d, \"objects\": %zu, \"rounds\": %" PRIu64
           ", \"max_kib\": %zu, \"elapsed_s\": %.6f, \"reallocs\": %" PRIu64 ", \"moves\": %" PRIu64
           ", \"moved_pct\": %.2f, \"appends\": %" PRIu64 ", \"final_bytes\": %" PRIu64
           ", \"allocator\": \"%s\", " BENCH_CHECKED_FMT "}\n",
           cfg.threads, cfg.objects, cfg.rounds, cfg.max_kib, all.end - all.start, reallocs, moves,
           reallocs ? 100.0 * (double)moves / (double)reallocs : 0.0, appends, final_bytes, allocator,
           BENCH_CHECKED_ARGS(chk, extra));
    return 0;
}
