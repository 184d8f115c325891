/*
 * xferbag: remote frees in batches, through a shared bag, as the Lever and
 * Boreham xmalloc test passes them.  --producers P producer threads and as
 * many consumer threads share one bag.  Each producer allocates --objects N
 * objects in batches of --batch B: a batch record (malloc'd: a count, the
 * producer's number, the index of its first object and an array of B
 * pointers) is filled with B new objects and pushed onto the bag, a LIFO
 * stack of at most --bag L batches under one mutex; a producer that finds
 * the bag full waits on a condition variable.  A consumer pops a batch
 * (waiting while the bag is empty and producers remain), checks and frees
 * its objects in order, then frees the record.  So every object and most
 * records are freed by another thread than the one that allocated them, in
 * runs of B frees, and any consumer may get any producer's batch.
 *
 * Sizes: --size 0 (the default) draws each object's size from the list 8,
 * 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048
 * (a hash of the producer's seed and the object's index picks it); another
 * --size makes every object that many bytes.
 *
 * Validation: object k of producer p carries the tag bench_tag(base of p, k)
 * in its first 8 bytes and the tag's complement at its end (blocks of 9 to
 * 15 bytes: in their last byte; blocks of 8 bytes hold the tag alone); every
 * 16th object of a producer is filled and checked in every byte.  The
 * consumer knows p and k from the batch record, so it derives the size, tag
 * and fill of every object it frees.  Any mismatch exits 3.  "checked" in
 * the output: blocks = P x N objects checked before their free, full and
 * bytes, batches = the records consumed (P x ceil(N / B)).
 *
 * Output: ops_per_s = objects freed per second, all consumers together;
 * elapsed_s from the first producer's start to the last consumer's end;
 * objects = P x N; max_in_bag = the most batches the bag ever held.
 */
#include "bench_common.h"

#include <inttypes.h>

static const char usage[] =
    "usage: xferbag [--producers P] [--objects N] [--batch B] [--bag L] [--size S]\n"
    "  --producers  producer threads, and as many consumer threads (default 1)\n"
    "  --objects    objects per producer (default 2M)\n"
    "  --batch      objects per batch (default 4096)\n"
    "  --bag        most batches waiting in the bag (default 100)\n"
    "  --size       object size in bytes, 8 or more; 0: mixed, 8..2048 B drawn per object\n"
    "               (default 0)\n";

static const uint32_t mixed_sizes[] = {8, 12, 16, 24, 32, 48, 64, 96, 128,
                                       192, 256, 384, 512, 768, 1024, 1536, 2048};
#define NMIXED (sizeof mixed_sizes / sizeof mixed_sizes[0])
#define FULL_EVERY 16

/* A batch: malloc'd by its producer, freed by the consumer that pops it. */
struct batch {
    uint32_t count;    /* objects in obj[] (B, fewer in a producer's last batch) */
    uint32_t producer; /* whose objects: they derive their sizes and tags from it */
    uint64_t first;    /* the producer's index of obj[0] */
    unsigned char *obj[];
};

struct thread {
    int id;
    pthread_t th;
    uint64_t tag_base;          /* producers: bench_tag's base of their objects */
    uint64_t batches;           /* consumers: records consumed */
    struct bench_checked chk;   /* consumers: what they checked */
    struct bench_span span;
} __attribute__((aligned(128)));

/* The bag: a LIFO stack of batch records (mmap'd: L slots). */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t not_full, not_empty;
    struct batch **slot;
    size_t depth, max_depth;
    int producers_left;
} bag = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0, 0};

/* opt: the command line, over the defaults; cfg: its copy that the
 * measured code reads (see bench_options). */
static struct {
    int producers;
    uint64_t objects;
    size_t batch, bag, size;
} opt = {.producers = 1, .objects = 2000000, .batch = 4096, .bag = 100, .size = 0}, cfg;

static const struct bench_opt opts[] = {INT_OPT("producers", &opt.producers), COUNT_OPT("objects", &opt.objects),
                                        SIZE_OPT("batch", &opt.batch), SIZE_OPT("bag", &opt.bag),
                                        SIZE_OPT("size", &opt.size), OPT_END};

