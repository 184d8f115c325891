/*
 * poolbursts: requests in bursts that another thread gives back, the loop of
 * a server whose threads hand work to each other in lock step (issue #40).
 * --threads T threads in a ring; thread i gives back the requests of thread
 * (i - 1) % T (with T = 1, its own).  A round:
 *   1. each thread gets a burst of --burst B requests of --size S bytes
 *      (fa_pool_get with --api pool, malloc with --api malloc), fills each,
 *      and every --every E requests replaces one of its --sessions K live
 *      sessions of --session S2 bytes (malloc'd in both APIs: the program's
 *      other traffic), picked at random: checks and frees it, mallocs a new
 *      one and stamps it;
 *   2. a barrier;
 *   3. each thread checks and gives back (fa_pool_put or free) its
 *      predecessor's B requests, in the order --order names: shuffled (a
 *      Fisher-Yates shuffle of the indices, drawn again every round) or in
 *      order (as they were got);
 *   4. a barrier.
 * --requests N per thread, rounded down to whole bursts.  The bursts of a
 * round all come from the threads' own pools, so every put but those of
 * T = 1 is another thread's object.
 *
 * Validation: request k of thread i carries bench_tag(base of i, k) in its
 * first 8 bytes and the complement at its end, and every byte between is
 * filled.  The thread that gives it back knows its sender and number, and
 * checks its stamps first, and every 16th request in every byte.  Sessions carry
 * tags of their own at both ends, checked before their free.  Exit 3 on a
 * mismatch.  "checked": blocks = the requests checked (T x N), full and
 * bytes; sessions = the sessions checked.
 *
 * Output: elapsed_s from the first thread's start to the last thread's end,
 * the whole loop (the shuffle and the checks included, the same work for
 * every allocator); ns_per_request = elapsed_s x 1e9 / N (the threads run
 * side by side).
 */
#include "bench_common.h"

#include <inttypes.h>

static const char usage[] =
    "usage: poolbursts [--api malloc|pool] [--threads T] [--burst B] [--requests N] [--size S]\n"
    "                  [--order shuffled|inorder] [--session S2] [--sessions K] [--every E]\n"
    "  --api       pool: requests from fastalloc's fa_pool; malloc (default): malloc/free\n"
    "  --threads   threads in a ring, each giving back its predecessor's burst (default 2)\n"
    "  --burst     requests per burst (default 1000)\n"
    "  --requests  requests per thread, rounded down to whole bursts (default 1M)\n"
    "  --size      bytes per request, a multiple of 8, >= 16 (default 192)\n"
    "  --order     the order requests are given back: shuffled (default) or inorder\n"
    "  --session   bytes per session, >= 16 (default 1024)\n"
    "  --sessions  live sessions per thread (default 512)\n"
    "  --every     one session replaced every E requests (default 4)\n";

#define FULL_EVERY 16

static __typeof__(fa_pool_create) *pool_create;
static __typeof__(fa_pool_get) *pool_get;
static __typeof__(fa_pool_put) *pool_put;

struct thread {
    int id;
    pthread_t th;
    struct thread *prev;      /* whose requests this thread gives back */
    unsigned char **burst;    /* this round's requests, B pointers */
    uint32_t *order;          /* B indices, the order of the puts */
    unsigned char **sessions; /* K live sessions */
    uint64_t *session_no;     /* the number of each live session, for its tag */
    uint64_t rng, tag_base, session_base, sessions_made;
    struct bench_checked chk;  /* requests */
    struct bench_checked schk; /* sessions */
    struct bench_span span;
} __attribute__((aligned(128)));

static struct {
    int use_pool;
    int threads;
    size_t burst;
    uint64_t requests;
    size_t size;
    int inorder;
    size_t session, sessions, every;
} opt = {.threads = 2, .burst = 1000, .requests = 1000000, .size = 192, .session = 1024, .sessions = 512,
         .every = 4},
  cfg;

