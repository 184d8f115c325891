/* Thread caches: the slow paths behind the inlined fast paths, the spans a
 * thread owns and the protocol by which spans change hands, and the life
 * cycle of a cache (created on a thread's first allocation, its spans given
 * up when the thread exits, recycled).
 *
 * A small span is, at any time, in one of three states:
 *  - owned by one thread: the page map names its cache as the owner of the
 *    span's pages; it is on that cache's list of its class; its freelist and
 *    used are that thread's alone;
 *  - listed by the central cache: no owner; freelist and used belong to
 *    whoever holds the class lock;
 *  - detached: no owner, on no list, every block live or on xfree; its
 *    xfree has the FA_XFREE_DETACHED bit.
 * Any thread may push a block on any span's xfree, with one
 * compare-and-swap.  A thread whose free finds the detached bit takes the
 * span instead, clearing the word with that compare-and-swap: the span
 * becomes its own, and the block goes on its freelist.  An owner gives a
 * span up by clearing the page map first and then, for a full span, setting
 * the detached bit on an empty xfree; if a block arrived in between, the
 * owner keeps the span.  Blocks on xfree stay counted in used until the
 * owner collects them.  These are the only ways a span changes hands; a span
 * whose blocks are all free is never on xfree's side of that race, since
 * used counts xfree. */
#include "08-tcache/tcache.h"
#include "00-base/lock.h"
#include "00-base/diag.h"
#include "00-base/options.h"
#include "05-central/central.h"
#include "06-large/large.h"
#include "02-records/meta.h"
#include "04-pageheap/pageheap.h"
#include "02-records/pagemap.h"
#include "07-decay/decay.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

/* Shared stand-ins: never hold a block.  `empty` is what a new thread sees;
 * `dead` is what a thread sees once its cache has been flushed at exit, so that
 * destructors running after ours still work, straight on the central cache. */
#define STANDIN(k) { .heads = {0}, .kind = (k) }
static struct fa__tcache tc_empty = STANDIN(FA_TC_EMPTY);
static struct fa__tcache tc_dead = STANDIN(FA_TC_DEAD);

__thread struct fa__tcache *fa__tls_cache __attribute__((tls_model("initial-exec"))) = &tc_empty;

static fa__lock_t registry_lock = FA_LOCK_INIT;
static struct fa__tcache registry = {.next = &registry, .prev = &registry};
static struct fa__tcache *spare_caches;
/* Caches of threads that exited while others were being created: they keep
 * their spans (and their current spans' heads) for the next new thread,
 * which takes the most recent one whole.  A thread that replaces another
 * then finds its predecessor's spans, warm, with no span changing hands; the
 * next scavenge epoch, an exit that nothing replaces and fa_trim() give the
 * spans of the ones left up (flush_dormant). */
static struct fa__tcache *dormant_caches;
static pthread_key_t exit_key;
static size_t claimed;        /* sum of live caches' max_bytes */
/* Claims on the global bound move in steps of this many bytes, so that a
 * span that empties and fills again (a loop that frees its last block and
 * allocates again) does not touch the shared counter each time. */
#define CLAIM_STEP ((size_t)64 << 10)
/* A span's blocks are cut 4 KiB at a time (mimalloc extends its free lists
 * by the same amount), or CARVE_MIN blocks if that is more (fewer if the
 * span has fewer).  A loop that allocates and frees a few blocks cycles
 * through what was cut, taking the freelist back once per cycle
 * (fa__tc_refill): 32 blocks make that a fraction of an instruction per
 * allocation (16 made 1k-reuse cost 36.8 instructions a pair instead of
 * 35.2).  Cutting a page (8 KiB) at a time made objpool-shuffle's
 * allocations slower: 23.7-27.8 ms against 22.1-22.5 for 40 rounds of 100k
 * blocks of 64 B (mimalloc 18.4); cutting 2 KiB saved no more, and cost
 * 64-reuse 0.3 instructions a pair. */
#define CARVE_BYTES 4096u
/* Full spans a thread keeps of one class before it detaches those found
 * full twice (the allocation slow path walks them all). */
#define KEEP_FULL 8u
/* Blocks gathered at most from short freelists (the allocation slow path). */
#define GATHER 32u
#define CARVE_MIN FA_TC_REFILL_MIN
static unsigned live_caches;
/* Threads' exits since a cache was last created.  A thread that exits
 * while new ones keep coming is being replaced; a run of exits with no new
 * thread is a program winding its threads down. */
static unsigned exits_since_birth;
/* An exit is taken as replaced while at most this many exits came since the
 * last new cache: a thread's successor may make its first allocation after
 * the exits of other chains' threads (thread-churn: two chains). */
#define EXITS_REPLACED 2

static void thread_exit(void *arg);
static bool claim(struct fa__tcache *tc, size_t bytes);
static void shed_kept(struct fa__tcache *tc, size_t limit);
static size_t share(void);
static void out_flush_all(struct fa__tcache *tc);
static void flush_dormant(bool old_only);

void fa__tc_init(void)
{
    pthread_key_create(&exit_key, thread_exit);
}

static struct fa__tcache *cache_new(void)
{
    fa__lock(&registry_lock);
    struct fa__tcache *tc = dormant_caches;
    bool warm = tc != NULL;
    if (warm) {
        /* Peeked at without the lock (flush_dormant): stored atomically. */
        __atomic_store_n(&dormant_caches, tc->next, __ATOMIC_RELAXED);
    } else if ((tc = spare_caches) != NULL) {
        spare_caches = tc->next;
    }
    fa__unlock(&registry_lock);
    if (tc == NULL) {
        tc = fa__meta_alloc(sizeof *tc);
        if (tc == NULL)
            return NULL;
    }
    if (!warm)
        __builtin_memset(tc, 0, sizeof *tc);
    tc->kind = FA_TC_REAL;
    tc->epoch = __atomic_load_n(&fa__scavenge_epoch, __ATOMIC_RELAXED);
    __atomic_add_fetch(&live_caches, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&exits_since_birth, 0, __ATOMIC_RELAXED);
    fa__lock(&registry_lock);
    tc->next = registry.next;
    tc->prev = &registry;
    registry.next->prev = tc;
    registry.next = tc;
    fa__unlock(&registry_lock);
    if (warm && tc->kept_bytes > 0) {
        /* Its predecessor's all-free spans: kept if the bound allows. */
        size_t want = (tc->kept_bytes + CLAIM_STEP - 1) & ~(CLAIM_STEP - 1);
        if (want > share() || !claim(tc, want))
            shed_kept(tc, 0);
    }
    return tc;
}

