/* A thread cache's life (internal.h): created on the thread's first
 * allocation (or its first free of a large block), hidden while a
 * diagnostic mode is on, left dormant for a thread that replaces it or
 * given up when the thread exits, then recycled.  Also the registry of live
 * caches, which the statistics walk. */
#include "08-tcache/internal.h"
#include "00-base/probe.h"
#include "00-base/mem.h"
#include "00-base/diag.h"
#include "00-base/lock.h"
#include "01-os/exit.h"
#include "02-records/meta.h"
#include "04-pageheap/pageheap.h"
#include "07-decay/decay.h"

#include <string.h>

/* Shared stand-ins: never hold a block.  `empty` is what a new thread sees;
 * `dead` is what a thread sees once its cache has been flushed at exit, so that
 * destructors running after ours still work, straight on the central cache
 * (told apart by address).  All zero, so they sit in .bss and nothing writes
 * them: a process reads the page of heads[] and kind of the one it uses.
 * Initialised in .data, with the registry's old list head, they were 32 KiB
 * of every process's RSS (#24). */
static struct fa__tcache tc_empty;
static struct fa__tcache tc_dead;

__thread struct fa__tcache *fa__tls_cache __attribute__((tls_model("initial-exec"))) = &tc_empty;

static fa__lock_t registry_lock = FA_LOCK_INIT;
/* The live caches, newest first, linked through next and prev. */
static struct fa__tcache *registry;
static struct fa__tcache *spare_caches;
/* Caches of threads that exited while others were being created: they keep
 * their spans (and their current spans' heads) for the next new thread,
 * which takes the most recent one whole.  A thread that replaces another
 * then finds its predecessor's spans, warm, with no span changing hands; the
 * next scavenge epoch, an exit that nothing replaces and fa_trim() give the
 * spans of the ones left up (flush_dormant). */
static struct fa__tcache *dormant_caches;
/* Threads' exits since a cache was last created.  A thread that exits
 * while new ones keep coming is being replaced; a run of exits with no new
 * thread is a program winding its threads down. */
static unsigned exits_since_birth;
/* An exit is taken as replaced while at most this many exits came since the
 * last new cache: a thread's successor may make its first allocation after
 * the exits of other chains' threads (thread-churn: two chains). */
#define EXITS_REPLACED 2
static void thread_exit(void *arg);

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
    if (!warm) {
        fa__memset(tc, 0, sizeof *tc);
        for (unsigned c = 0; c < FA_NUM_CLASSES; c++)
            fa__list_init(&tc->spans[c]);
        fa__list_init(&tc->spare);
    }
    tc->kind = FA_TC_REAL;
#if FA_SECURE
    for (unsigned c = 0; c < FA_NUM_CLASSES; c++)
        tc->bsize[c] = fa__classes[c].size;
#endif
    tc->epoch = __atomic_load_n(&fa__scavenge_epoch, __ATOMIC_RELAXED);
    fa__tc_live_add(1);
    __atomic_store_n(&exits_since_birth, 0, __ATOMIC_RELAXED);
    fa__lock(&registry_lock);
    tc->next = registry;
    tc->prev = NULL;
    if (registry != NULL)
        registry->prev = tc;
    registry = tc;
    fa__unlock(&registry_lock);
    FA_PROBE2(tcache_new, tc, warm);
    if (warm && tc->kept_bytes > 0) {
        /* Its predecessor's all-free spans: kept if the bound allows. */
        size_t want = (tc->kept_bytes + FA_TC_CLAIM_STEP - 1) & ~(FA_TC_CLAIM_STEP - 1);
        if (want > fa__tc_share() || !fa__tc_claim(tc, want))
            fa__tc_shed_kept(tc, 0);
    }
    return tc;
}

/* While a diagnostic mode is on (00-base/diag.h), a thread's cache is hidden
 * here and fa__tls_cache is the empty stand-in: the fast paths miss on
 * every call, and the slow paths, which the mode sees, work on this cache
 * as the fast paths would have (a pop from heads[], a push on an owned
 * span's freelist), with no lock. */
__thread struct fa__tcache *fa__tc_hidden __attribute__((tls_model("initial-exec")));