static struct thread *prods, *conss;
static pthread_barrier_t start_bar;

/* Size of a producer's object k: --size, or one of the list picked by a
 * hash of its tag (the consumer computes the same). */
static inline size_t object_size(uint64_t tag)
{
    return cfg.size != 0 ? cfg.size : mixed_sizes[mix64(tag) % NMIXED];
}

/* bench_mark needs 9 bytes for its two stamps: an 8-byte object holds the
 * tag alone, and is "full" once that is checked. */
static inline void put_object(unsigned char *p, size_t n, uint64_t tag, int full)
{
    if (n >= 9)
        bench_mark(p, n, tag, full);
    else
        memcpy(p, &tag, 8);
}

static inline long object_bad(const unsigned char *p, size_t n, uint64_t tag, int full,
                              struct bench_checked *c)
{
    if (n >= 9)
        return bench_check(p, n, tag, full, c);
    uint64_t h;
    memcpy(&h, p, 8);
    if (h != tag)
        return 0;
    c->blocks++;
    if (full)
        bench_checked_full(c, n);
    return -1;
}

static void bag_push(struct batch *b)
{
    pthread_mutex_lock(&bag.lock);
    while (bag.depth == cfg.bag)
        pthread_cond_wait(&bag.not_full, &bag.lock);
    bag.slot[bag.depth++] = b;
    if (bag.depth > bag.max_depth)
        bag.max_depth = bag.depth;
    pthread_cond_signal(&bag.not_empty);
    pthread_mutex_unlock(&bag.lock);
}

/* The batch on top of the bag, or NULL once it is empty and no producer
 * is left. */
static struct batch *bag_pop(void)
{
    pthread_mutex_lock(&bag.lock);
    while (bag.depth == 0 && bag.producers_left > 0)
        pthread_cond_wait(&bag.not_empty, &bag.lock);
    struct batch *b = NULL;
    if (bag.depth > 0) {
        b = bag.slot[--bag.depth];
        pthread_cond_signal(&bag.not_full);
    }
    pthread_mutex_unlock(&bag.lock);
    return b;
}

static void *producer(void *arg)
{
    struct thread *t = arg;
    const uint64_t n_objects = cfg.objects;
    const size_t per_batch = cfg.batch;
    const size_t rec_bytes = sizeof(struct batch) + per_batch * sizeof(unsigned char *);
    pthread_barrier_wait(&start_bar);
    t->span.start = now_s(); /* not the main thread's clock: it may run late */
    for (uint64_t k = 0; k < n_objects;) {
        struct batch *b = malloc(rec_bytes);
        if (b == NULL)
            BENCH_FAIL("producer %d: malloc(%zu) of a batch returned NULL", t->id, rec_bytes);
        uint32_t count = (uint32_t)(n_objects - k < per_batch ? n_objects - k : per_batch);
        *b = (struct batch){.count = count, .producer = (uint32_t)t->id, .first = k};
        for (uint32_t j = 0; j < count; j++, k++) {
            uint64_t tag = bench_tag(t->tag_base, k);
            size_t n = object_size(tag);
            unsigned char *p = malloc(n);
            if (p == NULL)
                BENCH_FAIL("producer %d: malloc(%zu) returned NULL", t->id, n);
            put_object(p, n, tag, k % FULL_EVERY == 0);
            b->obj[j] = p;
        }
        bag_push(b);
    }
    t->span.end = now_s();
    pthread_mutex_lock(&bag.lock);
    if (--bag.producers_left == 0) /* the consumers waiting on an empty bag may stop */
        pthread_cond_broadcast(&bag.not_empty);
    pthread_mutex_unlock(&bag.lock);
    return NULL;
}

