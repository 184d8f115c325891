/* Allocation traces: a child records itself (FASTALLOC_TRACE) while four
 * threads make calls whose counts the test knows, each kind at sizes no
 * other code here uses, with frees of each other's blocks; then
 * `fastalloc-trace stat` must count exactly those calls, and `dump` must
 * list them.  Then the reader against damage: the trace cut at every
 * record boundary and with bytes flipped at random must each get one
 * error line with a byte offset and exit status 1, never a crash.  A forked
 * child and an exec'd one each write a trace of their own, PATH.PID. */
#define _GNU_SOURCE
#include "check.h"
#include "child.h"
#include "util.h"
#include "fastalloc.h"
#include "09-diag/format.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { T = 4, NM = 500, NC = 100, NA = 50, NR = 100, NX = 250 };
static void *blocks[T][NM];
static pthread_barrier_t bar;

static size_t size_m(int t) { return 10001 + 1000 * (size_t)t; }
static size_t size_c(int t) { return 20001 + (size_t)t; }
static size_t size_a(int t) { return 30208 + 256 * (size_t)t; }
static size_t size_r(int t) { return 40001 + (size_t)t; }

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    void *c[NC], *a[NA];
    for (int i = 0; i < NM; i++)
        blocks[t][i] = fa_malloc(size_m(t));
    for (int i = 0; i < NC; i++)
        c[i] = fa_calloc(1, size_c(t));
    for (int i = 0; i < NA; i++)
        a[i] = fa_aligned_alloc(256, size_a(t));
    for (int i = NM - NR; i < NM; i++) /* the last NR blocks grow */
        blocks[t][i] = fa_realloc(blocks[t][i], size_r(t));
    for (int i = 0; i < NC; i++)
        fa_free(c[i]);
    for (int i = 0; i < NA; i++)
        fa_free(a[i]);
    pthread_barrier_wait(&bar);
    /* The first NX blocks of the next thread: cross-thread frees. */
    int u = (t + 1) % T;
    for (int i = 0; i < NX; i++)
        fa_free(blocks[u][i]);
    for (int i = NX; i < NM; i++)
        fa_free(blocks[t][i]);
    return NULL;
}

static int child_record(void)
{
    pthread_t th[T];
    pthread_barrier_init(&bar, NULL, T);
    for (int t = 0; t < T; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);
    return 0;
}

static char trace_path[64];

static void trace_env(void *arg)
{
    setenv("FASTALLOC_TRACE", arg, 1);
}

/* The row of `stat`'s commonest sizes for size: its allocations and frees. */
static bool size_row(const char *out, size_t size, unsigned long *allocs, unsigned long *frees)
{
    const char *p = strstr(out, "commonest sizes");
    char want[32];
    snprintf(want, sizeof want, " %zu ", size);
    for (p = p ? strchr(p, '\n') : NULL; p != NULL && *p != '\0'; p = strchr(p + 1, '\n')) {
        unsigned long s, a, f;
        if (sscanf(p + 1, "%lu %lu %lu", &s, &a, &f) == 3 && s == size) {
            *allocs = a;
            *frees = f;
            return true;
        }
    }
    return false;
}

/* Runs this program in mode (record, forkchild, execparent), traced to
 * trace_path: it must exit 0 with nothing on stderr; what it printed is in
 * *r. */
static void record_as(const char *mode, struct child_out *r)
{
    snprintf(trace_path, sizeof trace_path, "/tmp/fa_trace_%d", (int)getpid());
    char *argv[] = {(char *)child_self(), (char *)mode, NULL};
    child_run(r, trace_env, trace_path, argv);
    CHECKF(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0 && r->err[0] == '\0', "%s: status %#x: %s", mode,
           r->status, r->err);
}

static void record(void)
{
    struct child_out r;
    record_as("record", &r);
}

/* Runs `fastalloc-trace cmd path`, which must exit 0; its output in *r. */
static void trace_tool(struct child_out *r, const char *cmd, const char *path)
{
    char *argv[] = {FA_TRACE_TOOL, (char *)cmd, (char *)path, NULL};
    child_run(r, NULL, NULL, argv);
    CHECKF(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0, "%s %s: status %#x: %s", cmd, path, r->status,
           r->err);
}

