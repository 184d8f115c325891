#include "10-stats/stats.h"
#include "00-base/mem.h"
#include "00-base/diag.h"
#include "00-base/options.h"
#include "01-os/sys.h"
#include "05-central/central.h"
#include "06-large/large.h"
#include "02-records/meta.h"
#include "02-records/pagemap.h"
#include "00-base/lock.h"
#include "04-pageheap/pageheap.h"
#include "08-tcache/tcache.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

_Static_assert(FA_NUM_CLASSES - 1 <= FA_STATS_MAX_CLASSES, "fa_stats_t has room for every class");

static fa__pool_stats_fn pool_source;

void fa__stats_set_pool_source(fa__pool_stats_fn fn)
{
    __atomic_store_n(&pool_source, fn, __ATOMIC_RELEASE);
}

void fa__stats_collect(fa_stats_t *out)
{
    fa__memset(out, 0, sizeof *out);
    struct fa__ph_stats st;
    fa__ph_get_stats(&st);
    out->mapped = st.mapped_bytes;
    out->in_spans = st.small_bytes;
    out->large = st.large_bytes;
    out->free = st.free_bytes;
    out->dirty = st.dirty_bytes;
    out->purged_total = st.purged_bytes;
    out->purges = st.purges;
    out->thread_caches = fa__tc_cached_bytes();
    out->thread_caches_claimed = fa__tc_claimed_bytes();
    out->thread_caches_bound = fa__opt.thread_cache_max;
    out->threads = fa__tc_live_threads();
    out->central = fa__central_free_bytes();
    out->metadata = fa__meta_bytes();
    out->limit = fa__opt.limit;
    out->purge_delay_ms = fa__opt.purge_delay_ms;

    /* The counts: the thread caches' for small blocks, the large-block
     * layer's for large ones. */
    struct fa__tc_counts n;
    fa__tc_sum_counts(&n);
    out->nclasses = FA_NUM_CLASSES - 1;
    for (unsigned c = 1; c < FA_NUM_CLASSES; c++) {
        struct fa_class_stats *k = &out->classes[c - 1];
        size_t size = fa__classes[c].size;
        /* A reader can see a thread's remote free before the allocation it
         * frees (the counters are read one by one): never below zero. */
        uint64_t live = n.allocs[c] > n.frees[c] ? n.allocs[c] - n.frees[c] : 0;
        k->size = size;
        k->in_use_blocks = live;
        k->spans = st.spans[c];
        k->allocs = n.allocs[c];
        k->slow_allocs = n.slow[c];
        out->allocs += n.allocs[c];
        out->frees += n.frees[c];
        out->allocated_bytes += n.allocs[c] * size;
        out->freed_bytes += n.frees[c] * size;
        out->in_use_blocks += live;
        out->in_use += live * size;
    }
    out->allocs += n.large_allocs;
    out->frees += n.large_frees;
    out->allocated_bytes += n.large_alloc_bytes;
    out->freed_bytes += n.large_free_bytes;
    if (n.large_allocs > n.large_frees)
        out->in_use_blocks += n.large_allocs - n.large_frees;
    if (n.large_alloc_bytes > n.large_free_bytes)
        out->in_use += n.large_alloc_bytes - n.large_free_bytes;
    fa__pool_stats_fn pools = __atomic_load_n(&pool_source, __ATOMIC_ACQUIRE);
    if (pools != NULL)
        out->npools = pools(out->pools, FA_STATS_MAX_POOLS);
    out->peak_in_use = st.peak_used_bytes;
    out->resident = st.small_bytes + st.large_bytes + st.dirty_bytes;
    out->released = st.purged_bytes;
}

/* ---- printing ---- */

/* Lines formatted on the stack and written with fputs: the printer itself
 * allocates nothing (a FILE's buffer may, once). */
/* Where the memory was when the allocator's resident bytes were highest
 * (FASTALLOC_STATS only).  Every part is bytes; resident is their sum. */
struct peak_parts {
    size_t resident;
    size_t in_use;     /* blocks handed out, small (at their class's size) and large */
    size_t owned_free; /* free blocks in spans, and large blocks, that threads keep */
    size_t central;    /* free blocks in the spans the central caches list */
    size_t unpurged;   /* free page-heap pages not purged yet */
    size_t metadata;   /* the allocator's records: written metadata, page-map pages */
};
static struct peak_parts at_peak;
/* A sample is taken when the heap's resident bytes pass this: at most 1/64
 * above the last sample, so that the last one is within that of the peak
 * and a heap that grows to 1 GiB takes a few hundred samples. */
static size_t peak_next;
static fa__lock_t peak_lock = FA_LOCK_INIT;

