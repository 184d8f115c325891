/*
 * objpool: the object-pool benchmarks of seed 001, for malloc/free and for
 * fastalloc's fa_pool (--api pool: fa_pool_create/get/put/trim found with
 * dlsym, so the binary links only libc; exit 2 when not under fastalloc).
 *
 * --mode shuffle (the seed's time test): --threads T workers, each allocates
 *   --objects objects of --size bytes per round, Fisher-Yates shuffles its
 *   pointer array, frees them in that order; --rounds rounds.  The seed timed
 *   the whole loop; here the threads step through the phases together
 *   (barriers) and only the allocate and free phases are timed: a phase
 *   lasts from the first thread's start to the last thread's end, and
 *   alloc_free_ms is the sum over the rounds (alloc_ms and free_ms split
 *   it).  The shuffle, and the checks between the phases, are not timed.
 *   total_ms is the whole loop, for reference.
 *
 *   --sizes MIN-MAX (malloc only): mixed sizes instead of --size.  Each
 *   object's size is drawn from the thread's seeded generator, a multiple of
 *   8 uniform in MIN..MAX, afresh every round; the draws for a round are made
 *   before its allocate phase and read from an array there, so the timed
 *   loop does the same work as with one size but hands malloc a different
 *   size each call.  A fixed-size pool cannot serve them: refused with
 *   --api pool, and with --mode rss (its bounds count objects of one size).
 *
 * --mode rss (the seed's memory test): the threads allocate all their objects
 *   (all live), free them, allocate them again, free them again; at each step
 *   the main thread reads RSS while the workers wait on a barrier (holding
 *   their objects).  Then the workers unmap their pointer arrays and exit,
 *   and RSS is read again; with --api pool, fa_pool_trim() runs after the
 *   exits (an exiting thread flushes its local pool) and RSS is read once
 *   more.  All in KiB.
 *
 * Validation: in the allocate phase each object gets a tag in its first word;
 * between the phases (untimed) every object's tag is checked, its alignment
 * too, and all its words are filled with a pattern; the whole pattern is
 * checked before the free phase and the tag again right before each free.
 * Objects handed out twice, overlapping or too short fail with exit 3.
 * "checked" in the output counts them: blocks (objects checked right before
 * their free), full (objects whose every word was checked between the
 * phases), threads x objects x rounds each (rss mode: 2 rounds), and bytes,
 * the sizes of the fully checked objects added up.
 *
 * RSS (rss mode) is read from the kernel's counters; a read that fails ends
 * the program (exit 2), so that no missing value can pass a bound.
 *
 * The pointer arrays are mmap'd and faulted in before the baseline reading.
 */
#include "bench_common.h"

#include <inttypes.h>

static const char usage[] =
    "usage: objpool [--mode shuffle|rss] [--api malloc|pool] [--threads T] [--objects N]\n"
    "               [--size B | --sizes MIN-MAX] [--rounds N] [--seed N]\n"
    "  --mode      shuffle: time allocate + free (default); rss: VmRSS at each step\n"
    "  --api       malloc: malloc/free (default); pool: fastalloc's fa_pool\n"
    "  --threads   worker threads (default 1)\n"
    "  --objects   objects per thread per round (default 100000)\n"
    "  --size      bytes per object, a multiple of 8, >= 16 (default 64)\n"
    "  --sizes     mixed sizes instead: multiples of 8 drawn uniformly in MIN..MAX\n"
    "              (multiples of 8, 16 <= MIN <= MAX <= 1M), per object and round;\n"
    "              shuffle mode and malloc only\n"
    "  --rounds    rounds, shuffle mode (default 50)\n";

/* fastalloc's pool API, found with dlsym (the program does not link it). */
static __typeof__(fa_pool_create) *pool_create;
static __typeof__(fa_pool_get) *pool_get;
static __typeof__(fa_pool_put) *pool_put;
static __typeof__(fa_pool_trim) *pool_trim;

enum { MODE_SHUFFLE, MODE_RSS };

/* opt: the command line, over the defaults; cfg: its copy that the
 * measured code reads (see bench_options). */
static struct {
    int mode;
    int use_pool;
    int threads;
    size_t objects;
    size_t size;
    size_t min_size, max_size; /* --sizes; 0 when every object is --size bytes */
    const char *sizes;
    uint64_t rounds;
    uint64_t seed;
} opt = {.mode = MODE_SHUFFLE, .threads = 1, .objects = 100000, .size = 64, .rounds = 50, .seed = 1}, cfg;

