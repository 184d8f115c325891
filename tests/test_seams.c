/* Races forced through the test seams (00-base/seam.h): the other thread's
 * move is made at the worst moment, every run, instead of once in many.
 *
 *   span        a thread's span has nothing free, and another thread
 *               frees one of its blocks just before the span is marked
 *               detached: the mark fails, the thread keeps the span and
 *               hands the block freed out again; nothing is stranded
 *               (every byte of the spans comes back once all is freed);
 *   pool-early  a pool block's objects are all out, and another thread
 *               puts one back just before the owner marks the block
 *               detached: the owner's last look finds the put, takes the
 *               block back, and the object is the next one it gets;
 *   pool-late   the same put's bit set just after that look (the put
 *               read the owner before the detach): the block stays
 *               detached with the put in it until a sweep (the next
 *               growth) hands it to a global pool, and the object is got
 *               again before any new block.
 * Linked with the static archive: the seams and the records are hidden in
 * the shared library. */
#include "check.h"
#include "util.h"

#include <fastalloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "00-base/seam.h"
#include "02-records/sizeclass.h"
#include "02-records/span.h"
#include "13-pool/pool.h"

/* ---- span */

#define SPAN_SIZE 1024
static void **blocks;
static size_t nblocks;
static unsigned span_hits;   /* seams met with a block of ours to free */
#define SEAM_MAX 64
static void *freed_at_seam[SEAM_MAX]; /* the blocks freed there */
static unsigned again;               /* of them, handed out again */

static void *free_it(void *p)
{
    fa_free(p);
    return NULL;
}

static void span_hook(enum fa__seam where, void *what)
{
    if (where != FA_SEAM_SPAN_DETACH || span_hits == SEAM_MAX)
        return;
    const struct fa__span *s = what;
    uintptr_t end = s->start + (uintptr_t)s->npages * 8192;
    for (size_t i = 0; i < nblocks; i++) {
        if (blocks[i] != NULL && (uintptr_t)blocks[i] >= s->start && (uintptr_t)blocks[i] < end) {
            pthread_t t;
            CHECK(pthread_create(&t, NULL, free_it, blocks[i]) == 0);
            CHECK(pthread_join(t, NULL) == 0);
            if (span_hits < SEAM_MAX)
                freed_at_seam[span_hits++] = blocks[i];
            blocks[i] = NULL;
            return;
        }
    }
}

static void *fill_spans(void *arg)
{
    (void)arg;
    for (size_t i = 0; i < nblocks; i++) {
        blocks[i] = fa_malloc(SPAN_SIZE);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], (int)i, SPAN_SIZE);
        for (unsigned k = 0; k < span_hits; k++)
            if (blocks[i] == freed_at_seam[k]) {
                freed_at_seam[k] = NULL;
                again++;
            }
    }
    return NULL;
}

static int case_span(void)
{
    fa_free(fa_malloc(1)); /* the class table is made at start-up */
    unsigned cls = fa__size_to_class(SPAN_SIZE);
    /* Spans enough that full ones are detached, not kept (slow.c). */
    nblocks = (size_t)fa__classes[cls].objs * 1000;
    blocks = fa_calloc(nblocks, sizeof *blocks);
    CHECK(blocks != NULL);
    fa_trim();
    fa_stats_t before;
    fa_stats_get(&before);
    __atomic_store_n(&fa__seam_hook, span_hook, __ATOMIC_RELEASE);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fill_spans, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    __atomic_store_n(&fa__seam_hook, NULL, __ATOMIC_RELEASE);
    printf("span: %u full spans met a free just before their detach; %u of the blocks freed came again\n",
           span_hits, again);
    CHECKF(span_hits >= 3, "only %u full spans met the seam", span_hits);
    /* The last span's block may come after the loop's end. */
    CHECKF(again + 1 >= span_hits, "only %u of the %u blocks freed at the seam were handed out again", again,
           span_hits);
    for (size_t i = 0; i < nblocks; i++)
        if (blocks[i] != NULL) {
            CHECKF(all_bytes(blocks[i], SPAN_SIZE, (unsigned char)i), "block %zu", i);
            fa_free(blocks[i]);
        }
    fa_free(blocks);
    /* Stranded, a span would hold its pages in small spans for ever. */
    fa_trim();
    fa_stats_t after;
    fa_stats_get(&after);
    /* A class may hold a span more for each block that is live now and was
     * not before: the C library's own (stdout's buffer, a thread's), and
     * nothing else. */
    size_t stranded = 0;
    for (unsigned i = 0; i < after.nclasses; i++) {
        const struct fa_class_stats *a = &after.classes[i], *b = &before.classes[i];
        size_t more = a->spans > b->spans ? a->spans - b->spans : 0;
        size_t live = a->in_use_blocks > b->in_use_blocks ? a->in_use_blocks - b->in_use_blocks : 0;
        if (more > live)
            stranded += (more - live) * fa__classes[i + 1].pages * 8192;
    }
    printf("span: %zu KiB in spans before, %zu after all was freed; %zu KiB in spans with no live block\n",
           before.in_spans / 1024, after.in_spans / 1024, stranded / 1024);
    CHECKF(stranded == 0, "%zu KiB more in small spans that hold no live block after every block was freed",
           stranded / 1024);
    return check_done("test_seams span");
}