/* While a diagnostic mode is on (00-base/diag.h), a thread's cache is hidden
 * here and fa__tls_cache is the empty stand-in: the fast paths miss on
 * every call, and the slow paths, which the mode sees, work on this cache
 * as the fast paths would have (a pop from heads[], a push on an owned
 * span's freelist), with no lock. */
static __thread struct fa__tcache *tls_hidden __attribute__((tls_model("initial-exec")));

/* The calling thread's real cache, hidden or not; NULL when it has none. */
static struct fa__tcache *current(void)
{
    struct fa__tcache *tc = fa__tls_cache;
    return tc->kind == FA_TC_REAL ? tc : tls_hidden;
}

/* The calling thread's real cache, created on first use; NULL when it cannot
 * have one (exiting, or no memory for the cache itself).  Hidden while a
 * diagnostic mode is on, shown again once it is off. */
static struct fa__tcache *my_cache(void)
{
    struct fa__tcache *tc = fa__tls_cache;
    if (FA_LIKELY(tc->kind == FA_TC_REAL))
        return tc;
    if (tc->kind == FA_TC_DEAD)
        return NULL;
    bool diag = fa__diag_on() != 0;
    if (tls_hidden != NULL) {
        tc = tls_hidden;
        if (!diag) { /* the mode went off: the fast paths again */
            tls_hidden = NULL;
            fa__tls_cache = tc;
        }
        return tc;
    }
    tc = cache_new();
    if (tc == NULL)
        return NULL;
    /* Published before pthread_setspecific: if it allocates, the nested
     * call finds the cache ready instead of recursing. */
    if (diag)
        tls_hidden = tc;
    else
        fa__tls_cache = tc;
    pthread_setspecific(exit_key, tc);
    return tc;
}


/* What one cache may hold: its own cap, and its share of the global bound
 * among the threads alive now. */
static size_t fair_share(void)
{
    unsigned n = __atomic_load_n(&live_caches, __ATOMIC_RELAXED);
    return fa__opt.thread_cache_max / (n ? n : 1);
}

static size_t share(void)
{
    size_t fair = fair_share();
    return fair < fa__opt.thread_cache_bytes ? fair : fa__opt.thread_cache_bytes;
}

/* What one cache may hold in large blocks: four times its own cap, and
 * what its spans leave of its fair share of the global bound, so that
 * spans and large blocks of all caches together stay within
 * thread_cache_max.  A large block that misses the cache takes the page
 * heap's one lock: threads that churn blocks of a few hundred KiB contended
 * on it at every allocation under a 2 MiB cap (micro-window256-mixedlarge,
 * 2 threads: 1.6 us a pair against 0.12 us with one thread).  Large blocks
 * make no claim on the global counter: an atomic add on one shared line at
 * every large free and allocation cost more than the page heap saved. */
static size_t large_share(const struct fa__tcache *tc)
{
    size_t fair = fair_share(), own = fa__opt.thread_cache_bytes * 4;
    if (own / 4 != fa__opt.thread_cache_bytes)
        own = SIZE_MAX;
    fair = fair > tc->max_bytes ? fair - tc->max_bytes : 0;
    return fair < own ? fair : own;
}

/* Claim bytes on the global bound; false if that would pass it. */
static bool claim(struct fa__tcache *tc, size_t bytes)
{
    if (__atomic_add_fetch(&claimed, bytes, __ATOMIC_RELAXED) > fa__opt.thread_cache_max) {
        __atomic_sub_fetch(&claimed, bytes, __ATOMIC_RELAXED);
        return false;
    }
    tc->max_bytes += bytes;
    return true;
}

static void unclaim(struct fa__tcache *tc, size_t bytes)
{
    tc->max_bytes -= bytes;
    __atomic_sub_fetch(&claimed, bytes, __ATOMIC_RELAXED);
}

/* ---- large blocks kept by the thread that freed them ---- */

/* Take cached large block i out of the cache, in use again. */
static struct fa__span *large_take(struct fa__tcache *tc, unsigned i)
{
    struct fa__span *s = tc->large[i];
    size_t bytes = (size_t)s->npages * FA_PAGE_SIZE;
    for (unsigned k = i + 1; k < tc->nlarge; k++)
        tc->large[k - 1] = tc->large[k];
    tc->nlarge--;
    __atomic_store_n(&tc->large_bytes, tc->large_bytes - bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&s->state, FA_SPAN_LARGE, __ATOMIC_RELAXED);
    return s;
}

/* Give cached large block i back to the page heap. */
static void large_drop(struct fa__tcache *tc, unsigned i)
{
    fa__large_release(large_take(tc, i));
}

static void large_drop_all(struct fa__tcache *tc)
{
    while (tc->nlarge > 0)
        large_drop(tc, 0);
}

void *fa__tc_large_alloc(size_t size)
{
    struct fa__tcache *tc = current();
    if (tc == NULL || tc->nlarge == 0)
        return NULL;
    size_t npages = (size + FA_PAGE_SIZE - 1) >> FA_PAGE_SHIFT;
    /* The newest block that fits with at most 1/8 to spare.  A block of
     * the hardened build keeps its guard page while cached: it is not
     * counted in. */
    for (unsigned i = tc->nlarge; i-- > 0;) {
        struct fa__span *s = tc->large[i];
        size_t have = s->npages - FA_SECURE;
        if (have < npages || have - npages > npages / 8)
            continue;
        tc->large_used = true;
        s = large_take(tc, i);
        FA_COUNT_ADD(tc->n.large_allocs, 1);
        FA_COUNT_ADD(tc->n.large_alloc_bytes, fa__large_size(s));
        FA_UNPOISON((void *)s->start, fa__large_size(s));
        return (void *)s->start;
    }
    return NULL;
}

