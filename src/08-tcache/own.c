/* The spans a thread owns (internal.h): taking one and giving it up, the
 * all-free spans it keeps within its claim, and the current span of each
 * class, which heads[] is filled from.  A span changes hands only by the
 * protocol of 02-records/span.h. */
#include "08-tcache/internal.h"
#include "00-base/seam.h"
#include "02-records/pagemap.h"
#include "04-pageheap/pageheap.h"
#include "05-central/central.h"

/* A span's blocks are cut 4 KiB at a time (mimalloc extends its free lists
 * by the same amount), or one block if it is larger.  A loop that
 * allocates and frees a few blocks cycles through what was cut, taking the
 * freelist back once per cycle (fa__tc_refill), however short the list: a
 * class that a thread uses for a few blocks at a time so touches the pages
 * of those blocks and no more.  Cutting at least 32 blocks, and taking the
 * list back only once it held 32, spared a reuse loop of 1 KiB blocks a
 * few instructions, but made every class a thread used touch 32 blocks:
 * 32 KiB of 1 KiB blocks, a whole span of larger ones (#24,
 * docs/HISTORY.md).  Cutting a page at a time made a shuffled object
 * benchmark's allocations slower (docs/HISTORY.md). */
#define CARVE_BYTES 4096u

/* What a cache may keep, at most, when a shared span empties (keep). */
#define FA_TC_SHARED_KEEP ((size_t)512 << 10)

/* Cut blocks off s, followed by tail; returns the first. */
static void *carve(struct fa__span *s, void *tail)
{
    const struct fa__class_info *ci = &fa__classes[s->cls];
    uint32_t n = CARVE_BYTES / ci->size;
    return fa__span_carve(s, n < ci->carve_min ? ci->carve_min : n, tail);
}

static size_t span_bytes(const struct fa__span *s)
{
    return (size_t)s->npages * FA_PAGE_SIZE;
}

static void own_link(struct fa__tcache *tc, struct fa__span *s)
{
    fa__list_push(&tc->spans[s->cls], &s->link);
    s->listed = FA_LISTED_THREAD;
    tc->nspans[s->cls]++;
}

/* Blocks on s's freelist, s being tc's. */
static uint32_t list_len(const struct fa__tcache *tc, const struct fa__span *s)
{
    return s->carved - s->used + (tc->cur[s->cls] == s);
}

/* s's freelist, len blocks, is taken or given up: the blocks that the
 * slow paths did not put there are the owner's own frees, which the free
 * fast path left uncounted. */
void fa__tc_fold(struct fa__tcache *tc, struct fa__span *s, uint32_t len)
{
    FA_COUNT_ADD(tc->n.frees[s->cls], len - s->nonuser);
    s->nonuser = 0;
}

/* Count the thread's frees still on its spans' lists, and leave the lists
 * in place (counted from now on). */
void fa__tc_fold_all(struct fa__tcache *tc)
{
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++) {
        struct fa__list *h = &tc->spans[c];
        for (struct fa__span *s = fa__span_first(h); s != NULL; s = fa__span_after(h, s)) {
            uint32_t len = list_len(tc, s);
            fa__tc_fold(tc, s, len);
            s->nonuser = (uint16_t)len;
        }
    }
}

static void own_unlink(struct fa__tcache *tc, struct fa__span *s)
{
    fa__tc_fold(tc, s, list_len(tc, s));
    fa__list_del(&s->link);
    s->listed = FA_LISTED_NONE;
    tc->nspans[s->cls]--;
}

/* Make s, which nobody owns and nobody else can take now, tc's. */
void fa__tc_own(struct fa__tcache *tc, struct fa__span *s)
{
    own_link(tc, s);
    s->touched = tc->epoch;
    s->marks = 0;
    s->nonuser = (uint16_t)(s->carved - s->used); /* nobody's frees to count */
    fa__pm_set_owner(s->start, s->npages, tc);
}

