/* The sampled heap profile (FASTALLOC_PROFILE): about one block per
 * `profile_interval` bytes allocated keeps the stack that allocated it,
 * and the live ones are written, in the text form of gperftools' heap
 * profiles, at exit, at fa_profile_dump and on a chosen signal.
 *
 * Sampling is a Poisson process over the bytes allocated, as tcmalloc's:
 * each thread counts down a distance drawn from an exponential
 * distribution of mean `profile_interval`, and the block in which it runs
 * out is sampled.  A block of s bytes is then sampled with probability
 * 1 - exp(-s / interval), which is what pprof's "heap_v2" header tells it
 * to undo: each sample of s bytes stands for s / (1 - exp(-s / interval))
 * live bytes.
 *
 * A sampled block is a large block of its own (at least a page), its span
 * marked `sampled`: a free finds it with the page-map load that it makes
 * anyway, and the table of samples, under its lock, is touched only for
 * sampled blocks.  At the default interval the page per sample is at most
 * 1/64 more memory (8 KiB per 512 KiB allocated).
 *
 * With the profile alone on, the thread caches stay in view of the fast
 * paths: each refill counts the blocks it hands a cache (fa__prof_meter)
 * and cuts the list where the sampling distance runs out, so that the
 * class's next miss is the sample; large blocks are counted one by one.
 * With hooks or a trace too, every call comes here through debug.c.  It is
 * refused with debug mode, memcheck or a trace, whose blocks have headers
 * of their own.  Calls backtrace.c and textout.c; debug.c calls it
 * (debug_int.h gives the order). */
#define _GNU_SOURCE
#include "09-diag/debug_int.h"
#include "00-base/diag.h"
#include "01-os/sys.h"
#include "00-base/lock.h"
#include "00-base/mem.h"
#include "00-base/options.h"
#include "00-base/probe.h"
#include "01-os/os.h"
#include "02-records/pagemap.h"
#include "02-records/span.h"
#include "02-records/tail.h"
#include "08-tcache/tcache.h"

#include <limits.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Frames kept per sample: pprof shows the callers of a site, so deeper
 * than debug mode's six. */
#define FRAMES 32

struct sample {
    uintptr_t addr; /* 0: an empty slot; 1: a deleted one */
    size_t size;    /* bytes asked for */
    uint32_t n;     /* frames */
    uint32_t unused;
    void *at[FRAMES];
};

/* The live samples: an open-addressing table by address, in memory from
 * the OS, under one lock (taken for sampled blocks only). */
static fa__lock_t lock = FA_LOCK_INIT;
static struct sample *table;
static size_t cap, used; /* used counts deleted slots too */
static size_t live;      /* samples in the table */

static bool on;
static pid_t owner;      /* the process that started the profile */
static unsigned dumps;   /* numbered dumps so far (signal, fa_profile_dump(NULL)) */
static int asked;        /* the signal came: dump at the next call */

/* Bytes until this thread's next sample (armed once drawn), and its
 * random state. */
static __thread long long left __attribute__((tls_model("initial-exec")));
static __thread bool armed __attribute__((tls_model("initial-exec")));
static __thread uint64_t rng __attribute__((tls_model("initial-exec")));

static size_t slot_of(uintptr_t p, size_t n)
{
    return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ULL >> 17) & (n - 1);
}

/* Caller holds the lock.  False when there is no memory for a bigger
 * table: the block is then not sampled. */
static bool grow(void)
{
    size_t ncap = cap ? 2 * cap : 1024;
    struct sample *t = fa__os_map(ncap * sizeof *t, 0);
    if (t == NULL)
        return false;
    for (size_t i = 0; i < cap; i++) {
        if (table[i].addr > 1) {
            size_t k = slot_of(table[i].addr, ncap);
            while (t[k].addr != 0)
                k = (k + 1) & (ncap - 1);
            fa__memcpy(&t[k], &table[i], sizeof t[k]); /* not a struct copy: see put() */
        }
    }
    if (table != NULL)
        fa__os_unmap(table, cap * sizeof *table);
    table = t;
    cap = ncap;
    used = live;
    return true;
}