/* The calling thread's real cache, hidden or not; NULL when it has none. */
struct fa__tcache *fa__tc_current(void)
{
    struct fa__tcache *tc = fa__tls_cache;
    return tc->kind == FA_TC_REAL ? tc : fa__tc_hidden;
}

/* The calling thread's real cache, created on first use; NULL when it cannot
 * have one (exiting, or no memory for the cache itself).  Hidden while a
 * diagnostic mode is on, shown again once it is off. */
struct fa__tcache *fa__tc_mine(void)
{
    struct fa__tcache *tc = fa__tls_cache;
    if (FA_LIKELY(tc->kind == FA_TC_REAL))
        return tc;
    if (tc == &tc_dead)
        return NULL;
    bool diag = fa__diag_every(); /* the profile alone leaves caches in view */
    if (fa__tc_hidden != NULL) {
        tc = fa__tc_hidden;
        if (!diag) { /* the mode went off: the fast paths again */
            fa__tc_hidden = NULL;
            fa__tls_cache = tc;
        }
        return tc;
    }
    tc = cache_new();
    if (tc == NULL)
        return NULL;
    /* Published before it is armed for exit: if that allocates, the nested
     * call finds the cache ready instead of recursing. */
    if (diag)
        fa__tc_hidden = tc;
    else
        fa__tls_cache = tc;
    fa__os_exit_arm(FA_EXIT_TCACHE, thread_exit, tc);
    return tc;
}


/* Threads that exited, and allocations and frees made with no cache. */
struct fa__tc_counts fa__tc_retired;

/* Give back every span and large block, and the whole claim. */
static void flush(struct fa__tcache *tc)
{
    fa__tc_out_flush_all(tc);
    fa__large_cache_trim(&tc->large, 0, false);
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++) {
        if (tc->cur[c] != NULL) {
            fa__tc_return_heads(tc, c);
            fa__tc_clear_cur(tc, c);
        }
        while (!fa__list_empty(&tc->spans[c]))
            fa__tc_disown(tc, fa__span_of(tc->spans[c].next));
    }
    fa__tc_shed_kept(tc, 0);
    fa__tc_unclaim(tc, tc->max_bytes);
}

void fa__tc_flush_mine(void)
{
    struct fa__tcache *tc = fa__tc_current();
    if (tc != NULL)
        flush(tc);
    fa__tc_flush_dormant(false);
}

/* Give up the spans of the dormant caches (all of them, or those that went
 * dormant before the current scavenge epoch), and make them spare.  Nobody
 * runs on a dormant cache: whoever takes one off the list may flush it. */
void fa__tc_flush_dormant(bool old_only)
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
        fa__tc_count_global(&fa__tc_retired.allocs[c], tc->n.allocs[c]);
        fa__tc_count_global(&fa__tc_retired.frees[c], tc->n.frees[c]);
        fa__tc_count_global(&fa__tc_retired.slow[c], tc->n.slow[c]);
    }
    fa__tc_count_global(&fa__tc_retired.large_allocs, tc->n.large_allocs);
    fa__tc_count_global(&fa__tc_retired.large_frees, tc->n.large_frees);
    fa__tc_count_global(&fa__tc_retired.large_alloc_bytes, tc->n.large_alloc_bytes);
    fa__tc_count_global(&fa__tc_retired.large_free_bytes, tc->n.large_free_bytes);
    fa__memset(&tc->n, 0, sizeof tc->n);
}

