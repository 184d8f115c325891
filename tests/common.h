/*
 * Helpers shared by the tests (tests/util.h) and the benchmark programs
 * (bench/bench_common.h): one random generator, one RSS reader, one clock,
 * one way to fail, and values the compiler cannot see through.
 *
 * Header only, and nothing here calls malloc: the benchmarks measure whatever
 * allocator was preloaded, and a harness that allocated for itself would
 * disturb what it measures (or crash with a broken allocator before it could
 * say so).
 */
#ifndef FA_COMMON_H
#define FA_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* x, laundered so that the compiler knows nothing about it (no constant
 * folding of impossible sizes into warnings, no elision of calls). */
static inline size_t opaque(size_t x)
{
    __asm__ __volatile__("" : "+r"(x));
    return x;
}

static inline void *opaque_ptr(void *p)
{
    __asm__ __volatile__("" : "+r"(p) : : "memory");
    return p;
}

/* ---- random numbers: splitmix64.  Any 64-bit state is a good seed (zero
 * included), so callers may seed with counters and thread numbers; mix64 is
 * its output function, also good for hashing a seed into a tag. */
static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* The next number of the sequence; one state per thread. */
static inline uint64_t rng_next(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ull;
    return mix64(*state);
}

/* Uniform in [0, n) (n small next to 2^64, so the modulo bias is
 * negligible). */
static inline uint64_t rng_below(uint64_t *state, uint64_t n)
{
    return rng_next(state) % n;
}

/* Uniform in [lo, hi]. */
static inline size_t rng_range(uint64_t *state, size_t lo, size_t hi)
{
    return lo + (size_t)rng_below(state, (uint64_t)(hi - lo) + 1);
}

/* ---- time: CLOCK_MONOTONIC in seconds, for timings and deadlines. */
static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- resident set size in bytes (0 when it cannot be read), read with
 * open/read on a stack buffer.  Two sources, one reader:
 *  - exact (smaps_rollup): counts present pages by walking the page tables.
 *    Tests use it: the kernel's running counters, which threads update in
 *    batches, once showed a 64 MB munmap as a 48 MB drop on a loaded
 *    machine.  It costs about 0.5 ms at 64 MiB resident and 4 ms at 1 GiB,
 *    with the address-space lock held;
 *  - counters (statm): a few microseconds, never blocks a page fault.  The
 *    benchmarks' sampling loops use them, so that sampling every 10 ms does
 *    not slow what they measure (their peak comes from the kernel's own
 *    maxrss, exact).
 * statm is also the fallback for kernels older than 4.14. */
static inline size_t read_statm_rss(char *buf, size_t cap)
{
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *end;
    strtoull(buf, &end, 10); /* total program size */
    unsigned long long res = strtoull(end, NULL, 10);
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

enum rss_source { RSS_EXACT, RSS_COUNTERS };

/* A field of /proc/self/smaps_rollup in bytes ("\nRss:", "\nAnonymous:"),
 * or (size_t)-1 when the kernel lacks the file or the field. */
static inline size_t smaps_rollup_bytes(const char *field)
{
    char buf[4096];
    int fd = open("/proc/self/smaps_rollup", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return (size_t)-1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return (size_t)-1;
    buf[n] = '\0';
    char *f = strstr(buf, field);
    return f != NULL ? (size_t)strtoull(f + strlen(field), NULL, 10) * 1024 : (size_t)-1;
}

static inline size_t rss_read(enum rss_source src)
{
    char buf[4096];
    if (src == RSS_EXACT) {
        size_t rss = smaps_rollup_bytes("\nRss:");
        if (rss != (size_t)-1)
            return rss;
    }
    return read_statm_rss(buf, sizeof buf);
}

/* The tests' reader: exact. */
static inline size_t rss_bytes(void)
{
    return rss_read(RSS_EXACT);
}

/* ---- failing.  The message is formatted on the stack and written with one
 * write(2): no stdio buffer and no malloc, so it gets out even when the
 * allocator under test is broken, and lines from two threads do not mix.
 * _exit: other threads and atexit handlers can neither hide nor delay the
 * failure. */

/* Prefix of die()'s messages; main() sets it to the program's name. */
static const char *die_prefix = "";

__attribute__((noreturn, format(printf, 3, 0), unused))
static void die_v(int code, const char *head, const char *fmt, va_list ap)
{
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "%s", head);
    if (n < 0 || n > (int)sizeof buf - 2)
        n = n < 0 ? 0 : (int)sizeof buf - 2;
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    if (m > 0)
        n += m;
    if (n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    if (write(2, buf, (size_t)n) < 0) { /* nothing left to do */
    }
    _exit(code);
}

/* "<die_prefix>: <message>" on stderr, then exit with status code. */
__attribute__((noreturn, format(printf, 2, 3), unused))
static void die(int code, const char *fmt, ...)
{
    char head[128];
    snprintf(head, sizeof head, "%s: ", die_prefix);
    va_list ap;
    va_start(ap, fmt);
    die_v(code, head, fmt, ap);
}

#endif
