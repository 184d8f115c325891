/* The slow paths of the thread cache: malloc's when heads[] runs dry, and
 * free's for every block that is not in a span the thread owns (a remote
 * free, a large block, a second free); large allocations; and scavenging,
 * which the slow paths run when the scavenge epoch moves. */
#include "08-tcache/internal.h"
#include "00-base/options.h"
#include "02-records/pagemap.h"
#include "02-records/tail.h"
#include "05-central/central.h"
#include "06-large/empty.h"
#include "07-decay/decay.h"

#include <errno.h>

/* Full spans a thread keeps of one class before it detaches those found
 * full twice (the allocation slow path walks them all). */
#define KEEP_FULL 8u
#define KEEP_RETAKEN 256u

/* Spans with blocks to hand out that the allocation slow path compares
 * before it makes the fullest of them current (#39, decision 1): blocks
 * then gather in few spans and the emptiest drain and go back to the page
 * heap, as the central cache does with its lists by fullness.  Eight bound
 * the walk where a thread owns many spans of a class. */
#define FA_TC_CANDIDATES 8u

/* Collect the remote frees of tc's spans other than the current ones, keep
 * or retire the spans that are then all free, retire kept spans that no
 * allocation took since the last scavenge, and give back claims the kept
 * spans no longer need. */