static bool put(const struct sample *s)
{
    if (2 * (used + 1) > cap && !grow())
        return false;
    size_t k = slot_of(s->addr, cap);
    while (table[k].addr > 1)
        k = (k + 1) & (cap - 1);
    if (table[k].addr == 0)
        used++;
    /* fa__memcpy, not a struct copy, which the compiler may make a call of
     * memcpy: the hardened library's is bounds.c's bounded one. */
    fa__memcpy(&table[k], s, sizeof *s);
    live++;
    return true;
}

static void take(uintptr_t p)
{
    if (cap == 0)
        return;
    for (size_t k = slot_of(p, cap); table[k].addr != 0; k = (k + 1) & (cap - 1)) {
        if (table[k].addr == p) {
            table[k].addr = 1;
            live--;
            return;
        }
    }
}

/* ---- sampling ---- */

/* ln(x) for x > 0, to about 1e-9: the library uses no libm.  x = m * 2^e
 * with m in [1/sqrt 2, sqrt 2), and ln m from the series of
 * 2 atanh((m - 1) / (m + 1)). */
static double ln(double x)
{
    union {
        double d;
        uint64_t u;
    } v = {x};
    int e = (int)((v.u >> 52) & 0x7ff) - 1023;
    v.u = (v.u & ((UINT64_C(1) << 52) - 1)) | (UINT64_C(1023) << 52);
    double m = v.d;
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e++;
    }
    double t = (m - 1) / (m + 1), t2 = t * t;
    double s = t * (2 + t2 * (2.0 / 3 + t2 * (2.0 / 5 + t2 * (2.0 / 7 + t2 * (2.0 / 9 + t2 * (2.0 / 11))))));
    return e * 0.6931471805599453 + s;
}

/* The next distance: exponential with mean `profile_interval`. */
static long long draw(void)
{
    if (rng == 0)
        rng = ((uint64_t)(uintptr_t)&rng * 0x9E3779B97F4A7C15ULL ^ (uint64_t)fa__os_thread_id()) | 1;
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    double u = (double)((rng >> 11) + 1) * (1.0 / 9007199254740992.0); /* (0, 1] */
    double d = -ln(u) * (double)__atomic_load_n(&fa__opt.profile_interval, __ATOMIC_RELAXED);
    return d < 1 ? 1 : d > 4e18 ? (long long)4e18 : (long long)d;
}

/* Count `weight` bytes against this thread's distance: true when the
 * distance runs out in them (the block is the sample), and a new one is
 * drawn. */
static bool due(size_t weight)
{
    if (FA_UNLIKELY(!armed)) {
        left = draw();
        armed = true;
    }
    /* A weight past LLONG_MAX (a request that then fails) counts as that
     * much: the distance is at most 4e18, so the subtraction stays in range. */
    long long w = weight == 0 ? 1 : weight > (size_t)LLONG_MAX ? LLONG_MAX : (long long)weight;
    if ((left -= w) > 0)
        return false;
    left = draw();
    return true;
}

/* The bytes a block is counted for, in sampling and in the profile: a
 * small block's class size (jemalloc's profiles count usable sizes too),
 * a large block's size asked for.  The two must be the same: pprof scales
 * each sample up by the bytes it shows. */
static size_t weight(size_t size, size_t align)
{
    if (size > FA_MAX_SMALL - FA_TAIL || align > FA_PAGE_SIZE)
        return size;
    unsigned cls = align <= FA_MIN_ALIGN ? fa__size_to_class(size + FA_TAIL) : fa__class_for_aligned(size + FA_TAIL, align);
    return cls != 0 ? fa__classes[cls].size : size;
}

/* A sampled block of size bytes, counted for w: a large block of its own,
 * its stack kept; NULL with errno = ENOMEM. */
static void *sample(size_t size, size_t align, bool zero, size_t w)
{
    void *p = fa__tc_alloc_large(size, align, zero);
    if (p == NULL)
        return NULL;
    struct sample s;
    fa__memset(&s, 0, sizeof s); /* as put() copies */
    s.addr = (uintptr_t)p;
    s.size = w;
    s.n = fa__dbg_capture_n(s.at, FRAMES);
    fa__lock(&lock);
    bool kept = put(&s);
    fa__unlock(&lock);
    if (kept)
        fa__pm_span((uintptr_t)p)->sampled = 1; /* the block's own record: no one else reads it now */
    FA_PROBE2(sample, p, size);
    return p;
}

/* Classes whose next allocation that misses is the sample (fa__prof_meter
 * cut their list before it), a bit each. */
