/* fastalloc-trace: read an allocation trace (FASTALLOC_TRACE=path).
 *
 *   fastalloc-trace stat FILE    operations, threads, peak live bytes and
 *                                blocks, cross-thread frees, size and
 *                                lifetime histograms, the commonest sizes
 *   fastalloc-trace replay FILE  the calls again, a thread per recorded
 *                                thread, on this process's malloc (choose it
 *                                with LD_PRELOAD): time, ops/s, peak RSS
 *   fastalloc-trace compare FILE [ROUNDS]
 *                                replay under glibc, fastalloc and the peers
 *                                installed, alternating; medians and ratios
 *   fastalloc-trace plot FILE [OUT.svg]
 *                                live bytes over time (gnuplot)
 *   fastalloc-trace dump FILE    every record as a line of text: its byte
 *                                offset, time (s), thread, operation, object
 *                                id, step, size and alignment
 *
 * The whole file is checked before anything is printed: a truncated,
 * corrupt or wrong-version file gets one line naming what is wrong and its
 * byte offset, and exit status 1.  The format is in src/09-diag/format.h. */
#define _GNU_SOURCE
#include "09-diag/format.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *file_name;

#ifdef FA_TRACE_FUZZ
/* The fuzz target (tools/fuzz-trace.sh): an error goes back to the
 * target's entry, which tries the next input. */
#include <setjmp.h>
static jmp_buf fuzz_jmp;
#endif

__attribute__((noreturn, format(printf, 2, 3))) static void bad(size_t off, const char *fmt, ...)
{
#ifdef FA_TRACE_FUZZ
    (void)off;
    (void)fmt;
    longjmp(fuzz_jmp, 1);
#endif
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fastalloc-trace: %s: ", file_name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " at byte %zu\n", off);
    va_end(ap);
    exit(1);
}

struct trace {
    const char *base, *end;
    uint32_t version, page, clock, pid;
    uint64_t start;
    const char *cmd;
    size_t cmd_len;
    const char *chunks; /* first chunk */
    uint64_t records;
};

static size_t at(const struct trace *t, const char *p)
{
    return (size_t)(p - t->base);
}

/* A record and where it is, for the actions. */
struct event {
    uint64_t thread;
    uint64_t time; /* ns since the start: the thread's sum of deltas */
    struct fa__trace_record r;
    size_t off;
};

typedef void (*visit_fn)(const struct event *e, void *arg);

/* Walk every chunk and record, checking each against the file's end and
 * the format; with visit set, call it for each record.  The footer must
 * agree with what was read. */
static void walk(struct trace *t, visit_fn visit, void *arg, uint64_t **thread_time, size_t *nthreads)
{
    const char *p = t->chunks;
    /* The pieces the writer hashed: the header to the command line, the
     * command line, then each chunk's header and its records. */
    uint64_t n = 0, sum = fa__trace_fnv(FA_TRACE_FNV_START, t->base, (size_t)(t->cmd - t->base));
    sum = fa__trace_fnv(sum, t->cmd, t->cmd_len);
    for (;;) {
        if (p >= t->end)
            bad(at(t, p), "truncated: the footer is missing");
        const char *chunk = p;
        char tag = *p++;
        if (tag == FA_TRACE_FOOTER)
            break;
        if (tag != FA_TRACE_CHUNK)
            bad(at(t, chunk), "corrupt: unknown block tag 0x%02x", (unsigned char)tag);
        uint64_t thread, nrec, nbytes;
        if ((p = fa__decode_varint64(p, t->end, &thread)) == NULL ||
            (p = fa__decode_varint64(p, t->end, &nrec)) == NULL ||
            (p = fa__decode_varint64(p, t->end, &nbytes)) == NULL)
            bad(at(t, chunk), "truncated or corrupt chunk header");
        if (thread == 0 || thread > (1u << 24) || nrec == 0 || nbytes > (uint64_t)(t->end - p) ||
            nrec > nbytes)
            bad(at(t, chunk), "corrupt chunk header (thread %" PRIu64 ", %" PRIu64 " records in %" PRIu64 " bytes)",
                thread, nrec, nbytes);
        const char *limit = p + nbytes, *records = p;
        if (thread_time != NULL && thread >= *nthreads) {
            size_t want = (size_t)thread + 64;
            uint64_t *nt = realloc(*thread_time, want * sizeof *nt);
            if (nt == NULL)
                bad(at(t, chunk), "out of memory");
            memset(nt + *nthreads, 0, (want - *nthreads) * sizeof *nt);
            *thread_time = nt;
            *nthreads = want;
        }
        for (uint64_t i = 0; i < nrec; i++) {
            struct event e;
            e.off = at(t, p);
            e.thread = thread;
            if ((p = fa__trace_get_record(p, limit, &e.r)) == NULL)
                bad(e.off, "corrupt record %" PRIu64 " of a chunk", i);
            if (e.r.op == FA_TR_ALIGNED && (e.r.align == 0 || (e.r.align & (e.r.align - 1)) != 0))
                bad(e.off, "corrupt record: alignment %" PRIu64, e.r.align);
            if (thread_time != NULL) {
                (*thread_time)[thread] += e.r.dt;
                e.time = (*thread_time)[thread];
            }
            if (visit != NULL)
                visit(&e, arg);
        }
        if (p != limit)
            bad(at(t, p), "corrupt chunk: %zu bytes after its last record", (size_t)(limit - p));
        sum = fa__trace_fnv(sum, chunk, (size_t)(records - chunk));
        sum = fa__trace_fnv(sum, records, (size_t)(p - records));
        n += nrec;
    }
    const char *footer = p - 1;
    uint64_t count;
    if ((p = fa__decode_varint64(p, t->end, &count)) == NULL || t->end - p < 16)
        bad(at(t, footer), "truncated footer");
    uint64_t check = fa__decode_fixed64(p);
    if (memcmp(p + 8, FA_TRACE_END, 8) != 0)
        bad(at(t, p + 8), "corrupt footer: no end mark");
    if (p + 16 != t->end)
        bad(at(t, p + 16), "%zu bytes after the end mark", (size_t)(t->end - p - 16));
    if (count != n)
        bad(at(t, footer), "the footer counts %" PRIu64 " records, the file holds %" PRIu64, count, n);
    if (check != sum)
        bad(at(t, footer), "checksum mismatch: the file was changed");
    t->records = n;
}