void fa__tc_unkeep(struct fa__tcache *tc, struct fa__span *s)
{
    s->kept = 0;
    __atomic_store_n(&tc->kept_bytes, tc->kept_bytes - span_bytes(s), __ATOMIC_RELAXED);
}

/* s, owned by tc, leaves it for the page heap: every block is free.  Its
 * heads[] cannot hold any: they would count in used. */
void fa__tc_retire(struct fa__tcache *tc, struct fa__span *s)
{
    if (s->kept)
        fa__tc_unkeep(tc, s);
    own_unlink(tc, s);
    /* The page heap clears the page map's owner with the rest. */
    fa__central_retire(s);
}

/* Give up an owned span that still has blocks in use: a full one is
 * detached, any other goes to the central cache. */
void fa__tc_disown(struct fa__tcache *tc, struct fa__span *s)
{
    if (s->kept)
        fa__tc_unkeep(tc, s);
    own_unlink(tc, s);
    fa__pm_set_owner(s->start, s->npages, NULL);
    if (s->used == 0 && __atomic_load_n(&s->xfree, __ATOMIC_RELAXED) == 0) {
        fa__central_retire(s);
        return;
    }
    if (s->freelist == NULL && s->carved == fa__classes[s->cls].objs) {
        fa__seam(FA_SEAM_SPAN_DETACH, s);
        if (fa__span_detach(s, tc))
            return;
    }
    /* Not full, or another thread's free came before the detach: the
     * central cache takes it, and the free's block with it. */
    fa__central_put(s);
}

/* s, a spare span of tc's, goes to the page heap. */
static void spare_retire(struct fa__tcache *tc, struct fa__span *s)
{
    fa__tc_unkeep(tc, s);
    fa__list_del(&s->link);
    s->listed = FA_LISTED_NONE;
    fa__central_retire(s);
}

void fa__tc_spare_age(struct fa__tcache *tc, unsigned old)
{
    struct fa__list *h = &tc->spare;
    for (struct fa__span *s = fa__span_first(h), *next; s != NULL; s = next) {
        next = fa__span_after(h, s);
        if (s->touched != old && s->touched != tc->epoch)
            spare_retire(tc, s);
    }
}

struct fa__span *fa__tc_spare_take(struct fa__tcache *tc, unsigned cls)
{
    if (fa__list_empty(&tc->spare))
        return NULL;
    struct fa__span *s = fa__span_of(tc->spare.next);
    fa__tc_unkeep(tc, s);
    fa__list_del(&s->link);
    if (s->cls != cls)
        fa__ph_reclass(s, cls);
    /* A spare that emptied here from blocks another thread allocated stays
     * shared: two threads that free each other's bursts would otherwise
     * pass its blocks back one by one every other round (test_xfer burst). */
    uint8_t shared = s->marks & FA_SPAN_SHARED;
    fa__tc_own(tc, s);
    s->marks = shared;
    return s;
}

/* Retire kept spans until the cache keeps at most limit bytes: the spares
 * first, the oldest first. */
void fa__tc_shed_kept(struct fa__tcache *tc, size_t limit)
{
    while (tc->kept_bytes > limit && !fa__list_empty(&tc->spare))
        spare_retire(tc, fa__span_of(tc->spare.prev));
    for (unsigned c = 1; c < FA_NUM_CLASSES && tc->kept_bytes > limit; c++) {
        struct fa__list *h = &tc->spans[c];
        for (struct fa__span *s = fa__span_first(h), *next; s != NULL && tc->kept_bytes > limit; s = next) {
            next = fa__span_after(h, s);
            if (s->kept)
                fa__tc_retire(tc, s);
        }
    }
}

/* Every block of s, which tc owns, is free: keep it if the cache's share
 * allows, else it goes to the page heap. */