static FA_NOINLINE void scavenge(struct fa__tcache *tc)
{
    unsigned old = tc->epoch;
    fa__tc_out_flush_all(tc);
    fa__tc_flush_dormant(true);
    tc->epoch = __atomic_load_n(&fa__scavenge_epoch, __ATOMIC_RELAXED);
    /* Large blocks no allocation took since the last scavenge go, and so
     * do the oldest while the cache is over its share. */
    fa__large_cache_trim(&tc->large, fa__tc_large_share(tc), true);
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++) {
        /* A current span no allocation refilled from since the last
         * scavenge stops being current, so that it can go if it is idle. */
        struct fa__span *cur = tc->cur[c];
        if (cur != NULL && tc->heads[c] == tc->snap[c]) {
            fa__tc_return_heads(tc, c);
            fa__tc_clear_cur(tc, c);
        }
        struct fa__list *h = &tc->spans[c];
        for (struct fa__span *s = fa__span_first(h), *next; s != NULL; s = next) {
            next = fa__span_after(h, s);
            if (s == tc->cur[c])
                continue;
            unsigned got = fa__tc_collect(tc, s);
            bool idle = s->touched != old && s->touched != tc->epoch;
            if (got > 0 && s->used == 0)
                fa__tc_keep(tc, s);
            else if (s->kept && idle)
                fa__tc_retire(tc, s);
            else if (idle && !s->kept && tc->cur[c] == NULL && tc->heads[c] == NULL &&
                     (s->freelist != NULL || s->carved < fa__classes[c].objs))
                /* A class the thread stopped allocating (no current span,
                 * nothing on heads[]): the free blocks of its spans, its
                 * own frees and other threads', go to the central cache
                 * with the span, for whoever needs a span of the class,
                 * within two epochs of its last allocation (#53,
                 * decision 2).  A full span stays: the blocks in it are
                 * the thread's, and its frees of them take no atomic. */
                fa__tc_disown(tc, s);
        }
    }
    fa__tc_spare_age(tc, old);
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++)
        tc->snap[c] = tc->heads[c];
    size_t sh = fa__tc_share();
    if (tc->kept_bytes > sh)
        fa__tc_shed_kept(tc, sh);
    size_t spare = tc->max_bytes - tc->kept_bytes;
    if (tc->max_bytes > sh || spare >= 2 * FA_TC_CLAIM_STEP) {
        size_t want = (tc->kept_bytes + FA_TC_CLAIM_STEP - 1) & ~(FA_TC_CLAIM_STEP - 1);
        if (want > sh)
            want = tc->kept_bytes;
        if (want < tc->max_bytes)
            fa__tc_unclaim(tc, tc->max_bytes - want);
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

/* Free the large block at p: the thread keeps it if its share allows
 * (06-large).  A thread that allocates only large blocks has no cache until
 * its first such free: it gets one here (an exiting thread gets none). */
static void free_large(struct fa__tcache *tc, void *p)
{
    struct fa__span *s = fa__large_span_of(p, "free");
    fa__tc_count_large(false, fa__large_size(s));
    if (!fa__large_keepable(s) || fa__opt.thread_cache_bytes == 0 || (tc = fa__tc_mine()) == NULL) {
        fa__large_free(NULL, s, 0);
        return;
    }
    housekeeping(tc); /* the only slow path a large-only thread takes */
    fa__large_free(&tc->large, s, fa__tc_large_share(tc));
}

void *fa__tc_alloc_large(size_t size, size_t align, bool zero)
{
    struct fa__tcache *tc = fa__tc_current();
    void *p = fa__large_alloc(tc != NULL ? &tc->large : NULL, size, align, zero);
    if (p != NULL)
        fa__tc_count_large(true, fa__large_size(fa__pm_span((uintptr_t)p)));
    return p;
}

static void *alloc_slow(struct fa__tcache *tc, unsigned cls);
static void *take_new(struct fa__tcache *tc, unsigned cls);

#if FA_SECURE
/* p, which alloc_slow is about to hand out, is the block the thread freed
 * last (tcache.h, fa__tc_not_last): hand out another, p behind it on
 * heads[].  With heads[] empty, p's span's list held it alone and the span
 * is cut to its end: another block from anywhere.  heads[] holds blocks of
 * the thread's own spans alone (fa__tc_return_heads puts them back on
 * their lists, as the thread's), and that second walk may detach p's span
 * (other threads free into it): then the other block waits on heads[] and
 * p goes out after all. */
static void *not_last_slow(struct fa__tcache *tc, unsigned cls, void *p)
{
    if (tc->heads[cls] != NULL)
        return fa__tc_not_last(tc, cls, p);
    void *q = alloc_slow(tc, cls);
    if (q == NULL)
        return p;
    uintptr_t a = (uintptr_t)p;
    bool mine = __atomic_load_n(&fa__pm_leaf_of(a)->owner[fa__pm_index(a)], __ATOMIC_RELAXED) == tc;
    void *back = mine ? p : q;
    fa__fl_set_next(back, tc->heads[cls]);
    tc->heads[cls] = back;
    return mine ? q : p;
}
#endif

void *fa__tc_alloc_slow(size_t size)
{
    unsigned cls = fa__size_to_class(size);
    struct fa__tcache *tc = fa__tc_mine();
    void *p;
    if (FA_UNLIKELY(tc == NULL)) {
        p = fa__central_alloc_one(cls);
        if (p == NULL) {
            errno = ENOMEM;
            return NULL;
        }
        fa__tc_count_global(&fa__tc_retired.allocs[cls], 1);
        fa__tc_count_global(&fa__tc_retired.slow[cls], 1);
        return p;
    }
    p = alloc_slow(tc, cls);
#if FA_SECURE
    if (FA_UNLIKELY(p == tc->last_free) && p != NULL)
        p = not_last_slow(tc, cls, p);
#endif
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
        if ((p = fa__tc_take_free(tc, s, cls)) != NULL)
            return p;
        fa__tc_clear_cur(tc, cls);
        full = s;
        s->marks |= FA_SPAN_SEEN_FULL;
        /* Threads that allocate the class free this span's blocks
         * (FA_XFREE_PEER): it is theirs now, the first of them to free
         * into it takes it (02-records/span.h), and
         * allocates again what it freed, warm in its own cache, instead of
         * sending each block back here (#39: a burst of 1,000 blocks that
         * another thread freed in a shuffled order cost that thread a
         * compare-and-swap a block). */
        if ((s->marks & FA_SPAN_SHARED) && fa__tc_detach(tc, s))
            full = NULL;
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
     * together, up to FA_TC_GATHER blocks: a thread that frees its own blocks in
     * random order, a few in each span (a malloc/free loop over 1,024
     * blocks of up to 32 KiB: spans of 8 blocks, all but one or two live),
     * would otherwise come here for every allocation. */
    void *g = NULL, *g_tail = NULL;
    struct fa__span *g_span = NULL, *best = NULL;
    uint32_t g_n = 0;
    unsigned seen = 0, walked = 0;
    const uint32_t objs = fa__classes[cls].objs;
    for (s = fa__span_first(&tc->spans[cls]); s != NULL; walked++) {
        struct fa__span *next = fa__span_after(&tc->spans[cls], s);
        uint32_t n = s->carved - s->used;
        if (s->freelist != NULL && s->carved == objs && n < FA_TC_GATHER) {
            /* The list holds n blocks (used counts every other block of
             * a span that is not current), so its tail is n - 1 links on:
             * a list of one, the common case, costs no read.  Each read is
             * a miss on a block in its own page, one after another.  A
             * kept span (the hardened build's keep its list) is the
             * thread's again. */
            if (s->kept)
                fa__tc_unkeep(tc, s);
            fa__tc_fold(tc, s, n);
            void *t = fa__fl_nth(s->freelist, n - 1);
            fa__fl_set_next(t, g);
            if (g == NULL)
                g_tail = t;
            g = s->freelist;
            s->freelist = NULL;
            fa__span_reused(s);
            s->used = s->carved;
            s->marks &= (uint8_t)~FA_SPAN_SEEN_FULL;
            s->touched = tc->epoch;
            g_span = s;
            if ((g_n += n) >= FA_TC_GATHER)
                break;
            s = next;
            continue;
        }
        if (s->freelist != NULL || s->carved < objs ||
            __atomic_load_n(&s->xfree, __ATOMIC_RELAXED) != 0) {
            /* A span with blocks to hand out: the fullest of the first
             * FA_TC_CANDIDATES seen becomes current. */
            if (best == NULL || s->used > best->used)
                best = s;
            if (++seen == FA_TC_CANDIDATES)
                break;
            s = next;
            continue;
        }
        if ((s->marks & FA_SPAN_SHARED) == 0 &&
            (s == full || !(s->marks & FA_SPAN_SEEN_FULL) || tc->nspans[cls] <= KEEP_FULL ||
             ((s->marks & FA_SPAN_RETAKEN) && tc->nspans[cls] <= KEEP_RETAKEN))) {
            s->marks |= FA_SPAN_SEEN_FULL;
            s = next;
        } else if (fa__tc_detach(tc, s)) {
            s = next;
        }
    }
    /* best still has what it had: only its owner takes from a span. */
    if (best != NULL && (p = fa__tc_take_free(tc, best, cls)) != NULL) {
        best->marks &= (uint8_t)~FA_SPAN_SEEN_FULL;
        fa__tc_set_cur(tc, cls, best);
        if (g != NULL) { /* behind the span's own blocks */
            fa__fl_set_next(g_tail, tc->heads[cls]);
            tc->heads[cls] = g;
        }
        return p;
    }
    if (g != NULL) {
        /* A long walk brought few blocks: the thread's many spans are
         * full but for a block or two each, as when a stable set of live
         * blocks is freed and replaced at random.  Handing out those few
         * alone would bring the next allocations back here, a long walk
         * each; a new span's blocks follow them instead, and frees gather
         * while those last.  The cost is one span of slack in such a
         * class.  One thread freeing one of 512 live 1 KiB blocks at
         * random and allocating again: 58 -> 12 ns a pair (tcmalloc 5,
         * mimalloc 11); 4,096 of 64 B: 76 -> 7.  After a short walk
         * (fewer than FA_TC_SLACK_WALK spans) the few blocks are handed
         * out alone: a new span there cost thread-churn a third more
         * peak RSS, threads that die before the slack pays. */
        if (g_n < FA_TC_SLACK_BELOW && walked >= FA_TC_SLACK_WALK) {
            int saved = errno;
            if ((p = take_new(tc, cls)) != NULL) {
                fa__fl_set_next(p, tc->heads[cls]);
                fa__fl_set_next(g_tail, p);
                tc->heads[cls] = fa__fl_next(g);
                return g;
            }
            errno = saved;
        }
        fa__tc_set_cur(tc, cls, g_span);
        tc->heads[cls] = fa__fl_next(g);
        return g;
    }
    return take_new(tc, cls);
}

/* A span the thread did not have, made current: a spare one, else one from
 * the central cache.  Returns its first block (NULL, errno ENOMEM, when
 * there is no memory). */
static void *take_new(struct fa__tcache *tc, unsigned cls)
{
    struct fa__span *s;
    void *p;
    if (fa__classes[cls].pages == FA_SPARE_PAGES && (s = fa__tc_spare_take(tc, cls)) != NULL) {
        p = fa__tc_take_free(tc, s, cls);
        fa__tc_set_cur(tc, cls, s);
        return p;
    }
    for (;;) {
        s = fa__central_take(cls);
        if (s == NULL) {
            errno = ENOMEM;
            return NULL;
        }
        fa__tc_own(tc, s);
        if ((p = fa__tc_take_free(tc, s, cls)) != NULL ||
            (!fa__tc_detach(tc, s) && (p = fa__tc_take_free(tc, s, cls)) != NULL)) {
            fa__tc_set_cur(tc, cls, s);
            return p;
        }
    }
}


/* The free fast path made every block of s free. */
void fa__tc_span_empty(struct fa__span *s)
{
    fa__tc_keep(fa__tls_cache, s);
}

void fa__tc_free_marked(void *p)
{
    struct fa__tcache *tc = fa__tls_cache;
    struct fa__span *s = fa__pm_span((uintptr_t)p);
    if (fa__tc_seen_free(tc, s, p))
        fa__tc_double_free(p, s);
    /* What the fast path does. */
    fa__fl_push(&s->freelist, p);
    fa__fl_scrub(p, fa__classes[s->cls].size);
    if (--s->used == 0)
        fa__tc_keep(tc, s);
}

void fa__tc_free_slow(void *p)
{
    struct fa__tcache *tc = fa__tls_cache;
    uintptr_t a = (uintptr_t)p;
    unsigned cls = fa__pm_class(a);
    if (cls == 0) {
        if (p != NULL && !fa__empty_has(p)) /* a block of no bytes: nothing to give back */
            free_large(tc, p);
        return;
    }
    struct fa__span *s = fa__pm_span(a);
    /* Another thread's span, or nobody's: what the fast path tests of its
     * own (12-api/fastpath.h).  The hardened build tests the cut count
     * too; the default build's test reads the record's second line, which
     * only a cut for a class writes, and not its first, which the span's
     * owner writes at every free (that read slowed the frees of a thread
     * that frees another's blocks). */
#if FA_SECURE
    if (FA_UNLIKELY(!fa__span_block_start(s, a)))
        fa__tc_free_bad(p, s);
    fa__tail_check_free(p, fa__classes[s->cls].size, a - s->start, fa__tls_cache);
#else
    if (FA_UNLIKELY(!fa__span_at_block(s, a)))
        fa__tc_free_bad(p, s);
#endif
    if (FA_UNLIKELY(fa__fl_marked(p, s)) && fa__tc_seen_free(fa__tc_current(), s, p))
        fa__tc_double_free(p, s);
    fa__fl_mark(p, s);
    fa__fl_scrub(p, fa__classes[cls].size);
    if (tc->kind != FA_TC_REAL && (tc = fa__tc_mine()) == NULL) {
        fa__tc_count_global(&fa__tc_retired.frees[cls], 1);
        fa__tc_push_remote(NULL, s, p, p, 1);
        return;
    }
    /* A block of the thread's own span, its cache hidden by a diagnostic
     * mode: what the fast path does (the free counts when the list is
     * taken back, as there). */
    if (FA_UNLIKELY(tc == fa__tc_hidden) &&
        __atomic_load_n(&fa__pm_leaf_of(a)->owner[fa__pm_index(a)], __ATOMIC_RELAXED) == tc) {
        fa__fl_push(&s->freelist, p);
        if (--s->used == 0)
            fa__tc_keep(tc, s);
        return;
    }
    FA_COUNT_ADD(tc->n.frees[cls], 1);
#if FA_SECURE
    tc->last_free = p; /* a span the thread may take back (fa__tc_not_last) */
#endif
    /* A thread that only frees other threads' blocks scavenges too, so
     * that the spans of the classes it no longer allocates go back within
     * two epochs (#53, decision 2).  p is counted in its span's used until
     * the outbox sends it, so no flush there empties that span. */
    if (FA_UNLIKELY(tc->epoch != __atomic_load_n(&fa__scavenge_epoch, __ATOMIC_RELAXED)))
        scavenge(tc);
    fa__tc_out_put(tc, s, cls, p);
}