static __thread uint64_t pending[(FA_NUM_CLASSES + 63) / 64] __attribute__((tls_model("initial-exec")));

void *fa__prof_take(size_t size)
{
    fa__prof_poll();
    unsigned cls = fa__size_to_class(size + FA_TAIL);
    uint64_t bit = UINT64_C(1) << (cls % 64);
    if (pending[cls / 64] & bit) {
        pending[cls / 64] &= ~bit;
        return sample(size, 0, false, fa__classes[cls].size);
    }
    return due(fa__classes[cls].size) ? sample(size, 0, false, fa__classes[cls].size) : NULL;
}

void *fa__prof_take_large(size_t size, size_t align, bool zero)
{
    fa__prof_poll();
    return due(size) ? sample(size, align, zero, size) : NULL;
}

void fa__prof_meter(unsigned cls)
{
    /* The profile alone leaves the cache in view: fa__tls_cache is the
     * thread's own (or the empty stand-in, whose lists are empty). */
    struct fa__tcache *tc = fa__tls_cache;
    long long w = (long long)fa__classes[cls].size;
    if (FA_UNLIKELY(!armed)) {
        left = draw();
        armed = true;
    }
    size_t n = 0;
    for (void *b = tc->heads[cls]; b != NULL; b = fa__fl_next_of(b, cls), n++) {
        if ((left -= w) > 0)
            continue;
        /* The distance runs out in the n-th block: it and those after it go
         * back to their spans, and the allocation that would have had it,
         * the next of this class to miss, is the sample. */
        left = draw();
        fa__tc_heads_cut(tc, cls, n);
        pending[cls / 64] |= UINT64_C(1) << (cls % 64);
        return;
    }
}

void *fa__prof_alloc(size_t size, size_t align, bool zero)
{
    fa__prof_poll();
    size_t w = weight(size, align);
    return due(w) ? sample(size, align, zero, w) : NULL;
}

bool fa__prof_is_sample(const void *p)
{
    if (p == NULL || fa__pm_class((uintptr_t)p) != 0)
        return false;
    struct fa__span *s = fa__pm_span((uintptr_t)p);
    return s != NULL && s->state == FA_SPAN_LARGE && s->sampled && s->start == (uintptr_t)p;
}

void fa__prof_free(void *p)
{
    fa__prof_poll();
    if (!fa__prof_is_sample(p))
        return; /* a small block, or a large one not sampled */
    fa__pm_span((uintptr_t)p)->sampled = 0;
    fa__lock(&lock);
    take((uintptr_t)p);
    fa__unlock(&lock);
}

/* ---- the dump ---- */

/* Output through one buffer, under the lock: a dump may run inside a
 * malloc (after the signal), so it neither allocates nor uses stdio. */
static struct fa__textout obuf;

/* "N: B [N: B]": the live count and bytes, and the same again where
 * gperftools puts what was allocated in all (only live samples are kept). */
static void out_counts(uint64_t n, uint64_t bytes)
{
    for (int twice = 0; twice < 2; twice++) {
        fa__out_str(&obuf, twice ? " [" : "");
        fa__out_dec(&obuf, n);
        fa__out_str(&obuf, ": ");
        fa__out_dec(&obuf, bytes);
    }
    fa__out_str(&obuf, "]");
}

/* The profile to the open file fd; 0 or an errno value.  Caller holds the
 * lock. */
static int write_profile(int fd)
{
    fa__out_start(&obuf, fd);
    uint64_t n = 0, bytes = 0;
    for (size_t i = 0; i < cap; i++) {
        if (table[i].addr > 1) {
            n++;
            bytes += table[i].size;
        }
    }
    fa__out_str(&obuf, "heap profile: ");
    out_counts(n, bytes);
    fa__out_str(&obuf, " @ heap_v2/");
    fa__out_dec(&obuf, __atomic_load_n(&fa__opt.profile_interval, __ATOMIC_RELAXED));
    fa__out_str(&obuf, "\n");
    for (size_t i = 0; i < cap; i++) {
        const struct sample *s = &table[i];
        if (s->addr <= 1)
            continue;
        out_counts(1, s->size);
        fa__out_str(&obuf, " @");
        /* pprof takes one from every address but the first, to land in
         * the call: the first, a return address too, is moved here. */
        for (unsigned f = 0; f < s->n; f++) {
            fa__out_str(&obuf, " ");
            fa__out_hex(&obuf, (uintptr_t)s->at[f] - (f == 0));
        }
        fa__out_str(&obuf, "\n");
    }
    /* Where each object was loaded, for pprof to name the addresses. */
    fa__out_str(&obuf, "\nMAPPED_LIBRARIES:\n");
    int maps = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (maps >= 0) {
        fa__out_file(&obuf, maps);
        close(maps);
    }
    fa__out_flush(&obuf);
    return obuf.err;
}