void fa__tc_keep(struct fa__tcache *tc, struct fa__span *s)
{
    /* A class the thread allocates nothing of (no current span): its
     * blocks were another thread's, freed here, and nobody here will take
     * the span.  It goes to the page heap at once, where any thread and any
     * class may (#39: a consumer that frees what a producer allocates kept
     * up to thread_cache_bytes of them; prodcons 1+1 peaked at 4.4 MiB
     * against 2.4). */
    if (tc->cur[s->cls] == NULL) {
        fa__tc_retire(tc, s);
        return;
    }
    /* A shared span that empties here held another thread's blocks: two
     * threads that free each other's bursts keep, each, the spans of the
     * other's last burst besides their own.  Such a span is kept only
     * while the cache keeps under FA_TC_SHARED_KEEP (#39: bursts of 1,000
     * blocks of 192 B peaked at 4.9 MiB, 3.3 MiB so, glibc 2.8 MiB; at
     * 256 KiB, bursts of 5,000 ran 18% slower, at 512 KiB 8%). */
    if ((s->marks & FA_SPAN_SHARED) && tc->kept_bytes + span_bytes(s) > FA_TC_SHARED_KEEP) {
        fa__tc_retire(tc, s);
        return;
    }
    size_t bytes = span_bytes(s);
    /* A span of FA_SPARE_PAGES pages (every class up to 4 KiB) becomes a
     * spare of the thread's, which the next such span of any class is cut
     * from (fa__tc_spare_take): a program whose blocks move from class to
     * class reuses the pages that one class gave up, with no trip to the
     * page heap.  A span kept for its class alone waits for that class
     * (#24).  Other spans are kept in their class.  Keeping only one
     * all-free span a class, and sending the rest to the page heap, slowed
     * a program that frees and allocates again 1,024 blocks of up to
     * 32 KiB: its spans went to the page heap and back every round
     * (docs/HISTORY.md, #24). */
    bool spare = s->npages == FA_SPARE_PAGES;
    if (tc->kept_bytes + bytes > tc->max_bytes) {
        size_t need = tc->kept_bytes + bytes - tc->max_bytes;
        need = (need + FA_TC_CLAIM_STEP - 1) & ~(FA_TC_CLAIM_STEP - 1);
        size_t sh = fa__tc_share();
        if (tc->max_bytes + need > sh)
            need = sh > tc->max_bytes ? sh - tc->max_bytes : 0;
        if (tc->kept_bytes + bytes > tc->max_bytes + need || !fa__tc_claim(tc, need)) {
            fa__tc_retire(tc, s);
            return;
        }
    }
    s->kept = 1;
    /* All free, the span starts over as a newly owned one does: its
     * SEEN_FULL and RETAKEN marks were of the blocks it held.  A span kept
     * in its class keeps its record: the RETAKEN marks of a round's spans
     * kept them, full again the next round, on the list, and every refill
     * walked them all (the hardened build kept every span in its class:
     * strings-1024 walked 62 spans a refill, 9 so, 6% of its time). */
    s->marks &= FA_SPAN_SHARED;
    __atomic_store_n(&tc->kept_bytes, tc->kept_bytes + bytes, __ATOMIC_RELAXED);
    fa__tc_fold(tc, s, s->carved); /* every block is on the list */
    /* Every block is free, so the span starts over: its blocks are cut
     * again, instead of handed out in the order they were freed.  After a
     * program frees in random order, its next allocations then walk memory
     * forwards, which the hardware prefetches, instead of jumping about the
     * span in the order of the frees (docs/HISTORY.md, #12).  With
     * `secure_shuffle` the hardened build cuts them in a fresh random
     * order, a batch at a time (span.c).  It keeps spares as the default
     * does: it used to keep the list, in the order of the frees, and its
     * spans in their class, so a program whose blocks move from class to
     * class went to the page heap for pages that another class held
     * free. */
    s->freelist = NULL;
    /* Its blocks hold what their frees left: links, marks, and with tails
     * the tails and canaries of requests shorter than the class, past what
     * secure_zero scrubbed; a cut must zero them again (span.c). */
    s->zeroed = 0;
    __atomic_store_n(&s->carved, 0, __ATOMIC_RELAXED); /* read by other threads' frees (span.h) */
    if (spare) {
        fa__list_del(&s->link);
        tc->nspans[s->cls]--;
        fa__list_push(&tc->spare, &s->link);
        s->touched = tc->epoch;
    }
}

