/* Memory that comes back: the timed work (decay), explicit trim, the limit,
 * options set from code, and the allocator-wide statistics.
 *
 * Three mechanisms return memory, cheapest first:
 *  - at a free (pageheap.c): dirty free pages beyond 16 MiB and 1/8 of the
 *    memory in use are purged at once, so a fall from a peak gives memory
 *    back with no timer and no further call;
 *  - the decay tick, at most once per interval and run by whichever thread
 *    reaches a slow path first (or by the background thread): pages free for
 *    the purge delay are purged, batches that the central caches kept but
 *    nobody fetched go back to their spans, and the scavenge epoch moves so
 *    that each thread shrinks its idle lists at its next slow path;
 *  - fa_trim() / malloc_trim(): everything, now.
 */
#include "fastalloc.h"
#include "central.h"
#include "internal.h"
#include "meta.h"
#include "pageheap.h"
#include "tcache.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

static uint64_t next_tick_ms;
static int background_state; /* 0 none, 1 starting or running */

static uint64_t interval_ms(void)
{
    long d = fa__opt.purge_delay_ms;
    uint64_t iv = d > 0 ? (uint64_t)d / 2 : 500;
    if (iv < 10)
        iv = 10;
    if (iv > 5000)
        iv = 5000;
    return iv;
}

static void tick(void)
{
    fa__central_drain(true);
    if (fa__opt.purge_delay_ms >= 0)
        fa__ph_purge(false);
    __atomic_add_fetch(&fa__scavenge_epoch, 1, __ATOMIC_RELAXED);
}

static void *background_main(void *arg)
{
    (void)arg;
    for (;;) {
        uint64_t iv = interval_ms();
        struct timespec ts = {.tv_sec = (time_t)(iv / 1000), .tv_nsec = (long)(iv % 1000) * 1000000};
        nanosleep(&ts, NULL);
        tick();
    }
    return NULL;
}

static void start_background(void)
{
    if (__atomic_exchange_n(&background_state, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 << 10);
    if (pthread_create(&t, &attr, background_main, NULL) != 0)
        __atomic_store_n(&background_state, 0, __ATOMIC_RELEASE);
    pthread_attr_destroy(&attr);
}

/* A child of fork has no background thread; it starts one when needed. */
void fa__decay_after_fork_child(void) FA_HIDDEN;
void fa__decay_after_fork_child(void)
{
    background_state = 0;
}

void fa__decay_maybe(void) FA_HIDDEN;
void fa__decay_maybe(void)
{
    if (fa__opt.background) {
        if (FA_UNLIKELY(__atomic_load_n(&background_state, __ATOMIC_RELAXED) == 0))
            start_background();
        return;
    }
    uint64_t now = fa__now_ms();
    uint64_t due = __atomic_load_n(&next_tick_ms, __ATOMIC_RELAXED);
    if (now < due)
        return;
    /* One thread runs the tick; the others go on. */
    if (!__atomic_compare_exchange_n(&next_tick_ms, &due, now + interval_ms(), false,
                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return;
    tick();
}

size_t fa_trim(void)
{
    fa__ensure_init();
    fa__tc_flush_mine();
    fa__central_drain(false);
    return fa__ph_purge(true);
}

void fa_set_limit(size_t bytes)
{
    fa__ensure_init();
    __atomic_store_n(&fa__opt.limit, bytes, __ATOMIC_RELAXED);
}

static const struct {
    const char *name;
    enum { OPT_SIZE, OPT_LONG, OPT_BOOL, OPT_INT } type;
    size_t off;
} options[] = {
    {"purge_delay_ms", OPT_LONG, offsetof(struct fa__options, purge_delay_ms)},
    {"purge_madv_free", OPT_BOOL, offsetof(struct fa__options, purge_madv_free)},
    {"hugepages", OPT_BOOL, offsetof(struct fa__options, hugepages)},
    {"background", OPT_INT, offsetof(struct fa__options, background)},
    {"limit", OPT_SIZE, offsetof(struct fa__options, limit)},
    {"thread_cache_bytes", OPT_SIZE, offsetof(struct fa__options, thread_cache_bytes)},
    {"thread_cache_max", OPT_SIZE, offsetof(struct fa__options, thread_cache_max)},
};

int fa_option_set(const char *name, long long value)
{
    fa__ensure_init();
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) {
        if (strcmp(name, options[i].name) != 0)
            continue;
        char *field = (char *)&fa__opt + options[i].off;
        switch (options[i].type) {
        case OPT_SIZE:
            if (value < 0)
                return EINVAL;
            __atomic_store_n((size_t *)field, (size_t)value, __ATOMIC_RELAXED);
            break;
        case OPT_LONG:
            if (value < -1)
                return EINVAL;
            __atomic_store_n((long *)field, (long)value, __ATOMIC_RELAXED);
            break;
        case OPT_BOOL:
            if (value != 0 && value != 1)
                return EINVAL;
            __atomic_store_n((bool *)field, value != 0, __ATOMIC_RELAXED);
            break;
        case OPT_INT:
            if (value != 0 && value != 1)
                return EINVAL;
            __atomic_store_n((int *)field, (int)value, __ATOMIC_RELAXED);
            break;
        }
        /* A thread whose cache is over a smaller bound sheds it soon. */
        __atomic_add_fetch(&fa__scavenge_epoch, 1, __ATOMIC_RELAXED);
        return 0;
    }
    return EINVAL;
}

int fa_option_get(const char *name, long long *value)
{
    fa__ensure_init();
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) {
        if (strcmp(name, options[i].name) != 0)
            continue;
        const char *field = (const char *)&fa__opt + options[i].off;
        switch (options[i].type) {
        case OPT_SIZE: *value = (long long)*(const size_t *)field; break;
        case OPT_LONG: *value = *(const long *)field; break;
        case OPT_BOOL: *value = *(const bool *)field; break;
        case OPT_INT: *value = *(const int *)field; break;
        }
        return 0;
    }
    return EINVAL;
}

void fa_stats(fa_stats_t *out)
{
    fa__ensure_init();
    memset(out, 0, sizeof *out);
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
}

#ifdef FA_OVERRIDE
/* glibc's name: returns 1 when memory was given back. */
__attribute__((visibility("default"))) int malloc_trim(size_t pad)
{
    (void)pad;
    return fa_trim() > 0;
}
#endif