/* The file the profile's path names, "%p" replaced by the process id; a
 * child of fork (no exec) that has no "%p" writes PATH.PID, so that it
 * leaves its parent's file alone; seq > 0 appends ".seq". */
static void path_of(char *buf, size_t size, unsigned seq)
{
    const char *t = fa__opt.profile.text, *pct = strstr(t, "%p");
    char pid[24];
    snprintf(pid, sizeof pid, "%ld", (long)fa__os_pid());
    int k;
    if (pct != NULL)
        k = snprintf(buf, size, "%.*s%s%s", (int)(pct - t), t, pid, pct + 2);
    else if (fa__os_pid() != owner)
        k = snprintf(buf, size, "%s.%s", t, pid);
    else
        k = snprintf(buf, size, "%s", t);
    if (seq != 0 && k >= 0 && (size_t)k < size)
        snprintf(buf + k, size - (size_t)k, ".%u", seq);
}

int fa__prof_dump(const char *path)
{
    if (!__atomic_load_n(&on, __ATOMIC_ACQUIRE))
        return EINVAL;
    char own[FA_OPT_TEXT_MAX + 48];
    fa__lock(&lock);
    if (path == NULL) {
        path_of(own, sizeof own, ++dumps);
        path = own;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int err = fd < 0 ? errno : write_profile(fd);
    fa__unlock(&lock);
    if (fd >= 0 && close(fd) != 0 && err == 0)
        err = errno;
    FA_PROBE1(profile_dump, err);
    return err;
}

static void on_signal(int sig)
{
    (void)sig;
    __atomic_store_n(&asked, 1, __ATOMIC_RELAXED);
}

void fa__prof_poll(void)
{
    if (FA_LIKELY(!__atomic_load_n(&asked, __ATOMIC_RELAXED)) || !__atomic_exchange_n(&asked, 0, __ATOMIC_ACQUIRE))
        return;
    int err = fa__prof_dump(NULL);
    if (err != 0)
        fa__diag("fastalloc: FASTALLOC_PROFILE: cannot write the dump asked for by signal %ld: %s",
                 fa__opt.profile_signal, fa__errno_words(err));
}

/* ---- start, fork, exit ---- */

bool fa__prof_init(int modes)
{
    if (!fa__opt.profile.on)
        return false;
    if (modes != 0) {
        fa__diag("fastalloc: FASTALLOC_PROFILE ignored: %s keeps blocks of its own",
                 (modes & FA_DIAG_DEBUG) ? "debug mode" : (modes & FA_DIAG_VALGRIND) ? "valgrind" : "a trace");
        return false;
    }
    owner = fa__os_pid();
    if (fa__opt.profile_signal != 0) {
        struct sigaction sa;
        fa__memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction((int)fa__opt.profile_signal, &sa, NULL) != 0)
            fa__diag("fastalloc: FASTALLOC_PROFILE_SIGNAL=%ld: cannot catch it: %s", fa__opt.profile_signal,
                     fa__errno_words(errno));
    }
    __atomic_store_n(&on, true, __ATOMIC_RELEASE);
    return true;
}

void fa__prof_lock_for_fork(void)
{
    fa__lock(&lock);
}

void fa__prof_unlock_for_fork(void)
{
    fa__unlock(&lock);
}

__attribute__((destructor)) static void at_exit(void)
{
    if (!__atomic_load_n(&on, __ATOMIC_ACQUIRE))
        return;
    char path[FA_OPT_TEXT_MAX + 48];
    path_of(path, sizeof path, 0);
    int err = fa__prof_dump(path);
    if (err != 0)
        fa__diag("fastalloc: FASTALLOC_PROFILE: cannot write %s: %s", path, fa__errno_words(err));
}