static void thread_exit(void *arg)
{
    struct fa__tcache *tc = arg;
    /* Later destructors may still allocate: they go to the central cache. */
    fa__tls_cache = &tc_dead;
    fa__tc_hidden = NULL;
    bool replaced = __atomic_add_fetch(&exits_since_birth, 1, __ATOMIC_RELAXED) <= EXITS_REPLACED;
    /* A thread that others replace leaves its spans to the next one: only
     * its remote frees go out, its large blocks back, and its claim (a
     * dormant cache claims nothing; its successor claims its kept spans
     * again).  One that nothing replaces gives everything up, and so do
     * the dormant caches: nobody is coming for them. */
    if (replaced) {
        fa__tc_out_flush_all(tc);
        fa__large_cache_trim(&tc->large, 0, false);
        fa__tc_unclaim(tc, tc->max_bytes);
        tc->epoch = __atomic_load_n(&fa__scavenge_epoch, __ATOMIC_RELAXED);
    } else {
        flush(tc);
    }
    fa__tc_fold_all(tc); /* its frees still on the spans it leaves to another */
    fa__tc_live_add(-1);
    FA_PROBE2(tcache_exit, tc, replaced);
    fa__lock(&registry_lock);
    retire_counts(tc);
    if (tc->prev != NULL)
        tc->prev->next = tc->next;
    else
        registry = tc->next;
    if (tc->next != NULL)
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
        fa__tc_flush_dormant(false);
    fa__ph_shed(replaced);
}

void fa__tc_count_large(bool alloc, size_t bytes)
{
    struct fa__tcache *tc = fa__tc_current();
    if (tc != NULL) {
        FA_COUNT_ADD(*(alloc ? &tc->n.large_allocs : &tc->n.large_frees), 1);
        FA_COUNT_ADD(*(alloc ? &tc->n.large_alloc_bytes : &tc->n.large_free_bytes), bytes);
        return;
    }
    fa__tc_count_global(alloc ? &fa__tc_retired.large_allocs : &fa__tc_retired.large_frees, 1);
    fa__tc_count_global(alloc ? &fa__tc_retired.large_alloc_bytes : &fa__tc_retired.large_free_bytes, bytes);
}

void fa__tc_sum_counts(struct fa__tc_counts *out)
{
    /* The caller's own frees, exact: count those still on its spans. */
    struct fa__tcache *me = fa__tc_current();
    if (me != NULL)
        fa__tc_fold_all(me);
    fa__lock(&registry_lock);
    for (unsigned c = 0; c < FA_NUM_CLASSES; c++) {
        out->allocs[c] = __atomic_load_n(&fa__tc_retired.allocs[c], __ATOMIC_RELAXED);
        out->frees[c] = __atomic_load_n(&fa__tc_retired.frees[c], __ATOMIC_RELAXED);
        out->slow[c] = __atomic_load_n(&fa__tc_retired.slow[c], __ATOMIC_RELAXED);
    }
    out->large_allocs = __atomic_load_n(&fa__tc_retired.large_allocs, __ATOMIC_RELAXED);
    out->large_frees = __atomic_load_n(&fa__tc_retired.large_frees, __ATOMIC_RELAXED);
    out->large_alloc_bytes = __atomic_load_n(&fa__tc_retired.large_alloc_bytes, __ATOMIC_RELAXED);
    out->large_free_bytes = __atomic_load_n(&fa__tc_retired.large_free_bytes, __ATOMIC_RELAXED);
    for (struct fa__tcache *tc = registry; tc != NULL; tc = tc->next) {
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
     * the thread's, used by the slow paths (fa__tc_mine). */
    fa__tc_hidden = tc;
    fa__tls_cache = &tc_empty;
}

size_t fa__tc_cached_bytes(void)
{
    size_t total = 0;
    fa__lock(&registry_lock);
    for (struct fa__tcache *tc = registry; tc != NULL; tc = tc->next)
        total += __atomic_load_n(&tc->large.bytes, __ATOMIC_RELAXED) +
                 __atomic_load_n(&tc->kept_bytes, __ATOMIC_RELAXED);
    fa__unlock(&registry_lock);
    return total;
}

size_t fa__tc_claimed_bytes(void)
{
    /* The claims, and the large blocks kept, which claim nothing on the
     * global counter (fa__tc_large_share) but are held all the same. */
    size_t total = fa__tc_claims();
    fa__lock(&registry_lock);
    for (struct fa__tcache *tc = registry; tc != NULL; tc = tc->next)
        total += __atomic_load_n(&tc->large.bytes, __ATOMIC_RELAXED);
    fa__unlock(&registry_lock);
    return total;
}

void fa__tc_lock_registry(void) { fa__lock(&registry_lock); }
void fa__tc_unlock_registry(void) { fa__unlock(&registry_lock); }