static void parse_header(struct trace *t, const void *m, size_t len);

static void open_trace(struct trace *t, const char *path)
{
    file_name = path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "fastalloc-trace: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 0) {
        fprintf(stderr, "fastalloc-trace: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    size_t len = (size_t)st.st_size;
    void *m = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (len != 0 && m == MAP_FAILED) {
        fprintf(stderr, "fastalloc-trace: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    parse_header(t, m, len);
}

/* The header of the trace in [m, m + len). */
static void parse_header(struct trace *t, const void *m, size_t len)
{
    memset(t, 0, sizeof *t);
    t->base = m;
    t->end = t->base + len;
    if (len < 33 || memcmp(t->base, FA_TRACE_MAGIC, 8) != 0)
        bad(0, len < 8 ? "truncated: not a trace" : "not a fastalloc trace (bad magic)");
    t->version = fa__decode_fixed32(t->base + 8);
    if (t->version != FA_TRACE_VERSION)
        bad(8, "unsupported version %u (this tool reads %u)", t->version, FA_TRACE_VERSION);
    t->page = fa__decode_fixed32(t->base + 12);
    t->clock = fa__decode_fixed32(t->base + 16);
    t->start = fa__decode_fixed64(t->base + 20);
    t->pid = fa__decode_fixed32(t->base + 28);
    uint64_t cl;
    const char *p = fa__decode_varint64(t->base + 32, t->end, &cl);
    if (p == NULL || cl > (uint64_t)(t->end - p))
        bad(32, "truncated or corrupt header (command line)");
    t->cmd = p;
    t->cmd_len = (size_t)cl;
    t->chunks = p + cl;
}

static const char *op_name(unsigned op)
{
    static const char *const names[] = {"?", "malloc", "calloc", "realloc", "free", "aligned"};
    return op <= FA_TR_ALIGNED ? names[op] : "?";
}

static void print_cmd(const struct trace *t)
{
    printf("command   ");
    for (size_t i = 0; i < t->cmd_len; i++)
        putchar(t->cmd[i] == '\0' ? ' ' : t->cmd[i]);
    printf("\npid       %u\n", t->pid);
}

static void *grow(void *p, size_t *cap, size_t need, size_t elem);

/* ---- dump ---- */

static void dump_one(const struct event *e, void *arg)
{
    (void)arg;
    printf("@%-8zu %12.6f T%-3" PRIu64 " %-7s id=%" PRIu64 " step=%" PRIu64, e->off, (double)e->time / 1e9,
           e->thread, op_name(e->r.op), e->r.id, e->r.step);
    if (e->r.op != FA_TR_FREE)
        printf(" size=%" PRIu64, e->r.size);
    if (e->r.op == FA_TR_ALIGNED)
        printf(" align=%" PRIu64, e->r.align);
    putchar('\n');
}

/* ---- stat ---- */

struct obj {
    uint64_t size, born;
    uint64_t thread;
};

struct sizecount {
    uint64_t size, allocs, frees;
};

struct stat_state {
    uint64_t ops[FA_TR_ALIGNED + 1];
    uint64_t threads_seen, cross_frees, unknown_frees;
    struct obj *objs;
    size_t nobjs;
    uint64_t size_hist[65], life_hist[65];
    /* Events for the live-bytes sweep: time, and the change in bytes and
     * blocks. */
    struct delta {
        uint64_t time;
        int64_t bytes, blocks;
    } *d;
    size_t nd, capd;
    struct sizecount *sizes; /* open addressing by size */
    size_t capsizes, nsizes;
    unsigned char *thread_seen;
    size_t nthread_seen;
};

static unsigned log2_bucket(uint64_t v)
{
    return v == 0 ? 0 : 64 - (unsigned)__builtin_clzll(v);
}

/* The tool's big arrays (records, objects) come from mmap, not malloc: a
 * replay measures the allocator on the trace's calls, not on the tool's
 * own bookkeeping.  New elements read as zero. */
static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *n = p == NULL ? mmap(NULL, c * elem, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                        : mremap(p, *cap * elem, c * elem, MREMAP_MAYMOVE);
    if (n == MAP_FAILED) {
        fprintf(stderr, "fastalloc-trace: out of memory\n");
        exit(1);
    }
    *cap = c;
    return n;
}

static void release(void *p, size_t cap, size_t elem)
{
    if (p != NULL)
        munmap(p, cap * elem);
}

static struct sizecount *size_slot(struct stat_state *s, uint64_t size)
{
    if (2 * (s->nsizes + 1) > s->capsizes) {
        size_t old = s->capsizes;
        struct sizecount *o = s->sizes;
        size_t cap = old ? 2 * old : 1024;
        s->sizes = calloc(cap, sizeof *s->sizes);
        if (s->sizes == NULL) {
            fprintf(stderr, "fastalloc-trace: out of memory\n");
            exit(1);
        }
        s->capsizes = cap;
        for (size_t i = 0; i < old; i++) {
            if (o[i].allocs + o[i].frees == 0)
                continue;
            size_t k = (size_t)(o[i].size * 0x9E3779B97F4A7C15ULL >> 20) & (cap - 1);
            while (s->sizes[k].allocs + s->sizes[k].frees != 0)
                k = (k + 1) & (cap - 1);
            s->sizes[k] = o[i];
        }
        free(o);
    }
    size_t k = (size_t)(size * 0x9E3779B97F4A7C15ULL >> 20) & (s->capsizes - 1);
    while (s->sizes[k].allocs + s->sizes[k].frees != 0 && s->sizes[k].size != size)
        k = (k + 1) & (s->capsizes - 1);
    if (s->sizes[k].allocs + s->sizes[k].frees == 0) {
        s->sizes[k].size = size;
        s->nsizes++;
    }
    return &s->sizes[k];
}

static void add_delta(struct stat_state *s, uint64_t time, int64_t bytes, int64_t blocks)
{
    s->d = grow(s->d, &s->capd, s->nd + 1, sizeof *s->d);
    s->d[s->nd++] = (struct delta){time, bytes, blocks};
}

static void stat_one(const struct event *e, void *arg)
{
    struct stat_state *s = arg;
    const struct fa__trace_record *r = &e->r;
    s->ops[r->op]++;
    s->thread_seen = grow(s->thread_seen, &s->nthread_seen, e->thread + 1, 1);
    if (!s->thread_seen[e->thread]) {
        s->thread_seen[e->thread] = 1;
        s->threads_seen++;
    }
    if (r->id > ((uint64_t)1 << 32))
        bad(e->off, "corrupt record: object id %" PRIu64, r->id);
    if (r->id == 0) { /* a block the trace never saw allocated */
        s->unknown_frees += r->op == FA_TR_FREE;
        return;
    }
    s->objs = grow(s->objs, &s->nobjs, (size_t)r->id + 1, sizeof *s->objs);
    struct obj *o = &s->objs[r->id];
    if (r->op == FA_TR_FREE) {
        if (o->born == 0) { /* allocated before this trace began (a forked child's) */
            s->unknown_frees++;
            return;
        }
        if (o->thread != e->thread)
            s->cross_frees++;
        s->life_hist[log2_bucket(e->time - (o->born < e->time ? o->born : e->time))]++;
        size_slot(s, o->size)->frees++;
        add_delta(s, e->time, -(int64_t)o->size, -1);
        o->born = 0;
        return;
    }
    s->size_hist[log2_bucket(r->size)]++;
    size_slot(s, r->size)->allocs++;
    if (r->op == FA_TR_REALLOC) {
        add_delta(s, e->time, (int64_t)r->size - (int64_t)o->size, 0);
    } else {
        add_delta(s, e->time, (int64_t)r->size, 1);
        o->born = e->time ? e->time : 1;
        o->thread = e->thread;
    }
    o->size = r->size;
}

static int cmp_delta(const void *a, const void *b)
{
    const struct delta *x = a, *y = b;
    return x->time < y->time ? -1 : x->time > y->time;
}

static int cmp_count(const void *a, const void *b)
{
    const struct sizecount *x = a, *y = b;
    return x->allocs < y->allocs ? 1 : x->allocs > y->allocs ? -1 : (x->size > y->size) - (x->size < y->size);
}

static void print_hist(const char *title, const uint64_t *h, const char *unit)
{
    uint64_t top = 1;
    for (int i = 0; i < 65; i++)
        if (h[i] > top)
            top = h[i];
    printf("\n%s\n", title);
    for (int i = 0; i < 65; i++) {
        if (h[i] == 0)
            continue;
        uint64_t lo = i == 0 ? 0 : (uint64_t)1 << (i - 1), hi = i == 0 ? 0 : (i == 64 ? UINT64_MAX : ((uint64_t)1 << i) - 1);
        int bar = (int)(40 * h[i] / top);
        printf("  %12" PRIu64 " - %-12" PRIu64 " %-3s %10" PRIu64 "  %.*s\n", lo, hi, unit, h[i], bar,
               "########################################");
    }
}

/* Every record, to be put in time order: a thread's chunks reach the file
 * when its buffer fills or it exits, so a free can come before the malloc
 * that another thread made. */
struct events {
    struct event *e;
    size_t n, cap;
};

static void collect(const struct event *e, void *arg)
{
    struct events *v = arg;
    v->e = grow(v->e, &v->cap, v->n + 1, sizeof *v->e);
    v->e[v->n] = *e;
    v->n++;
}

/* By time; a thread's records keep their order (their times never go
 * back), and records of one time keep the file's order. */
static int cmp_event(const void *a, const void *b)
{
    const struct event *x = a, *y = b;
    if (x->time != y->time)
        return x->time < y->time ? -1 : 1;
    return (x->off > y->off) - (x->off < y->off);
}

static int do_stat(struct trace *t)
{
    struct stat_state s;
    memset(&s, 0, sizeof s);
    uint64_t *tt = NULL;
    size_t ntt = 0;
    struct events v = {NULL, 0, 0};
    walk(t, collect, &v, &tt, &ntt);
    qsort(v.e, v.n, sizeof *v.e, cmp_event);
    for (size_t i = 0; i < v.n; i++)
        stat_one(&v.e[i], &s);
    release(v.e, v.cap, sizeof *v.e);
    print_cmd(t);
    uint64_t allocs = s.ops[FA_TR_MALLOC] + s.ops[FA_TR_CALLOC] + s.ops[FA_TR_ALIGNED];
    printf("records   %" PRIu64 "\n", t->records);
    printf("ops       malloc %" PRIu64 ", calloc %" PRIu64 ", aligned %" PRIu64 ", realloc %" PRIu64 ", free %" PRIu64
           "\n",
           s.ops[FA_TR_MALLOC], s.ops[FA_TR_CALLOC], s.ops[FA_TR_ALIGNED], s.ops[FA_TR_REALLOC], s.ops[FA_TR_FREE]);
    printf("threads   %" PRIu64 "\n", s.threads_seen);
    uint64_t known_frees = s.ops[FA_TR_FREE] - s.unknown_frees;
    printf("frees     %" PRIu64 " cross-thread (%.1f%% of %" PRIu64 "), %" PRIu64 " of blocks from before the trace\n",
           s.cross_frees, known_frees ? 100.0 * (double)s.cross_frees / (double)known_frees : 0.0, known_frees,
           s.unknown_frees);
    qsort(s.d, s.nd, sizeof *s.d, cmp_delta);
    int64_t bytes = 0, blocks = 0, peak_bytes = 0, peak_blocks = 0;
    for (size_t i = 0; i < s.nd; i++) {
        bytes += s.d[i].bytes;
        blocks += s.d[i].blocks;
        if (bytes > peak_bytes)
            peak_bytes = bytes;
        if (blocks > peak_blocks)
            peak_blocks = blocks;
    }
    printf("peak      %" PRId64 " bytes live, %" PRId64 " blocks live\n", peak_bytes, peak_blocks);
    printf("end       %" PRId64 " bytes live in %" PRId64 " blocks (%" PRIu64 " allocations)\n", bytes, blocks, allocs);
    print_hist("sizes (allocations and reallocs)", s.size_hist, "B");
    print_hist("lifetimes (allocation to free)", s.life_hist, "ns");
    /* The commonest sizes, with the frees of blocks of each size. */
    size_t k = 0;
    for (size_t i = 0; i < s.capsizes; i++)
        if (s.sizes[i].allocs + s.sizes[i].frees != 0)
            s.sizes[k++] = s.sizes[i];
    qsort(s.sizes, k, sizeof *s.sizes, cmp_count);
    printf("\ncommonest sizes\n  %12s %12s %12s\n", "bytes", "allocations", "frees");
    for (size_t i = 0; i < k && i < 20; i++)
        printf("  %12" PRIu64 " %12" PRIu64 " %12" PRIu64 "\n", s.sizes[i].size, s.sizes[i].allocs, s.sizes[i].frees);
    release(s.objs, s.nobjs, sizeof *s.objs);
    release(s.d, s.capd, sizeof *s.d);
    free(s.sizes);
    release(s.thread_seen, s.nthread_seen, 1);
    free(tt);
    return 0;
}

/* ---- replay ---- */

/* Each recorded thread's records run on a thread of their own, on the
 * malloc of this process (LD_PRELOAD picks it).  An object's step k runs
 * after its step k - 1, whichever thread made that one: a free waits for
 * its malloc.  Objects whose steps are not all in the file (a thread still
 * running at the recording's exit lost its last records) are left out. */
struct robj {
    void *p;
    uint64_t done; /* steps done */
    uint64_t nsteps;
    uint64_t seen;
};

struct rthread {
    struct event *e;
    size_t n, cap;
    pthread_t th;
};

static struct robj *robjs;
static size_t nrobjs;
static struct rthread *rthreads;
static size_t nrthreads;
static uint64_t progress; /* steps done in all threads */
static uint64_t replayed[FA_TR_ALIGNED + 1], replayed_bytes, skipped;

static void gather(const struct event *e, void *arg)
{
    (void)arg;
    if (e->r.id > ((uint64_t)1 << 32))
        bad(e->off, "corrupt record: object id %" PRIu64, e->r.id);
    rthreads = grow(rthreads, &nrthreads, (size_t)e->thread + 1, sizeof *rthreads);
    struct rthread *t = &rthreads[e->thread];
    t->e = grow(t->e, &t->cap, t->n + 1, sizeof *t->e);
    t->e[t->n++] = *e;
    if (e->r.id != 0) {
        robjs = grow(robjs, &nrobjs, (size_t)e->r.id + 1, sizeof *robjs);
        struct robj *o = &robjs[e->r.id];
        o->seen++;
        if (e->r.step + 1 > o->nsteps)
            o->nsteps = e->r.step + 1;
    }
}

/* Wait for obj's steps before step; false if nothing moves for 10 s (a
 * trace whose order cannot be kept). */
static bool wait_step(struct robj *o, uint64_t step)
{
    uint64_t last = __atomic_load_n(&progress, __ATOMIC_ACQUIRE);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned spins = 0; __atomic_load_n(&o->done, __ATOMIC_ACQUIRE) != step; spins++) {
        if (spins < 64)
            continue;
        sched_yield();
        uint64_t now = __atomic_load_n(&progress, __ATOMIC_ACQUIRE);
        if (now != last) {
            last = now;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            continue;
        }
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (t1.tv_sec - t0.tv_sec > 10)
            return false;
    }
    return true;
}

static void *replay_thread(void *arg)
{
    struct rthread *t = arg;
    uint64_t counts[FA_TR_ALIGNED + 1] = {0}, bytes = 0, skip = 0;
    for (size_t i = 0; i < t->n; i++) {
        const struct fa__trace_record *r = &t->e[i].r;
        struct robj *o = r->id != 0 ? &robjs[r->id] : NULL;
        if (o == NULL || o->seen != o->nsteps) {
            skip++;
            continue;
        }
        if (!wait_step(o, r->step)) {
            fprintf(stderr, "fastalloc-trace: %s: replay stuck: object %" PRIu64 " waits for step %" PRIu64
                            " at byte %zu\n", file_name, r->id, r->step, t->e[i].off);
            exit(1);
        }
        void *p = NULL;
        switch (r->op) {
        case FA_TR_MALLOC:
            p = malloc(r->size);
            break;
        case FA_TR_CALLOC:
            p = calloc(1, r->size);
            break;
        case FA_TR_ALIGNED:
            if (posix_memalign(&p, r->align < sizeof(void *) ? sizeof(void *) : r->align, r->size) != 0)
                p = NULL;
            break;
        case FA_TR_REALLOC:
            p = realloc(o->p, r->size);
            break;
        case FA_TR_FREE:
            free(o->p);
            break;
        }
        if (r->op != FA_TR_FREE) {
            if (p == NULL && r->size != 0) {
                fprintf(stderr, "fastalloc-trace: %s: out of memory replaying %" PRIu64 " bytes at byte %zu\n",
                        file_name, r->size, t->e[i].off);
                exit(1);
            }
            if (p != NULL && r->size != 0 && r->op != FA_TR_CALLOC)
                *(volatile char *)p = 1; /* the program wrote its block */
            o->p = p;
            bytes += r->size;
        }
        counts[r->op]++;
        __atomic_store_n(&o->done, r->step + 1, __ATOMIC_RELEASE);
        __atomic_fetch_add(&progress, 1, __ATOMIC_RELEASE);
    }
    for (int k = 0; k <= FA_TR_ALIGNED; k++)
        __atomic_fetch_add(&replayed[k], counts[k], __ATOMIC_RELAXED);
    __atomic_fetch_add(&replayed_bytes, bytes, __ATOMIC_RELAXED);
    __atomic_fetch_add(&skipped, skip, __ATOMIC_RELAXED);
    return NULL;
}

static int do_replay(struct trace *t, bool json)
{
    uint64_t *tt = NULL;
    size_t ntt = 0;
    walk(t, gather, NULL, &tt, &ntt);
    free(tt);
    /* The tool's own memory before the calls start: the replay's heap is
     * what the peak adds to it. */
    long before_kib = 0;
    FILE *sm = fopen("/proc/self/statm", "r");
    if (sm != NULL) {
        long pages_total, pages_res;
        if (fscanf(sm, "%ld %ld", &pages_total, &pages_res) == 2)
            before_kib = pages_res * (sysconf(_SC_PAGESIZE) / 1024);
        fclose(sm);
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (size_t i = 1; i < nrthreads; i++)
        if (rthreads[i].n > 0 && pthread_create(&rthreads[i].th, NULL, replay_thread, &rthreads[i]) != 0) {
            fprintf(stderr, "fastalloc-trace: cannot start a replay thread\n");
            return 1;
        }
    for (size_t i = 1; i < nrthreads; i++)
        if (rthreads[i].n > 0)
            pthread_join(rthreads[i].th, NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    uint64_t ops = 0;
    for (int k = 1; k <= FA_TR_ALIGNED; k++)
        ops += replayed[k];
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long heap_kib = ru.ru_maxrss > before_kib ? ru.ru_maxrss - before_kib : 0;
    const char *pre = getenv("LD_PRELOAD");
    if (json) { /* one line, for compare and make bench */
        printf("{\"bench\": \"replay\", \"elapsed_s\": %.6f, \"ops\": %" PRIu64 ", \"ops_per_s\": %.1f, "
               "\"maxrss_kib\": %ld, \"heap_peak_kib\": %ld, \"checked\": {\"ops\": %" PRIu64
               ", \"records\": %" PRIu64 "}}\n",
               s, ops, s > 0 ? (double)ops / s : 0.0, ru.ru_maxrss, heap_kib, ops, t->records);
        return skipped == 0 ? 0 : 3;
    }
    printf("allocator %s\n", pre != NULL && *pre != '\0' ? pre : "the C library's");
    printf("replayed  malloc %" PRIu64 ", calloc %" PRIu64 ", aligned %" PRIu64 ", realloc %" PRIu64 ", free %" PRIu64
           ", %" PRIu64 " bytes allocated; %" PRIu64 " records left out\n",
           replayed[FA_TR_MALLOC], replayed[FA_TR_CALLOC], replayed[FA_TR_ALIGNED], replayed[FA_TR_REALLOC],
           replayed[FA_TR_FREE], replayed_bytes, skipped);
    printf("time      %.6f s, %.3f M ops/s\n", s, s > 0 ? (double)ops / s / 1e6 : 0.0);
    printf("peak RSS  %.1f MiB, %.1f MiB over the tool's own before the calls\n", (double)ru.ru_maxrss / 1024.0,
           (double)heap_kib / 1024.0);
    return 0;
}

#ifdef FA_TRACE_FUZZ
/* libFuzzer: any bytes as a trace file.  The reader must accept them or
 * refuse them (bad() returns here), never read past them, crash or hang;
 * what it collects is kept between inputs, so that a refused one leaks
 * nothing. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct events v;
    static uint64_t *tt;
    static size_t ntt;
    struct trace t;
    file_name = "input";
    v.n = 0;
    if (ntt != 0)
        memset(tt, 0, ntt * sizeof *tt);
    if (setjmp(fuzz_jmp) == 0) {
        parse_header(&t, data, size);
        walk(&t, collect, &v, &tt, &ntt);
        qsort(v.e, v.n, sizeof *v.e, cmp_event);
    }
    return 0;
}
#define main fastalloc_trace_main
int fastalloc_trace_main(int argc, char **argv);
#endif

/* ---- compare ---- */

/* The allocators a compare replays under: the C library's, fastalloc
 * (next to this program in the build tree, or in the lib folder of its
 * install; FASTALLOC_LIB overrides) and Debian's packages of the peers. */
struct alloc {
    const char *name;
    char path[4096]; /* "" for the C library's */
};

static bool find_fastalloc(char *out, size_t cap)
{
    const char *env = getenv("FASTALLOC_LIB");
    if (env != NULL && *env != '\0') {
        snprintf(out, cap, "%s", env);
        return access(out, R_OK) == 0;
    }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return false;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash == NULL)
        return false;
    *slash = '\0';
    static const char *const rel[] = {"libfastalloc.so", "../lib/libfastalloc.so",
                                      "../lib/x86_64-linux-gnu/libfastalloc.so", "../lib64/libfastalloc.so"};
    size_t dir = strlen(self);
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        size_t r = strlen(rel[i]);
        if (dir + 1 + r >= cap)
            continue;
        memcpy(out, self, dir);
        out[dir] = '/';
        memcpy(out + dir + 1, rel[i], r + 1);
        if (access(out, R_OK) == 0)
            return true;
    }
    return false;
}

struct run {
    double s;
    long rss_kib;
};

/* One replay of file under alloc, in a child: its JSON line read back. */
static bool replay_once(const struct alloc *a, const char *file, struct run *out)
{
    int fds[2];
    if (pipe(fds) != 0)
        return false;
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        if (a->path[0] != '\0')
            setenv("LD_PRELOAD", a->path, 1);
        else
            unsetenv("LD_PRELOAD");
        execl("/proc/self/exe", "fastalloc-trace", "replay", "--json", file, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char buf[1024];
    size_t len = 0;
    ssize_t r;
    while (len < sizeof buf - 1 && (r = read(fds[0], buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)r;
    buf[len] = '\0';
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    const char *e = strstr(buf, "\"elapsed_s\": "), *m = strstr(buf, "\"heap_peak_kib\": ");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || e == NULL || m == NULL)
        return false;
    out->s = strtod(e + 13, NULL);
    out->rss_kib = strtol(m + 17, NULL, 10);
    return true;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int do_compare(const char *file, int rounds)
{
    static struct alloc all[] = {
        {"glibc", ""},
        {"fastalloc", ""},
        {"jemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
        {"tcmalloc", "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"},
        {"mimalloc", "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"},
    };
    enum { NA = sizeof all / sizeof all[0], MAXR = 99 };
    bool use[NA];
    for (int i = 0; i < NA; i++)
        use[i] = i == 0 || (i == 1 ? find_fastalloc(all[i].path, sizeof all[i].path) : access(all[i].path, R_OK) == 0);
    static double secs[NA][MAXR], rss[NA][MAXR];
    if (rounds < 1 || rounds > MAXR)
        rounds = 3;
    /* Alternating: round r runs every allocator once before round r + 1. */
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < NA; i++) {
            if (!use[i])
                continue;
            struct run one;
            if (!replay_once(&all[i], file, &one)) {
                fprintf(stderr, "fastalloc-trace: %s: the replay under %s failed\n", file, all[i].name);
                return 1;
            }
            secs[i][r] = one.s;
            rss[i][r] = (double)one.rss_kib / 1024.0;
        }
    }
    double ms[NA], mr[NA], best = 0;
    for (int i = 0; i < NA; i++) {
        if (!use[i])
            continue;
        ms[i] = median(secs[i], rounds);
        mr[i] = median(rss[i], rounds);
        if (best == 0 || ms[i] < best)
            best = ms[i];
    }
    printf("%-10s %12s %12s %10s %10s\n", "allocator", "median s", "heap peak", "vs glibc", "vs best");
    for (int i = 0; i < NA; i++) {
        if (!use[i])
            printf("%-10s %12s\n", all[i].name, "(not installed)");
        else
            printf("%-10s %12.4f %8.1f MiB %9.2fx %9.2fx\n", all[i].name, ms[i], mr[i], ms[i] / ms[0], ms[i] / best);
    }
    printf("medians of %d alternating replays each; time: the replay's own, without reading the file; heap peak: "
           "the peak RSS over the tool's own before the calls\n",
           rounds);
    return 0;
}

/* ---- plot ---- */

/* Live bytes over time, as an SVG drawn by gnuplot (as make bench draws
 * its plots). */
static int do_plot(struct trace *t, const char *svg)
{
    uint64_t *tt = NULL;
    size_t ntt = 0;
    struct events v = {NULL, 0, 0};
    walk(t, collect, &v, &tt, &ntt);
    free(tt);
    qsort(v.e, v.n, sizeof *v.e, cmp_event);
    char data[] = "/tmp/fastalloc-trace-XXXXXX";
    int fd = mkstemp(data);
    if (fd < 0) {
        fprintf(stderr, "fastalloc-trace: cannot write a temporary file: %s\n", strerror(errno));
        return 1;
    }
    FILE *f = fdopen(fd, "w");
    /* Object sizes by id, and the live total after each record (at most
     * 4,000 points: every k-th). */
    uint64_t *size = NULL;
    size_t nsize = 0;
    int64_t live = 0;
    size_t every = v.n / 4000 + 1;
    for (size_t i = 0; i < v.n; i++) {
        const struct fa__trace_record *r = &v.e[i].r;
        if (r->id != 0 && r->id < ((uint64_t)1 << 32)) {
            size = grow(size, &nsize, (size_t)r->id + 1, sizeof *size);
            if (r->op == FA_TR_FREE) {
                live -= (int64_t)size[r->id];
                size[r->id] = 0;
            } else {
                live += (int64_t)r->size - (int64_t)size[r->id];
                size[r->id] = r->size;
            }
        }
        if (i % every == 0 || i + 1 == v.n)
            fprintf(f, "%.6f %.6f\n", (double)v.e[i].time / 1e9, (double)live / 1048576.0);
    }
    fclose(f);
    release(size, nsize, sizeof *size);
    release(v.e, v.cap, sizeof *v.e);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "gnuplot -e \"set terminal svg size 900,500; set output '%s'; "
                              "set xlabel 'seconds'; set ylabel 'live MiB'; set title 'live bytes'; "
                              "plot '%s' with lines title 'live'\"",
             svg, data);
    int rc = system(cmd);
    unlink(data);
    if (rc != 0) {
        fprintf(stderr, "fastalloc-trace: gnuplot failed (apt-get install gnuplot-nox)\n");
        return 1;
    }
    printf("wrote %s\n", svg);
    return 0;
}

static const char usage[] = "usage: fastalloc-trace stat FILE\n"
                            "       fastalloc-trace dump FILE\n"
                            "       fastalloc-trace replay [--json] FILE\n"
                            "       fastalloc-trace compare FILE [ROUNDS]\n"
                            "       fastalloc-trace plot FILE [OUT.svg]\n";

int main(int argc, char **argv)
{
    struct trace t;
    if (argc >= 3 && strcmp(argv[1], "replay") == 0) {
        bool json = argc == 4 && strcmp(argv[2], "--json") == 0;
        if (argc != 3 + json) {
            fputs(usage, stderr);
            return 2;
        }
        open_trace(&t, argv[2 + json]);
        return do_replay(&t, json);
    }
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "compare") == 0) {
        open_trace(&t, argv[2]); /* refused here, not in every replay */
        walk(&t, NULL, NULL, NULL, NULL);
        return do_compare(argv[2], argc == 4 ? atoi(argv[3]) : 3);
    }
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "plot") == 0) {
        char out[4096];
        snprintf(out, sizeof out, "%s.svg", argv[2]);
        open_trace(&t, argv[2]);
        return do_plot(&t, argc == 4 ? argv[3] : out);
    }
    if (argc != 3) {
        fputs(usage, stderr);
        return 2;
    }
    if (strcmp(argv[1], "stat") == 0) {
        open_trace(&t, argv[2]);
        return do_stat(&t);
    }
    if (strcmp(argv[1], "dump") == 0) {
        open_trace(&t, argv[2]);
        walk(&t, NULL, NULL, NULL, NULL); /* all of it checked before a line is printed */
        uint64_t *tt = NULL;
        size_t ntt = 0;
        print_cmd(&t);
        walk(&t, dump_one, NULL, &tt, &ntt);
        free(tt);
        return 0;
    }
    fputs(usage, stderr);
    return 2;
}