/* The current span of a class carries one extra count in used for as long
 * as it is current, so that a free never finds it all free: a loop that
 * frees its class's last block and allocates again would otherwise go
 * through fa__tc_span_empty and back at every turn of the span.  Whether
 * the current span is all free is asked when it stops being current. */
void fa__tc_set_cur(struct fa__tcache *tc, unsigned cls, struct fa__span *s)
{
    tc->cur[cls] = s;
    s->used++;
    s->touched = tc->epoch;
    tc->snap[cls] = NULL;
}

/* heads[cls] is empty. */
void fa__tc_clear_cur(struct fa__tcache *tc, unsigned cls)
{
    struct fa__span *s = tc->cur[cls];
    tc->cur[cls] = NULL;
    if (--s->used == 0)
        fa__tc_keep(tc, s);
}


/* Fill heads[cls] from s, which tc owns, and return its first block; NULL
 * when s has nothing free.  The freelist goes whole (its blocks leave used's
 * complement, so used becomes carved without reading the list), then the
 * remote frees (counted in used already), then fresh blocks. */
void *fa__tc_take_free(struct fa__tcache *tc, struct fa__span *s, unsigned cls)
{
    const struct fa__class_info *ci = &fa__classes[cls];
    if (s->kept)
        fa__tc_unkeep(tc, s);
    void *head = s->freelist;
    if (head != NULL) {
        /* The span is current or about to be: used counts one more. */
        uint32_t bias = tc->cur[cls] == s;
        uint32_t n = s->carved - (s->used - bias);
        fa__tc_fold(tc, s, n);
        s->freelist = NULL;
        fa__span_reused(s);
        s->used = s->carved + bias;
        /* A short list from a span still being cut: cut more ahead of it,
         * so that a loop that frees and allocates a few blocks does not
         * come back here every few allocations. */
        if ((n < ci->carve_min || FA_TC_LAST_ALONE(tc, head, n)) && s->carved < ci->objs)
            head = carve(s, head);
    } else if (__atomic_load_n(&s->xfree, __ATOMIC_RELAXED) != 0) {
        uintptr_t x = __atomic_exchange_n(&s->xfree, 0, __ATOMIC_ACQUIRE);
        if (x & FA_XFREE_PEER)
            fa__tc_peer_freed(tc, s);
        fa__span_reused(s);
        head = FA_XFREE_LIST(x);
    } else if (s->carved < ci->objs) {
        head = carve(s, NULL);
    } else {
        return NULL;
    }
    tc->heads[cls] = fa__fl_next(head);
    return head;
}

/* s, tc's current span of its class or another of its spans, has nothing
 * free: detach it, unless a remote free came meanwhile (false). */
bool fa__tc_detach(struct fa__tcache *tc, struct fa__span *s)
{
    /* Off the list first: once detached, the span may be another thread's
     * at once, linked through the same fields. */
    own_unlink(tc, s);
    fa__pm_set_owner(s->start, s->npages, NULL);
    unsigned cls = s->cls; /* s is not read once detached */
    fa__seam(FA_SEAM_SPAN_DETACH, s);
    if (fa__span_detach(s, tc)) {
        fa__tc_count_detach(tc, cls, false);
        return true;
    }
    fa__tc_own(tc, s);
    return false;
}

/* The current span's blocks still on heads[cls] go back to its freelist. */
void fa__tc_return_heads(struct fa__tcache *tc, unsigned cls)
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
            fa__tc_keep(tc, s);
        b = next;
    }
}

void fa__tc_heads_cut(struct fa__tcache *tc, unsigned cls, size_t n)
{
    void *keep = tc->heads[cls];
    if (n == 0 || keep == NULL) {
        fa__tc_return_heads(tc, cls);
        return;
    }
    void *last = fa__fl_nth(keep, (unsigned)n - 1);
    tc->heads[cls] = fa__fl_next(last);
    fa__fl_set_next(last, NULL);
    fa__tc_return_heads(tc, cls);
    tc->heads[cls] = keep;
}