static void *consumer(void *arg)
{
    struct thread *t = arg;
    struct bench_checked chk = {0}; /* a local, kept in registers; into *t at the end */
    uint64_t batches = 0;
    pthread_barrier_wait(&start_bar);
    t->span.start = now_s();
    for (struct batch *b; (b = bag_pop()) != NULL; batches++) {
        if (b->producer >= (uint32_t)cfg.producers || b->count == 0 || b->count > cfg.batch)
            BENCH_FAIL("consumer %d: batch record %p was overwritten (producer %u, count %u)", t->id,
                       (void *)b, b->producer, b->count);
        const uint64_t base = prods[b->producer].tag_base;
        for (uint32_t j = 0; j < b->count; j++) {
            uint64_t k = b->first + j;
            uint64_t tag = bench_tag(base, k);
            size_t n = object_size(tag);
            unsigned char *p = b->obj[j];
            long bad = object_bad(p, n, tag, k % FULL_EVERY == 0, &chk);
            if (bad >= 0)
                BENCH_FAIL("consumer %d: object %" PRIu64 " of producer %u (%p, %zu bytes) is corrupt "
                           "at byte %ld", t->id, k, b->producer, (void *)p, n, bad);
            free(p);
        }
        free(b);
    }
    t->span.end = now_s();
    t->chk = chk;
    t->batches = batches;
    return NULL;
}

int main(int argc, char **argv)
{
    bench_options("xferbag", argc, argv, opts, usage, usage);
    cfg = opt;
    if (optind != argc || cfg.producers < 1 || cfg.producers > 512 || cfg.objects < 1 ||
        cfg.batch < 1 || cfg.batch > (1u << 24) || cfg.bag < 1 || cfg.bag > (1u << 20) ||
        (cfg.size != 0 && cfg.size < 8) || cfg.size > (1u << 30))
        bench_usage_error(usage);
    const char *allocator = bench_detect_allocator();
    const size_t recs_bytes = (size_t)cfg.producers * sizeof(struct thread);
    prods = bench_map(recs_bytes, 1);
    conss = bench_map(recs_bytes, 1);
    bag.slot = bench_map(cfg.bag * sizeof *bag.slot, 1);
    bag.producers_left = cfg.producers;
    for (int i = 0; i < cfg.producers; i++) {
        prods[i].id = conss[i].id = i;
        prods[i].tag_base = mix64(0x7ba9 + ((uint64_t)i << 20));
    }
    bench_barrier_init(&start_bar, (unsigned)(2 * cfg.producers + 1));
    /* All of them wait at the start barrier: the order of the starts does not matter. */
    BENCH_START(conss, cfg.producers, th, consumer, 0);
    BENCH_START(prods, cfg.producers, th, producer, 0);
    pthread_barrier_wait(&start_bar);
    BENCH_JOIN(prods, cfg.producers, th);
    BENCH_JOIN(conss, cfg.producers, th);
    pthread_barrier_destroy(&start_bar);
    struct bench_span first = BENCH_SPAN(prods, cfg.producers, span);
    struct bench_span last = BENCH_SPAN(conss, cfg.producers, span);
    double elapsed = last.end - first.start;
    uint64_t total = cfg.objects * (uint64_t)cfg.producers, batches = 0;
    for (int i = 0; i < cfg.producers; i++)
        batches += conss[i].batches;
    struct bench_checked chk = BENCH_CHECKED_SUM(conss, cfg.producers, chk);
    char extra[48];
    snprintf(extra, sizeof extra, ", \"batches\": %" PRIu64, batches);
    printf("{\"bench\": \"xferbag\", \"producers\": %d, \"objects_per_producer\": %" PRIu64 ", "
           "\"batch\": %zu, \"bag\": %zu, \"size\": %zu, \"objects\": %" PRIu64 ", \"max_in_bag\": %zu, "
           "\"elapsed_s\": %.6f, \"ops_per_s\": %.1f, \"allocator\": \"%s\", " BENCH_CHECKED_FMT "}\n",
           cfg.producers, cfg.objects, cfg.batch, cfg.bag, cfg.size, total, bag.max_depth, elapsed,
           (double)total / elapsed, allocator, BENCH_CHECKED_ARGS(chk, extra));
    bench_unmap(bag.slot, cfg.bag * sizeof *bag.slot);
    bench_unmap(conss, recs_bytes);
    bench_unmap(prods, recs_bytes);
    return 0;
}