static inline void housekeeping(struct fa__tcache *tc);

/* Free the large block at p: keep it if it is small enough and the cache's
 * share allows (older blocks make room first), else the page heap has it. */
static void large_free(struct fa__tcache *tc, void *p)
{
    struct fa__span *s = fa__large_span_of(p, "free");
    size_t bytes = (size_t)s->npages * FA_PAGE_SIZE;
    fa__tc_count_large(false, fa__large_size(s));
    /* A thread that allocates only large blocks has no cache until its
     * first such free: it gets one here (an exiting thread gets none).  In
     * the hardened build a cached block keeps its guard page, and the
     * guard is made ordinary when the block goes back (fa__large_release). */
    if (bytes > FA_TC_LARGE_MAX || fa__opt.thread_cache_bytes == 0 || (tc = my_cache()) == NULL) {
        fa__large_release(s);
        return;
    }
    housekeeping(tc); /* the only slow path a large-only thread takes */
    if (tc->nlarge == FA_TC_LARGE_SLOTS)
        large_drop(tc, 0);
    size_t cap = large_share(tc);
    while (tc->nlarge > 0 && tc->large_bytes + bytes > cap)
        large_drop(tc, 0);
    if (tc->large_bytes + bytes > cap) {
        fa__large_release(s);
        return;
    }
    /* Freed for everyone else: a second free or a realloc of p now stops
     * the program, as it does for a block the page heap has. */
    __atomic_store_n(&s->state, FA_SPAN_CACHED, __ATOMIC_RELAXED);
    FA_POISON((void *)s->start, bytes);
    tc->large[tc->nlarge++] = s;
    __atomic_store_n(&tc->large_bytes, tc->large_bytes + bytes, __ATOMIC_RELAXED);
}

/* ---- spans a thread owns ---- */

static size_t span_bytes(const struct fa__span *s)
{
    return (size_t)s->npages * FA_PAGE_SIZE;
}

static void own_link(struct fa__tcache *tc, struct fa__span *s)
{
    struct fa__span **list = &tc->spans[s->cls];
    s->prev = NULL;
    s->next = *list;
    if (*list != NULL)
        (*list)->prev = s;
    *list = s;
    s->listed = FA_LISTED_THREAD;
    tc->nspans[s->cls]++;
}

/* ---- statistics ---- */

/* Threads that exited, and allocations and frees made with no cache. */
static struct fa__tc_counts retired;

static void count_global(uint64_t *c, uint64_t n)
{
    __atomic_fetch_add(c, n, __ATOMIC_RELAXED);
}

/* Blocks on s's freelist, s being tc's. */
static uint32_t list_len(const struct fa__tcache *tc, const struct fa__span *s)
{
    return s->carved - s->used + (tc->cur[s->cls] == s);
}

/* s's freelist, len blocks, is taken or given up: the blocks that the
 * slow paths did not put there are the owner's own frees, which the free
 * fast path left uncounted. */
static void fold(struct fa__tcache *tc, struct fa__span *s, uint32_t len)
{
    FA_COUNT_ADD(tc->n.frees[s->cls], len - s->nonuser);
    s->nonuser = 0;
}

/* Count the thread's frees still on its spans' lists, and leave the lists
 * in place (counted from now on). */
static void fold_all(struct fa__tcache *tc)
{
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++) {
        for (struct fa__span *s = tc->spans[c]; s != NULL; s = s->next) {
            uint32_t len = list_len(tc, s);
            fold(tc, s, len);
            s->nonuser = (uint16_t)len;
        }
    }
}

static void own_unlink(struct fa__tcache *tc, struct fa__span *s)
{
    fold(tc, s, list_len(tc, s));
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        tc->spans[s->cls] = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    s->next = s->prev = NULL;
    s->listed = FA_LISTED_NONE;
    tc->nspans[s->cls]--;
}

/* Make s, which nobody owns and nobody else can take now, tc's. */
static void own(struct fa__tcache *tc, struct fa__span *s)
{
    own_link(tc, s);
    s->touched = tc->epoch;
    s->full_seen = 0;
    s->nonuser = (uint16_t)(s->carved - s->used); /* nobody's frees to count */
    fa__pm_set_owner(s->start, s->npages, tc);
}

static void unkeep(struct fa__tcache *tc, struct fa__span *s)
{
    s->kept = 0;
    __atomic_store_n(&tc->kept_bytes, tc->kept_bytes - span_bytes(s), __ATOMIC_RELAXED);
}

/* s, owned by tc, leaves it for the page heap: every block is free.  Its
 * heads[] cannot hold any: they would count in used. */
static void retire(struct fa__tcache *tc, struct fa__span *s)
{
    if (s->kept)
        unkeep(tc, s);
    own_unlink(tc, s);
    /* The page heap clears the page map's owner with the rest. */
    fa__central_retire(s);
}

/* Give up an owned span that still has blocks in use: a full one is
 * detached, any other goes to the central cache. */
static void disown(struct fa__tcache *tc, struct fa__span *s)
{
    if (s->kept)
        unkeep(tc, s);
    own_unlink(tc, s);
    fa__pm_set_owner(s->start, s->npages, NULL);
    if (s->used == 0 && __atomic_load_n(&s->xfree, __ATOMIC_RELAXED) == 0) {
        fa__central_retire(s);
        return;
    }
    if (s->freelist == NULL && s->carved == fa__classes[s->cls].objs && fa__span_detach(s))
        return;
    fa__central_put(s);
}

/* Retire kept spans until the cache keeps at most limit bytes. */
static void shed_kept(struct fa__tcache *tc, size_t limit)
{
    for (unsigned c = 1; c < FA_NUM_CLASSES && tc->kept_bytes > limit; c++) {
        for (struct fa__span *s = tc->spans[c], *next; s != NULL && tc->kept_bytes > limit; s = next) {
            next = s->next;
            if (s->kept)
                retire(tc, s);
        }
    }
}

/* Every block of s, which tc owns, is free: keep it if the cache's share
 * allows, else it goes to the page heap. */
