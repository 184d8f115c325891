/* The outbox: frees of blocks in spans the thread does not own wait here,
 * one span per class, and go out as a batch (FA_TC_OUTBOX_*): one
 * compare-and-swap on the span's xfree per batch, and the span's record,
 * which its owner writes, touched once per batch (snmalloc batches its
 * remote frees the same way).  A thread that frees what another allocates
 * meets one span of each class at a time, its producer's current one. */
#include "08-tcache/internal.h"
#include "05-central/central.h"

/* The list head..tail of n blocks of s, which the calling thread does not
 * own, goes on s's xfree with one compare-and-swap; or, when the central
 * cache lists s, on its freelist under the class lock; or, when s is
 * detached, s becomes tc's and the blocks go on its freelist if tc
 * allocates the class, else the central cache lists s with them. */
void fa__tc_push_remote(struct fa__tcache *tc, struct fa__span *s, void *head, void *tail, uint32_t n)
{
    /* Whether this thread allocates the class: a span goes to such a
     * thread only, and its owner learns that one frees into it (#53). */
    bool peer = tc != NULL && tc->cur[s->cls] != NULL;
    uintptr_t x = __atomic_load_n(&s->xfree, __ATOMIC_RELAXED);
    for (;;) {
        if (x & FA_XFREE_DETACHED) {
            if (!__atomic_compare_exchange_n(&s->xfree, &x, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
                continue;
            /* A span goes to a thread that allocates its class (#53): an
             * exiting thread, or one with no current span of the class,
             * lists it with the central cache, for the next thread that
             * needs a span of the class. */
            if (!peer) {
                fa__fl_set_next(tail, NULL);
                fa__central_put_list(s, head);
                return;
            }
            fa__tc_own(tc, s);
            /* Blocks another thread allocated, freed here: when the span
             * fills again, it goes to whoever frees into it next, if this
             * thread shares the class (own.c, fa__tc_shares). */
            if ((x & ~FA_XFREE_DETACHED) != (uintptr_t)tc) {
                if (fa__tc_shares(tc, s->cls))
                    s->marks |= FA_SPAN_SHARED;
            } else {
                s->marks |= FA_SPAN_RETAKEN;
                fa__tc_count_detach(tc, s->cls, true);
            }
            fa__fl_set_next(tail, s->freelist);
            s->freelist = head;
            s->used -= n;
            s->nonuser += n; /* this thread counted them as remote frees */
            if (s->used == 0)
                fa__tc_keep(tc, s);
            else
                fa__tc_took(tc, s->cls);
            return;
        }
        if (x & FA_XFREE_LISTED) {
            if (fa__central_free_list(s, head, tail, n))
                return;
            x = __atomic_load_n(&s->xfree, __ATOMIC_RELAXED);
            continue;
        }
        fa__fl_set_next(tail, FA_XFREE_LIST(x));
        uintptr_t word = (uintptr_t)head | (x & FA_XFREE_PEER) | (peer ? FA_XFREE_PEER : 0);
        if (__atomic_compare_exchange_n(&s->xfree, &x, word, false, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED))
            return;
    }
}

static void out_flush(struct fa__tcache *tc, struct fa__outbox *o)
{
    struct fa__span *s = o->s;
    o->s = NULL;
    tc->out_bytes -= o->bytes < tc->out_bytes ? o->bytes : tc->out_bytes;
    fa__tc_push_remote(tc, s, o->head, o->tail, o->n);
}

void fa__tc_out_flush_all(struct fa__tcache *tc)
{
    for (unsigned i = 1; i < FA_NUM_CLASSES; i++)
        if (tc->out[i].s != NULL)
            out_flush(tc, &tc->out[i]);
    tc->out_bytes = 0;
}

void fa__tc_out_put(struct fa__tcache *tc, struct fa__span *s, unsigned cls, void *p)
{
    struct fa__outbox *o = &tc->out[cls];
    uint32_t size = fa__classes[cls].size;
    tc->out_bytes += size;
    if (tc->out_bytes > FA_TC_OUTBOX_ALL) {
        fa__tc_out_flush_all(tc);
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
    /* A thread that allocates the class takes a detached span at its
     * first free; any other lists it with a batch of its frees. */
    if (tc->cur[cls] != NULL && (__atomic_load_n(&s->xfree, __ATOMIC_RELAXED) & FA_XFREE_DETACHED)) {
        fa__tc_push_remote(tc, s, p, p, 1); /* takes the span */
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