/* ---- pool */

static fa_pool *pool;
static struct block *seam_block; /* the block the seam met */
static void *put_back;           /* its object the other thread put */
static enum fa__seam pool_when;
static void **pool_objs;
static size_t npool;

static void *put_and_exit(void *o)
{
    fa_pool_put(pool, o); /* into this thread's pool, which its exit gives back */
    return NULL;
}

/* The late put's own move: its bit, in a block whose owner it read
 * before the detach (get_put.c's remote put). */
static void put_bit(struct block *b, void *o)
{
    size_t s = slot_index(pool, b, (uintptr_t)o);
    remote_put_word(pool, b, s / 64, (uint64_t)1 << (s % 64));
}

static void pool_hook(enum fa__seam where, void *what)
{
    if (where != pool_when || seam_block != NULL)
        return;
    struct block *b = what;
    for (size_t i = 0; i < npool; i++) {
        if (pool_objs[i] != NULL && block_of(pool, pool_objs[i]) == b) {
            seam_block = b;
            put_back = pool_objs[i];
            pool_objs[i] = NULL;
            if (where == FA_SEAM_POOL_DETACHED) {
                put_bit(b, put_back);
                return;
            }
            pthread_t t;
            CHECK(pthread_create(&t, NULL, put_and_exit, put_back) == 0);
            CHECK(pthread_join(t, NULL) == 0);
            return;
        }
    }
}

static int pool_case(enum fa__seam when, const char *name)
{
    fa_pool_options o = {.object_size = 64, .name = name};
    pool = fa_pool_create(&o);
    CHECK(pool != NULL);
    npool = 100000;
    pool_objs = fa_calloc(npool, sizeof *pool_objs);
    CHECK(pool_objs != NULL);
    pool_when = when;
    seam_block = NULL;
    __atomic_store_n(&fa__seam_hook, pool_hook, __ATOMIC_RELEASE);
    size_t n = 0;
    while (seam_block == NULL && n < npool)
        pool_objs[n++] = fa_pool_get(pool);
    __atomic_store_n(&fa__seam_hook, NULL, __ATOMIC_RELEASE);
    CHECKF(seam_block != NULL, "%zu gets met no seam", n);
    struct lpool *me = fa__pool_my_lp(pool);
    struct lpool *owner = __atomic_load_n(&seam_block->owner, __ATOMIC_RELAXED);
    fa_pool_stats_t st;
    fa_pool_stats(pool, &st);
    size_t bytes = st.bytes_os;
    if (when == FA_SEAM_POOL_DETACH) {
        /* Taken back at once. */
        CHECKF(owner == me, "the block's owner is %p, not this thread's pool %p", (void *)owner, (void *)me);
    } else {
        CHECKF(owner == DETACHED(me), "the block's owner is %p, not detached from %p", (void *)owner,
               (void *)me);
    }
    /* The object put back is got again before the pool maps more. */
    bool again = false;
    for (size_t k = 0; k < 4096 && n < npool && !again; k++) {
        pool_objs[n] = fa_pool_get(pool);
        again = pool_objs[n++] == put_back;
        fa_pool_stats(pool, &st);
        CHECKF(st.bytes_os == bytes || again, "the pool grew from %zu to %zu bytes before the object put back "
               "came again", bytes, st.bytes_os);
    }
    CHECKF(again, "the object put back at the seam was not got again");
    printf("%s: the object put back at the seam came again, the pool at %zu bytes\n", name, bytes);
    for (size_t i = 0; i < n; i++)
        if (pool_objs[i] != NULL)
            fa_pool_put(pool, pool_objs[i]);
    fa_pool_stats(pool, &st);
    /* The late put is its bit alone, which no thread's count saw. */
    size_t uncounted = when == FA_SEAM_POOL_DETACHED;
    CHECKF(st.live == uncounted, "%zu objects still out after all were put", st.live - uncounted);
    fa_free(pool_objs);
    fa_pool_destroy(pool);
    return check_done(name);
}

static int case_pool_early(void)
{
    return pool_case(FA_SEAM_POOL_DETACH, "test_seams pool-early");
}

static int case_pool_late(void)
{
    return pool_case(FA_SEAM_POOL_DETACHED, "test_seams pool-late");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    static const struct check_case cases[] = {
        {"span", case_span}, {"pool-early", case_pool_early}, {"pool-late", case_pool_late}};
    return check_run_case("test_seams", cases, sizeof cases / sizeof cases[0], argc, argv);
}
