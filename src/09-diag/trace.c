/* The trace recorder.  Each thread encodes its records into a buffer of
 * its own (64 KiB, from the OS) and writes it out whole as a chunk, under
 * one lock, when it fills, when the thread exits and at process exit.  A
 * map from address to object id (sharded by address, a lock per shard)
 * gives every block an id for its life, which a realloc keeps.
 *
 * The file: the top process writes `path` and holds an flock on it; a
 * process that finds the lock taken (a program its parent exec'd) writes
 * `path.PID`, and so does a forked child.  Records that arrive after the
 * footer (destructors that run after ours) are not written. */
#define _GNU_SOURCE
#include "09-diag/trace.h"
#include "00-base/mem.h"
#include "00-base/diag.h"
#include "00-base/lock.h"
#include "00-base/options.h"
#include "01-os/clock.h"
#include "01-os/exit.h"
#include "01-os/os.h"
#include "01-os/sys.h"
#include "09-diag/format.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define BUF_BYTES ((size_t)64 << 10)
#define SHARDS 64

/* ---- the file ---- */

static int trace_fd = -1;
static fa__lock_t file_lock = FA_LOCK_INIT; /* writes, and the totals below */
static uint64_t checksum = FA_TRACE_FNV_START;
static uint64_t nrecords;
static uint64_t start_ns;
static uint64_t next_id = 1, next_thread = 1;

static uint64_t clock_ns(void)
{
    return fa__os_now_ns();
}

/* The time of a record.  On x86-64, the time-stamp counter scaled to ns
 * (calibrated against CLOCK_MONOTONIC over 2 ms at start-up): a vDSO
 * clock_gettime at every record was a large share of what recording cost a
 * program.  Elsewhere, clock_gettime. */
#if defined(__x86_64__)
#include <x86intrin.h>
static uint64_t tsc0, ns0, tsc_mult; /* ns = ns0 + ((tsc - tsc0) * tsc_mult >> 32) */

static void calibrate(void)
{
    uint64_t c0 = clock_ns(), t0 = __rdtsc(), c1, t1;
    do {
        c1 = clock_ns();
        t1 = __rdtsc();
    } while (c1 - c0 < 2000000);
    tsc0 = t0;
    ns0 = c0;
    tsc_mult = t1 > t0 ? (uint64_t)(((unsigned __int128)(c1 - c0) << 32) / (t1 - t0)) : 0;
}

static uint64_t now_ns(void)
{
    if (tsc_mult == 0)
        return clock_ns();
    uint64_t t = __rdtsc();
    return ns0 + (uint64_t)(((unsigned __int128)(t - tsc0) * tsc_mult) >> 32);
}
#else
static void calibrate(void)
{
}

static uint64_t now_ns(void)
{
    return clock_ns();
}
#endif

/* All of [p, p + n) to the file; false on an error (reported once, and
 * the trace stops: a partial file fails the reader's checks). */
static bool write_all(const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(trace_fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            fa__diag("fastalloc: FASTALLOC_TRACE: write failed (%s): the trace stops here", fa__errno_words(errno));
            close(trace_fd);
            trace_fd = -1;
            return false;
        }
        c += w;
        n -= (size_t)w;
    }
    return true;
}

static void write_header(void)
{
    char h[8 + 4 + 4 + 4 + 8 + 4 + FA_VARINT64_MAX];
    fa__memcpy(h, FA_TRACE_MAGIC, 8);
    fa__encode_fixed32(h + 8, FA_TRACE_VERSION);
    fa__encode_fixed32(h + 12, (uint32_t)fa__os_page_size());
    fa__encode_fixed32(h + 16, FA_TRACE_CLOCK_MONOTONIC);
    fa__encode_fixed64(h + 20, start_ns);
    fa__encode_fixed32(h + 28, (uint32_t)fa__os_pid());
    /* The command line, as the kernel has it (read, no allocation). */
    char cmd[4096];
    size_t len = 0;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r;
        while (len < sizeof cmd && (r = read(fd, cmd + len, sizeof cmd - len)) > 0)
            len += (size_t)r;
        close(fd);
    }
    unsigned n = 32 + fa__encode_varint64(h + 32, len);
    if (write_all(h, n) && write_all(cmd, len))
        checksum = fa__trace_fnv(fa__trace_fnv(FA_TRACE_FNV_START, h, n), cmd, len);
}