static int case_stat(void)
{
    record();
    struct child_out r;
    trace_tool(&r, "stat", trace_path);
    for (int t = 0; t < T; t++) {
        unsigned long a = 0, f = 0;
        CHECKF(size_row(r.out, size_m(t), &a, &f) && a == NM && f == NM - NR, "%zu B: %lu allocs, %lu frees\n%s",
               size_m(t), a, f, r.out);
        CHECKF(size_row(r.out, size_c(t), &a, &f) && a == NC && f == NC, "calloc %zu B: %lu, %lu", size_c(t), a, f);
        CHECKF(size_row(r.out, size_a(t), &a, &f) && a == NA && f == NA, "aligned %zu B: %lu, %lu", size_a(t), a,
               f);
        CHECKF(size_row(r.out, size_r(t), &a, &f) && a == NR && f == NR, "realloc to %zu B: %lu, %lu", size_r(t), a,
               f);
    }
    /* The totals hold the C library's own calls too (a block per thread it
     * starts, stdio): at least the test's, and not many more. */
    unsigned long m, c, al, re, fr, th, cross;
    const char *ops = strstr(r.out, "ops ");
    CHECK(ops != NULL && sscanf(ops, "ops malloc %lu, calloc %lu, aligned %lu, realloc %lu, free %lu", &m, &c, &al,
                                &re, &fr) == 5);
    CHECKF(m >= T * NM && m <= T * NM + 32 && c >= T * NC && c <= T * NC + 32 && al == T * NA && re >= T * NR &&
               re <= T * NR + 8 && fr >= T * (NM + NC + NA) && fr <= T * (NM + NC + NA) + 32,
           "%s", r.out);
    const char *thr = strstr(r.out, "threads ");
    CHECK(thr != NULL && sscanf(thr, "threads %lu", &th) == 1 && th >= T && th <= T + 2);
    const char *cr = strstr(r.out, "frees ");
    CHECK(cr != NULL && sscanf(cr, "frees %lu cross-thread", &cross) == 1 && cross >= T * NX &&
          cross <= T * NX + 8);
    unlink(trace_path);
    return check_done("test_trace stat");
}

/* Run the tool on a damaged copy: exit 1, one line naming the file and a
 * byte offset, nothing on stdout. */
static void expect_error(const char *path, const char *what)
{
    char *argv[] = {FA_TRACE_TOOL, "stat", (char *)path, NULL};
    struct child_out r;
    child_run(&r, NULL, NULL, argv);
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 1, "%s: status %#x, stderr: %s", what, r.status, r.err);
    CHECKF(strncmp(r.err, "fastalloc-trace: ", 17) == 0 && strstr(r.err, " at byte ") != NULL &&
               strchr(r.err, '\n') == r.err + strlen(r.err) - 1,
           "%s: stderr \"%s\"", what, r.err);
    CHECKF(r.out[0] == '\0', "%s: printed before the check: %s", what, r.out);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    struct stat st;
    CHECK(fstat(fileno(f), &st) == 0);
    char *b = malloc((size_t)st.st_size);
    CHECK(b != NULL && fread(b, 1, (size_t)st.st_size, f) == (size_t)st.st_size);
    fclose(f);
    *len = (size_t)st.st_size;
    return b;
}

static void spit(const char *path, const char *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL && fwrite(b, 1, len, f) == len && fclose(f) == 0);
}

