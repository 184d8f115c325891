/* Central cache.  Each class keeps the spans nobody owns that have free
 * blocks, in four lists by how full they are.  A thread that needs a span
 * takes the fullest: a program's long-lived blocks then gather in few spans,
 * and the emptier spans drain and go back to the page heap (tcmalloc's
 * central free list prioritizes its spans the same way, for the same
 * reason).  A span whose blocks have all come back goes to the page heap at
 * once. */
#include "05-central/central.h"
#include "00-base/diag.h"
#include "02-records/freelist.h"
#include "04-pageheap/pageheap.h"
#include "02-records/pagemap.h"
#include "02-records/sizeclass.h"
#include "02-records/span.h"

/* Lists by fullness: list k holds spans with used * NLISTS / objs == k. */
#define NLISTS 4

struct central {
    fa__lock_t lock;
    struct fa__list lists[NLISTS];
    size_t free_objs;              /* objs - used, summed over listed spans */
} FA_ALIGNED_CL;

static struct central central[FA_NUM_CLASSES];
/* The classes whose central cache has been used, a bit each: the walks over
 * every class (the scavenge tick, the statistics) read these words and the
 * entries of the classes used, no more. */
static uint64_t used_classes[(FA_NUM_CLASSES + 63) / 64];

static bool class_used(unsigned cls)
{
    return (__atomic_load_n(&used_classes[cls / 64], __ATOMIC_ACQUIRE) >> (cls % 64)) & 1;
}

/* Lock a class's central cache, its lists set up on first use: a program
 * that uses a few classes leaves the rest of the table (12 KiB) untouched,
 * and out of its RSS.  (Some kernels back even a read of an untouched page
 * with a page of its own.) */
static struct central *lock_class(unsigned cls)
{
    struct central *cc = &central[cls];
    fa__lock(&cc->lock);
    if (FA_UNLIKELY(cc->lists[0].next == NULL)) {
        for (unsigned k = 0; k < NLISTS; k++)
            fa__list_init(&cc->lists[k]);
        __atomic_fetch_or(&used_classes[cls / 64], (uint64_t)1 << (cls % 64), __ATOMIC_RELEASE);
    }
    return cc;
}

/* The list of s's fullness. */
static unsigned fullness(const struct fa__span *s)
{
    unsigned k = (unsigned)((uint64_t)s->used * NLISTS / fa__classes[s->cls].objs);
    return k < NLISTS ? k : NLISTS - 1;
}

/* Link s in the list of its fullness and count its free blocks. */
static void enlist(struct central *cc, struct fa__span *s)
{
    fa__list_push(&cc->lists[fullness(s)], &s->link);
    /* Read without the lock (fa__central_drain, stats). */
    __atomic_store_n(&cc->free_objs, cc->free_objs + (fa__classes[s->cls].objs - s->used), __ATOMIC_RELAXED);
}

static void unlist(struct central *cc, struct fa__span *s)
{
    fa__list_del(&s->link);
    __atomic_store_n(&cc->free_objs, cc->free_objs - (fa__classes[s->cls].objs - s->used), __ATOMIC_RELAXED);
}

/* s, no thread's, is listed from now on: frees into it come here
 * (FA_XFREE_LISTED, fa__central_free_list). */
static void list_push(struct central *cc, struct fa__span *s)
{
    enlist(cc, s);
    s->listed = FA_LISTED_CENTRAL;
    __atomic_fetch_or(&s->xfree, FA_XFREE_LISTED, __ATOMIC_RELAXED);
}

/* s, unlinked, is no longer listed: frees into it go to its xfree again. */
static void unmark(struct fa__span *s)
{
    s->listed = FA_LISTED_NONE;
    __atomic_fetch_and(&s->xfree, ~FA_XFREE_LISTED, __ATOMIC_RELAXED);
}

/* s leaves the lists. */
static void list_del(struct central *cc, struct fa__span *s)
{
    unlist(cc, s);
    unmark(s);
}

static struct fa__span *new_span(unsigned cls)
{
    struct fa__span *s = fa__ph_alloc(fa__classes[cls].pages, 1, FA_SPAN_SMALL, cls);
    if (s == NULL)
        return NULL;
    s->freelist = NULL;
    s->xfree = 0;
    s->used = 0;
    s->carved = 0;
    s->nonuser = 0;
    s->touched = 0;
    s->kept = 0;
    s->listed = FA_LISTED_NONE;
    return s;
}

struct fa__span *fa__central_take(unsigned cls)
{
    struct central *cc = lock_class(cls);
    for (unsigned k = NLISTS; k-- > 0;) {
        struct fa__span *s = fa__span_first(&cc->lists[k]);
        if (s != NULL) {
            list_del(cc, s);
            fa__unlock(&cc->lock);
            return s;
        }
    }
    fa__unlock(&cc->lock);
    /* The page heap has its own lock: not taken under ours. */
    return new_span(cls);
}