static const struct bench_opt opts[] = {
    CHOICE_OPT("mode", &opt.mode, "shuffle|rss", NULL), /* MODE_SHUFFLE, MODE_RSS */
    CHOICE_OPT("api", &opt.use_pool, "malloc|pool", NULL), INT_OPT("threads", &opt.threads),
    SIZE_OPT("objects", &opt.objects), SIZE_OPT("size", &opt.size), STRING_OPT("sizes", &opt.sizes),
    COUNT_OPT("rounds", &opt.rounds), COUNT_OPT("seed", &opt.seed), OPT_END};

static fa_pool *pool;
static pthread_barrier_t bar;      /* workers only (shuffle) or workers + main (rss) */

struct worker {
    int id;
    pthread_t th;
    uint64_t **ptrs;
    size_t ptr_bytes;
    uint32_t *sizes; /* --sizes: this round's size of each object, by allocation index */
    uint64_t rng;
    uint64_t tag_base;
    struct bench_checked chk; /* what this thread checked */
    struct bench_span span;   /* this thread's current phase */
} __attribute__((aligned(128)));

static struct worker *workers;
static double alloc_free_s; /* written by worker 0 only */
static double phase_s[2];   /* the same, split: allocate, free */

static inline uint64_t obj_tag(struct worker *w, uint64_t round, size_t i)
{
    return bench_tag(w->tag_base, round * cfg.objects + i);
}

static inline void *get_obj(void)
{
    return cfg.use_pool ? pool_get(pool) : malloc(cfg.size);
}

static inline void put_obj(void *p)
{
    if (cfg.use_pool)
        pool_put(pool, p);
    else
        free(p);
}

static void phase_alloc(struct worker *w, uint64_t round)
{
    uint64_t **ptrs = w->ptrs;
    const uint64_t t0 = obj_tag(w, round, 0);
    for (size_t i = 0; i < cfg.objects; i++) {
        uint64_t *p = get_obj();
        if (p == NULL)
            BENCH_FAIL("thread %d: allocation %zu of %zu bytes returned NULL", w->id, i, cfg.size);
        p[0] = t0 + i * 0x9e3779b97f4a7c16ull;
        ptrs[i] = p;
    }
}

/* The same with mixed sizes: its own function, so that the fixed-size loop
 * above stays the code the 64 B rows have always timed. */
static void phase_alloc_mixed(struct worker *w, uint64_t round)
{
    uint64_t **ptrs = w->ptrs;
    const uint32_t *sizes = w->sizes;
    const uint64_t t0 = obj_tag(w, round, 0);
    for (size_t i = 0; i < cfg.objects; i++) {
        uint64_t *p = malloc(sizes[i]);
        if (p == NULL)
            BENCH_FAIL("thread %d: allocation %zu of %" PRIu32 " bytes returned NULL", w->id, i, sizes[i]);
        p[0] = t0 + i * 0x9e3779b97f4a7c16ull;
        ptrs[i] = p;
    }
}

/* Untimed, before a round of mixed sizes: every object's size. */
static void draw_sizes(struct worker *w)
{
    const uint64_t steps = (cfg.max_size - cfg.min_size) / 8 + 1;
    for (size_t i = 0; i < cfg.objects; i++)
        w->sizes[i] = (uint32_t)(cfg.min_size + 8 * rng_below(&w->rng, steps));
}

static inline size_t obj_size(const struct worker *w, size_t i)
{
    return w->sizes != NULL ? w->sizes[i] : cfg.size;
}

static void phase_free(struct worker *w, uint64_t round)
{
    uint64_t **ptrs = w->ptrs;
    const size_t n = cfg.objects;
    uint64_t checked = 0; /* a local: a counter in *w would go to memory around every call */
    for (size_t i = 0; i < n; i++) {
        uint64_t *p = ptrs[i];
        /* the pattern of phase_check: word 0 is the tag, known from word 1 */
        if (p[0] != (p[1] ^ 0x5555555555555555ull))
            BENCH_FAIL("thread %d round %" PRIu64 ": object %p was overwritten while live",
                       w->id, round, (void *)p);
        checked++;
        put_obj(p);
    }
    w->chk.blocks += checked;
}

/* Untimed: checks the tags written by phase_alloc (their index is the
 * object's allocation index, before any shuffle), fills every word. */