static void keep(struct fa__tcache *tc, struct fa__span *s)
{
    size_t bytes = span_bytes(s);
    if (tc->kept_bytes + bytes > tc->max_bytes) {
        size_t need = tc->kept_bytes + bytes - tc->max_bytes;
        need = (need + CLAIM_STEP - 1) & ~(CLAIM_STEP - 1);
        size_t sh = share();
        if (tc->max_bytes + need > sh)
            need = sh > tc->max_bytes ? sh - tc->max_bytes : 0;
        if (tc->kept_bytes + bytes > tc->max_bytes + need || !claim(tc, need)) {
            retire(tc, s);
            return;
        }
    }
    s->kept = 1;
    __atomic_store_n(&tc->kept_bytes, tc->kept_bytes + bytes, __ATOMIC_RELAXED);
    fold(tc, s, s->carved); /* every block is on the list */
    /* Every block is free, so the span starts over: its blocks are cut
     * again in address order, instead of handed out in the order they were
     * freed.  After a program frees in random order, its next allocations
     * then walk memory forwards, which the hardware prefetches
     * (objpool-shuffle, 1 thread: 6.4 against 11.2 ms allocating when every
     * span is kept). */
    if (FA_SECURE) {
        /* The hardened build keeps the list, in its random order: its
         * blocks are counted already, and a span kept so is taken back
         * whole or gathered, either way unkept first. */
        s->nonuser = (uint16_t)s->carved;
    } else {
        s->freelist = NULL;
        s->carved = 0;
    }
}

void fa__tc_span_empty(struct fa__span *s)
{
    keep(fa__tls_cache, s);
}

/* The current span of a class carries one extra count in used for as long
 * as it is current, so that a free never finds it all free: a loop that
 * frees its class's last block and allocates again would otherwise go
 * through fa__tc_span_empty and back at every turn of the span.  Whether
 * the current span is all free is asked when it stops being current. */
static void set_cur(struct fa__tcache *tc, unsigned cls, struct fa__span *s)
{
    tc->cur[cls] = s;
    s->used++;
    s->touched = tc->epoch;
    tc->snap[cls] = NULL;
}

/* heads[cls] is empty. */
static void clear_cur(struct fa__tcache *tc, unsigned cls)
{
    struct fa__span *s = tc->cur[cls];
    tc->cur[cls] = NULL;
    if (--s->used == 0)
        keep(tc, s);
}

#if FA_SECURE
/* The hardened build hands a fresh span's blocks out in a random order,
 * so that where the next block lies cannot be told from where the last one
 * did.  A thread's own xorshift stream, seeded from the list key. */
static __thread uint64_t carve_rng __attribute__((tls_model("initial-exec")));

static uint32_t carve_random(uint32_t bound)
{
    uint64_t x = carve_rng;
    if (x == 0)
        x = fa__fl_key[1] ^ (uintptr_t)&carve_rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    carve_rng = x;
    return (uint32_t)(((x >> 32) * bound) >> 32);
}
#endif

/* Cut up to n fresh blocks off s (at least one is left), followed by
 * tail; returns the first.  Each is marked free (02-records/freelist.h): a free
 * of a block that was never handed out is a double free. */
static void *carve(struct fa__span *s, const struct fa__class_info *ci, void *tail)
{
    uint32_t n = CARVE_BYTES / ci->size;
    if (n < CARVE_MIN)
        n = CARVE_MIN;
    if (n > ci->objs - s->carved)
        n = ci->objs - s->carved;
    uintptr_t first = s->start + (uintptr_t)s->carved * ci->size;
    s->carved += n;
    s->used += n;
#if FA_SECURE
    /* Zero, as a freed block is (scrubbed), then linked in a shuffled
     * order.  n is at most CARVE_BYTES / 16. */
    if (!s->zeroed)
        memset((void *)first, 0, (size_t)n * ci->size);
    uint16_t order[CARVE_BYTES / 16];
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = carve_random(i + 1);
        order[i] = order[j];
        order[j] = (uint16_t)i;
    }
    for (uint32_t i = 0; i < n; i++) {
        void *b = (void *)(first + (uintptr_t)order[i] * ci->size);
        fa__fl_mark(b, s);
        fa__fl_set_next(b, i + 1 < n ? (void *)(first + (uintptr_t)order[i + 1] * ci->size) : tail);
    }
    return (void *)(first + (uintptr_t)order[0] * ci->size);
#else
    /* Forwards, in the order the blocks are handed out. */
    uintptr_t last = first + (uintptr_t)(n - 1) * ci->size;
    for (uintptr_t b = first; b < last; b += ci->size) {
        fa__fl_mark((void *)b, s);
        fa__fl_set_next((void *)b, (void *)(b + ci->size));
    }
    fa__fl_mark((void *)last, s);
    fa__fl_set_next((void *)last, tail);
    return (void *)first;
#endif
}

/* Fill heads[cls] from s, which tc owns, and return its first block; NULL
 * when s has nothing free.  The freelist goes whole (its blocks leave used's
 * complement, so used becomes carved without reading the list), then the
 * remote frees (counted in used already), then fresh blocks. */
static void *take_free(struct fa__tcache *tc, struct fa__span *s, unsigned cls)
{
    const struct fa__class_info *ci = &fa__classes[cls];
    if (s->kept)
        unkeep(tc, s);
    void *head = s->freelist;
    if (head != NULL) {
        /* The span is current or about to be: used counts one more. */
        uint32_t bias = tc->cur[cls] == s;
        uint32_t n = s->carved - (s->used - bias);
        fold(tc, s, n);
        s->freelist = NULL;
        s->used = s->carved + bias;
        /* A short list from a span still being cut: cut more behind it, so
         * that a loop that frees and allocates a few blocks does not come
         * back here every few allocations. */
        if (n < CARVE_MIN && s->carved < ci->objs)
            head = carve(s, ci, head);
    } else if (__atomic_load_n(&s->xfree, __ATOMIC_RELAXED) != 0) {
        head = (void *)__atomic_exchange_n(&s->xfree, 0, __ATOMIC_ACQUIRE);
    } else if (s->carved < ci->objs) {
        head = carve(s, ci, NULL);
    } else {
        return NULL;
    }
    tc->heads[cls] = fa__fl_next(head);
    return head;
}

