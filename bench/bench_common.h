/*
 * Helpers shared by the benchmark programs in bench/ (header only: each
 * program is one .c file, see bench/CMakeLists.txt).  The random generator,
 * the RSS reader, the clock and die() are tests/common.h's, shared with the
 * tests.
 *
 * The programs link against libc and pthread only, never against fastalloc,
 * so one binary measures every allocator through LD_PRELOAD.  They include
 * fastalloc.h for its types and prototypes only (it declares fa_ names and
 * nothing else, so malloc stays whatever the preload makes it) and find the
 * fa_ functions they call with dlsym.  Rules they all follow:
 *   - Failures are reported without malloc (the allocator under test may be
 *     broken): die() formats on the stack and write()s.  Exit status 3
 *     means "the allocator misbehaved" (VALIDATION FAILED), 2 a usage error.
 *   - The harness's own arrays (pointer arrays, rings, samples, thread ids)
 *     are mmap'd, so the only malloc/free calls are the measured ones.
 *   - RSS is read with open/read on a stack buffer (no stdio, no malloc),
 *     so sampling it does not call the allocator; from the kernel's
 *     counters (common.h, RSS_COUNTERS), a few microseconds a read.  A read
 *     that fails ends the program (exit 2): a missing value must not pass
 *     for a small one.
 *   - Output: one JSON line on stdout, with "allocator" (who served malloc,
 *     see bench_detect_allocator) and "checked": what the program verified,
 *     counted where the checks are done (struct bench_checked), so that
 *     run.py can compare the counts with the work it asked for.  A check
 *     that fails exits 3 before anything is printed; a program that printed
 *     a fixed "valid": true would say nothing about what it checked.
 */
#ifndef FA_BENCH_COMMON_H
#define FA_BENCH_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "fastalloc.h"

/* Weak references, resolved against whatever allocator was preloaded (NULL
 * when none defines them): only used to tell who served malloc.  fastalloc.h
 * declares fa_owns too; this declaration makes the reference weak, so the
 * programs still start without fastalloc. */
extern int fa_owns(const void *ptr) __attribute__((weak));
extern _Bool mi_is_in_heap_region(const void *p) __attribute__((weak));
extern int MallocExtension_GetOwnership(const void *p) __attribute__((weak));
extern int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp,
                   size_t newlen) __attribute__((weak));

#define BENCH_FAIL(...) die(3, "VALIDATION FAILED: " __VA_ARGS__)

__attribute__((unused)) static void bench_sleep_until(double t)
{
    for (;;) {
        double d = t - now_s();
        if (d <= 0)
            return;
        struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        nanosleep(&ts, NULL);
    }
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
        die(2, "bad value for %s: '%s'", opt, s);
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
        die(2, "mmap of %zu bytes failed: %s", bytes, strerror(errno));
    return p;
}

__attribute__((unused)) static void bench_unmap(void *p, size_t bytes)
{
    if (p != NULL)
        munmap(p, bytes ? bytes : 1);
}

/* RSS of this process in KiB, read without malloc by common.h's reader,
 * from the kernel's counters: the exact page-table walk the tests use would
 * slow the runs that sample it every 10 ms, and hold the lock their page
 * faults need.  A process always has pages resident, so 0 means the read
 * failed: the program stops there (exit 2) rather than report a value that
 * would pass for a tiny RSS. */
__attribute__((unused)) static long bench_rss_kib(void)
{
    size_t b = rss_read(RSS_COUNTERS);
    if (b == 0)
        die(2, "cannot read the RSS from /proc/self/statm");
    return (long)(b / 1024);
}

/* Whether the fastalloc that serves this process is the hardened build:
 * the file that defines the fa_owns calls bind to (the first in the search
 * order: the preload) is libfastalloc-secure.so*.  Both builds answer
 * fa_owns alike, and the bench has a column for each. */
static inline int bench_fastalloc_is_secure(void)
{
    void *f = dlsym(RTLD_DEFAULT, "fa_owns");
    Dl_info info;
    if (f == NULL || dladdr(f, &info) == 0 || info.dli_fname == NULL)
        return 0;
    const char *base = strrchr(info.dli_fname, '/');
    base = base != NULL ? base + 1 : info.dli_fname;
    return strncmp(base, "libfastalloc-secure.so", 22) == 0;
}