static const struct bench_opt opts[] = {
    CHOICE_OPT("api", &opt.use_pool, "malloc|pool", NULL), INT_OPT("threads", &opt.threads),
    SIZE_OPT("burst", &opt.burst), COUNT_OPT("requests", &opt.requests), SIZE_OPT("size", &opt.size),
    CHOICE_OPT("order", &opt.inorder, "shuffled|inorder", NULL), SIZE_OPT("session", &opt.session),
    SIZE_OPT("sessions", &opt.sessions), SIZE_OPT("every", &opt.every), OPT_END};

static fa_pool *pool;
static pthread_barrier_t bar;
static uint64_t rounds;

static inline unsigned char *get_req(void)
{
    return cfg.use_pool ? pool_get(pool) : malloc(cfg.size);
}

static inline void put_req(unsigned char *p)
{
    if (cfg.use_pool)
        pool_put(pool, p);
    else
        free(p);
}

/* A new session in slot j, the one there checked and freed first. */
static void replace_session(struct thread *t, size_t j)
{
    const size_t n = cfg.session;
    unsigned char *old = t->sessions[j];
    if (old != NULL)
        bench_check_free(t->id, old, n, bench_tag(t->session_base, t->session_no[j]), 0, &t->schk);
    unsigned char *p = malloc(n);
    if (p == NULL)
        BENCH_FAIL("thread %d: malloc(%zu) of a session returned NULL", t->id, n);
    uint64_t s = t->sessions_made++;
    bench_stamp(p, n, bench_tag(t->session_base, s));
    t->sessions[j] = p;
    t->session_no[j] = s;
}

static void get_burst(struct thread *t, uint64_t round)
{
    const size_t n = cfg.burst, size = cfg.size, every = cfg.every;
    const uint64_t first = round * n;
    for (size_t j = 0; j < n; j++) {
        unsigned char *p = get_req();
        if (p == NULL)
            BENCH_FAIL("thread %d: a request of %zu bytes returned NULL", t->id, size);
        uint64_t k = first + j;
        bench_fill(p, size, bench_tag(t->tag_base, k));
        t->burst[j] = p;
        if (j % every == 0)
            replace_session(t, (size_t)rng_below(&t->rng, cfg.sessions));
    }
}

static void put_burst(struct thread *t, uint64_t round)
{
    const size_t n = cfg.burst, size = cfg.size;
    struct thread *from = t->prev;
    uint32_t *order = t->order;
    if (!cfg.inorder)
        for (size_t j = n - 1; j > 0; j--) {
            size_t r = (size_t)rng_below(&t->rng, j + 1);
            uint32_t x = order[j];
            order[j] = order[r];
            order[r] = x;
        }
    const uint64_t first = round * n, base = from->tag_base;
    struct bench_checked chk = t->chk;
    for (size_t j = 0; j < n; j++) {
        size_t i = order[j];
        unsigned char *p = from->burst[i];
        uint64_t k = first + i;
        long bad = bench_check(p, size, bench_tag(base, k), k % FULL_EVERY == 0, &chk);
        if (bad >= 0)
            BENCH_FAIL("thread %d: request %p of thread %d was overwritten while live (byte %ld)", t->id,
                       (void *)p, from->id, bad);
        put_req(p);
    }
    t->chk = chk;
}