/* Open the trace file: `path`, or `path.PID` when another process (the
 * one that exec'd this one) holds `path`, or always (a forked child). */
static int open_trace(bool own_file)
{
    const char *path = fa__opt.trace.text;
    int fd;
    if (!own_file) {
        fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && ftruncate(fd, 0) == 0)
            return fd;
        if (fd >= 0)
            close(fd);
    }
    char own[FA_OPT_TEXT_MAX + 16];
    snprintf(own, sizeof own, "%s.%d", path, fa__os_pid());
    fd = open(own, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        fa__diag("fastalloc: FASTALLOC_TRACE: cannot write %s: %s", own, fa__errno_words(errno));
    return fd;
}

/* ---- per-thread buffers ---- */

struct tbuf {
    char *buf;
    size_t len;
    uint64_t nrec;
    uint64_t last_ns;
    uint64_t thread;
    struct tbuf *next; /* free buffers */
};

static struct tbuf *free_bufs;         /* under file_lock */
static __thread struct tbuf *my_buf __attribute__((tls_model("initial-exec")));
/* Set once this thread's buffer went at its exit: later records (other
 * destructors) go out one at a time. */
static __thread int buf_gone __attribute__((tls_model("initial-exec")));

/* Write b's records as a chunk; file_lock held. */
static void flush_locked(struct tbuf *b)
{
    if (b->nrec == 0 || trace_fd < 0) {
        b->len = b->nrec = 0;
        return;
    }
    char h[1 + 3 * FA_VARINT64_MAX];
    unsigned n = 0;
    h[n++] = FA_TRACE_CHUNK;
    n += fa__encode_varint64(h + n, b->thread);
    n += fa__encode_varint64(h + n, b->nrec);
    n += fa__encode_varint64(h + n, b->len);
    if (write_all(h, n) && write_all(b->buf, b->len)) {
        checksum = fa__trace_fnv(checksum, h, n);
        checksum = fa__trace_fnv(checksum, b->buf, b->len);
        nrecords += b->nrec;
    }
    b->len = b->nrec = 0;
}

static void thread_exit(void *arg)
{
    struct tbuf *b = arg;
    fa__lock(&file_lock);
    flush_locked(b);
    b->next = free_bufs;
    free_bufs = b;
    fa__unlock(&file_lock);
    my_buf = NULL;
    buf_gone = 1;
}

static uint64_t new_thread_number(void)
{
    return __atomic_fetch_add(&next_thread, 1, __ATOMIC_RELAXED);
}

static struct tbuf *get_buf(void)
{
    struct tbuf *b = my_buf;
    if (FA_LIKELY(b != NULL) || buf_gone)
        return b;
    fa__lock(&file_lock);
    b = free_bufs;
    if (b != NULL)
        free_bufs = b->next;
    fa__unlock(&file_lock);
    if (b == NULL) {
        b = fa__os_map(sizeof *b + BUF_BYTES, 0);
        if (b == NULL)
            return NULL;
        b->buf = (char *)(b + 1);
    }
    b->len = b->nrec = 0;
    b->last_ns = start_ns;
    b->thread = new_thread_number();
    my_buf = b;
    fa__os_exit_arm(FA_EXIT_TRACE, thread_exit, b);
    return b;
}

static void record(unsigned op, uint64_t id, uint64_t step, uint64_t size, uint64_t align)
{
    if (__atomic_load_n(&trace_fd, __ATOMIC_RELAXED) < 0)
        return;
    uint64_t now = now_ns();
    struct tbuf *b = get_buf();
    if (b == NULL) {
        /* No buffer (its thread has exited, or no memory): a chunk of one
         * record, timed from the start. */
        char r[FA_TRACE_RECORD_MAX];
        struct tbuf one = {.buf = r, .thread = 0};
        one.len = fa__trace_put_record(r, op, id, step, size, align, now - start_ns);
        one.nrec = 1;
        one.thread = new_thread_number();
        fa__lock(&file_lock);
        flush_locked(&one);
        fa__unlock(&file_lock);
        return;
    }
    if (b->len + FA_TRACE_RECORD_MAX > BUF_BYTES) {
        fa__lock(&file_lock);
        flush_locked(b);
        fa__unlock(&file_lock);
    }
    uint64_t dt = now > b->last_ns ? now - b->last_ns : 0;
    b->last_ns = now;
    b->len += fa__trace_put_record(b->buf + b->len, op, id, step, size, align, dt);
    b->nrec++;
}