static void phase_check_fill(struct worker *w, uint64_t round)
{
    for (size_t i = 0; i < cfg.objects; i++) {
        uint64_t *p = w->ptrs[i];
        uint64_t tag = obj_tag(w, round, i);
        const size_t words = obj_size(w, i) / 8;
        if (((uintptr_t)p & 15) != 0)
            BENCH_FAIL("thread %d: object %p is not 16-byte aligned", w->id, (void *)p);
        if (p[0] != tag)
            BENCH_FAIL("thread %d round %" PRIu64 ": object %zu at %p was overwritten while live "
                       "(another object shares its memory)", w->id, round, i, (void *)p);
        for (size_t k = 1; k < words; k++)
            p[k] = tag ^ (0x5555555555555555ull * k);
    }
    for (size_t i = 0; i < cfg.objects; i++) {
        uint64_t *p = w->ptrs[i];
        uint64_t tag = obj_tag(w, round, i);
        const size_t size = obj_size(w, i), words = size / 8;
        for (size_t k = 1; k < words; k++)
            if (p[k] != (tag ^ (0x5555555555555555ull * k)))
                BENCH_FAIL("thread %d round %" PRIu64 ": object %p word %zu was overwritten while live",
                           w->id, round, (void *)p, k);
        bench_checked_full(&w->chk, size);
    }
}