static void *worker(void *arg)
{
    struct thread *t = arg;
    for (size_t j = 0; j < cfg.sessions; j++)
        replace_session(t, j);
    pthread_barrier_wait(&bar);
    t->span.start = now_s();
    for (uint64_t r = 0; r < rounds; r++) {
        get_burst(t, r);
        pthread_barrier_wait(&bar);
        put_burst(t, r);
        pthread_barrier_wait(&bar);
    }
    t->span.end = now_s();
    for (size_t j = 0; j < cfg.sessions; j++)
        bench_check_free(t->id, t->sessions[j], cfg.session, bench_tag(t->session_base, t->session_no[j]), 0,
                         &t->schk);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_options("poolbursts", argc, argv, opts, usage, usage);
    cfg = opt;
    if (optind != argc || cfg.threads < 1 || cfg.threads > 512 || cfg.burst < 1 || cfg.burst > (1u << 24) ||
        cfg.requests < cfg.burst || cfg.size < 16 || cfg.size % 8 != 0 || cfg.size > (1u << 20) ||
        cfg.session < 16 || cfg.session > (1u << 20) || cfg.sessions < 1 || cfg.sessions > (1u << 20) ||
        cfg.every < 1)
        bench_usage_error(usage);
    rounds = cfg.requests / cfg.burst;
    if (cfg.use_pool) {
        pool_create = (__typeof__(fa_pool_create) *)bench_fa_symbol("fa_pool_create");
        pool_get = (__typeof__(fa_pool_get) *)bench_fa_symbol("fa_pool_get");
        pool_put = (__typeof__(fa_pool_put) *)bench_fa_symbol("fa_pool_put");
        pool = pool_create(&(fa_pool_options){.object_size = cfg.size});
        if (pool == NULL)
            BENCH_FAIL("fa_pool_create failed (errno %d)", errno);
    }
    const char *allocator = bench_detect_allocator();
    struct thread *ts = bench_map((size_t)cfg.threads * sizeof *ts, 1);
    for (int i = 0; i < cfg.threads; i++) {
        struct thread *t = &ts[i];
        t->id = i;
        t->prev = &ts[(i + cfg.threads - 1) % cfg.threads];
        t->burst = bench_map(cfg.burst * sizeof *t->burst, 1);
        t->order = bench_map(cfg.burst * sizeof *t->order, 1);
        for (size_t j = 0; j < cfg.burst; j++)
            t->order[j] = (uint32_t)j;
        t->sessions = bench_map(cfg.sessions * sizeof *t->sessions, 1);
        t->session_no = bench_map(cfg.sessions * sizeof *t->session_no, 1);
        t->rng = mix64(0x5eed + (uint64_t)i);
        t->tag_base = mix64((uint64_t)(i + 1) << 36);
        t->session_base = mix64((uint64_t)(i + 1) << 44 | 1);
    }
    bench_barrier_init(&bar, (unsigned)cfg.threads);
    BENCH_START(ts, cfg.threads, th, worker, 0);
    BENCH_JOIN(ts, cfg.threads, th);
    pthread_barrier_destroy(&bar);
    struct bench_span all = BENCH_SPAN(ts, cfg.threads, span);
    double elapsed = all.end - all.start;
    struct bench_checked chk = BENCH_CHECKED_SUM(ts, cfg.threads, chk);
    struct bench_checked schk = BENCH_CHECKED_SUM(ts, cfg.threads, schk);
    const uint64_t requests = rounds * cfg.burst;
    if (chk.blocks != requests * (uint64_t)cfg.threads)
        BENCH_FAIL("checked %" PRIu64 " requests, expected %" PRIu64, chk.blocks, requests * (uint64_t)cfg.threads);
    char extra[64];
    snprintf(extra, sizeof extra, ", \"sessions\": %" PRIu64, schk.blocks);
    printf("{\"bench\": \"poolbursts\", \"api\": \"%s\", \"threads\": %d, \"burst\": %zu, \"order\": \"%s\", "
           "\"requests\": %" PRIu64 ", \"rounds\": %" PRIu64 ", \"size\": %zu, \"elapsed_s\": %.6f, "
           "\"ns_per_request\": %.3f, \"allocator\": \"%s\", " BENCH_CHECKED_FMT "}\n",
           cfg.use_pool ? "pool" : "malloc", cfg.threads, cfg.burst, cfg.inorder ? "inorder" : "shuffled",
           requests, rounds, cfg.size, elapsed, elapsed * 1e9 / (double)requests, allocator,
           BENCH_CHECKED_ARGS(chk, extra));
    return 0;
}
