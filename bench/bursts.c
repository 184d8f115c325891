/*
 * bursts: cross-thread frees in bursts, the loop of a server whose threads
 * hand batches of requests to each other.  --threads T threads in a ring:
 * thread i hands its bursts to thread (i + 1) % T and frees those of
 * thread (i - 1) % T (T may be odd; with T = 1 a thread frees its own).
 * Each thread loops over --blocks N / --burst B bursts (N rounded down to
 * whole bursts):
 *   1. allocates a burst of B blocks of --size S bytes, and for each block
 *      also runs one "session": mallocs --session S2 bytes, writes its first
 *      and last 8 bytes, and checks and frees the session made --live K
 *      sessions before (a ring of K live sessions);
 *   2. hands the burst (an array of B pointers, one of 3 mmap'd arrays the
 *      thread uses in turn) to its partner through the partner's mailbox,
 *      two slots, emptied in order; while both are taken it spins a little,
 *      then sched_yield()s, and meanwhile frees the bursts that arrive in
 *      its own mailbox (so two threads that wait on each other still move);
 *   3. if a burst from its predecessor is waiting, checks and frees all of
 *      its blocks in a shuffled order (a Fisher-Yates shuffle of the
 *      indices with the thread's generator, drawn again for every burst),
 *      then empties that slot, which hands the array back to its owner.
 * At the end each thread frees the bursts still coming to it (as many as it
 * handed on) and its last K sessions.  A slot is emptied only after its
 * burst is freed, and the 3 arrays of a thread are used in order, so the
 * array a thread fills has always been given back (2 at most in a mailbox).
 *
 * Validation: block k of thread i carries bench_tag(base of i, k) in its
 * first 8 bytes and the complement at its end; every 16th block is filled
 * in every byte.  The freeing thread knows the sender and, the mailbox
 * being in order, the number of each burst, so it checks every block
 * before its free (all of them fully or by the stamps).  Sessions carry a
 * tag of their own at both ends, checked before their free.  Exit 3 on a
 * mismatch.  "checked" in the output: blocks = T x N blocks of the bursts,
 * full and bytes (every 16th), sessions = T x N sessions checked, bursts =
 * T x N / B bursts received.
 *
 * Output: elapsed_s from the first thread's start to the last thread's end;
 * ns_per_block = elapsed_s x 1e9 / N (the blocks of one thread: the threads
 * run side by side); blocks = N after rounding.
 */
#include "bench_common.h"

#include <inttypes.h>
#include <sched.h>

static const char usage[] =
    "usage: bursts [--threads T] [--burst B] [--blocks N] [--size S] [--session S2] [--live K]\n"
    "  --threads  threads in a ring, each handing its bursts to the next (default 2)\n"
    "  --burst    blocks per burst (default 1000)\n"
    "  --blocks   blocks per thread, rounded down to whole bursts (default 2M)\n"
    "  --size     bytes per block (default 192; 16 or more)\n"
    "  --session  bytes per session (default 1024; 16 or more)\n"
    "  --live     sessions live per thread: each frees the one made K before (default 16)\n";

#define FULL_EVERY 16
#define ARRAYS 3 /* burst arrays per thread, used in turn */
#define SLOTS 2  /* a mailbox's slots, a power of two below ARRAYS */

struct thread {
    /* This thread's mailbox: head and slot[] written by the predecessor,
     * tail by this thread once it has freed a burst. */
    _Alignas(128) unsigned long head;
    unsigned char **slot[SLOTS];
    _Alignas(128) unsigned long tail;
    _Alignas(128) int id;
    pthread_t th;
    struct thread *next, *prev; /* who gets this thread's bursts; whose it gets */
    unsigned char **array[ARRAYS];
    uint32_t *order;            /* B indices, shuffled for every burst received */
    unsigned char **sessions;   /* the ring of K live sessions */
    uint64_t rng, tag_base, session_base;
    uint64_t received;          /* bursts received so far */
    struct bench_checked chk;   /* the blocks of the bursts received */
    struct bench_checked schk;  /* the sessions */
    struct bench_span span;
};

/* opt: the command line, over the defaults; cfg: its copy that the
 * measured code reads (see bench_options). */