/* ---- object ids ---- */

struct slot {
    uintptr_t addr; /* 0: empty, 1: deleted */
    uint64_t id;
    uint64_t step;
};

static struct shard {
    fa__lock_t lock;
    struct slot *t;
    size_t cap, used; /* used counts deleted slots too */
} shards[SHARDS];

static struct shard *shard_of(uintptr_t a)
{
    return &shards[(a >> 4) & (SHARDS - 1)];
}

static size_t hash_of(uintptr_t a, size_t cap)
{
    return (size_t)(((a >> 10) * 0x9E3779B97F4A7C15ULL) >> 17) & (cap - 1);
}

/* Shard lock held. */
static bool map_grow(struct shard *s)
{
    size_t cap = s->cap ? 2 * s->cap : 1024;
    struct slot *t = fa__os_map(cap * sizeof *t, 0);
    if (t == NULL)
        return false;
    size_t used = 0;
    for (size_t i = 0; i < s->cap; i++) {
        if (s->t[i].addr > 1) {
            size_t k = hash_of(s->t[i].addr, cap);
            while (t[k].addr != 0)
                k = (k + 1) & (cap - 1);
            t[k] = s->t[i];
            used++;
        }
    }
    if (s->t != NULL)
        fa__os_unmap(s->t, s->cap * sizeof *s->t);
    s->t = t;
    s->cap = cap;
    s->used = used;
    return true;
}

static void map_put(uintptr_t a, uint64_t id, uint64_t step)
{
    struct shard *s = shard_of(a);
    fa__lock(&s->lock);
    if (2 * (s->used + 1) > s->cap && !map_grow(s)) {
        fa__unlock(&s->lock);
        return; /* its free will be recorded as an unknown block's */
    }
    size_t k = hash_of(a, s->cap);
    while (s->t[k].addr > 1 && s->t[k].addr != a)
        k = (k + 1) & (s->cap - 1);
    if (s->t[k].addr == 0)
        s->used++;
    s->t[k] = (struct slot){a, id, step};
    fa__unlock(&s->lock);
}

/* The id and step of the block at a, taken off the map; id 0 when the
 * trace never saw it allocated. */
static uint64_t map_take(uintptr_t a, uint64_t *step)
{
    struct shard *s = shard_of(a);
    uint64_t id = 0;
    *step = 0;
    fa__lock(&s->lock);
    if (s->cap != 0) {
        for (size_t k = hash_of(a, s->cap); s->t[k].addr != 0; k = (k + 1) & (s->cap - 1)) {
            if (s->t[k].addr == a) {
                id = s->t[k].id;
                *step = s->t[k].step;
                s->t[k].addr = 1;
                break;
            }
        }
    }
    fa__unlock(&s->lock);
    return id;
}

/* ---- the recording calls ---- */

void fa__trace_alloc(unsigned op, void *p, size_t size, size_t align)
{
    if (p == NULL || __atomic_load_n(&trace_fd, __ATOMIC_RELAXED) < 0)
        return;
    uint64_t id = __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED);
    map_put((uintptr_t)p, id, 0);
    record(op, id, 0, size, align);
}

void fa__trace_free(void *p)
{
    if (p == NULL || __atomic_load_n(&trace_fd, __ATOMIC_RELAXED) < 0)
        return;
    uint64_t step, id = map_take((uintptr_t)p, &step);
    record(FA_TR_FREE, id, id ? step + 1 : 0, 0, 0);
}

