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
 * --mode rss (the seed's memory test): the threads allocate all their objects
 *   (all live), free them, allocate them again, free them again; at each step
 *   the main thread reads VmRSS while the workers wait on a barrier (holding
 *   their objects).  Then the workers unmap their pointer arrays and exit,
 *   and VmRSS is read again; with --api pool, fa_pool_trim() runs after the
 *   exits (an exiting thread flushes its local pool) and VmRSS is read once
 *   more.  All in KiB.
 *
 * Validation: in the allocate phase each object gets a tag in its first word;
 * between the phases (untimed) every object's tag is checked, its alignment
 * too, and all its words are filled with a pattern; the whole pattern is
 * checked before the free phase and the tag again right before each free.
 * Objects handed out twice, overlapping or too short fail with exit 3.
 *
 * The pointer arrays are mmap'd and faulted in before the baseline reading.
 */
#include "bench_common.h"

#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>

typedef struct fa_pool fa_pool;
typedef struct fa_pool_options {
    size_t object_size;
    size_t object_align;
    void (*ctor)(void *obj, void *arg);
    void (*dtor)(void *obj, void *arg);
    void *arg;
    unsigned global_pools;
    unsigned handover;
    size_t block_size;
    size_t max_objects;
    size_t max_bytes;
    int idle_trim_ms;
    int debug;
    const char *name;
} fa_pool_options; /* mirrors include/fastalloc.h (this program does not include it) */

static fa_pool *(*pool_create)(const fa_pool_options *);
static void *(*pool_get)(fa_pool *);
static void (*pool_put)(fa_pool *, void *);
static size_t (*pool_trim)(fa_pool *);

enum { MODE_SHUFFLE, MODE_RSS };

static struct {
    int mode;
    int use_pool;
    int threads;
    size_t objects;
    size_t size;
    uint64_t rounds;
    uint64_t seed;
} cfg;

static fa_pool *pool;
static pthread_barrier_t bar;      /* workers only (shuffle) or workers + main (rss) */

struct worker {
    int id;
    pthread_t th;
    uint64_t **ptrs;
    size_t ptr_bytes;
    uint64_t rng;
    uint64_t tag_base;
    double start, end; /* this thread's current phase */
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

static void phase_free(struct worker *w, uint64_t round)
{
    uint64_t **ptrs = w->ptrs;
    const size_t n = cfg.objects;
    for (size_t i = 0; i < n; i++) {
        uint64_t *p = ptrs[i];
        /* the pattern of phase_check: word 0 is the tag, known from word 1 */
        if (p[0] != (p[1] ^ 0x5555555555555555ull))
            BENCH_FAIL("thread %d round %" PRIu64 ": object %p was overwritten while live",
                       w->id, round, (void *)p);
        put_obj(p);
    }
}

/* Untimed: checks the tags written by phase_alloc (their index is the
 * object's allocation index, before any shuffle), fills every word. */
static void phase_check_fill(struct worker *w, uint64_t round)
{
    const size_t words = cfg.size / 8;
    for (size_t i = 0; i < cfg.objects; i++) {
        uint64_t *p = w->ptrs[i];
        uint64_t tag = obj_tag(w, round, i);
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
        for (size_t k = 1; k < words; k++)
            if (p[k] != (tag ^ (0x5555555555555555ull * k)))
                BENCH_FAIL("thread %d round %" PRIu64 ": object %p word %zu was overwritten while live",
                           w->id, round, (void *)p, k);
    }
}

static void shuffle(struct worker *w)
{
    uint64_t **a = w->ptrs;
    for (size_t i = cfg.objects - 1; i > 0; i--) {
        size_t j = (size_t)(bench_rand(&w->rng) % (i + 1));
        uint64_t *t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* Worker 0 adds the phase that all workers just finished (called after a
 * barrier, so every start/end is written). */
static void account_phase(int which)
{
    double s = workers[0].start, e = workers[0].end;
    for (int i = 1; i < cfg.threads; i++) {
        if (workers[i].start < s)
            s = workers[i].start;
        if (workers[i].end > e)
            e = workers[i].end;
    }
    alloc_free_s += e - s;
    phase_s[which] += e - s;
}

static void *shuffle_main(void *arg)
{
    struct worker *w = arg;
    for (uint64_t r = 0; r < cfg.rounds; r++) {
        pthread_barrier_wait(&bar);
        w->start = bench_now();
        phase_alloc(w, r);
        w->end = bench_now();
        pthread_barrier_wait(&bar);
        if (w->id == 0)
            account_phase(0);
        phase_check_fill(w, r);
        shuffle(w);
        pthread_barrier_wait(&bar);
        w->start = bench_now();
        phase_free(w, r);
        w->end = bench_now();
        pthread_barrier_wait(&bar);
        if (w->id == 0)
            account_phase(1);
    }
    return NULL;
}

/* rss mode: main reads VmRSS between the barriers. */
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

static void usage(FILE *f)
{
    fprintf(f,
        "usage: objpool [--mode shuffle|rss] [--api malloc|pool] [--threads T] [--objects N]\n"
        "               [--size B] [--rounds N] [--seed N]\n"
        "  --mode      shuffle: time allocate + free (default); rss: VmRSS at each step\n"
        "  --api       malloc: malloc/free (default); pool: fastalloc's fa_pool\n"
        "  --threads   worker threads (default 1)\n"
        "  --objects   objects per thread per round (default 100000)\n"
        "  --size      bytes per object, a multiple of 8, >= 16 (default 64)\n"
        "  --rounds    rounds, shuffle mode (default 50)\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"mode", required_argument, 0, 'm'},    {"api", required_argument, 0, 'a'},
        {"threads", required_argument, 0, 't'}, {"objects", required_argument, 0, 'n'},
        {"size", required_argument, 0, 's'},    {"rounds", required_argument, 0, 'r'},
        {"seed", required_argument, 0, 'S'},    {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    bench_name = "objpool";
    cfg.mode = MODE_SHUFFLE;
    cfg.threads = 1;
    cfg.objects = 100000;
    cfg.size = 64;
    cfg.rounds = 50;
    cfg.seed = 1;
    for (;;) {
        int c = getopt_long(argc, argv, "", opts, NULL);
        if (c == -1)
            break;
        switch (c) {
        case 'm':
            if (strcmp(optarg, "shuffle") == 0)
                cfg.mode = MODE_SHUFFLE;
            else if (strcmp(optarg, "rss") == 0)
                cfg.mode = MODE_RSS;
            else
                bench_die(2, "bad --mode '%s'", optarg);
            break;
        case 'a':
            if (strcmp(optarg, "pool") == 0)
                cfg.use_pool = 1;
            else if (strcmp(optarg, "malloc") != 0)
                bench_die(2, "bad --api '%s'", optarg);
            break;
        case 't': cfg.threads = (int)bench_count("--threads", optarg); break;
        case 'n': cfg.objects = (size_t)bench_count("--objects", optarg); break;
        case 's': cfg.size = (size_t)bench_count("--size", optarg); break;
        case 'r': cfg.rounds = bench_count("--rounds", optarg); break;
        case 'S': cfg.seed = bench_count("--seed", optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc || cfg.threads < 1 || cfg.threads > 1024 || cfg.objects < 2 ||
        cfg.size < 16 || cfg.size % 8 != 0 || cfg.rounds < 1) {
        usage(stderr);
        return 2;
    }
    if (cfg.use_pool) {
        pool_create = (fa_pool * (*)(const fa_pool_options *))bench_fa_symbol("fa_pool_create");
        pool_get = (void *(*)(fa_pool *))bench_fa_symbol("fa_pool_get");
        pool_put = (void (*)(fa_pool *, void *))bench_fa_symbol("fa_pool_put");
        pool_trim = (size_t(*)(fa_pool *))bench_fa_symbol("fa_pool_trim");
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
        w->rng = bench_mix64(cfg.seed * 1000003u + (uint64_t)i);
        w->tag_base = bench_mix64(cfg.seed ^ ((uint64_t)(i + 1) << 40));
    }
    int parties = cfg.threads + (cfg.mode == MODE_RSS ? 1 : 0);
    if (pthread_barrier_init(&bar, NULL, (unsigned)parties) != 0)
        bench_die(2, "pthread_barrier_init failed");

    double t0 = bench_now();
    long base = 0, live[2] = {0}, freed[2] = {0}, after_exit = 0, after_trim = -1;
    for (int i = 0; i < cfg.threads; i++) {
        int e = pthread_create(&workers[i].th, NULL,
                               cfg.mode == MODE_RSS ? rss_main : shuffle_main, &workers[i]);
        if (e != 0)
            bench_die(2, "pthread_create: %s", strerror(e));
    }
    if (cfg.mode == MODE_RSS) {
        base = bench_vmrss_kib();
        pthread_barrier_wait(&bar);
        for (int r = 0; r < 2; r++) {
            pthread_barrier_wait(&bar);
            live[r] = bench_vmrss_kib();
            pthread_barrier_wait(&bar);
            pthread_barrier_wait(&bar);
            freed[r] = bench_vmrss_kib();
            pthread_barrier_wait(&bar);
        }
    }
    for (int i = 0; i < cfg.threads; i++)
        pthread_join(workers[i].th, NULL);
    double total = bench_now() - t0;
    pthread_barrier_destroy(&bar);

    if (cfg.mode == MODE_SHUFFLE) {
        double pairs = (double)cfg.threads * (double)cfg.objects * (double)cfg.rounds;
        printf("{\"bench\": \"objpool\", \"mode\": \"shuffle\", \"api\": \"%s\", \"threads\": %d, "
               "\"objects\": %zu, \"size\": %zu, \"rounds\": %" PRIu64 ", \"alloc_free_ms\": %.3f, "
               "\"alloc_ms\": %.3f, \"free_ms\": %.3f, \"total_ms\": %.3f, \"ns_per_pair\": %.3f, \"allocator\": \"%s\", \"valid\": true}\n",
               cfg.use_pool ? "pool" : "malloc", cfg.threads, cfg.objects, cfg.size, cfg.rounds,
               alloc_free_s * 1e3, phase_s[0] * 1e3, phase_s[1] * 1e3, total * 1e3, alloc_free_s * 1e9 * cfg.threads / pairs, allocator);
    } else {
        after_exit = bench_vmrss_kib();
        if (cfg.use_pool) {
            pool_trim(pool);
            after_trim = bench_vmrss_kib();
        }
        printf("{\"bench\": \"objpool\", \"mode\": \"rss\", \"api\": \"%s\", \"threads\": %d, "
               "\"objects\": %zu, \"size\": %zu, \"ptr_array_bytes\": %zu, \"base_kib\": %ld, "
               "\"live1_kib\": %ld, \"freed1_kib\": %ld, \"live2_kib\": %ld, \"freed2_kib\": %ld, "
               "\"exit_kib\": %ld, \"trim_kib\": %ld, \"live1_mib\": %.2f, \"allocator\": \"%s\", "
               "\"valid\": true}\n",
               cfg.use_pool ? "pool" : "malloc", cfg.threads, cfg.objects, cfg.size,
               ptr_bytes * (size_t)cfg.threads, base, live[0], freed[0], live[1], freed[1],
               after_exit, after_trim, (double)live[0] / 1024.0, allocator);
    }
    return 0;
}