/* s, tc's current span of its class or another of its spans, has nothing
 * free: detach it, unless a remote free came meanwhile (false). */
static bool detach(struct fa__tcache *tc, struct fa__span *s)
{
    /* Off the list first: once detached, the span may be another thread's
     * at once, linked through the same fields. */
    own_unlink(tc, s);
    fa__pm_set_owner(s->start, s->npages, NULL);
    if (fa__span_detach(s))
        return true;
    own(tc, s);
    return false;
}

/* The current span's blocks still on heads[cls] go back to its freelist. */
static void return_heads(struct fa__tcache *tc, unsigned cls)
{
    /* Most often every block is the current span's; after a gather (the
     * allocation slow path) some are other spans' of the thread's. */
    void *b = tc->heads[cls];
    tc->heads[cls] = NULL;
    while (b != NULL) {
        void *next = fa__fl_next(b);
        struct fa__span *s = fa__pm_span((uintptr_t)b);
        fa__fl_push(&s->freelist, b);
        s->nonuser++; /* never handed out */
        if (--s->used == 0) /* not the current span: it has one more */
            keep(tc, s);
        b = next;
    }
}

/* Collect the remote frees of tc's spans other than the current ones, keep
 * or retire the spans that are then all free, retire kept spans that no
 * allocation took since the last scavenge, and give back claims the kept
 * spans no longer need. */
static FA_NOINLINE void scavenge(struct fa__tcache *tc)
{
    unsigned old = tc->epoch;
    out_flush_all(tc);
    flush_dormant(true);
    tc->epoch = __atomic_load_n(&fa__scavenge_epoch, __ATOMIC_RELAXED);
    /* Large blocks no allocation took since the last scavenge go, and so
     * do the oldest while the cache is over its share. */
    if (!tc->large_used)
        large_drop_all(tc);
    tc->large_used = false;
    while (tc->nlarge > 0 && tc->large_bytes > large_share(tc))
        large_drop(tc, 0);
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++) {
        /* A current span no allocation refilled from since the last
         * scavenge stops being current, so that it can go if it is idle. */
        struct fa__span *cur = tc->cur[c];
        if (cur != NULL && tc->heads[c] == tc->snap[c]) {
            return_heads(tc, c);
            clear_cur(tc, c);
        }
        for (struct fa__span *s = tc->spans[c], *next; s != NULL; s = next) {
            next = s->next;
            if (s == tc->cur[c])
                continue;
            if (fa__span_collect(s) > 0 && s->used == 0)
                keep(tc, s);
            else if (s->kept && s->touched != old && s->touched != tc->epoch)
                retire(tc, s);
        }
    }
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++)
        tc->snap[c] = tc->heads[c];
    size_t sh = share();
    if (tc->kept_bytes > sh)
        shed_kept(tc, sh);
    size_t spare = tc->max_bytes - tc->kept_bytes;
    if (tc->max_bytes > sh || spare >= 2 * CLAIM_STEP) {
        size_t want = (tc->kept_bytes + CLAIM_STEP - 1) & ~(CLAIM_STEP - 1);
        if (want > sh)
            want = tc->kept_bytes;
        if (want < tc->max_bytes)
            unclaim(tc, tc->max_bytes - want);
    }
}

/* Slow-path housekeeping: the timed decay work, and this cache's scavenge
 * when the epoch moved. */
static inline void housekeeping(struct fa__tcache *tc)
{
    fa__decay_maybe();
    if (FA_UNLIKELY(tc->epoch != __atomic_load_n(&fa__scavenge_epoch, __ATOMIC_RELAXED)))
        scavenge(tc);
}

static void *alloc_slow(struct fa__tcache *tc, unsigned cls);

void *fa__tc_alloc_slow(size_t size)
{
    unsigned cls = fa__size_to_class(size);
    struct fa__tcache *tc = my_cache();
    void *p;
    if (FA_UNLIKELY(tc == NULL)) {
        p = fa__central_alloc_one(cls);
        if (p == NULL) {
            errno = ENOMEM;
            return NULL;
        }
        count_global(&retired.allocs[cls], 1);
        count_global(&retired.slow[cls], 1);
        return p;
    }
    p = alloc_slow(tc, cls);
    if (p != NULL) {
        FA_COUNT_ADD(tc->n.allocs[cls], 1);
        FA_COUNT_ADD(tc->n.slow[cls], 1);
    }
    return p;
}