void fa__trace_realloc(void *old, void *p, size_t size)
{
    if (__atomic_load_n(&trace_fd, __ATOMIC_RELAXED) < 0)
        return;
    uint64_t step, id = map_take((uintptr_t)old, &step);
    if (id == 0) { /* a block from before the trace: from here, a new one */
        fa__trace_alloc(FA_TR_MALLOC, p, size, 0);
        return;
    }
    map_put((uintptr_t)p, id, step + 1);
    record(FA_TR_REALLOC, id, step + 1, size, 0);
}

void fa__trace_alloc_hdr(unsigned op, struct fa__trace_hdr *h, size_t size, size_t align)
{
    h->id = __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED);
    h->step = 0;
    record(op, h->id, 0, size, align);
}

void fa__trace_free_hdr(const struct fa__trace_hdr *h)
{
    record(FA_TR_FREE, h->id, (uint64_t)h->step + 1, 0, 0);
}

void fa__trace_realloc_hdr(const struct fa__trace_hdr *old, struct fa__trace_hdr *h, size_t size)
{
    h->id = old->id;
    h->step = old->step + 1;
    record(FA_TR_REALLOC, h->id, h->step, size, 0);
}

/* ---- start, fork, exit ---- */

void fa__trace_init(void)
{
    if (!fa__opt.trace.on)
        return;
    calibrate();
    start_ns = now_ns();
    trace_fd = open_trace(false);
    if (trace_fd < 0)
        return;
    write_header();
    if (trace_fd >= 0)
        __atomic_fetch_or(&fa__diag_mode, FA_DIAG_TRACE, __ATOMIC_RELEASE);
}

void fa__trace_fork_prepare(void)
{
    if (!fa__opt.trace.on)
        return;
    fa__lock(&file_lock);
    for (unsigned i = 0; i < SHARDS; i++)
        fa__lock(&shards[i].lock);
}

void fa__trace_fork_parent(void)
{
    if (!fa__opt.trace.on)
        return;
    for (unsigned i = SHARDS; i-- > 0;)
        fa__unlock(&shards[i].lock);
    fa__unlock(&file_lock);
}

void fa__trace_fork_child(void)
{
    if (!fa__opt.trace.on)
        return;
    /* A file of the child's own, from a fresh start: the parent's blocks
     * are unknown to it (their frees carry id 0), and the parent writes
     * the records this thread had buffered. */
    for (unsigned i = 0; i < SHARDS; i++) {
        struct shard *s = &shards[i];
        if (s->t != NULL)
            fa__memset(s->t, 0, s->cap * sizeof *s->t);
        s->used = 0;
        fa__unlock(&s->lock);
    }
    if (trace_fd >= 0)
        close(trace_fd);
    nrecords = 0;
    start_ns = now_ns();
    next_thread = 1;
    struct tbuf *b = my_buf;
    if (b != NULL) {
        b->len = b->nrec = 0;
        b->last_ns = start_ns;
        b->thread = next_thread++;
    }
    /* Other threads' buffers do not exist here: their memory is the
     * parent's copy, which nobody will flush. */
    free_bufs = NULL;
    trace_fd = open_trace(true);
    if (trace_fd >= 0)
        write_header();
    fa__unlock(&file_lock);
}

__attribute__((destructor)) static void trace_at_exit(void)
{
    if (__atomic_load_n(&trace_fd, __ATOMIC_RELAXED) < 0)
        return;
    fa__lock(&file_lock);
    if (my_buf != NULL)
        flush_locked(my_buf);
    if (trace_fd >= 0) {
        char f[1 + FA_VARINT64_MAX + 8 + 8];
        unsigned n = 0;
        f[n++] = FA_TRACE_FOOTER;
        n += fa__encode_varint64(f + n, nrecords);
        fa__encode_fixed64(f + n, checksum);
        n += 8;
        fa__memcpy(f + n, FA_TRACE_END, 8);
        n += 8;
        write_all(f, n);
        /* Calls after this one are not recorded. */
        int fd = trace_fd;
        __atomic_store_n(&trace_fd, -1, __ATOMIC_RELAXED);
        if (fd >= 0)
            close(fd);
    }
    fa__unlock(&file_lock);
}