static int case_damage(void)
{
    record();
    size_t len;
    char *good = slurp(trace_path, &len);
    char bad_path[80];
    snprintf(bad_path, sizeof bad_path, "%s.bad", trace_path);
    /* Cut at record boundaries: at the end of the header, at the start of
     * every chunk and of its first and last record, at each of the first 40
     * records (whose offsets dump's output must list), and at every stride-th
     * record past them; then at every byte of the footer.  The boundaries
     * are found here with the format's own decoder.  Each cut runs the tool
     * once, so the stride keeps the runs to about 400 where the trace holds
     * thousands of records: every kind of boundary is cut, on a loaded
     * machine too (a cut at every record took over 5 minutes there). */
    struct child_out r;
    trace_tool(&r, "dump", trace_path);
    const char *end = good + len, *p = good + 32;
    uint64_t v;
    CHECK((p = fa__decode_varint64(p, end, &v)) != NULL);
    p += v;
    const char *first_chunk = p;
    /* A first pass counts the records, for the stride. */
    uint64_t records = 0;
    while (p < end && *p == FA_TRACE_CHUNK) {
        uint64_t thread, nrec, nbytes;
        CHECK((p = fa__decode_varint64(p + 1, end, &thread)) != NULL);
        CHECK((p = fa__decode_varint64(p, end, &nrec)) != NULL);
        CHECK((p = fa__decode_varint64(p, end, &nbytes)) != NULL);
        records += nrec;
        p += nbytes;
    }
    CHECKF(records > 3000, "%llu records", (unsigned long long)records);
    /* Under a sanitizer each run of the tool costs several times more
     * (153 s for the whole case at 300 cuts): a third as many there. */
    enum { STRIDED_CUTS = FA_TEST_SLOW ? 100 : 300, FLIPS = FA_TEST_SLOW ? 100 : 300 };
    uint64_t stride = records / STRIDED_CUTS + 1, seen = 0;
    unsigned cuts = 0;
    p = first_chunk;
    spit(bad_path, good, (size_t)(p - good));
    expect_error(bad_path, "cut after the header");
    while (p < end && *p == FA_TRACE_CHUNK) {
        if (p != first_chunk) {
            spit(bad_path, good, (size_t)(p - good));
            expect_error(bad_path, "cut between chunks");
            cuts++;
        }
        uint64_t thread, nrec, nbytes;
        CHECK((p = fa__decode_varint64(p + 1, end, &thread)) != NULL);
        CHECK((p = fa__decode_varint64(p, end, &nrec)) != NULL);
        CHECK((p = fa__decode_varint64(p, end, &nbytes)) != NULL);
        for (uint64_t i = 0; i < nrec; i++, seen++) {
            if (seen < 40) { /* in the part of dump's output the test keeps */
                char at[32];
                snprintf(at, sizeof at, "@%-8zu", (size_t)(p - good));
                CHECKF(strstr(r.out, at) != NULL, "dump lacks record %s", at);
            }
            if (seen < 40 || seen % stride == 0 || i == 0 || i == nrec - 1) {
                spit(bad_path, good, (size_t)(p - good));
                expect_error(bad_path, "cut at a record");
                cuts++;
            }
            struct fa__trace_record rec;
            CHECK((p = fa__trace_get_record(p, end, &rec)) != NULL);
        }
    }
    CHECKF(seen == records && cuts > STRIDED_CUTS, "%llu of %llu records walked, %u cuts", (unsigned long long)seen,
           (unsigned long long)records, cuts);
    for (const char *q = p; q < end; q++) {
        spit(bad_path, good, (size_t)(q - good));
        expect_error(bad_path, "cut in the footer");
    }
    /* Bytes flipped at random, one at a time. */
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < FLIPS; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        size_t off = rng % len;
        unsigned char x = (unsigned char)(1 + (rng >> 32) % 255);
        good[off] ^= (char)x;
        spit(bad_path, good, len);
        good[off] ^= (char)x;
        expect_error(bad_path, "a flipped byte");
    }
    /* Another version; a byte after the end; an empty file. */
    good[8] = 2;
    spit(bad_path, good, len);
    good[8] = 1;
    {
        char *av[] = {FA_TRACE_TOOL, "stat", bad_path, NULL};
        child_run(&r, NULL, NULL, av);
        CHECKF(strstr(r.err, "unsupported version 2") != NULL, "%s", r.err);
    }
    char *longer = malloc(len + 1);
    CHECK(longer != NULL);
    memcpy(longer, good, len);
    longer[len] = 'x';
    spit(bad_path, longer, len + 1);
    expect_error(bad_path, "a byte after the end");
    spit(bad_path, good, 0);
    expect_error(bad_path, "an empty file");
    free(longer);
    free(good);
    unlink(bad_path);
    unlink(trace_path);
    return check_done("test_trace damage");
}

/* Replay: the same operations as the recording, with the same sizes.  The
 * replay itself is recorded (fastalloc preloaded into the tool), and its
 * trace must have the recording's rows for the test's sizes. */
#ifndef FA_TEST_SANITIZED
static void replay_env(void *arg)
{
    setenv("FASTALLOC_TRACE", arg, 1);
    setenv("LD_PRELOAD", FA_LIB, 1);
}
#endif

static void ops_of(const char *out, const char *prefix, unsigned long v[5])
{
    const char *p = strstr(out, prefix);
    char fmt[128];
    snprintf(fmt, sizeof fmt, "%s malloc %%lu, calloc %%lu, aligned %%lu, realloc %%lu, free %%lu", prefix);
    CHECKF(p != NULL && sscanf(p, fmt, &v[0], &v[1], &v[2], &v[3], &v[4]) == 5, "no \"%s\" line in:\n%s", prefix,
           out);
}

