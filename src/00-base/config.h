/* Base layer: compiler macros and the constants every layer shares.
 *
 * Nothing here calls anything: this header, lock.h, diag.h, clock.h and
 * options.h are the bottom of the layer table in docs/DESIGN.md, and may be
 * included by every file. */
#ifndef FA_BASE_CONFIG_H
#define FA_BASE_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define FA_LIKELY(x) __builtin_expect(!!(x), 1)
#define FA_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define FA_HIDDEN __attribute__((visibility("hidden")))
#define FA_NOINLINE __attribute__((noinline))
/* A function whose reads of other threads' counters race by design (a
 * statistic read while its owner updates it with plain stores, which the
 * owner's fast path keeps plain): ThreadSanitizer does not watch it.  Kept
 * out of line, so that nothing inlined into it loses its checks unseen. */
#define FA_RACY_READER __attribute__((noinline, no_sanitize("thread")))
/* The entry points whose fast paths are the hot path start on a cache line,
 * in .text.hot, which the linker puts first: where they landed otherwise
 * moved with every unrelated change to the code before them, and so did
 * their speed, with the same instructions (docs/HISTORY.md has the
 * benchmark rows that moved). */
#define FA_HOT_ENTRY __attribute__((hot, aligned(64)))
#define FA_INLINE static inline __attribute__((always_inline))
#define FA_COLD __attribute__((cold, noinline))
#define FA_CACHELINE 64
#define FA_ALIGNED_CL __attribute__((aligned(FA_CACHELINE)))

/* Allocator pages are 8 KiB: two OS pages, so one page-map entry covers more
 * memory and spans of small objects waste less at their tail. */
#define FA_PAGE_SHIFT 13
#define FA_PAGE_SIZE ((size_t)1 << FA_PAGE_SHIFT)

/* The hardened build (libfastalloc-secure.so): SECURITY.md. */
#ifndef FA_SECURE
#define FA_SECURE 0
#endif

/* Blocks of at most FA_MAX_SMALL bytes go through the size classes and
 * thread caches; bigger ones are runs of whole pages of their own, cut
 * from the page heap that every size shares (06-large).  32 KiB: above
 * it, rounding to the 8 KiB page wastes no more than the classes' four
 * steps a doubling did, and a run a program frees serves any size that
 * fits, where a class's span served its class alone (DESIGN.md, "Page
 * runs").  The hardened build keeps classes up to 256 KiB: its checks on
 * free (the free mark, the tails, the zeroing) are the classes', and each
 * run there costs a guard page. */
#ifndef FA_MAX_SMALL_SHIFT
#if FA_SECURE
#define FA_MAX_SMALL_SHIFT 18
#else
#define FA_MAX_SMALL_SHIFT 15
#endif
#endif
#define FA_MAX_SMALL ((size_t)1 << FA_MAX_SMALL_SHIFT)

/* Requests above this are impossible: the size could not be rounded up to
 * whole pages without wrapping. */
#define FA_MAX_REQUEST ((size_t)PTRDIFF_MAX - ((size_t)64 << 20))

/* A statistics counter that one thread writes and any thread may read
 * (10-stats/stats.c reads with relaxed atomic loads): one add to memory.  A
 * ThreadSanitizer build makes the write an atomic store, which costs two
 * more instructions but is not a race to it. */
#if defined(__SANITIZE_THREAD__)
#define FA_COUNT_ADD(c, n) __atomic_store_n(&(c), (c) + (n), __ATOMIC_RELAXED)
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FA_COUNT_ADD(c, n) __atomic_store_n(&(c), (c) + (n), __ATOMIC_RELAXED)
#endif
#endif
#ifndef FA_COUNT_ADD
#define FA_COUNT_ADD(c, n) ((c) += (n))
#endif

/* A word that changes once, from 0 to its final value, read where the
 * compiler should fold the load into the instruction that uses it (which
 * it does not do with an atomic load): a plain load, and a relaxed atomic
 * one under ThreadSanitizer, to which it is then no race. */
#if defined(__SANITIZE_THREAD__)
#define FA_ONCE_WORD(w) __atomic_load_n(&(w), __ATOMIC_RELAXED)
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FA_ONCE_WORD(w) __atomic_load_n(&(w), __ATOMIC_RELAXED)
#endif
#endif
#ifndef FA_ONCE_WORD
#define FA_ONCE_WORD(w) (w)
#endif

/* Every block of 16 bytes or more is aligned to this (max_align_t). */
#define FA_MIN_ALIGN 16

#endif
