/*
 * Shared definitions of the allocator's layers.  Each layer has its own
 * header; this one holds the constants, the lock and the helpers they all use.
 *
 * Lock order (a thread may hold several only in this order):
 *   thread registry  ->  central[cls] (ascending)  ->  page heap  ->  metadata
 */
#ifndef FA_INTERNAL_H
#define FA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define FA_LIKELY(x) __builtin_expect(!!(x), 1)
#define FA_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define FA_HIDDEN __attribute__((visibility("hidden")))
#define FA_NOINLINE __attribute__((noinline))
#define FA_INLINE static inline __attribute__((always_inline))
#define FA_COLD __attribute__((cold, noinline))
#define FA_CACHELINE 64
#define FA_ALIGNED_CL __attribute__((aligned(FA_CACHELINE)))

/* Allocator pages are 8 KiB: two OS pages, so one page-map entry covers more
 * memory and spans of small objects waste less at their tail. */
#define FA_PAGE_SHIFT 13
#define FA_PAGE_SIZE ((size_t)1 << FA_PAGE_SHIFT)

/* Blocks of at most this many bytes go through the size classes and thread
 * caches; bigger ones are spans of their own. */
#define FA_MAX_SMALL ((size_t)256 << 10)

/* Requests above this are impossible: the size could not be rounded up to
 * whole pages without wrapping. */
#define FA_MAX_REQUEST ((size_t)PTRDIFF_MAX - ((size_t)64 << 20))

/* Every block of 16 bytes or more is aligned to this (max_align_t). */
#define FA_MIN_ALIGN 16

/* ---- lock: a spinlock that yields the CPU when it does not get the lock
 * quickly.  Critical sections are short; a futex would add a syscall to the
 * uncontended unlock path of nothing. ---- */
static inline void fa__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

typedef struct {
    volatile int v;
} fa__lock_t;

#define FA_LOCK_INIT {0}

void fa__lock_slow(fa__lock_t *l) FA_HIDDEN;

FA_INLINE void fa__lock(fa__lock_t *l)
{
    if (FA_LIKELY(__atomic_exchange_n(&l->v, 1, __ATOMIC_ACQUIRE) == 0))
        return;
    fa__lock_slow(l);
}

FA_INLINE void fa__unlock(fa__lock_t *l)
{
    __atomic_store_n(&l->v, 0, __ATOMIC_RELEASE);
}

/* ---- diagnostics: one line on stderr, written without allocating ---- */
void fa__diag(const char *fmt, ...) FA_HIDDEN __attribute__((format(printf, 1, 2)));
_Noreturn void fa__fatal(const char *fmt, ...) FA_HIDDEN __attribute__((format(printf, 1, 2)));

/* ---- initialisation ---- */
extern int fa__initialized FA_HIDDEN;
void fa__global_init(void) FA_HIDDEN;
/* The object pools' locks across fork() (pool.c). */
void fa__pool_fork_prepare(void) FA_HIDDEN;
void fa__pool_fork_release(int child) FA_HIDDEN;

FA_INLINE void fa__ensure_init(void)
{
    if (FA_UNLIKELY(!__atomic_load_n(&fa__initialized, __ATOMIC_ACQUIRE)))
        fa__global_init();
}

/* Options read once from the environment at initialisation. */
struct fa__options {
    size_t thread_cache_bytes; /* cap on what one thread cache may hold */
    size_t thread_cache_max;   /* cap on all thread caches together */
    long purge_delay_ms;       /* free pages go back after this; 0 now, -1 never */
    bool purge_madv_free;      /* purge with MADV_FREE instead of MADV_DONTNEED */
    bool hugepages;            /* ask for transparent huge pages */
    int background;            /* 1: a thread does the timed work */
    size_t limit;              /* bytes in use or resident; 0 = none */
};
extern struct fa__options fa__opt FA_HIDDEN;

#endif