/* Who served malloc: fastalloc (fastalloc-secure for the hardened build),
 * mimalloc, tcmalloc, jemalloc, else glibc. */
__attribute__((unused)) static const char *bench_detect_allocator(void)
{
    const char *name = "glibc";
    void *p = malloc(64);
    if (fa_owns && fa_owns(p))
        name = bench_fastalloc_is_secure() ? "fastalloc-secure" : "fastalloc";
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
        die(2, "%s not found: this mode needs fastalloc (LD_PRELOAD=.../libfastalloc.so)", name);
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

/* Index of the first byte of p[from, end) that is not b, or -1. */
static inline long bench_bytes_bad(const unsigned char *p, size_t from, size_t end, unsigned char b)
{
    const uint64_t word = 0x0101010101010101ull * b;
    size_t i = from;
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

/* Index of the first wrong byte of a filled block, or -1. */
__attribute__((unused)) static long bench_fill_bad(const unsigned char *p, size_t n, uint64_t tag)
{
    if (!bench_stamp_ok(p, n, tag))
        return 0;
    return bench_bytes_bad(p, 8, n > 16 ? n - 8 : 8, bench_fill_byte(tag));
}

/* ---- what a program checked: the "checked" object of its output.  The
 * counts are kept where the checks are done (a check that fails exits 3, so
 * a count is the number of checks that passed), per thread, and summed at
 * the end; run.py compares them with the work it asked the program to do. */
struct bench_checked {
    uint64_t blocks; /* blocks checked right before their free (stamps at least) */
    uint64_t full;   /* of these, blocks checked in every byte */
    uint64_t bytes;  /* bytes compared by those full checks */
};

static inline void bench_checked_add(struct bench_checked *sum, const struct bench_checked *c)
{
    sum->blocks += c->blocks;
    sum->full += c->full;
    sum->bytes += c->bytes;
}

/* One fully checked block of n bytes: call after its check passed. */
static inline void bench_checked_full(struct bench_checked *c, size_t n)
{
    c->full++;
    c->bytes += n;
}

/* The "checked" member of the output line, with fields more in extra ("" or
 * ", \"name\": value..."); the printf format and its arguments. */
#define BENCH_CHECKED_FMT "\"checked\": {\"blocks\": %" PRIu64 ", \"full\": %" PRIu64 ", \"bytes\": %" PRIu64 "%s}"
#define BENCH_CHECKED_ARGS(c, extra) (c).blocks, (c).full, (c).bytes, (extra)

/* A block marked when allocated and checked right before its free: filled
 * entirely when full (every so many blocks, to catch overlaps that miss the
 * stamps), else only stamped (cheap enough for every block). */
static inline void bench_mark(unsigned char *p, size_t n, uint64_t tag, int full)
{
    if (full)
        bench_fill(p, n, tag);
    else
        bench_stamp(p, n, tag);
}

/* -1 when the block still holds what bench_mark(p, n, tag, full) wrote, else
 * the index of a wrong byte (0 for a wrong stamp).  A block that passes is
 * counted in *c. */
static inline long bench_check(const unsigned char *p, size_t n, uint64_t tag, int full,
                               struct bench_checked *c)
{
    long bad = full ? bench_fill_bad(p, n, tag) : bench_stamp_ok(p, n, tag) ? -1 : 0;
    if (bad < 0) {
        c->blocks++;
        if (full)
            bench_checked_full(c, n);
    }
    return bad;
}

/* Checks a block of thread id as bench_check does (counted in *c), then
 * frees it; exit 3 when it was overwritten. */
static inline void bench_check_free(int id, unsigned char *p, size_t n, uint64_t tag, int full,
                                    struct bench_checked *c)
{
    long bad = bench_check(p, n, tag, full, c);
    if (bad >= 0)
        BENCH_FAIL("thread %d: block %p (%zu bytes) was overwritten while live (byte %ld)", id, (void *)p,
                   n, bad);
    free(p);
}

/* ---- RSS samples over time, kept in harness memory: "series" in the
 * output, [seconds, MiB] pairs for the plots. */
struct bench_samples {
    double *t; /* seconds, on the program's clock */
    long *kib;
    size_t n, cap; /* samples past cap are dropped */
};

/* populate: fault the arrays in now, so that they sit in the RSS baseline. */
__attribute__((unused)) static void bench_samples_init(struct bench_samples *s, size_t cap, int populate)
{
    s->t = bench_map(cap * sizeof *s->t, populate);
    s->kib = bench_map(cap * sizeof *s->kib, populate);
    s->n = 0;
    s->cap = cap;
}

static inline void bench_sample(struct bench_samples *s, double t, long kib)
{
    if (s->n < s->cap) {
        s->t[s->n] = t;
        s->kib[s->n] = kib;
        s->n++;
    }
}

/* The elements of the "series" array (the brackets are the caller's). */
__attribute__((unused)) static void bench_print_samples(const struct bench_samples *s)
{
    for (size_t i = 0; i < s->n; i++)
        printf("%s[%.4f, %.2f]", i ? ", " : "", s->t[i], s->kib[i] / 1024.0);
}

/* ---- command line.  Every program takes long options only, each with an
 * argument, plus --help; one table describes them and bench_options()
 * parses them, so that all programs read and reject values the same way.
 * The table lives at file scope and points into opt, a static that holds
 * the defaults; main() copies what was parsed to the variables the measured
 * code reads, cfg in most programs (bench_options says why it copies). */
enum bench_opt_kind {
    OPT_COUNT,  /* uint64_t, in bench_count's syntax (100000, 100k, 2M, 1.5G) */
    OPT_SIZE,   /* size_t, the same syntax */
    OPT_LONG,   /* long, the same syntax */
    OPT_INT,    /* int, the same syntax */
    OPT_DOUBLE, /* double, read with strtod and not checked: a bad value reads
                   as 0, which the program's own range check refuses */
    OPT_STRING, /* const char *: the argument itself */
    OPT_CHOICE, /* int: the index of the argument among the words of choices */
};

struct bench_opt {
    const char *name;         /* without the leading "--" */
    enum bench_opt_kind kind;
    void *ptr;                /* where the value goes, of the kind's type */
    const char *choices;      /* OPT_CHOICE: the words, "reuse|window" */
    const char *hint;         /* OPT_CHOICE: "(hint)" added to the message
                                 for a bad word; NULL for none */
};

/* Entries of the table, several to a line.  The pointer must point to the
 * kind's type: _Generic refuses to compile any other, so an entry cannot
 * write an int into a size_t. */
#define BENCH_OPT_(name, kind, type, ptr) {(name), (kind), _Generic((ptr), type *: (ptr)), NULL, NULL}
#define COUNT_OPT(name, ptr) BENCH_OPT_(name, OPT_COUNT, uint64_t, ptr)
#define SIZE_OPT(name, ptr) BENCH_OPT_(name, OPT_SIZE, size_t, ptr)
#define LONG_OPT(name, ptr) BENCH_OPT_(name, OPT_LONG, long, ptr)
#define INT_OPT(name, ptr) BENCH_OPT_(name, OPT_INT, int, ptr)
#define DOUBLE_OPT(name, ptr) BENCH_OPT_(name, OPT_DOUBLE, double, ptr)
#define STRING_OPT(name, ptr) BENCH_OPT_(name, OPT_STRING, const char *, ptr)
/* choices: "word|word"; hint: NULL, or what a bad word's message adds. */
#define CHOICE_OPT(name, ptr, choices, hint) \
    {(name), OPT_CHOICE, _Generic((ptr), int *: (ptr)), (choices), (hint)}
#define OPT_END {NULL, 0, NULL, NULL, NULL}

#define BENCH_MAX_OPTS 16

/* The index of word among the '|'-separated words of choices, or -1. */
static inline int bench_choice(const char *choices, const char *word)
{
    size_t len = strlen(word);
    for (int i = 0;; i++) {
        const char *bar = strchr(choices, '|');
        size_t n = bar != NULL ? (size_t)(bar - choices) : strlen(choices);
        if (n == len && memcmp(choices, word, n) == 0)
            return i;
        if (bar == NULL)
            return -1;
        choices = bar + 1;
    }
}

static inline void bench_set_option(const struct bench_opt *o, const char *arg)
{
    char flag[64];
    snprintf(flag, sizeof flag, "--%s", o->name);
    switch (o->kind) {
    case OPT_COUNT: *(uint64_t *)o->ptr = bench_count(flag, arg); break;
    case OPT_SIZE: *(size_t *)o->ptr = (size_t)bench_count(flag, arg); break;
    case OPT_LONG: *(long *)o->ptr = (long)bench_count(flag, arg); break;
    case OPT_INT: *(int *)o->ptr = (int)bench_count(flag, arg); break;
    case OPT_DOUBLE: *(double *)o->ptr = strtod(arg, NULL); break;
    case OPT_STRING: *(const char **)o->ptr = arg; break;
    case OPT_CHOICE: {
        int i = bench_choice(o->choices, arg);
        if (i < 0) {
            if (o->hint != NULL)
                die(2, "bad %s '%s' (%s)", flag, arg, o->hint);
            die(2, "bad %s '%s'", flag, arg);
        }
        *(int *)o->ptr = i;
        break;
    }
    }
}

/* Usage text on stderr, then exit status 2: a bad command line. */
__attribute__((noreturn, unused)) static void bench_usage_error(const char *usage)
{
    fputs(usage, stderr);
    exit(2);
}

/* Parses argv by opts (ended by OPT_END) and --help, and returns when the
 * program should go on; optind is then the index of the first operand, and
 * each program refuses operands in its own range check.  name: the
 * program's, which die() puts before its messages from here on.
 * Otherwise it exits: with status 0 after --help, which prints help on
 * stdout, or with status 2 after an unknown option or a missing argument
 * (getopt_long has said which), which prints on_error on stderr unless it is
 * NULL; a bad value exits 2 too.
 * Point the table at copies, not at the variables the measured loops read,
 * and copy the values over afterwards: the compiler must assume that a
 * variable whose address was taken may change in any call, so it would
 * reload such variables after every malloc and free (or every compiler
 * barrier), and the measured code would no longer be the same. */
__attribute__((unused)) static void bench_options(const char *name, int argc, char **argv,
                                                  const struct bench_opt *opts, const char *help,
                                                  const char *on_error)
{
    die_prefix = name;
    struct option lo[BENCH_MAX_OPTS + 2];
    int n = 0;
    for (; opts[n].name != NULL; n++) {
        if (n == BENCH_MAX_OPTS)
            die(2, "too many options (at most %d)", BENCH_MAX_OPTS);
        lo[n] = (struct option){opts[n].name, required_argument, NULL, 256 + n};
    }
    lo[n] = (struct option){"help", no_argument, NULL, 'h'};
    lo[n + 1] = (struct option){NULL, 0, NULL, 0};
    for (;;) {
        int c = getopt_long(argc, argv, "", lo, NULL);
        if (c == -1)
            return;
        if (c >= 256 && c < 256 + n) {
            bench_set_option(&opts[c - 256], optarg);
        } else if (c == 'h') {
            fputs(help, stdout);
            exit(0);
        } else {
            if (on_error != NULL)
                bench_usage_error(on_error);
            exit(2);
        }
    }
}

/* ---- threads.  A team: one thread per record of an array, each record
 * holding its thread's id (so that no memory is mapped or allocated for
 * the ids while RSS is being measured). */

/* Starts n threads; thread i runs fn(first + i * stride), its own record,
 * and its id goes to first_id + i * stride (a member of that record).
 * stack: bytes of stack per thread, 0 for the default.  A thread that
 * cannot be created ends the program (exit 2). */
__attribute__((unused)) static void bench_start(int n, void *(*fn)(void *), void *first, size_t stride,
                                                pthread_t *first_id, size_t stack)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (stack != 0)
        pthread_attr_setstacksize(&attr, stack);
    for (int i = 0; i < n; i++) {
        pthread_t *id = (pthread_t *)(void *)((char *)first_id + (size_t)i * stride);
        int e = pthread_create(id, &attr, fn, (char *)first + (size_t)i * stride);
        if (e != 0)
            die(2, "pthread_create (thread %d): %s", i, strerror(e));
    }
    pthread_attr_destroy(&attr);
}

__attribute__((unused)) static void bench_join(int n, pthread_t *first_id, size_t stride)
{
    for (int i = 0; i < n; i++)
        pthread_join(*(pthread_t *)(void *)((char *)first_id + (size_t)i * stride), NULL);
}

/* recs: the array of records; th: the member that holds a thread's id. */
#define BENCH_START(recs, n, th, fn, stack) \
    bench_start((n), (fn), (recs), sizeof *(recs), &(recs)->th, (stack))
#define BENCH_JOIN(recs, n, th) bench_join((n), &(recs)->th, sizeof *(recs))

/* When a thread ran its timed part, read on its own clock: with more threads
 * than CPUs, the main thread may only run again after some are done. */
struct bench_span {
    double start, end;
};

/* From the earliest start to the latest end of n spans stride bytes apart
 * (each a member of a per-thread record; first is record 0's). */
__attribute__((unused)) static struct bench_span bench_span_of(const struct bench_span *first, size_t stride,
                                                               int n)
{
    struct bench_span all = *first;
    for (int i = 1; i < n; i++) {
        const struct bench_span *s = (const void *)((const char *)first + (size_t)i * stride);
        if (s->start < all.start)
            all.start = s->start;
        if (s->end > all.end)
            all.end = s->end;
    }
    return all;
}

#define BENCH_SPAN(recs, n, span) bench_span_of(&(recs)->span, sizeof *(recs), (n))

/* A start (or phase) barrier for parties threads, main included when it
 * waits too; one that cannot be made ends the program (exit 2). */
__attribute__((unused)) static void bench_barrier_init(pthread_barrier_t *b, unsigned parties)
{
    if (pthread_barrier_init(b, NULL, parties) != 0)
        die(2, "pthread_barrier_init failed");
}

/* The checked counts of n records stride bytes apart, summed (first is
 * record 0's member). */
__attribute__((unused)) static struct bench_checked bench_checked_sum(const struct bench_checked *first,
                                                                      size_t stride, int n)
{
    struct bench_checked sum = {0};
    for (int i = 0; i < n; i++)
        bench_checked_add(&sum, (const void *)((const char *)first + (size_t)i * stride));
    return sum;
}

#define BENCH_CHECKED_SUM(recs, n, chk) bench_checked_sum(&(recs)->chk, sizeof *(recs), (n))

/* ---- chains of short-lived threads: each of n chains runs one thread at a
 * time, which starts its successor (bench_chain_next) and exits, and the
 * last thread of a chain says so (bench_chain_end).  They are detached, so
 * that nobody has to join them, and main waits for the chains' ends. */
struct bench_chains {
    sem_t ended;
    pthread_attr_t detached;
    unsigned long retries; /* starts of a successor that failed and were tried again */
};

__attribute__((unused)) static void bench_chains_init(struct bench_chains *c)
{
    sem_init(&c->ended, 0, 0);
    pthread_attr_init(&c->detached);
    pthread_attr_setdetachstate(&c->detached, PTHREAD_CREATE_DETACHED);
    c->retries = 0;
}

/* The first threads: chain i runs fn(first + i * stride), its record.  A
 * thread that cannot be created ends the program (exit 2). */
__attribute__((unused)) static void bench_chains_start(struct bench_chains *c, int n, void *(*fn)(void *),
                                                       void *first, size_t stride)
{
    for (int i = 0; i < n; i++) {
        pthread_t th;
        int e = pthread_create(&th, &c->detached, fn, (char *)first + (size_t)i * stride);
        if (e != 0)
            die(2, "pthread_create: %s", strerror(e));
    }
}

#define BENCH_CHAINS_START(c, recs, n, fn) bench_chains_start((c), (n), (fn), (recs), sizeof *(recs))

/* Starts the next thread of a chain, fn(arg).  The system refuses while too
 * many threads are still exiting: then wait a millisecond and try again,
 * counted in retries. */
__attribute__((unused)) static void bench_chain_next(struct bench_chains *c, void *(*fn)(void *), void *arg)
{
    pthread_t next;
    while (pthread_create(&next, &c->detached, fn, arg) != 0) {
        __atomic_fetch_add(&c->retries, 1, __ATOMIC_RELAXED);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static inline void bench_chain_end(struct bench_chains *c)
{
    sem_post(&c->ended);
}

/* Returns once all n chains have ended. */
__attribute__((unused)) static void bench_chains_wait(struct bench_chains *c, int n)
{
    for (int i = 0; i < n; i++)
        while (sem_wait(&c->ended) != 0) {
        }
}

#endif