/* The slow path proper: heads[cls] is empty. */
static void *alloc_slow(struct fa__tcache *tc, unsigned cls)
{
    void *p;
    if (tc->heads[cls] != NULL) /* a nested call refilled it */
        return fa__fl_pop(&tc->heads[cls]);
    /* The current span first: most often this takes its freelist whole. */
    struct fa__span *s = tc->cur[cls], *full = NULL;
    if (s != NULL) {
        if ((p = take_free(tc, s, cls)) != NULL)
            return p;
        clear_cur(tc, cls);
        full = s;
        s->full_seen = 1;
    }
    housekeeping(tc);
    /* Another span of the thread's.  A full span stays the thread's while
     * it has at most KEEP_FULL spans of the class, and else until a walk
     * finds it full a second time; it is detached then.  A thread that
     * frees its own blocks in any order (a few in each of many classes)
     * keeps its spans, where detaching them had its next free take each
     * back, a compare-and-swap and a page-map write per turn; a thread
     * whose blocks another frees (a producer) finds them on its spans'
     * xfree a turn later.
     * Short freelists of spans cut to their end are gathered into heads
     * together, up to GATHER blocks: a thread that frees its own blocks in
     * random order, a few in each span (a malloc/free loop over 1,024
     * blocks of up to 32 KiB: spans of 8 blocks, all but one or two live),
     * would otherwise come here for every allocation. */
    void *g = NULL, *g_tail = NULL;
    struct fa__span *g_span = NULL;
    uint32_t g_n = 0;
    const uint32_t objs = fa__classes[cls].objs;
    for (s = tc->spans[cls]; s != NULL;) {
        struct fa__span *next = s->next;
        uint32_t n = s->carved - s->used;
        if (s->freelist != NULL && s->carved == objs && n < GATHER) {
            /* The list holds n blocks (used counts every other block of
             * a span that is not current), so its tail is n - 1 links on:
             * a list of one, the common case, costs no read.  Each read is
             * a miss on a block in its own page, one after another.  A
             * kept span (the hardened build's keep its list) is the
             * thread's again. */
            if (s->kept)
                unkeep(tc, s);
            fold(tc, s, n);
            void *t = fa__fl_nth(s->freelist, n - 1);
            fa__fl_set_next(t, g);
            if (g == NULL)
                g_tail = t;
            g = s->freelist;
            s->freelist = NULL;
            s->used = s->carved;
            s->full_seen = 0;
            g_span = s;
            if ((g_n += n) >= GATHER)
                break;
            s = next;
            continue;
        }
        if ((p = take_free(tc, s, cls)) != NULL) {
            s->full_seen = 0;
            set_cur(tc, cls, s);
            if (g != NULL) { /* behind the span's own blocks */
                fa__fl_set_next(g_tail, tc->heads[cls]);
                tc->heads[cls] = g;
            }
            return p;
        }
        if (s == full || !s->full_seen || tc->nspans[cls] <= KEEP_FULL) {
            s->full_seen = 1;
            s = next;
        } else if (detach(tc, s)) {
            s = next;
        }
    }
    if (g != NULL) {
        set_cur(tc, cls, g_span);
        tc->heads[cls] = fa__fl_next(g);
        return g;
    }
    for (;;) {
        s = fa__central_take(cls);
        if (s == NULL) {
            errno = ENOMEM;
            return NULL;
        }
        own(tc, s);
        if ((p = take_free(tc, s, cls)) != NULL || (!detach(tc, s) && (p = take_free(tc, s, cls)) != NULL)) {
            set_cur(tc, cls, s);
            return p;
        }
    }
}

/* The list head..tail of n blocks of s, which the calling thread does not
 * own, goes on s's xfree with one compare-and-swap; or, when s is detached
 * and the thread has a cache (tc), s becomes tc's and the blocks go on its
 * freelist. */