static void shuffle(struct worker *w)
{
    uint64_t **a = w->ptrs;
    for (size_t i = cfg.objects - 1; i > 0; i--) {
        size_t j = (size_t)rng_below(&w->rng, i + 1);
        uint64_t *t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* Worker 0 adds the phase that all workers just finished (called after a
 * barrier, so every start/end is written). */
static void account_phase(int which)
{
    struct bench_span all = BENCH_SPAN(workers, cfg.threads, span);
    alloc_free_s += all.end - all.start;
    phase_s[which] += all.end - all.start;
}

/* One timed phase of shuffle mode, started and ended with all workers
 * together (the barriers); worker 0 adds it up once all have finished. */
static void timed_phase(struct worker *w, uint64_t round, void (*phase)(struct worker *, uint64_t),
                        int which)
{
    pthread_barrier_wait(&bar);
    w->span.start = now_s();
    phase(w, round);
    w->span.end = now_s();
    pthread_barrier_wait(&bar);
    if (w->id == 0)
        account_phase(which);
}

/* shuffle mode.  With mixed sizes (--sizes), they are drawn anew before
 * each allocate phase, untimed. */
static void *shuffle_main(void *arg)
{
    struct worker *w = arg;
    const int mixed = cfg.sizes != NULL;
    for (uint64_t r = 0; r < cfg.rounds; r++) {
        if (mixed) {
            draw_sizes(w);
            timed_phase(w, r, phase_alloc_mixed, 0);
        } else {
            timed_phase(w, r, phase_alloc, 0);
        }
        phase_check_fill(w, r);
        shuffle(w);
        timed_phase(w, r, phase_free, 1);
    }
    return NULL;
}

/* rss mode: main reads RSS between the barriers. */
static void *rss_main(void *arg)
{
    struct worker *w = arg;
    pthread_barrier_wait(&bar); /* baseline read */
    for (uint64_t r = 0; r < 2; r++) {
        phase_alloc(w, r);
        phase_check_fill(w, r);
        pthread_barrier_wait(&bar); /* all live: main reads */
        pthread_barrier_wait(&bar);
        shuffle(w);
        phase_free(w, r);
        pthread_barrier_wait(&bar); /* all freed: main reads */
        pthread_barrier_wait(&bar);
    }
    bench_unmap(w->ptrs, w->ptr_bytes);
    w->ptrs = NULL;
    return NULL;
}

int main(int argc, char **argv)
{
    bench_options("objpool", argc, argv, opts, usage, usage);
    cfg = opt;
    if (cfg.sizes != NULL) {
        char dash = 0, extra = 0;
        if (sscanf(cfg.sizes, "%zu%c%zu%c", &cfg.min_size, &dash, &cfg.max_size, &extra) != 3 || dash != '-' ||
            cfg.min_size < 16 || cfg.min_size > cfg.max_size || cfg.max_size > (1u << 20) ||
            cfg.min_size % 8 != 0 || cfg.max_size % 8 != 0 || cfg.mode != MODE_SHUFFLE || cfg.use_pool)
            bench_usage_error(usage);
        cfg.size = 0; /* each object has its own */
    }
    if (optind != argc || cfg.threads < 1 || cfg.threads > 1024 || cfg.objects < 2 ||
        (cfg.sizes == NULL && (cfg.size < 16 || cfg.size % 8 != 0)) || cfg.rounds < 1)
        bench_usage_error(usage);
    if (cfg.use_pool) {
        pool_create = (__typeof__(fa_pool_create) *)bench_fa_symbol("fa_pool_create");
        pool_get = (__typeof__(fa_pool_get) *)bench_fa_symbol("fa_pool_get");
        pool_put = (__typeof__(fa_pool_put) *)bench_fa_symbol("fa_pool_put");
        pool_trim = (__typeof__(fa_pool_trim) *)bench_fa_symbol("fa_pool_trim");
        pool = pool_create(&(fa_pool_options){.object_size = cfg.size});
        if (pool == NULL)
            BENCH_FAIL("fa_pool_create failed (errno %d)", errno);
    }
    const char *allocator = bench_detect_allocator();

    workers = bench_map((size_t)cfg.threads * sizeof *workers, 1);
    size_t ptr_bytes = cfg.objects * sizeof(uint64_t *);
    for (int i = 0; i < cfg.threads; i++) {
        struct worker *w = &workers[i];
        w->id = i;
        w->ptr_bytes = ptr_bytes;
        w->ptrs = bench_map(ptr_bytes, 1);
        if (cfg.sizes != NULL)
            w->sizes = bench_map(cfg.objects * sizeof *w->sizes, 1);
        w->rng = mix64(cfg.seed * 1000003u + (uint64_t)i);
        w->tag_base = mix64(cfg.seed ^ ((uint64_t)(i + 1) << 40));
    }
    int parties = cfg.threads + (cfg.mode == MODE_RSS ? 1 : 0);
    bench_barrier_init(&bar, (unsigned)parties);

    double t0 = now_s();
    long base = 0, live[2] = {0}, freed[2] = {0}, after_exit = 0, after_trim = -1;
    BENCH_START(workers, cfg.threads, th, cfg.mode == MODE_RSS ? rss_main : shuffle_main, 0);
    if (cfg.mode == MODE_RSS) {
        base = bench_rss_kib();
        pthread_barrier_wait(&bar);
        for (int r = 0; r < 2; r++) {
            pthread_barrier_wait(&bar);
            live[r] = bench_rss_kib();
            pthread_barrier_wait(&bar);
            pthread_barrier_wait(&bar);
            freed[r] = bench_rss_kib();
            pthread_barrier_wait(&bar);
        }
    }
    BENCH_JOIN(workers, cfg.threads, th);
    double total = now_s() - t0;
    pthread_barrier_destroy(&bar);
    struct bench_checked chk = BENCH_CHECKED_SUM(workers, cfg.threads, chk);

    if (cfg.mode == MODE_SHUFFLE) {
        double pairs = (double)cfg.threads * (double)cfg.objects * (double)cfg.rounds;
        printf("{\"bench\": \"objpool\", \"mode\": \"shuffle\", \"api\": \"%s\", \"threads\": %d, "
               "\"objects\": %zu, \"size\": %zu, \"min_size\": %zu, \"max_size\": %zu, "
               "\"rounds\": %" PRIu64 ", \"alloc_free_ms\": %.3f, "
               "\"alloc_ms\": %.3f, \"free_ms\": %.3f, \"total_ms\": %.3f, \"ns_per_pair\": %.3f, \"allocator\": \"%s\", "
               BENCH_CHECKED_FMT "}\n",
               cfg.use_pool ? "pool" : "malloc", cfg.threads, cfg.objects, cfg.size,
               cfg.sizes != NULL ? cfg.min_size : cfg.size, cfg.sizes != NULL ? cfg.max_size : cfg.size, cfg.rounds,
               alloc_free_s * 1e3, phase_s[0] * 1e3, phase_s[1] * 1e3, total * 1e3, alloc_free_s * 1e9 * cfg.threads / pairs, allocator,
               BENCH_CHECKED_ARGS(chk, ""));
    } else {
        after_exit = bench_rss_kib();
        if (cfg.use_pool) {
            pool_trim(pool);
            after_trim = bench_rss_kib();
        }
        printf("{\"bench\": \"objpool\", \"mode\": \"rss\", \"api\": \"%s\", \"threads\": %d, "
               "\"objects\": %zu, \"size\": %zu, \"ptr_array_bytes\": %zu, \"base_kib\": %ld, "
               "\"live1_kib\": %ld, \"freed1_kib\": %ld, \"live2_kib\": %ld, \"freed2_kib\": %ld, "
               "\"exit_kib\": %ld, \"trim_kib\": %ld, \"live1_mib\": %.2f, \"allocator\": \"%s\", "
               BENCH_CHECKED_FMT "}\n",
               cfg.use_pool ? "pool" : "malloc", cfg.threads, cfg.objects, cfg.size,
               ptr_bytes * (size_t)cfg.threads, base, live[0], freed[0], live[1], freed[1],
               after_exit, after_trim, (double)live[0] / 1024.0, allocator, BENCH_CHECKED_ARGS(chk, ""));
    }
    return 0;
}
