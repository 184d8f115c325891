/* Helpers for the tests: byte patterns, sizes from the environment, a team
 * of threads, and the helpers shared with the benchmarks (common.h: random
 * numbers, RSS, clock, opaque values). */
#ifndef FA_TEST_UTIL_H
#define FA_TEST_UTIL_H

#include "check.h"
#include "common.h"

#include <fastalloc.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the pattern helpers assume a little-endian machine"
#endif

/* Built with a sanitizer: tests scale their work down. */
#if defined(__SANITIZE_ADDRESS__) || defined(FA_TEST_SANITIZED)
#define FA_TEST_SLOW 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FA_TEST_SLOW 1
#endif
#endif
#ifndef FA_TEST_SLOW
#define FA_TEST_SLOW 0
#endif

/* Built with ThreadSanitizer (FA_TEST_SLOW is set for it too): its shadow
 * memory stays resident, so RSS bounds are wider there. */
#if defined(__SANITIZE_THREAD__)
#define TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TEST_TSAN 1
#endif
#endif
#ifndef TEST_TSAN
#define TEST_TSAN 0
#endif

/* What the allocator counts resident of its own: spans cut into blocks,
 * large blocks, free pages not purged yet, and its records.  The
 * process's resident set holds all of it; under ThreadSanitizer, whose
 * shadow of every page touched stays resident, purged or not, a test
 * bounds this instead of the resident set, to the same figure. */
static inline size_t heap_resident_bytes(void)
{
    fa_stats_t st;
    fa_stats_get(&st);
    return st.in_spans + st.large + st.dirty + st.metadata;
}

/* ---- patterns: byte k of a block with seed s is a fixed function of (s, k),
 * so a prefix keeps its pattern when a block is resized, and two blocks with
 * different seeds that overlap are caught. */
static inline uint64_t pat_word(uint64_t seed, size_t j)
{
    /* word j is number j + 1 of the random sequence that starts at seed */
    return mix64(seed + (uint64_t)(j + 1) * 0x9e3779b97f4a7c15ull);
}

static inline uint8_t pat_byte(uint64_t seed, size_t k)
{
    return (uint8_t)(pat_word(seed, k >> 3) >> ((k & 7) * 8));
}

/* Fill bytes [from, to) of p with the pattern of seed.  Tests fill blocks up
 * to their usable size, past the alloc_size the compiler knows: laundered,
 * so that _FORTIFY_SOURCE=3 does not take that for an overflow. */
static inline void pat_fill_range(void *p, size_t from, size_t to, uint64_t seed)
{
    unsigned char *b = opaque_ptr(p);
    size_t k = from;
    while (k < to && (k & 7) != 0) {
        b[k] = pat_byte(seed, k);
        k++;
    }
    for (; k + 8 <= to; k += 8) {
        uint64_t w = pat_word(seed, k >> 3);
        memcpy(b + k, &w, 8);
    }
    for (; k < to; k++)
        b[k] = pat_byte(seed, k);
}

static inline void pat_fill(void *p, size_t n, uint64_t seed)
{
    pat_fill_range(p, 0, n, seed);
}

/* Offset of the first byte in [0, n) that does not hold the pattern, or
 * (size_t)-1 when all do. */
static inline size_t pat_find_bad(const void *p, size_t n, uint64_t seed)
{
    const unsigned char *b = p;
    size_t k = 0;
    for (; k + 8 <= n; k += 8) {
        uint64_t w;
        memcpy(&w, b + k, 8);
        if (w != pat_word(seed, k >> 3))
            break;
    }
    for (; k < n; k++)
        if (b[k] != pat_byte(seed, k))
            return k;
    return (size_t)-1;
}

static inline int pat_ok(const void *p, size_t n, uint64_t seed)
{
    return pat_find_bad(p, n, seed) == (size_t)-1;
}

static inline int all_bytes(const void *p, size_t n, unsigned char v)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != v)
            return 0;
    return 1;
}

static inline size_t env_size(const char *name, size_t dflt)
{
    const char *s = getenv(name);
    if (s == NULL || *s == '\0')
        return dflt;
    return (size_t)strtoull(s, NULL, 10);
}