static void push_remote(struct fa__tcache *tc, struct fa__span *s, void *head, void *tail, uint32_t n)
{
    uintptr_t x = __atomic_load_n(&s->xfree, __ATOMIC_RELAXED);
    for (;;) {
        if (x & FA_XFREE_DETACHED) {
            if (!__atomic_compare_exchange_n(&s->xfree, &x, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
                continue;
            if (tc == NULL) { /* an exiting thread: the central cache takes it */
                fa__fl_set_next(tail, NULL);
                fa__central_put_list(s, head);
                return;
            }
            own(tc, s);
            fa__fl_set_next(tail, s->freelist);
            s->freelist = head;
            s->used -= n;
            s->nonuser += n; /* this thread counted them as remote frees */
            if (s->used == 0)
                keep(tc, s);
            return;
        }
        fa__fl_set_next(tail, (void *)x);
        if (__atomic_compare_exchange_n(&s->xfree, &x, (uintptr_t)head, false, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED))
            return;
    }
}

static void out_flush(struct fa__tcache *tc, struct fa__outbox *o)
{
    struct fa__span *s = o->s;
    o->s = NULL;
    tc->out_bytes -= o->bytes < tc->out_bytes ? o->bytes : tc->out_bytes;
    push_remote(tc, s, o->head, o->tail, o->n);
}

static void out_flush_all(struct fa__tcache *tc)
{
    for (unsigned i = 1; i < FA_NUM_CLASSES; i++)
        if (tc->out[i].s != NULL)
            out_flush(tc, &tc->out[i]);
    tc->out_bytes = 0;
}

/* ---- double frees ---- */

/* Whether p is on the list from head, which holds at most bound blocks: a
 * longer one has been corrupted, most likely by a double free that got past
 * these checks (one whose first free sat in another thread's outbox). */
static bool list_has(void *head, const void *p, uint32_t bound, uint32_t size)
{
    for (void *b = head; b != NULL; b = fa__fl_next(b)) {
        if (b == p)
            return true;
        if (bound-- == 0)
            fa__fatal("fastalloc: free(): the free list of %u-byte blocks that should hold %p is corrupt "
                      "(a double free or a write after free)",
                      size, p);
    }
    return false;
}

/* Whether p, a block of s that carries s's free mark, is free.  Looked
 * for where the calling thread may read: its own heads[] and outbox (tc,
 * its real cache, hidden or not; NULL if it has none), and for a span it
 * owns, the span's freelist and the remote frees on its xfree, which only
 * the owner takes.  A block that is not found had its mark copied from a
 * freed block: it is live. */
static bool seen_free(struct fa__tcache *tc, struct fa__span *s, const void *p)
{
    if (tc == NULL)
        return false;
    const struct fa__class_info *ci = &fa__classes[s->cls];
    /* heads[cls] holds the current span's blocks and at most GATHER more. */
    if (list_has(tc->heads[s->cls], p, ci->objs + GATHER + ci->max_list, ci->size))
        return true;
    if (tc->out[s->cls].s == s && list_has(tc->out[s->cls].head, p, ci->objs, ci->size))
        return true;
    uintptr_t a = (uintptr_t)p;
    if (__atomic_load_n(&fa__pm_leaf_of(a)->owner[fa__pm_index(a)], __ATOMIC_RELAXED) != tc)
        return false;
    /* Past the blocks cut: a span whose blocks all came back starts over
     * (keep), and its blocks are free without being on a list. */
    if (fa__tc_block_index(s, a) >= s->carved)
        return true;
    if (list_has(s->freelist, p, ci->objs, ci->size))
        return true;
    uintptr_t x = __atomic_load_n(&s->xfree, __ATOMIC_ACQUIRE) & ~FA_XFREE_DETACHED;
    return list_has((void *)x, p, ci->objs, ci->size);
}

static _Noreturn void double_free(const void *p, const struct fa__span *s)
{
    fa__fatal("fastalloc: free(): double free of %p (a block of %u bytes)", p, fa__classes[s->cls].size);
}

void fa__tc_free_bad(const void *p, const struct fa__span *s)
{
    uintptr_t off = (uintptr_t)p - s->start;
    if (off % fa__classes[s->cls].size != 0)
        fa__fatal("fastalloc: free(): pointer %p is inside a block, not at its start", p);
    if (fa__fl_marked(p, s))
        double_free(p, s);
    fa__fatal("fastalloc: free(): invalid pointer %p (a block never handed out)", p);
}

void fa__tc_free_marked(void *p)
{
    struct fa__tcache *tc = fa__tls_cache;
    struct fa__span *s = fa__pm_span((uintptr_t)p);
    if (seen_free(tc, s, p))
        double_free(p, s);
    /* What the fast path does. */
    fa__fl_push(&s->freelist, p);
    fa__fl_scrub(p, fa__classes[s->cls].size);
    if (--s->used == 0)
        keep(tc, s);
}

void fa__tc_free_slow(void *p)
{
    struct fa__tcache *tc = fa__tls_cache;
    uintptr_t a = (uintptr_t)p;
    if (fa__pm_class(a) == 0) {
        if (p != NULL)
            large_free(tc, p);
        return;
    }
    struct fa__span *s = fa__pm_span(a);
#if FA_SECURE
    if (FA_UNLIKELY(!fa__tc_block_start(s, a)))
        fa__tc_free_bad(p, s);
#endif
    if (FA_UNLIKELY(fa__fl_marked(p, s)) && seen_free(current(), s, p))
        double_free(p, s);
    fa__fl_mark(p, s);
    fa__fl_scrub(p, fa__classes[s->cls].size);
    if (tc->kind != FA_TC_REAL && (tc = my_cache()) == NULL) {
        count_global(&retired.frees[s->cls], 1);
        push_remote(NULL, s, p, p, 1);
        return;
    }
    /* A block of the thread's own span, its cache hidden by a diagnostic
     * mode: what the fast path does (the free counts when the list is
     * taken back, as there). */
    if (FA_UNLIKELY(tc == tls_hidden) &&
        __atomic_load_n(&fa__pm_leaf_of(a)->owner[fa__pm_index(a)], __ATOMIC_RELAXED) == tc) {
        fa__fl_push(&s->freelist, p);
        if (--s->used == 0)
            keep(tc, s);
        return;
    }
    FA_COUNT_ADD(tc->n.frees[s->cls], 1);
    /* Remote frees gather in the outbox, one span per class (snmalloc
     * batches its remote frees the same way): one compare-and-swap per
     * batch, and the span's record, which its owner writes, is touched once
     * per batch.  A thread that frees what another allocates meets one span
     * of each class at a time, its producer's current one. */
    struct fa__outbox *o = &tc->out[s->cls];
    uint32_t size = fa__classes[s->cls].size;
    tc->out_bytes += size;
    if (tc->out_bytes > FA_TC_OUTBOX_ALL) {
        out_flush_all(tc);
        tc->out_bytes = size;
    }
    if (o->s == s) {
        fa__fl_set_next(p, o->head);
        o->head = p;
        o->n++;
        o->bytes += size;
        if (o->bytes >= FA_TC_OUTBOX_BYTES || o->n >= FA_TC_OUTBOX_BLOCKS)
            out_flush(tc, o);
        return;
    }
    if (__atomic_load_n(&s->xfree, __ATOMIC_RELAXED) & FA_XFREE_DETACHED) {
        push_remote(tc, s, p, p, 1); /* takes the span */
        return;
    }
    if (o->s != NULL)
        out_flush(tc, o);
    fa__fl_set_next(p, NULL);
    o->s = s;
    o->head = o->tail = p;
    o->n = 1;
    o->bytes = size;
    if (size >= FA_TC_OUTBOX_BYTES)
        out_flush(tc, o);
}

/* Give back every span and large block, and the whole claim. */
static void flush(struct fa__tcache *tc)
{
    out_flush_all(tc);
    large_drop_all(tc);
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++) {
        if (tc->cur[c] != NULL) {
            return_heads(tc, c);
            clear_cur(tc, c);
        }
        while (tc->spans[c] != NULL)
            disown(tc, tc->spans[c]);
    }
    unclaim(tc, tc->max_bytes);
}

void fa__tc_flush_mine(void)
{
    struct fa__tcache *tc = current();
    if (tc != NULL)
        flush(tc);
    flush_dormant(false);
}

/* Give up the spans of the dormant caches (all of them, or those that went
 * dormant before the current scavenge epoch), and make them spare.  Nobody
 * runs on a dormant cache: whoever takes one off the list may flush it. */
static void flush_dormant(bool old_only)
{
    if (__atomic_load_n(&dormant_caches, __ATOMIC_RELAXED) == NULL)
        return;
    unsigned now = __atomic_load_n(&fa__scavenge_epoch, __ATOMIC_RELAXED);
    for (;;) {
        fa__lock(&registry_lock);
        struct fa__tcache **at = &dormant_caches;
        while (*at != NULL && old_only && (*at)->epoch == now)
            at = &(*at)->next;
        struct fa__tcache *tc = *at;
        if (tc != NULL)
            __atomic_store_n(at, tc->next, __ATOMIC_RELAXED);
        fa__unlock(&registry_lock);
        if (tc == NULL)
            return;
        flush(tc);
        fa__lock(&registry_lock);
        tc->next = spare_caches;
        spare_caches = tc;
        fa__unlock(&registry_lock);
    }
}

/* The exiting thread's counts join those of the threads before it; the
 * caller holds the registry lock and takes tc off the registry in the same
 * breath, so that a reader counts them once. */
static void retire_counts(struct fa__tcache *tc)
{
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++) {
        count_global(&retired.allocs[c], tc->n.allocs[c]);
        count_global(&retired.frees[c], tc->n.frees[c]);
        count_global(&retired.slow[c], tc->n.slow[c]);
    }
    count_global(&retired.large_allocs, tc->n.large_allocs);
    count_global(&retired.large_frees, tc->n.large_frees);
    count_global(&retired.large_alloc_bytes, tc->n.large_alloc_bytes);
    count_global(&retired.large_free_bytes, tc->n.large_free_bytes);
    memset(&tc->n, 0, sizeof tc->n);
}