/* A thread collects the remote frees of all its spans of a class once it
 * took, at its frees, a quarter as many detached spans of the class as it
 * owns, and at least FA_TC_COLLECT_MIN, since its last such collection.
 * A taken span holds the blocks of the thread it came from, which that
 * thread frees into it as remote frees.  The allocation slow path looks
 * at a few spans of a class (FA_TC_CANDIDATES), the newest first, and the
 * scavenge runs on a clock: a thread that took spans faster than it
 * allocated from them, or that finished its work and only frees what
 * others hand it, left the older ones, all but empty on their xfree lists,
 * unseen, and the thread they came from cut new spans for the blocks in
 * them (#53, rptest's pattern).  A collection visits every span of the
 * class: a bounded number of visits per span taken.  A thread that takes
 * no span (one that frees its own blocks) never collects so. */
#define FA_TC_COLLECT_MIN 16u

void fa__tc_took(struct fa__tcache *tc, unsigned cls)
{
    uint32_t quarter = tc->nspans[cls] / 4;
    if (++tc->taken[cls] < (quarter > FA_TC_COLLECT_MIN ? quarter : FA_TC_COLLECT_MIN))
        return;
    tc->taken[cls] = 0;
    struct fa__list *h = &tc->spans[cls];
    for (struct fa__span *s = fa__span_first(h), *next; s != NULL; s = next) {
        next = fa__span_after(h, s);
        if (s != tc->cur[cls] && fa__tc_collect(tc, s) > 0 && s->used == 0)
            fa__tc_keep(tc, s);
    }
}

/* Whether tc shares a span of class c: marks it FA_SPAN_SHARED, so that it
 * is detached the moment it is full, for the thread that frees into it to
 * take.  That pays where another thread frees the span's blocks (bursts
 * handed from thread to thread: the taker frees and allocates them again
 * in its own cache) and costs where the owner frees most of them itself:
 * it takes the span back at its first free, and blocks it gave to another
 * thread meanwhile come back one list at a time (rptest's pattern, where a
 * thread hands its neighbour a third of what it allocates).  The outcome
 * of the thread's own detaches decides: it shares while fewer than half of
 * the spans of the class that it detached came back to it
 * (FA_SPAN_RETAKEN), and otherwise one span in FA_TC_SHARE_SAMPLE, so that
 * a change of pattern shows.  The counts are halved as they reach
 * FA_TC_SHARE_WINDOW; below FA_TC_SHARE_MIN detaches, it shares (#53). */
#define FA_TC_SHARE_MIN 8u
#define FA_TC_SHARE_WINDOW 64u
#define FA_TC_SHARE_SAMPLE 32u

bool fa__tc_shares(struct fa__tcache *tc, unsigned c)
{
    if (tc->detached[c] < FA_TC_SHARE_MIN || 2 * tc->retaken[c] < tc->detached[c])
        return true;
    return ++tc->sample[c] % FA_TC_SHARE_SAMPLE == 0;
}

void fa__tc_count_detach(struct fa__tcache *tc, unsigned c, bool retaken)
{
    if (retaken) {
        tc->retaken[c]++;
        return;
    }
    if (++tc->detached[c] >= FA_TC_SHARE_WINDOW) {
        tc->detached[c] /= 2;
        tc->retaken[c] /= 2;
    }
}

void fa__tc_peer_freed(struct fa__tcache *tc, struct fa__span *s)
{
    if (fa__tc_shares(tc, s->cls))
        s->marks |= FA_SPAN_SHARED;
}

unsigned fa__tc_collect(struct fa__tcache *tc, struct fa__span *s)
{
    bool peer;
    unsigned got = fa__span_collect(s, &peer);
    if (peer)
        fa__tc_peer_freed(tc, s);
    return got;
}