void fa__central_retire(struct fa__span *s)
{
    fa__ph_free(s);
}

void fa__central_put(struct fa__span *s)
{
    fa__central_put_list(s, NULL);
}

void fa__central_put_list(struct fa__span *s, void *head)
{
    struct central *cc = lock_class(s->cls);
    fa__span_absorb(s, head);
    fa__span_collect(s, NULL);
    if (s->used == 0) {
        fa__unlock(&cc->lock);
        fa__ph_free(s);
        return;
    }
    list_push(cc, s);
    fa__unlock(&cc->lock);
}

bool fa__central_free_list(struct fa__span *s, void *head, void *tail, uint32_t n)
{
    struct central *cc = lock_class(s->cls);
    if (!(__atomic_load_n(&s->xfree, __ATOMIC_RELAXED) & FA_XFREE_LISTED)) {
        /* Taken meanwhile by a thread: its xfree again. */
        fa__unlock(&cc->lock);
        return false;
    }
    if (n > s->used)
        fa__fatal("fastalloc: free(): double free among the %u-byte blocks of a span near %p",
                  fa__classes[s->cls].size, head);
    unsigned k = fullness(s);
    uint32_t was = s->used;
    fa__fl_set_next(tail, s->freelist);
    s->freelist = head;
    s->used -= n;
    /* Blocks pushed on its xfree before it was listed. */
    fa__span_collect(s, NULL);
    __atomic_store_n(&cc->free_objs, cc->free_objs + (was - s->used), __ATOMIC_RELAXED);
    if (s->used == 0) {
        list_del(cc, s);
        fa__unlock(&cc->lock);
        fa__ph_free(s);
        return true;
    }
    /* Moved to the list of its new fullness only when that changes: the
     * links touch two other spans' records. */
    if (fullness(s) != k) {
        fa__list_del(&s->link);
        fa__list_push(&cc->lists[fullness(s)], &s->link);
    }
    fa__unlock(&cc->lock);
    return true;
}

void *fa__central_alloc_one(unsigned cls)
{
    const struct fa__class_info *ci = &fa__classes[cls];
    struct central *cc = lock_class(cls);
    struct fa__span *s = NULL;
    for (unsigned k = NLISTS; k-- > 0 && s == NULL;)
        s = fa__span_first(&cc->lists[k]);
    if (s == NULL) {
        fa__unlock(&cc->lock);
        s = new_span(cls);
        if (s == NULL)
            return NULL;
        fa__lock(&cc->lock);
    } else {
        list_del(cc, s);
    }
    fa__span_collect(s, NULL);
    void *p;
    if (s->freelist != NULL) {
        p = fa__fl_pop(&s->freelist);
        fa__span_reused(s);
        s->used++;
    } else {
        p = fa__span_carve(s, 1, NULL); /* counts it in used */
    }
    if (s->freelist == NULL && s->carved == ci->objs) {
        /* Full: detached, so that the next free of one of its blocks takes
         * it (02-records/span.h).  A block freed meanwhile keeps it listed. */
        if (!fa__span_detach(s, NULL)) {
            fa__span_collect(s, NULL);
            list_push(cc, s);
        }
    } else {
        list_push(cc, s);
    }
    fa__unlock(&cc->lock);
    return p;
}

void fa__central_drain(void)
{
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++) {
        struct central *cc = &central[c];
        if (!class_used(c) || __atomic_load_n(&cc->free_objs, __ATOMIC_RELAXED) == 0)
            continue;
        struct fa__list empty; /* spans all free: to the page heap, unlocked */
        fa__list_init(&empty);
        fa__lock(&cc->lock);
        for (unsigned k = 0; k < NLISTS; k++) {
            struct fa__list *head = &cc->lists[k];
            for (struct fa__span *s = fa__span_first(head), *next; s != NULL; s = next) {
                next = fa__span_after(head, s);
                if (FA_XFREE_LIST(__atomic_load_n(&s->xfree, __ATOMIC_RELAXED)) == NULL)
                    continue;
                unlist(cc, s);
                fa__span_collect(s, NULL);
                if (s->used == 0) {
                    unmark(s);
                    fa__list_push(&empty, &s->link);
                } else {
                    enlist(cc, s);
                }
            }
        }
        fa__unlock(&cc->lock);
        while (!fa__list_empty(&empty)) {
            struct fa__span *s = fa__span_of(empty.next);
            fa__list_del(&s->link);
            fa__ph_free(s);
        }
    }
}

size_t fa__central_free_bytes(void)
{
    size_t total = 0;
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++)
        if (class_used(c))
            total += __atomic_load_n(&central[c].free_objs, __ATOMIC_RELAXED) * fa__classes[c].size;
    return total;
}

void fa__central_lock_all(void)
{
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++)
        fa__lock(&central[c].lock);
}

void fa__central_unlock_all(void)
{
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++)
        fa__unlock(&central[c].lock);
}