void fa__stats_peak_sample(void)
{
    if (!__atomic_load_n(&fa__opt.stats.on, __ATOMIC_RELAXED) ||
        fa__ph_resident_bytes() < __atomic_load_n(&peak_next, __ATOMIC_RELAXED) || !fa__trylock(&peak_lock))
        return;
    fa_stats_t s; /* 5 KiB, with the class table */
    fa__stats_collect(&s);
    /* The parts as the heap's records give them, in bytes of spans and
     * blocks, scaled down to the pages that are resident: a span's pages
     * nobody touched yet count in its bytes, not in RSS.  The scaling is
     * taken from the free parts only: blocks in use are taken to be
     * resident. */
    struct peak_parts q;
    size_t blocks = s.in_spans + s.large, heap = blocks + s.dirty;
    size_t res = fa__ph_heap_resident();
    q.in_use = s.in_use < blocks ? s.in_use : blocks;
    if (res < q.in_use)
        res = q.in_use;
    size_t central = s.central < blocks - q.in_use ? s.central : blocks - q.in_use;
    size_t idle = heap - q.in_use, idle_res = res - q.in_use;
    if (idle_res > idle)
        idle_res = idle;
    q.central = idle ? (size_t)((double)central * idle_res / idle) : 0;
    q.unpurged = idle ? (size_t)((double)s.dirty * idle_res / idle) : 0;
    q.owned_free = idle_res - q.central - q.unpurged;
    q.metadata = fa__meta_used() + fa__pm_resident();
    q.resident = q.in_use + idle_res + q.metadata;
    if (q.resident > at_peak.resident)
        at_peak = q;
    __atomic_store_n(&peak_next, heap + (heap / 64 > ((size_t)64 << 10) ? heap / 64 : (size_t)64 << 10),
                     __ATOMIC_RELAXED);
    fa__unlock(&peak_lock);
}

/* At exit: a program that never grew its heap past the first sample's
 * margin still gets one. */
static void peak_sample_last(void)
{
    if (at_peak.resident != 0)
        return;
    __atomic_store_n(&peak_next, 0, __ATOMIC_RELAXED);
    fa__stats_peak_sample();
}

struct printer {
    FILE *f;
    int err;
};

__attribute__((format(printf, 2, 3))) static void put(struct printer *p, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (fputs(buf, p->f) == EOF)
        p->err = errno ? errno : EIO;
}

static double mib(size_t b)
{
    return (double)b / (1 << 20);
}

static void print_table(struct printer *p, const fa_stats_t *s)
{
    put(p, "fastalloc statistics\n");
    put(p, "  blocks     %llu allocated, %llu freed, %zu in use (%.1f MiB); peak %.1f MiB\n", s->allocs,
        s->frees, s->in_use_blocks, mib(s->in_use), mib(s->peak_in_use));
    put(p, "  bytes      %.1f MiB allocated, %.1f MiB freed in total\n", mib(s->allocated_bytes),
        mib(s->freed_bytes));
    put(p, "  heap       %.1f MiB mapped, %.1f MiB resident at most, %.1f MiB released (%llu purges)\n",
        mib(s->mapped), mib(s->resident), mib(s->released), s->purges);
    put(p, "  page heap  %.1f MiB in small spans, %.1f MiB large, %.1f MiB free (%.1f MiB dirty)\n",
        mib(s->in_spans), mib(s->large), mib(s->free), mib(s->dirty));
    put(p, "  caches     threads %.1f MiB (%u threads, claim %.1f of %.1f MiB), central %.1f MiB\n",
        mib(s->thread_caches), s->threads, mib(s->thread_caches_claimed), mib(s->thread_caches_bound),
        mib(s->central));
    put(p, "  metadata   %.1f MiB\n", mib(s->metadata));
    if (at_peak.resident != 0)
        put(p, "  at peak    %.1f MiB resident: %.1f in use, %.1f owned free, %.1f central, %.1f unpurged, "
               "%.1f metadata\n", mib(at_peak.resident), mib(at_peak.in_use), mib(at_peak.owned_free),
            mib(at_peak.central), mib(at_peak.unpurged), mib(at_peak.metadata));
    put(p, "  %8s %12s %12s %7s %10s\n", "class", "in use", "allocs", "spans", "fast path");
    for (unsigned i = 0; i < s->nclasses; i++) {
        const struct fa_class_stats *k = &s->classes[i];
        if (k->allocs == 0 && k->spans == 0)
            continue;
        double fast = k->allocs ? 100.0 * (double)(k->allocs - k->slow_allocs) / (double)k->allocs : 0;
        put(p, "  %8zu %12zu %12llu %7zu %9.1f%%\n", k->size, k->in_use_blocks, k->allocs, k->spans, fast);
    }
    unsigned np = s->npools < FA_STATS_MAX_POOLS ? s->npools : FA_STATS_MAX_POOLS;
    if (np > 0)
        put(p, "  %-16s %8s %10s %10s %10s %10s\n", "pool", "object", "live", "free", "MiB", "gets");
    for (unsigned i = 0; i < np; i++) {
        const fa_pool_stats_t *q = &s->pools[i];
        put(p, "  %-16.16s %8zu %10zu %10zu %10.1f %10llu\n", q->name, q->object_size, q->live,
            q->free_local + q->free_global, mib(q->bytes_os), q->gets);
    }
}

