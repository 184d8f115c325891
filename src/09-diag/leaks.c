/* Debug mode's leak report: at exit, the blocks still live, grouped by
 * the place that allocated them, largest first.  Calls checked.c (the live
 * list) and backtrace.c; nothing calls it but the exit (debug_int.h gives
 * the order). */
#include "09-diag/debug_int.h"
#include "00-base/mem.h"
#include "00-base/diag.h"
#include "01-os/os.h"

#include <string.h>

struct site {
    void *at[FA_DBG_FRAMES];
    uint16_t n;
    size_t blocks, bytes;
};

static bool same_site(const struct site *s, const struct fa__dbg_hdr *h)
{
    return s->n == h->nalloc && memcmp(s->at, h->alloc_at, h->nalloc * sizeof(void *)) == 0;
}

static uint64_t site_hash(const struct fa__dbg_hdr *h)
{
    uint64_t x = h->nalloc;
    for (unsigned i = 0; i < h->nalloc; i++)
        x = (x ^ (uintptr_t)h->alloc_at[i]) * 0x9E3779B97F4A7C15ULL;
    return x ^ (x >> 29);
}

/* The live blocks, grouped by the place that allocated them, largest
 * first.  The groups are built under the lock in memory from the OS (the
 * heap is what is being reported on), and printed after it: symbolizing
 * takes the loader's lock, which a thread in dlopen may hold while it
 * allocates. */
static void leak_report(void)
{
    const struct fa__dbg_hdr *live = fa__dbg_live_head();
    fa__dbg_live_lock();
    size_t blocks = 0, bytes = 0;
    for (const struct fa__dbg_hdr *h = live->next; h != live; h = h->next) {
        blocks++;
        bytes += h->size;
    }
    if (blocks == 0) {
        fa__dbg_live_unlock();
        return;
    }
    size_t cap = 16;
    while (cap < 2 * blocks)
        cap *= 2;
    size_t map_bytes = cap * sizeof(struct site);
    struct site *t = fa__os_map(map_bytes, 0);
    if (t == NULL) {
        fa__dbg_live_unlock();
        fa__diag("fastalloc: debug: leak report: %zu blocks (%zu bytes) live at exit; no memory to "
                 "group them",
                 blocks, bytes);
        return;
    }
    size_t nsites = 0;
    for (const struct fa__dbg_hdr *h = live->next; h != live; h = h->next) {
        size_t i = site_hash(h) & (cap - 1);
        while (t[i].blocks != 0 && !same_site(&t[i], h))
            i = (i + 1) & (cap - 1);
        if (t[i].blocks == 0) {
            fa__memcpy(t[i].at, h->alloc_at, sizeof t[i].at);
            t[i].n = h->nalloc;
            nsites++;
        }
        t[i].blocks++;
        t[i].bytes += h->size;
    }
    fa__dbg_live_unlock();
    /* Compact, then sort by bytes, largest first (an insertion sort on the
     * largest few: qsort may allocate). */
    size_t k = 0;
    for (size_t i = 0; i < cap; i++)
        if (t[i].blocks != 0)
            t[k++] = t[i];
    enum { SHOWN = 32 };
    size_t shown = nsites < SHOWN ? nsites : SHOWN;
    for (size_t i = 0; i < shown; i++) {
        size_t best = i;
        for (size_t j = i + 1; j < k; j++)
            if (t[j].bytes > t[best].bytes)
                best = j;
        struct site tmp = t[i];
        t[i] = t[best];
        t[best] = tmp;
    }
    fa__diag("fastalloc: debug: leak report: %zu blocks (%zu bytes) live at exit, from %zu places", blocks,
             bytes, nsites);
    for (size_t i = 0; i < shown; i++) {
        fa__diag("fastalloc:   %zu bytes in %zu block%s", t[i].bytes, t[i].blocks, t[i].blocks == 1 ? "" : "s");
        fa__dbg_print_trace("allocated at:", t[i].at, t[i].n);
    }
    if (nsites > shown)
        fa__diag("fastalloc:   ... and %zu more places", nsites - shown);
    fa__os_unmap(t, map_bytes);
}

__attribute__((destructor)) static void at_exit(void)
{
    /* Under valgrind alone, memcheck's leak check reports instead. */
    if (fa__diag_on() & FA_DIAG_DEBUG)
        leak_report();
}