/* Runs fn((void *)(first + i)) in n threads at once, i from 0 to n - 1,
 * each with stack bytes of stack (0: the default), and returns once all of
 * them have ended.  A thread that cannot be started or joined fails the
 * test. */
__attribute__((unused)) static void run_threads(size_t n, void *(*fn)(void *), uintptr_t first, size_t stack)
{
    pthread_t t[n]; /* on the stack: no allocation besides the test's own */
    pthread_attr_t attr;
    if (stack != 0) {
        CHECK(pthread_attr_init(&attr) == 0 && pthread_attr_setstacksize(&attr, stack) == 0);
    }
    for (size_t i = 0; i < n; i++)
        CHECK(pthread_create(&t[i], stack != 0 ? &attr : NULL, fn, (void *)(first + i)) == 0);
    for (size_t i = 0; i < n; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    if (stack != 0)
        pthread_attr_destroy(&attr);
}

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* Bytes of [p, p + n) that are resident (mincore), at most 64 MiB; p page
 * aligned. */
static inline size_t resident_bytes(const void *p, size_t n)
{
    static unsigned char vec[(64u << 20) / 4096];
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), pages = (n + pg - 1) / pg;
    CHECK(pages <= sizeof vec);
    CHECK(mincore((void *)p, n, vec) == 0);
    size_t r = 0;
    for (size_t i = 0; i < pages; i++)
        r += vec[i] & 1;
    return r * pg;
}

/* ---- the hardened library (docs/SECURITY.md).  A suite built twice
 * (tests/CMakeLists.txt, fa_test SECURE) is compiled with
 * FA_TEST_SECURE_LIB=1 for the program linked against libfastalloc-secure,
 * and adapts its expectations with these, fixed here from SECURITY.md and
 * the sources named, never read from the library under test:
 *   - with its `secure_tails` option on (FASTALLOC_SECURE_TAILS=1, which
 *     fa_test TAILS sets for a third run of a suite), every small request
 *     gains a tail of TEST_TAIL bytes (02-records/tail.h: 2 bytes of
 *     record and 8 of canary), so that a request of n bytes lands in the
 *     size class of n + TEST_TAIL, and requests of up to 256 KiB -
 *     TEST_TAIL bytes are small; malloc_usable_size says the bytes asked
 *     for, or 16 for fewer (test_tails_on); without it, TEST_TAIL is 0;
 *   - a large block has a guard page of TEST_GUARD bytes after it (the page
 *     heap's 8 KiB page), so that two large blocks cut one after the other
 *     lie TEST_GUARD bytes apart;
 *   - a large block that is freed waits, guarded, in a keeper the threads
 *     share unless it is bigger than TEST_SHARED_MAX: fa_trim hands the
 *     keeper's blocks to the page heap (06-large/large.c). */
#ifndef FA_TEST_SECURE_LIB
#define FA_TEST_SECURE_LIB 0
#endif
/* The largest small block (00-base/config.h, FA_MAX_SMALL): 32 KiB in the
 * default build, whose larger blocks are runs of whole pages; 256 KiB in
 * the hardened one, which keeps its checks on the classes' blocks. */
#define TEST_MAX_SMALL (FA_TEST_SECURE_LIB ? (size_t)256 << 10 : (size_t)32 << 10)
#if FA_TEST_SECURE_LIB
/* Whether this process runs with the hardened build's tails: the
 * environment it was started with, read each time (a child may set it). */
__attribute__((unused)) static bool test_tails_on(void)
{
    const char *e = getenv("FASTALLOC_SECURE_TAILS");
    return e != NULL && strcmp(e, "1") == 0;
}
#define TEST_TAIL (test_tails_on() ? (size_t)10 : (size_t)0)
#define TEST_GUARD ((size_t)8192)
#define TEST_SHARED_MAX ((size_t)16 << 20)
#else
#define test_tails_on() false
#define TEST_TAIL ((size_t)0)
#define TEST_GUARD ((size_t)0)
#endif

/* The usable size of a block asked for n bytes in the hardened library
 * with tails: exactly n, or 16 for fewer (a free block's link and mark
 * fill its first 16 bytes). */
__attribute__((unused)) static size_t test_secure_usable(size_t n)
{
    return n < 16 ? 16 : n;
}

#endif