static void thread_exit(void *arg)
{
    struct fa__tcache *tc = arg;
    /* Later destructors may still allocate: they go to the central cache. */
    fa__tls_cache = &tc_dead;
    tls_hidden = NULL;
    bool replaced = __atomic_add_fetch(&exits_since_birth, 1, __ATOMIC_RELAXED) <= EXITS_REPLACED;
    /* A thread that others replace leaves its spans to the next one: only
     * its remote frees go out, its large blocks back, and its claim (a
     * dormant cache claims nothing; its successor claims its kept spans
     * again).  One that nothing replaces gives everything up, and so do
     * the dormant caches: nobody is coming for them. */
    if (replaced) {
        out_flush_all(tc);
        large_drop_all(tc);
        unclaim(tc, tc->max_bytes);
        tc->epoch = __atomic_load_n(&fa__scavenge_epoch, __ATOMIC_RELAXED);
    } else {
        flush(tc);
    }
    fold_all(tc); /* its frees still on the spans it leaves to another */
    __atomic_sub_fetch(&live_caches, 1, __ATOMIC_RELAXED);
    fa__lock(&registry_lock);
    retire_counts(tc);
    tc->prev->next = tc->next;
    tc->next->prev = tc->prev;
    if (replaced) {
        tc->next = dormant_caches;
        __atomic_store_n(&dormant_caches, tc, __ATOMIC_RELAXED);
    } else {
        tc->next = spare_caches;
        spare_caches = tc;
    }
    fa__unlock(&registry_lock);
    if (!replaced)
        flush_dormant(false);
    fa__ph_shed(replaced);
}

void fa__tc_count_large(bool alloc, size_t bytes)
{
    struct fa__tcache *tc = current();
    if (tc != NULL) {
        FA_COUNT_ADD(*(alloc ? &tc->n.large_allocs : &tc->n.large_frees), 1);
        FA_COUNT_ADD(*(alloc ? &tc->n.large_alloc_bytes : &tc->n.large_free_bytes), bytes);
        return;
    }
    count_global(alloc ? &retired.large_allocs : &retired.large_frees, 1);
    count_global(alloc ? &retired.large_alloc_bytes : &retired.large_free_bytes, bytes);
}

void fa__tc_sum_counts(struct fa__tc_counts *out)
{
    /* The caller's own frees, exact: count those still on its spans. */
    struct fa__tcache *me = current();
    if (me != NULL)
        fold_all(me);
    fa__lock(&registry_lock);
    for (unsigned c = 0; c < FA_NUM_CLASSES; c++) {
        out->allocs[c] = __atomic_load_n(&retired.allocs[c], __ATOMIC_RELAXED);
        out->frees[c] = __atomic_load_n(&retired.frees[c], __ATOMIC_RELAXED);
        out->slow[c] = __atomic_load_n(&retired.slow[c], __ATOMIC_RELAXED);
    }
    out->large_allocs = __atomic_load_n(&retired.large_allocs, __ATOMIC_RELAXED);
    out->large_frees = __atomic_load_n(&retired.large_frees, __ATOMIC_RELAXED);
    out->large_alloc_bytes = __atomic_load_n(&retired.large_alloc_bytes, __ATOMIC_RELAXED);
    out->large_free_bytes = __atomic_load_n(&retired.large_free_bytes, __ATOMIC_RELAXED);
    for (struct fa__tcache *tc = registry.next; tc != &registry; tc = tc->next) {
        for (unsigned c = 0; c < FA_NUM_CLASSES; c++) {
            out->allocs[c] += __atomic_load_n(&tc->n.allocs[c], __ATOMIC_RELAXED);
            out->frees[c] += __atomic_load_n(&tc->n.frees[c], __ATOMIC_RELAXED);
            out->slow[c] += __atomic_load_n(&tc->n.slow[c], __ATOMIC_RELAXED);
        }
        out->large_allocs += __atomic_load_n(&tc->n.large_allocs, __ATOMIC_RELAXED);
        out->large_frees += __atomic_load_n(&tc->n.large_frees, __ATOMIC_RELAXED);
        out->large_alloc_bytes += __atomic_load_n(&tc->n.large_alloc_bytes, __ATOMIC_RELAXED);
        out->large_free_bytes += __atomic_load_n(&tc->n.large_free_bytes, __ATOMIC_RELAXED);
    }
    fa__unlock(&registry_lock);
}

void fa__tc_leave(void)
{
    struct fa__tcache *tc = fa__tls_cache;
    if (FA_LIKELY(tc->kind != FA_TC_REAL))
        return;
    /* Hidden: the fast paths miss from now on; heads[] and the spans stay
     * the thread's, used by the slow paths (my_cache). */
    tls_hidden = tc;
    fa__tls_cache = &tc_empty;
}

size_t fa__tc_cached_bytes(void)
{
    size_t total = 0;
    fa__lock(&registry_lock);
    for (struct fa__tcache *tc = registry.next; tc != &registry; tc = tc->next)
        total += __atomic_load_n(&tc->large_bytes, __ATOMIC_RELAXED) +
                 __atomic_load_n(&tc->kept_bytes, __ATOMIC_RELAXED);
    fa__unlock(&registry_lock);
    return total;
}

size_t fa__tc_claimed_bytes(void)
{
    /* The claims, and the large blocks kept, which claim nothing on the
     * global counter (large_share) but are held all the same. */
    size_t total = __atomic_load_n(&claimed, __ATOMIC_RELAXED);
    fa__lock(&registry_lock);
    for (struct fa__tcache *tc = registry.next; tc != &registry; tc = tc->next)
        total += __atomic_load_n(&tc->large_bytes, __ATOMIC_RELAXED);
    fa__unlock(&registry_lock);
    return total;
}

unsigned fa__tc_live_threads(void)
{
    return __atomic_load_n(&live_caches, __ATOMIC_RELAXED);
}

void fa__tc_lock_registry(void) { fa__lock(&registry_lock); }
void fa__tc_unlock_registry(void) { fa__unlock(&registry_lock); }