static struct {
    int threads;
    size_t burst;
    uint64_t blocks;
    size_t size, session, live;
} opt = {.threads = 2, .burst = 1000, .blocks = 2000000, .size = 192, .session = 1024, .live = 16}, cfg;

static const struct bench_opt opts[] = {INT_OPT("threads", &opt.threads), SIZE_OPT("burst", &opt.burst),
                                        COUNT_OPT("blocks", &opt.blocks), SIZE_OPT("size", &opt.size),
                                        SIZE_OPT("session", &opt.session), SIZE_OPT("live", &opt.live),
                                        OPT_END};

static uint64_t nbursts; /* bursts per thread */
static pthread_barrier_t start_bar;

static inline void wait_a_little(unsigned *spins)
{
    if (++*spins < 64)
        bench_cpu_relax();
    else
        sched_yield();
}

/* Checks and frees the oldest burst of t's mailbox, in a shuffled order,
 * then empties its slot; 0 when the mailbox is empty. */
static int free_one_burst(struct thread *t)
{
    unsigned long tail = t->tail;
    if (__atomic_load_n(&t->head, __ATOMIC_ACQUIRE) == tail)
        return 0;
    unsigned char **burst = t->slot[tail & (SLOTS - 1)];
    const size_t n = cfg.burst, size = cfg.size;
    uint32_t *order = t->order;
    for (size_t j = n - 1; j > 0; j--) { /* the last burst's order shuffled again: as uniform */
        size_t r = (size_t)rng_below(&t->rng, j + 1);
        uint32_t x = order[j];
        order[j] = order[r];
        order[r] = x;
    }
    const uint64_t first = t->received * n, base = t->prev->tag_base;
    struct bench_checked chk = t->chk; /* a local, kept in registers */
    for (size_t j = 0; j < n; j++) {
        uint64_t k = first + order[j];
        bench_check_free(t->id, burst[order[j]], size, bench_tag(base, k), k % FULL_EVERY == 0, &chk);
    }
    t->chk = chk;
    t->received++;
    __atomic_store_n(&t->tail, tail + 1, __ATOMIC_RELEASE);
    return 1;
}

/* Session s: a new one in the ring, the one made K before it checked and freed. */
static inline void session(struct thread *t, uint64_t s)
{
    const size_t n = cfg.session, live = cfg.live;
    unsigned char *p = malloc(n);
    if (p == NULL)
        BENCH_FAIL("thread %d: malloc(%zu) of a session returned NULL", t->id, n);
    bench_stamp(p, n, bench_tag(t->session_base, s));
    unsigned char **ring = &t->sessions[s % live];
    if (s >= live)
        bench_check_free(t->id, *ring, n, bench_tag(t->session_base, s - live), 0, &t->schk);
    *ring = p;
}

static void *worker(void *arg)
{
    struct thread *t = arg;
    struct thread *to = t->next;
    const size_t n = cfg.burst, size = cfg.size;
    const uint64_t bursts = nbursts;
    uint64_t k = 0; /* blocks allocated */
    pthread_barrier_wait(&start_bar);
    t->span.start = now_s();
    for (uint64_t b = 0; b < bursts; b++) {
        unsigned char **burst = t->array[b % ARRAYS];
        for (size_t j = 0; j < n; j++, k++) {
            unsigned char *p = malloc(size);
            if (p == NULL)
                BENCH_FAIL("thread %d: malloc(%zu) returned NULL", t->id, size);
            bench_mark(p, size, bench_tag(t->tag_base, k), k % FULL_EVERY == 0);
            burst[j] = p;
            session(t, k);
        }
        /* Into the partner's mailbox: while it is full, free what comes in. */
        unsigned spins = 0;
        while (b - __atomic_load_n(&to->tail, __ATOMIC_ACQUIRE) >= SLOTS)
            if (free_one_burst(t))
                spins = 0;
            else
                wait_a_little(&spins);
        to->slot[b & (SLOTS - 1)] = burst;
        __atomic_store_n(&to->head, b + 1, __ATOMIC_RELEASE);
        free_one_burst(t);
    }
    /* The bursts still coming, as many as this thread handed on. */
    for (unsigned spins = 0; t->received < bursts;)
        if (free_one_burst(t))
            spins = 0;
        else
            wait_a_little(&spins);
    for (uint64_t s = k > cfg.live ? k - cfg.live : 0; s < k; s++)
        bench_check_free(t->id, t->sessions[s % cfg.live], cfg.session, bench_tag(t->session_base, s), 0,
                         &t->schk);
    t->span.end = now_s();
    return NULL;
}