static int case_replay(void)
{
    record();
    struct child_out st, rp;
    trace_tool(&st, "stat", trace_path);
    char *rargv[] = {FA_TRACE_TOOL, "replay", trace_path, NULL};
#ifdef FA_TEST_SANITIZED
    /* The sanitizer owns malloc: the replay runs on it, unrecorded. */
    child_run(&rp, NULL, NULL, rargv);
#else
    char second[80];
    snprintf(second, sizeof second, "%s.replay", trace_path);
    child_run(&rp, replay_env, second, rargv);
#endif
    CHECKF(WIFEXITED(rp.status) && WEXITSTATUS(rp.status) == 0, "replay: status %#x: %s", rp.status, rp.err);
    unsigned long want[5], got[5];
    ops_of(st.out, "ops      ", want);
    ops_of(rp.out, "replayed ", got);
    for (int k = 0; k < 5; k++)
        CHECKF(got[k] == want[k], "op %d: replayed %lu of %lu\n%s", k, got[k], want[k], rp.out);
    CHECKF(strstr(rp.out, "; 0 records left out") != NULL && strstr(rp.out, "M ops/s") != NULL &&
               strstr(rp.out, "peak RSS") != NULL,
           "%s", rp.out);
#ifndef FA_TEST_SANITIZED
    struct child_out st2;
    trace_tool(&st2, "stat", second);
    for (int t = 0; t < T; t++) {
        size_t sizes[4] = {size_m(t), size_c(t), size_a(t), size_r(t)};
        for (int k = 0; k < 4; k++) {
            unsigned long a1, f1, a2, f2;
            CHECK(size_row(st.out, sizes[k], &a1, &f1));
            CHECKF(size_row(st2.out, sizes[k], &a2, &f2) && a2 == a1 && f2 == f1, "%zu B: %lu/%lu against %lu/%lu",
                   sizes[k], a2, f2, a1, f1);
        }
    }
    unlink(second);
#endif
    unlink(trace_path);
    return check_done("test_trace replay");
}

/* compare: a row per allocator, glibc and fastalloc at least, each
 * replay complete; plot: an SVG, when gnuplot is installed. */
static void lib_env(void *arg)
{
    setenv("FASTALLOC_LIB", arg, 1);
}

static int case_tools(void)
{
#ifdef FA_TEST_SANITIZED
    /* compare preloads other allocators into the tool, which a sanitizer
     * build's runtime refuses. */
    printf("SKIP: a sanitizer build: compare would preload allocators into a sanitized program\n");
    return 77;
#endif
    record();
    char *cargv[] = {FA_TRACE_TOOL, "compare", trace_path, "1", NULL};
    struct child_out r;
    child_run(&r, lib_env, FA_LIB, cargv);
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "compare: status %#x: %s%s", r.status, r.out, r.err);
    CHECKF(strstr(r.out, "\nglibc ") != NULL && strstr(r.out, "\nfastalloc ") != NULL &&
               strstr(r.out, "1.00x") != NULL,
           "compare printed:\n%s", r.out);
    char svg[96];
    snprintf(svg, sizeof svg, "%s.svg", trace_path);
    char *pargv[] = {FA_TRACE_TOOL, "plot", trace_path, svg, NULL};
    child_run(&r, NULL, NULL, pargv);
    unlink(trace_path);
    if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 1 && strstr(r.err, "gnuplot") != NULL) {
        printf("SKIP: gnuplot is not installed: plot not checked\n");
        return 77;
    }
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "plot: %s", r.err);
    size_t len;
    char *s = slurp(svg, &len);
    CHECK(len > 1000 && strstr(s, "<svg") != NULL && strstr(s, "live bytes") != NULL);
    free(s);
    unlink(svg);
    return check_done("test_trace tools");
}

/* A forked child writes PATH.PID: its own calls, as a trace of its own. */
static int child_fork(void)
{
    void *a = fa_malloc(12345);
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; i < 77; i++)
            fa_free(fa_malloc(23456));
        fa_free(a); /* a block the child's trace never saw allocated */
        exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    printf("child=%d\n", (int)pid);
    fa_free(a);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

/* Runs this program in mode, traced (record_as), a parent that starts a
 * child and prints "child=PID": returns the pid, and puts the child's own
 * trace, PATH.PID, in own. */