static void print_json(struct printer *p, const fa_stats_t *s)
{
    put(p, "{\"allocs\": %llu, \"frees\": %llu, \"allocated_bytes\": %llu, \"freed_bytes\": %llu, ", s->allocs,
        s->frees, s->allocated_bytes, s->freed_bytes);
    put(p, "\"in_use\": %zu, \"in_use_blocks\": %zu, \"peak_in_use\": %zu, ", s->in_use, s->in_use_blocks,
        s->peak_in_use);
    put(p, "\"mapped\": %zu, \"resident\": %zu, \"released\": %zu, \"purges\": %llu, ", s->mapped, s->resident,
        s->released, s->purges);
    put(p, "\"page_heap\": {\"small_spans\": %zu, \"large\": %zu, \"free\": %zu, \"dirty\": %zu}, ", s->in_spans,
        s->large, s->free, s->dirty);
    put(p, "\"thread_caches\": {\"bytes\": %zu, \"claimed\": %zu, \"bound\": %zu, \"threads\": %u}, ",
        s->thread_caches, s->thread_caches_claimed, s->thread_caches_bound, s->threads);
    put(p, "\"central\": %zu, \"metadata\": %zu, \"limit\": %zu, \"purge_delay_ms\": %ld, \"classes\": [",
        s->central, s->metadata, s->limit, s->purge_delay_ms);
    for (unsigned i = 0; i < s->nclasses; i++) {
        const struct fa_class_stats *k = &s->classes[i];
        put(p, "%s{\"size\": %zu, \"in_use_blocks\": %zu, \"spans\": %zu, \"allocs\": %llu, \"slow_allocs\": %llu}",
            i ? ", " : "", k->size, k->in_use_blocks, k->spans, k->allocs, k->slow_allocs);
    }
    put(p, "], \"pools\": [");
    unsigned np = s->npools < FA_STATS_MAX_POOLS ? s->npools : FA_STATS_MAX_POOLS;
    for (unsigned i = 0; i < np; i++) {
        const fa_pool_stats_t *q = &s->pools[i];
        /* Pool names are the program's: only plain characters go into the
         * JSON string, anything else as '?'. */
        char name[48];
        size_t k = 0;
        for (const char *c = q->name; *c != '\0' && k < sizeof name - 1; c++, k++)
            name[k] = (*c >= 0x20 && *c < 0x7f && *c != '"' && *c != '\\') ? *c : '?';
        name[k] = '\0';
        put(p, "%s{\"name\": \"%s\", \"object_size\": %zu, \"live\": %zu, \"free_local\": %zu, "
            "\"free_global\": %zu, \"bytes_os\": %zu, \"bytes_peak\": %zu, \"gets\": %llu, \"puts\": %llu}",
            i ? ", " : "", name, q->object_size, q->live, q->free_local, q->free_global, q->bytes_os,
            q->bytes_peak, q->gets, q->puts);
    }
    put(p, "]");
    if (at_peak.resident != 0)
        put(p, ", \"at_peak\": {\"resident\": %zu, \"in_use\": %zu, \"owned_free\": %zu, \"central\": %zu, "
               "\"unpurged\": %zu, \"metadata\": %zu}", at_peak.resident, at_peak.in_use, at_peak.owned_free,
            at_peak.central, at_peak.unpurged, at_peak.metadata);
    put(p, "}\n");
}

int fa__stats_print(FILE *out, int flags, const fa_stats_t *s)
{
    struct printer p = {out, 0};
    if (flags & FA_STATS_JSON)
        print_json(&p, s);
    else
        print_table(&p, s);
    if (fflush(out) == EOF && p.err == 0)
        p.err = errno ? errno : EIO;
    if (p.err != 0) {
        errno = p.err;
        return -1;
    }
    return 0;
}

/* FASTALLOC_STATS: the statistics at exit, as a table on stderr or as JSON
 * in a file.  Set only from the environment at start-up, so set means the
 * allocator is up. */
__attribute__((destructor)) static void stats_at_exit(void)
{
    if (!__atomic_load_n(&fa__opt.stats.on, __ATOMIC_RELAXED))
        return;
    peak_sample_last();
    fa_stats_t s; /* 5 KiB, with the class table */
    fa__stats_collect(&s);
    if (fa__opt.stats.text[0] == '\0') {
        fa__stats_print(stderr, 0, &s);
        return;
    }
    /* %p is the process id: a program that forks or execs (a compiler
     * driver, git) then leaves one file per process. */
    char path[sizeof fa__opt.stats.text + 16];
    const char *pct = strstr(fa__opt.stats.text, "%p");
    if (pct != NULL)
        snprintf(path, sizeof path, "%.*s%ld%s", (int)(pct - fa__opt.stats.text), fa__opt.stats.text,
                 (long)fa__os_pid(), pct + 2);
    else
        snprintf(path, sizeof path, "%s", fa__opt.stats.text);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fa__diag("fastalloc: FASTALLOC_STATS: cannot write %s: %s", path, fa__errno_words(errno));
        return;
    }
    if (fa__stats_print(f, FA_STATS_JSON, &s) != 0)
        fa__diag("fastalloc: FASTALLOC_STATS: cannot write %s: %s", path, fa__errno_words(errno));
    fclose(f);
}
