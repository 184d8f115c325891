/* The page heap's purge mechanism: how dirty free spans go back to the OS
 * (03-purge/purge.c decides when, and how much).  Purges at a free and at
 * thread exit take batches of spans off the lists and madvise them with the
 * lock dropped; the timed look and a forced purge madvise under the lock.
 * Also the fork reset of what was in flight. */
#include "04-pageheap/heap_int.h"
#include "00-base/probe.h"
#include "00-base/asan.h"
#include "01-os/clock.h"
#include "00-base/options.h"
#include "01-os/os.h"
#include "03-purge/purge.h"

#include <sched.h>

#define HUGE_PAGE ((size_t)2 << 20)
#define PURGE_SCAN_MAX 256 /* spans looked at by one timed purge */

/* Under the page heap's lock.  When the timed look last ran. */
static uint64_t last_decay_ms;
/* Bumped each time a batch purged without the lock comes back (read
 * without the lock by fa__ph_wait_for_purge). */
static unsigned purge_gen;

/* In a child of fork(), a batch another parent thread was purging never
 * comes back (its list was on that thread's stack): nothing may wait for it.
 * Its pages stay lost to the child's heap. */
void fa__ph_after_fork_child(void)
{
    fa__ph.purging_pages = 0;
}

/* Give a span's pages back to the OS.  With huge pages on, only whole
 * 2 MiB pages inside the span go, so no huge page is split.  Touches no
 * shared structure: callers may run it without the lock on a span they have
 * taken off every list. */
size_t fa__ph_release_pages(struct fa__span *s)
{
    uintptr_t a = s->start, e = s->start + s->npages * FA_PAGE_SIZE;
    if (fa__opt.hugepages) {
        uintptr_t ha = (a + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
        uintptr_t he = e & ~(uintptr_t)(HUGE_PAGE - 1);
        if (ha != a || he != e)
            s->zeroed = 0;
        if (ha >= he)
            return 0;
        a = ha;
        e = he;
    }
    /* An AddressSanitizer build gives the shadow of the range back too:
     * without it, every purged byte that was poisoned would keep an eighth
     * of a byte resident.  Shadow pages read as zero again: unpoisoned. */
    uintptr_t slo, shi;
    fa__asan_shadow_pages(a, e - a, &slo, &shi);
    if (shi > slo)
        fa__os_release((void *)slo, shi - slo, false);
    fa__os_release((void *)a, e - a, fa__opt.purge_madv_free);
    FA_PROBE2(purge, a, e - a);
    if (!fa__opt.purge_madv_free && a == s->start)
        s->zeroed = (e == s->start + s->npages * FA_PAGE_SIZE);
    return e - a;
}

static size_t purge_span(struct fa__span *s)
{
    fa__ph_dirty_del(s);
    s->dirty = 0;
    s->ndirty = 0;
    size_t n = fa__ph_release_pages(s);
    fa__ph.st.purged_bytes += n;
    fa__ph.st.purges++;
    fa__ph_requeue_clean(s);
    return n;
}

/* Purging outside the lock: dirty spans are taken off the lists (state
 * PURGING, so no neighbour merges with them and nobody allocates them), the
 * lock is dropped for the madvise calls, and they come back clean.  Other
 * threads' frees and allocations do not wait for the kernel. */
#define PURGE_BATCH 32

static unsigned detach_dirty(struct fa__span **out, size_t down_to)
{
    unsigned n = 0;
    while (n < PURGE_BATCH && fa__ph.st.dirty_bytes > down_to && !fa__list_empty(&fa__ph.dirty)) {
        struct fa__span *s = fa__span_of_dirty(fa__ph.dirty.next);
        fa__ph_remove_free(s);
        __atomic_store_n(&s->state, FA_SPAN_PURGING, __ATOMIC_RELAXED);
        s->dirty = 0;
        s->ndirty = 0;
        fa__ph.purging_pages += s->npages;
        out[n++] = s;
    }
    return n;
}

/* Called with the lock held; returns with it held. */
static void purge_detached(struct fa__span **spans, unsigned n)
{
    if (n == 0)
        return;
    fa__unlock(&fa__ph_lock);
    size_t bytes = 0;
    for (unsigned i = 0; i < n; i++)
        bytes += fa__ph_release_pages(spans[i]);
    fa__lock(&fa__ph_lock);
    fa__ph.st.purged_bytes += bytes;
    fa__ph.st.purges += n;
    for (unsigned i = 0; i < n; i++) {
        fa__ph.purging_pages -= spans[i]->npages;
        fa__ph_coalesce_insert(spans[i]);
    }
    __atomic_store_n(&purge_gen, purge_gen + 1, __ATOMIC_RELEASE);
}

/* Called with the lock held; returns with it held, after at least one batch
 * in flight has come back. */
void fa__ph_wait_for_purge(void)
{
    unsigned gen = purge_gen;
    fa__unlock(&fa__ph_lock);
    for (unsigned i = 0; __atomic_load_n(&purge_gen, __ATOMIC_ACQUIRE) == gen; i++) {
        if (i < 64)
            fa__cpu_relax();
        else
            sched_yield(); /* the purging thread may be descheduled */
    }
    fa__lock(&fa__ph_lock);
}

/* Purge, oldest first, until dirty memory is at most down_to bytes (the
 * policy's answer; FA_PURGE_NONE purges nothing). */
void fa__ph_purge_down_to(size_t down_to)
{
    if (down_to == FA_PURGE_NONE)
        return;
    struct fa__span *batch[PURGE_BATCH];
    unsigned n;
    while ((n = detach_dirty(batch, down_to)) > 0)
        purge_detached(batch, n);
}

void fa__ph_shed(bool replaced)
{
    fa__lock(&fa__ph_lock);
    fa__ph_purge_down_to(fa__purge_at_exit(in_use(), fa__ph.st.dirty_bytes, replaced));
    fa__unlock(&fa__ph_lock);
}

size_t fa__ph_purge_all_locked(void)
{
    size_t n = 0;
    while (!fa__list_empty(&fa__ph.dirty))
        n += purge_span(fa__span_of_dirty(fa__ph.dirty.next));
    return n;
}

/* Spans the policy finds old enough go back to the OS. */
static size_t purge_aged_locked(uint64_t now)
{
    fa__purge_note_look(now, in_use());
    size_t n = 0;
    struct fa__list *at = fa__ph.dirty.next;
    for (int i = 0; at != &fa__ph.dirty && i < PURGE_SCAN_MAX; i++) {
        struct fa__span *s = fa__span_of_dirty(at);
        at = at->next;
        if (fa__purge_span_aged(now, s->free_since))
            n += purge_span(s);
    }
    last_decay_ms = now;
    return n;
}

/* The timed part of decay, amortized on page-heap calls. */
void fa__ph_decay_tick_locked(void)
{
    uint64_t now;
    if (!fa__list_empty(&fa__ph.dirty) && fa__purge_look_due(last_decay_ms, &now))
        purge_aged_locked(now);
}

size_t fa__ph_purge(bool force)
{
    fa__lock(&fa__ph_lock);
    size_t n = force ? fa__ph_purge_all_locked() : purge_aged_locked(fa__now_ms());
    fa__unlock(&fa__ph_lock);
    return n;
}
