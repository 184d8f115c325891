/*
 * Helpers shared by the benchmark programs in bench/ (header only: each
 * program is one .c file, see bench/CMakeLists.txt).
 *
 * The programs link against libc and pthread only, never against fastalloc,
 * so one binary measures every allocator through LD_PRELOAD.  Rules they all
 * follow:
 *   - Failures are reported without malloc (the allocator under test may be
 *     broken): bench_die() formats on the stack and write()s.  Exit status 3
 *     means "the allocator misbehaved" (VALIDATION FAILED), 2 a usage error.
 *   - The harness's own arrays (pointer arrays, rings, samples) are mmap'd,
 *     so the only malloc/free calls are the measured ones.
 *   - VmRSS is read with open/read on a stack buffer (no stdio, no malloc),
 *     so sampling it does not disturb the allocator.
 *   - Output: one JSON line on stdout, with "allocator" (who served malloc,
 *     see bench_detect_allocator) and "valid": true.
 */
#ifndef FA_BENCH_COMMON_H
#define FA_BENCH_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Weak references, resolved against whatever allocator was preloaded (NULL
 * when none defines them): only used to tell who served malloc. */
extern int fa_owns(const void *ptr) __attribute__((weak));
extern _Bool mi_is_in_heap_region(const void *p) __attribute__((weak));
extern int MallocExtension_GetOwnership(const void *p) __attribute__((weak));
extern int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp,
                   size_t newlen) __attribute__((weak));

static const char *bench_name = "bench";

static void bench_die(int code, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3), unused));
static void bench_die(int code, const char *fmt, ...)
{
    char buf[640];
    va_list ap;
    int n = snprintf(buf, sizeof buf, "%s: ", bench_name);
    va_start(ap, fmt);
    n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    if (write(2, buf, (size_t)n) < 0) { /* nothing left to do */
    }
    _exit(code);
}

#define BENCH_FAIL(...) bench_die(3, "VALIDATION FAILED: " __VA_ARGS__)

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((unused)) static void bench_sleep_until(double t)
{
    for (;;) {
        double d = t - bench_now();
        if (d <= 0)
            return;
        struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static inline uint64_t bench_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* Busy-wait hint. */
static inline void bench_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("pause" ::: "memory");
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#else
    __asm__ volatile("" ::: "memory");
#endif
}

/* splitmix64: a small, good, seedable generator (one per thread). */
static inline uint64_t bench_rand(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ull;
    return bench_mix64(*state);
}

/* Uniform in [lo, hi] (hi - lo small, so the modulo bias is negligible). */
static inline size_t bench_rand_range(uint64_t *state, size_t lo, size_t hi)
{
    return lo + (size_t)(bench_rand(state) % (uint64_t)(hi - lo + 1));
}

/* "100000", "100k", "2M", "1.5G" (powers of ten). */
__attribute__((unused)) static uint64_t bench_count(const char *opt, const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mult = 1;
    if (*end == 'k' || *end == 'K')
        mult = 1e3, end++;
    else if (*end == 'm' || *end == 'M')
        mult = 1e6, end++;
    else if (*end == 'g' || *end == 'G')
        mult = 1e9, end++;
    if (errno || end == s || *end != '\0' || v < 0 || v * mult > 1e15)
        bench_die(2, "bad value for %s: '%s'", opt, s);
    return (uint64_t)(v * mult + 0.5);
}

/* Harness memory, zeroed and (populate != 0) faulted in now, so that it
 * sits in the RSS baseline instead of growing during the measurement. */
__attribute__((unused)) static void *bench_map(size_t bytes, int populate)
{
    if (bytes == 0)
        bytes = 1;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
    if (p == MAP_FAILED)
        bench_die(2, "mmap of %zu bytes failed: %s", bytes, strerror(errno));
    return p;
}

__attribute__((unused)) static void bench_unmap(void *p, size_t bytes)
{
    if (p != NULL)
        munmap(p, bytes ? bytes : 1);
}

/* VmRSS of this process in KiB, read without malloc. */
__attribute__((unused)) static long bench_vmrss_kib(void)
{
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    const char *p = strstr(buf, "\nVmRSS:");
    if (p == NULL)
        return -1;
    return strtol(p + 7, NULL, 10);
}

/* Who served malloc: fastalloc, mimalloc, tcmalloc, jemalloc, else glibc. */
__attribute__((unused)) static const char *bench_detect_allocator(void)
{
    const char *name = "glibc";
    void *p = malloc(64);
    if (fa_owns && fa_owns(p))
        name = "fastalloc";
    else if (mi_is_in_heap_region && mi_is_in_heap_region(p))
        name = "mimalloc";
    else if (MallocExtension_GetOwnership && MallocExtension_GetOwnership(p) == 1 /* kOwned */)
        name = "tcmalloc";
    else if (mallctl)
        name = "jemalloc";
    free(p);
    return name;
}

/* A fastalloc entry point, found at run time (the program does not link
 * against fastalloc); dies with exit 2 when not running under fastalloc. */
__attribute__((unused)) static void *bench_fa_symbol(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    if (f == NULL)
        bench_die(2, "%s not found: this mode needs fastalloc (LD_PRELOAD=.../libfastalloc.so)", name);
    return f;
}

/* Stamps: an 8-byte tag at the start of a block and its complement in the
 * last 8 bytes (blocks of 9 to 15 bytes: its low byte in the last byte).  Checked right
 * before the block is freed, they catch blocks that overlap, are too short,
 * or were handed out twice. */
static inline uint64_t bench_tag(uint64_t base, uint64_t i)
{
    return (base | 1) + i * 0x9e3779b97f4a7c16ull; /* odd: never 0 */
}

static inline void bench_stamp(unsigned char *p, size_t n, uint64_t tag)
{
    uint64_t t = ~tag;
    memcpy(p, &tag, 8);
    if (n >= 16)
        memcpy(p + n - 8, &t, 8);
    else
        p[n - 1] = (unsigned char)t;
}

static inline int bench_stamp_ok(const unsigned char *p, size_t n, uint64_t tag)
{
    uint64_t h, t;
    memcpy(&h, p, 8);
    if (h != tag)
        return 0;
    if (n < 16)
        return p[n - 1] == (unsigned char)~tag;
    memcpy(&t, p + n - 8, 8);
    return t == ~tag;
}

/* Full pattern: every byte between the stamps, derived from the tag. */
static inline unsigned char bench_fill_byte(uint64_t tag)
{
    return (unsigned char)(tag >> 56) | 1;
}

__attribute__((unused)) static void bench_fill(unsigned char *p, size_t n, uint64_t tag)
{
    if (n > 16)
        memset(p + 8, bench_fill_byte(tag), n - 16);
    bench_stamp(p, n, tag);
}

/* Index of the first wrong byte of a filled block, or -1. */
__attribute__((unused)) static long bench_fill_bad(const unsigned char *p, size_t n, uint64_t tag)
{
    if (!bench_stamp_ok(p, n, tag))
        return 0;
    const unsigned char b = bench_fill_byte(tag);
    const uint64_t word = 0x0101010101010101ull * b;
    size_t i = 8, end = n > 16 ? n - 8 : 8;
    for (; i + 8 <= end; i += 8) { /* a word at a time, then find the byte */
        uint64_t v;
        memcpy(&v, p + i, 8);
        if (v != word)
            break;
    }
    for (; i < end; i++)
        if (p[i] != b)
            return (long)i;
    return -1;
}

#endif