static int record_parent(const char *mode, char *own, size_t cap)
{
    struct child_out r;
    record_as(mode, &r);
    int pid = 0;
    CHECK(sscanf(strstr(r.out, "child=") ? strstr(r.out, "child=") : "", "child=%d", &pid) == 1 && pid > 0);
    snprintf(own, cap, "%s.%d", trace_path, pid);
    return pid;
}

static int case_fork(void)
{
    char own[96];
    record_parent("forkchild", own, sizeof own);
    struct child_out r;
    unsigned long a, f;
    trace_tool(&r, "stat", trace_path);
    CHECKF(size_row(r.out, 12345, &a, &f) && a == 1 && f == 1 && !size_row(r.out, 23456, &a, &f), "parent:\n%s",
           r.out);
    trace_tool(&r, "stat", own);
    CHECKF(size_row(r.out, 23456, &a, &f) && a == 77 && f == 77 && strstr(r.out, ", 1 of blocks from before") != NULL,
           "child:\n%s", r.out);
    unlink(own);
    unlink(trace_path);
    return check_done("test_trace fork");
}

/* A child that the traced process forks and execs (this program again,
 * as a compiler driver runs its passes) is a new process that finds PATH
 * held by its parent: it writes PATH.PID, its own calls only. */
enum { EXEC_FREED = 55, EXEC_LIVE = 11 };

static int child_exec_child(void)
{
    for (int i = 0; i < EXEC_FREED; i++)
        fa_free(fa_malloc(34567));
    static void *live[EXEC_LIVE];
    for (int i = 0; i < EXEC_LIVE; i++)
        live[i] = fa_malloc(34568);
    return live[0] != NULL ? 0 : 1;
}

static int child_exec_parent(void)
{
    void *a = fa_malloc(12345);
    pid_t pid = fork();
    if (pid == 0) {
        execl(child_self(), child_self(), "execchild", (char *)NULL);
        _exit(127);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return 1;
    printf("child=%d\n", (int)pid);
    fa_free(a);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

static int case_exec(void)
{
    char own[96];
    int pid = record_parent("execparent", own, sizeof own);
    struct child_out r;
    unsigned long a, f;
    trace_tool(&r, "stat", trace_path);
    CHECKF(size_row(r.out, 12345, &a, &f) && a == 1 && f == 1 && !size_row(r.out, 34567, &a, &f) &&
               !size_row(r.out, 34568, &a, &f),
           "parent:\n%s", r.out);
    trace_tool(&r, "stat", own);
    /* The child's own process: its pid and command line in the header, its
     * calls counted exactly, nothing of its parent's. */
    char pid_line[32];
    snprintf(pid_line, sizeof pid_line, "\npid       %d\n", pid);
    CHECKF(strstr(r.out, pid_line) != NULL && strstr(r.out, " execchild") != NULL, "child's header:\n%s", r.out);
    CHECKF(size_row(r.out, 34567, &a, &f) && a == EXEC_FREED && f == EXEC_FREED && size_row(r.out, 34568, &a, &f) &&
               a == EXEC_LIVE && f == 0 && !size_row(r.out, 12345, &a, &f) &&
               strstr(r.out, ", 0 of blocks from before") != NULL,
           "child:\n%s", r.out);
    /* Its totals: the C library may add a call or two at start-up. */
    unsigned long ops[5];
    ops_of(r.out, "ops      ", ops);
    CHECKF(ops[0] >= EXEC_FREED + EXEC_LIVE && ops[0] <= EXEC_FREED + EXEC_LIVE + 4 && ops[4] >= EXEC_FREED &&
               ops[4] <= EXEC_FREED + 4,
           "child:\n%s", r.out);
    unlink(own);
    unlink(trace_path);
    return check_done("test_trace exec");
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "record") == 0)
        return child_record();
    if (argc == 2 && strcmp(argv[1], "forkchild") == 0)
        return child_fork();
    if (argc == 2 && strcmp(argv[1], "execparent") == 0)
        return child_exec_parent();
    if (argc == 2 && strcmp(argv[1], "execchild") == 0)
        return child_exec_child();
    static const struct check_case cases[] = {
        {"stat", case_stat},
        {"damage", case_damage},
        {"replay", case_replay},
        {"tools", case_tools},
        {"fork", case_fork},
        {"exec", case_exec},
    };
    return check_run_case("test_trace", cases, sizeof cases / sizeof cases[0], argc, argv);
}
