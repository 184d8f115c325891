/* Central cache.  Each class keeps:
 *  - a small stack of whole batches ("transfer slots"), so a thread that
 *    gives back a full batch and another that asks for one exchange a list
 *    head in O(1), without touching the spans;
 *  - the spans of this class that have free blocks, to build batches from
 *    when the slots are empty.
 * A span whose blocks have all come back goes to the page heap at once. */
#include "core/central.h"
#include "core/freelist.h"
#include "core/pageheap.h"
#include "core/pagemap.h"
#include "core/sizeclass.h"

#define SLOT_BYTES ((size_t)128 << 10) /* bound on what a class keeps in slots */
#define MAX_SLOTS 64

struct batch {
    void *head;
};

struct central {
    fa__lock_t lock;
    unsigned nslots, max_slots;
    unsigned slot_low;        /* fewest batches kept since the last drain */
    struct fa__span nonempty; /* sentinel of spans with free blocks */
    size_t free_objs;         /* in slots and in spans' free lists */
    struct batch slots[MAX_SLOTS];
} FA_ALIGNED_CL;

static struct central central[FA_NUM_CLASSES];

void fa__central_init(void)
{
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++) {
        struct central *cc = &central[c];
        cc->nonempty.next = cc->nonempty.prev = &cc->nonempty;
        size_t batch_bytes = (size_t)fa__classes[c].batch * fa__classes[c].size;
        size_t slots = SLOT_BYTES / batch_bytes;
        if (slots > MAX_SLOTS)
            slots = MAX_SLOTS;
        if (slots < 2)
            slots = 2;
        cc->max_slots = (unsigned)slots;
    }
}

static void span_list_push(struct central *cc, struct fa__span *s)
{
    s->next = cc->nonempty.next;
    s->prev = &cc->nonempty;
    cc->nonempty.next->prev = s;
    cc->nonempty.next = s;
    s->listed = 1;
}

static void span_list_del(struct fa__span *s)
{
    s->prev->next = s->next;
    s->next->prev = s->prev;
    s->next = s->prev = NULL;
    s->listed = 0;
}

static struct fa__span *new_span(unsigned cls)
{
    const struct fa__class_info *ci = &fa__classes[cls];
    struct fa__span *s = fa__ph_alloc(ci->pages, 1, FA_SPAN_SMALL, cls);
    if (s == NULL)
        return NULL;
    s->freelist = NULL;
    s->used = 0;
    s->bump = s->start;
    s->limit = s->start + (uintptr_t)ci->objs * ci->size;
    return s;
}

/* Pull up to n blocks out of the class's spans, getting a new span if none
 * has any. Called with the class lock held. */
static unsigned fetch_from_spans(struct central *cc, unsigned cls, void **head, unsigned n, bool whole)
{
    const size_t size = fa__classes[cls].size;
    void *list = NULL;
    unsigned got = 0;
    while (got < n) {
        struct fa__span *s = cc->nonempty.next;
        if (s == &cc->nonempty) {
            /* The page heap has its own lock, taken after ours (lock order). */
            s = new_span(cls);
            if (s == NULL)
                break;
            span_list_push(cc, s);
            cc->free_objs += fa__classes[cls].objs;
        }
        if (whole && got == 0 && s->freelist != NULL) {
            /* Hand the span's whole free list over, however long, without
             * reading it: its blocks came back in any order and are cold, and
             * walking their links here would take a cache miss per block with
             * the class lock held.  The thread reads them as it allocates,
             * in parallel with the other threads. */
            uint32_t carved = (uint32_t)((s->bump - s->start) / size);
            got = carved - s->used;
            list = s->freelist;
            s->freelist = NULL;
            s->used = carved;
            if (s->bump >= s->limit)
                span_list_del(s);
            break;
        }
        while (got < n && s->freelist != NULL) {
            fa__fl_push(&list, fa__fl_pop(&s->freelist));
            got++;
            s->used++;
        }
        while (got < n && s->bump < s->limit) {
            void *o = (void *)s->bump;
            s->bump += size;
            fa__fl_push(&list, o);
            got++;
            s->used++;
        }
        if (s->freelist == NULL && s->bump >= s->limit)
            span_list_del(s);
    }
    cc->free_objs -= got;
    *head = list;
    return got;
}

unsigned fa__central_fetch(unsigned cls, void **head, unsigned n, bool whole)
{
    struct central *cc = &central[cls];
    fa__lock(&cc->lock);
    if (cc->nslots > 0 && n >= fa__classes[cls].batch) {
        *head = cc->slots[--cc->nslots].head;
        if (cc->nslots < cc->slot_low)
            cc->slot_low = cc->nslots;
        n = fa__classes[cls].batch;
        cc->free_objs -= n;
        fa__unlock(&cc->lock);
        return n;
    }
    unsigned got = fetch_from_spans(cc, cls, head, n, whole);
    fa__unlock(&cc->lock);
    return got;
}

/* Return n blocks to their spans (class lock held). */
static void to_spans(struct central *cc, unsigned cls, void *head, unsigned n)
{
    const uint32_t objs = fa__classes[cls].objs;
    void *o = head;
    for (unsigned i = 0; i < n; i++) {
        void *next = fa__fl_next(o);
        struct fa__span *s = fa__pm_span((uintptr_t)o);
        fa__fl_push(&s->freelist, o);
        s->used--;
        if (s->used == 0) {
            /* Every block is back: the span returns to the page heap. */
            if (s->listed)
                span_list_del(s);
            cc->free_objs -= objs;
            fa__ph_free(s);
        } else if (!s->listed) {
            span_list_push(cc, s);
        }
        o = next;
    }
}

void fa__central_release(unsigned cls, void *head, unsigned n, bool spans)
{
    struct central *cc = &central[cls];
    fa__lock(&cc->lock);
    cc->free_objs += n;
    if (!spans && n == fa__classes[cls].batch && cc->nslots < cc->max_slots) {
        cc->slots[cc->nslots++].head = head;
        fa__unlock(&cc->lock);
        return;
    }
    to_spans(cc, cls, head, n);
    fa__unlock(&cc->lock);
}

void fa__central_drain(bool idle_only)
{
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++) {
        struct central *cc = &central[c];
        if (__atomic_load_n(&cc->nslots, __ATOMIC_RELAXED) == 0)
            continue;
        fa__lock(&cc->lock);
        unsigned n = idle_only ? cc->slot_low : cc->nslots;
        /* The oldest batches sit at the bottom of the stack. */
        for (unsigned i = 0; i < n; i++)
            to_spans(cc, c, cc->slots[i].head, fa__classes[c].batch);
        for (unsigned i = n; i < cc->nslots; i++)
            cc->slots[i - n] = cc->slots[i];
        cc->nslots -= n;
        cc->slot_low = cc->nslots;
        fa__unlock(&cc->lock);
    }
}

size_t fa__central_free_bytes(void)
{
    size_t total = 0;
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++)
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