int main(int argc, char **argv)
{
    bench_options("bursts", argc, argv, opts, usage, usage);
    cfg = opt;
    if (optind != argc || cfg.threads < 1 || cfg.threads > 512 || cfg.burst < 1 || cfg.burst > (1u << 24) ||
        cfg.blocks < cfg.burst || cfg.size < 16 || cfg.size > (1u << 30) || cfg.session < 16 ||
        cfg.session > (1u << 30) || cfg.live < 1 || cfg.live > (1u << 20))
        bench_usage_error(usage);
    nbursts = cfg.blocks / cfg.burst;
    const uint64_t blocks = nbursts * cfg.burst;
    const char *allocator = bench_detect_allocator();
    const size_t ts_bytes = (size_t)cfg.threads * sizeof(struct thread);
    const size_t array_bytes = cfg.burst * sizeof(unsigned char *);
    struct thread *ts = bench_map(ts_bytes, 1);
    for (int i = 0; i < cfg.threads; i++) {
        struct thread *t = &ts[i];
        t->id = i;
        t->next = &ts[(i + 1) % cfg.threads];
        t->prev = &ts[(i + cfg.threads - 1) % cfg.threads];
        for (int a = 0; a < ARRAYS; a++)
            t->array[a] = bench_map(array_bytes, 1);
        t->order = bench_map(cfg.burst * sizeof *t->order, 1);
        for (size_t j = 0; j < cfg.burst; j++)
            t->order[j] = (uint32_t)j;
        t->sessions = bench_map(cfg.live * sizeof *t->sessions, 1);
        t->rng = mix64(0xb0b5 + (uint64_t)i);
        t->tag_base = mix64(0x5eed0000 + ((uint64_t)i << 24));
        t->session_base = mix64(t->tag_base ^ 0x5e55);
    }
    bench_barrier_init(&start_bar, (unsigned)cfg.threads);
    BENCH_START(ts, cfg.threads, th, worker, 0);
    BENCH_JOIN(ts, cfg.threads, th);
    pthread_barrier_destroy(&start_bar);
    struct bench_span all = BENCH_SPAN(ts, cfg.threads, span);
    struct bench_checked chk = {0}, schk = {0}; /* the bursts' blocks; the sessions */
    uint64_t received = 0;
    for (int i = 0; i < cfg.threads; i++) {
        bench_checked_add(&chk, &ts[i].chk);
        bench_checked_add(&schk, &ts[i].schk);
        received += ts[i].received;
    }
    double elapsed = all.end - all.start;
    char extra[96];
    snprintf(extra, sizeof extra, ", \"sessions\": %" PRIu64 ", \"bursts\": %" PRIu64, schk.blocks, received);
    printf("{\"bench\": \"bursts\", \"threads\": %d, \"burst\": %zu, \"blocks\": %" PRIu64 ", \"size\": %zu, "
           "\"session\": %zu, \"live\": %zu, \"elapsed_s\": %.6f, \"ns_per_block\": %.2f, "
           "\"allocator\": \"%s\", " BENCH_CHECKED_FMT "}\n",
           cfg.threads, cfg.burst, blocks, cfg.size, cfg.session, cfg.live, elapsed,
           elapsed * 1e9 / (double)blocks, allocator, BENCH_CHECKED_ARGS(chk, extra));
    for (int i = 0; i < cfg.threads; i++) {
        for (int a = 0; a < ARRAYS; a++)
            bench_unmap(ts[i].array[a], array_bytes);
        bench_unmap(ts[i].order, cfg.burst * sizeof *ts[i].order);
        bench_unmap(ts[i].sessions, cfg.live * sizeof *ts[i].sessions);
    }
    bench_unmap(ts, ts_bytes);
    return 0;
}
