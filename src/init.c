/* Start-up, fork safety, the lock's slow path and diagnostics.
 *
 * Initialisation is lazy: the first allocation of the process (which may
 * come from a constructor before main, or from the dynamic loader) runs it.
 * It maps memory and reads the environment, nothing that can allocate, so a
 * nested call cannot find the allocator half built. */
#include "internal.h"
#include "central.h"
#include "meta.h"
#include "pageheap.h"
#include "sizeclass.h"
#include "tcache.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int fa__initialized;
struct fa__options fa__opt = {
    .thread_cache_bytes = (size_t)2 << 20,
    .thread_cache_max = (size_t)64 << 20,
    .purge_delay_ms = 1000,
};

void fa__decay_after_fork_child(void) FA_HIDDEN;

static fa__lock_t init_lock = FA_LOCK_INIT;
static int atfork_registered;

void fa__lock_slow(fa__lock_t *l)
{
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (__atomic_load_n(&l->v, __ATOMIC_RELAXED) == 0 &&
                __atomic_exchange_n(&l->v, 1, __ATOMIC_ACQUIRE) == 0)
                return;
            fa__cpu_relax();
        }
        /* The holder may be descheduled (more threads than cores): let it
         * run instead of burning our time slice. */
        sched_yield();
    }
}

/* Fork: hold every lock across fork() so the child gets consistent
 * structures, whatever the other threads of the parent were doing. */
static void fork_prepare(void)
{
    /* The pools first: they take the metadata lock below their own. */
    fa__pool_fork_prepare();
    fa__tc_lock_registry();
    fa__central_lock_all();
    fa__lock(&fa__ph_lock);
    fa__lock(&fa__meta_lock);
}

static void fork_unlock_heap(void)
{
    fa__unlock(&fa__meta_lock);
    fa__unlock(&fa__ph_lock);
    fa__central_unlock_all();
    fa__tc_unlock_registry();
}

static void fork_release(void)
{
    fork_unlock_heap();
    fa__pool_fork_release(0);
}

static void fork_child(void)
{
    fa__ph_after_fork_child();
    fork_unlock_heap();
    fa__pool_fork_release(1);
    fa__decay_after_fork_child();
}

static size_t parse_size(const char *s, size_t dflt)
{
    if (s == NULL || *s == '\0')
        return dflt;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end != '\0') {
        fa__diag("fastalloc: ignoring malformed size '%s'", s);
        return dflt;
    }
    return (size_t)v;
}

static long parse_long(const char *s, long dflt)
{
    if (s == NULL || *s == '\0')
        return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < -1) {
        fa__diag("fastalloc: ignoring malformed number '%s'", s);
        return dflt;
    }
    return v;
}

void fa__global_init(void)
{
    fa__lock(&init_lock);
    if (!fa__initialized) {
        fa__opt.thread_cache_bytes =
            parse_size(getenv("FASTALLOC_THREAD_CACHE_BYTES"), fa__opt.thread_cache_bytes);
        fa__opt.thread_cache_max =
            parse_size(getenv("FASTALLOC_THREAD_CACHE_MAX"), fa__opt.thread_cache_max);
        fa__opt.limit = parse_size(getenv("FASTALLOC_LIMIT"), 0);
        fa__opt.purge_delay_ms = parse_long(getenv("FASTALLOC_PURGE_DELAY_MS"), fa__opt.purge_delay_ms);
        fa__opt.hugepages = parse_long(getenv("FASTALLOC_HUGEPAGES"), 0) == 1;
        fa__opt.background = parse_long(getenv("FASTALLOC_BACKGROUND"), 0) == 1;
        const char *pm = getenv("FASTALLOC_PURGE");
        fa__opt.purge_madv_free = pm != NULL && strcmp(pm, "free") == 0;
        fa__sizeclass_init();
        fa__ph_init();
        fa__central_init();
        fa__tc_init();
        __atomic_store_n(&fa__initialized, 1, __ATOMIC_RELEASE);
    }
    fa__unlock(&init_lock);
    /* pthread_atfork may allocate, so it runs after the allocator is ready. */
    if (__atomic_exchange_n(&atfork_registered, 1, __ATOMIC_ACQ_REL) == 0)
        pthread_atfork(fork_prepare, fork_release, fork_child);
}

static void vdiag(const char *fmt, va_list ap)
{
    char buf[256];
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof buf - 2)
        n = sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
}

void fa__diag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdiag(fmt, ap);
    va_end(ap);
}

void fa__fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdiag(fmt, ap);
    va_end(ap);
    abort();
}
