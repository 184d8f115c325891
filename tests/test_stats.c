/* Statistics against known call sequences.  Each case takes a snapshot,
 * makes calls whose counts it knows, and checks the difference: blocks and
 * bytes allocated and freed, in use, per size class, large blocks; from one
 * thread, and from four threads (with frees of each other's blocks)
 * summed after they exit.  The printed table and JSON: the JSON must parse
 * (python3's json module reads it).  FASTALLOC_STATS at exit: the table, the
 * JSON file, and a file per process with %p. */
#define _GNU_SOURCE
#include "check.h"
#include "child.h"
#include "fastalloc.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink;

/* The class entry of size bytes (the smallest class that holds it). */
static const struct fa_class_stats *class_of(const fa_stats_t *s, size_t size)
{
    for (unsigned i = 0; i < s->nclasses; i++)
        if (s->classes[i].size >= size)
            return &s->classes[i];
    CHECKF(0, "no class holds %zu bytes", size);
    return NULL;
}

/* The class entry a request of n bytes lands in: the class of n, or in the
 * hardened library of n and its tail (util.h, TEST_TAIL). */
static const struct fa_class_stats *class_asked(const fa_stats_t *s, size_t n)
{
    return class_of(s, n + TEST_TAIL);
}

static fa_stats_t before, after;

/* One thread: 1,000 blocks of 40 B (class 48; 64 in the hardened library,
 * with the tail), 300 of them freed; 200 of 1,000 B, all freed; 3 large
 * blocks of 2 MiB, one freed. */
static int case_one(void)
{
    enum { N = 1000, M = 300, B = 200, L = 3 };
    static void *p[N], *q[B], *big[L];
    fa_stats_get(&before);
    for (int i = 0; i < N; i++)
        CHECK((p[i] = fa_malloc(40)) != NULL);
    for (int i = 0; i < B; i++)
        CHECK((q[i] = fa_malloc(1000)) != NULL);
    for (int i = 0; i < L; i++)
        CHECK((big[i] = fa_malloc(2 << 20)) != NULL);
    for (int i = 0; i < M; i++)
        fa_free(p[i]);
    for (int i = 0; i < B; i++)
        fa_free(q[i]);
    fa_free(big[0]);
    /* Blocks freed and allocated again: the thread takes its frees back
     * from the span (counted then), three times over. */
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < M; i++)
            CHECK((p[i] = fa_malloc(40)) != NULL);
        for (int i = 0; i < M; i++)
            fa_free(p[i]);
    }
    fa_stats_get(&after);
    size_t s40 = class_asked(&after, 40)->size, s1k = class_asked(&after, 1000)->size;
    CHECKF(s40 == (test_tails_on() ? 64 : 48) && s1k == 1024, "classes %zu and %zu", s40, s1k);
    CHECKF(after.allocs - before.allocs == N + B + L + 3 * M, "allocs %llu", after.allocs - before.allocs);
    CHECKF(after.frees - before.frees == M + B + 1 + 3 * M, "frees %llu", after.frees - before.frees);
    CHECKF(after.in_use_blocks - before.in_use_blocks == N - M + L - 1, "in use %zu",
           after.in_use_blocks - before.in_use_blocks);
    size_t want = (N - M) * s40 + (size_t)(L - 1) * (2 << 20);
    CHECKF(after.in_use - before.in_use == want, "in use %zu B, expected %zu", after.in_use - before.in_use, want);
    CHECK(after.allocated_bytes - before.allocated_bytes == (N + 3 * M) * s40 + B * s1k + (size_t)L * (2 << 20));
    CHECK(after.freed_bytes - before.freed_bytes == 4 * M * s40 + B * s1k + (2 << 20));
    const struct fa_class_stats *a = class_asked(&after, 40), *b = class_asked(&before, 40);
    CHECK(a->allocs - b->allocs == N + 3 * M);
    CHECK(a->in_use_blocks - b->in_use_blocks == N - M);
    CHECK(a->spans >= 1);
    CHECK(class_asked(&after, 1000)->in_use_blocks == class_asked(&before, 1000)->in_use_blocks);
    /* Most allocations take the fast path. */
    CHECKF(a->slow_allocs - b->slow_allocs < N / 4, "%llu slow of %d", a->slow_allocs - b->slow_allocs, N + 3 * M);
    CHECK(after.peak_in_use >= after.in_spans + after.large);
    CHECK(after.resident >= after.in_spans + after.large);
    for (int i = M; i < N; i++)
        fa_free(p[i]);
    for (int i = 1; i < L; i++)
        fa_free(big[i]);
    fa_stats_get(&after);
    CHECK(after.in_use_blocks == before.in_use_blocks && after.in_use == before.in_use);
    return check_done("test_stats one");
}

/* Four threads: thread t allocates K blocks of size[t], frees half of its
 * own and then the other half of thread t+1's (a remote free), so every
 * block is freed once; plus K/10 blocks each that stay live. */
enum { T = 4, K = 5000 };
static const size_t tsize[T] = {24, 200, 3000, 30000};
static void *blocks[T][K];
static void *keep[T][K / 10];
static pthread_barrier_t bar;

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    for (int i = 0; i < K; i++)
        CHECK((blocks[t][i] = fa_malloc(tsize[t])) != NULL);
    for (int i = 0; i < K / 10; i++)
        CHECK((keep[t][i] = fa_malloc(tsize[t])) != NULL);
    pthread_barrier_wait(&bar);
    for (int i = 0; i < K / 2; i++)
        fa_free(blocks[t][i]);
    int u = (t + 1) % T;
    for (int i = K / 2; i < K; i++)
        fa_free(blocks[u][i]);
    return NULL;
}

static int case_threads(void)
{
    pthread_t th[T];
    CHECK(pthread_barrier_init(&bar, NULL, T) == 0);
    fa_stats_get(&before);
    for (int t = 0; t < T; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0);
    for (int t = 0; t < T; t++)
        CHECK(pthread_join(th[t], NULL) == 0);
    fa_stats_get(&after);
    unsigned long long allocs = 0, frees = 0, bytes = 0;
    for (int t = 0; t < T; t++) {
        size_t sz = class_asked(&after, tsize[t])->size;
        allocs += K + K / 10;
        frees += K;
        bytes += (K / 10) * sz;
        const struct fa_class_stats *a = class_asked(&after, tsize[t]), *b = class_asked(&before, tsize[t]);
        CHECKF(a->allocs - b->allocs == K + K / 10, "%zu B: allocs %llu", tsize[t], a->allocs - b->allocs);
        CHECKF(a->in_use_blocks - b->in_use_blocks == K / 10, "%zu B: in use %zu", tsize[t],
               a->in_use_blocks - b->in_use_blocks);
    }
    /* The totals hold, besides, what the C library allocated for the new
     * threads (one block of 288 B each, in glibc 2.36): exact per class
     * above, within that much here. */
    CHECKF(after.allocs - before.allocs >= allocs && after.allocs - before.allocs <= allocs + 2 * T,
           "allocs %llu, expected %llu", after.allocs - before.allocs, allocs);
    CHECKF(after.frees - before.frees >= frees && after.frees - before.frees <= frees + 2 * T,
           "frees %llu, expected %llu", after.frees - before.frees, frees);
    CHECKF(after.in_use - before.in_use >= bytes && after.in_use - before.in_use <= bytes + 2 * T * 1024,
           "in use %zu, expected %llu", after.in_use - before.in_use, bytes);
    fa_stats_t mid = after;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < K / 10; i++)
            fa_free(keep[t][i]);
    fa_stats_get(&after);
    CHECK(mid.in_use - after.in_use == bytes && after.frees - mid.frees == T * (K / 10));
    pthread_barrier_destroy(&bar);
    return check_done("test_stats threads");
}

static int case_print(void)
{
    char path[] = "/tmp/fa_stats_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w");
    CHECK(f != NULL);
    sink = fa_malloc(100);
    /* A pool with 25 objects out: listed with the heap. */
    fa_pool_options po = {.object_size = 200, .name = "statpool"};
    fa_pool *pool = fa_pool_create(&po);
    CHECK(pool != NULL);
    void *objs[25];
    for (int i = 0; i < 25; i++)
        CHECK((objs[i] = fa_pool_get(pool)) != NULL);
    fa_stats_t s;
    fa_stats_get(&s);
    bool found = false;
    for (unsigned i = 0; i < s.npools && i < FA_STATS_MAX_POOLS; i++)
        if (strcmp(s.pools[i].name, "statpool") == 0)
            found = s.pools[i].live == 25 && s.pools[i].object_size >= 200;
    CHECK(found);
    CHECK(fa_stats_print(f, FA_STATS_JSON) == 0);
    fclose(f);
    char *argv[] = {"python3", "-c",
                    "import json, sys\n"
                    "d = json.load(open(sys.argv[1]))\n"
                    "assert d['allocs'] >= 1 and d['in_use'] > 0, d\n"
                    "c = [k for k in d['classes'] if k['size'] == 112][0]\n"
                    "assert c['in_use_blocks'] >= 1 and c['spans'] >= 1, c\n"
                    "p = [q for q in d['pools'] if q['name'] == 'statpool'][0]\n"
                    "assert p['live'] == 25, p\n"
                    "print('parsed', len(d['classes']))\n",
                    path, NULL};
    struct child_out r;
    child_run(&r, NULL, NULL, argv);
    unlink(path);
    if (child_missing(&r, "python3"))
        return 77;
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0 && strstr(r.out, "parsed ") != NULL,
           "the JSON did not parse: %s%s", r.out, r.err);
    /* The table: a header and a row for the class in use. */
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    CHECK(m != NULL && fa_stats_print(m, 0) == 0);
    fclose(m);
    CHECK(strstr(buf, "fastalloc statistics") != NULL && strstr(buf, "     112 ") != NULL);
    CHECKF(strstr(buf, "  statpool ") != NULL, "%s", buf);
    free(buf);
    for (int i = 0; i < 25; i++)
        fa_pool_put(pool, objs[i]);
    fa_pool_destroy(pool);
    CHECK(fa_stats_print(NULL, 0) == -1 && errno == EINVAL);
    fa_free(sink);
    return check_done("test_stats print");
}

/* FASTALLOC_STATS: at exit, the table on stderr, or JSON in a file that
 * tools/fastalloc-stat renders. */
static void stats_env(void *arg)
{
    setenv("FASTALLOC_STATS", arg, 1);
}

static int child_exit(void)
{
    for (int i = 0; i < 777; i++)
        sink = fa_malloc(1500); /* 777 blocks of class 1536, all live at exit */
    return 0;
}

static int case_exit(void)
{
    char *argv[] = {(char *)child_self(), "child", NULL};
    struct child_out r;
    child_run(&r, stats_env, "1", argv);
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "status %#x: %s", r.status, r.err);
    CHECKF(strstr(r.err, "fastalloc statistics") != NULL && strstr(r.err, "    1536          777 ") != NULL,
           "stderr:\n%s", r.err);
    char path[] = "/tmp/fa_stats_XXXXXX", env[64];
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    snprintf(env, sizeof env, "json:%s", path);
    child_run(&r, stats_env, env, argv);
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0 && r.err[0] == '\0', "status %#x: %s", r.status,
           r.err);
    char tool[4096];
    snprintf(tool, sizeof tool, "%s/tools/fastalloc-stat", FA_SOURCE_DIR);
    char *targv[] = {"python3", tool, path, NULL};
    child_run(&r, NULL, NULL, targv);
    unlink(path);
    if (child_missing(&r, "python3"))
        return 77;
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "fastalloc-stat: %s%s", r.out, r.err);
    CHECKF(strstr(r.out, "    1536        777 ") != NULL, "fastalloc-stat printed:\n%s", r.out);
    return check_done("test_stats exit");
}

/* FASTALLOC_STATS=json:PATH with %p in PATH: each process writes its own
 * file, named with its pid.  The process run writes one, a child it forks
 * another, and a child it forks and execs (this program again) a third;
 * each makes blocks of a size of its own, all live at exit, and its file
 * must count them, and not the others'. */
enum { PID_N = 111, PID_F = 222, PID_E = 333 };
static const size_t pid_size_n = 700, pid_size_f = 2000, pid_size_e = 5000;

static void make_live(int n, size_t size)
{
    for (int i = 0; i < n; i++)
        sink = fa_malloc(size);
}

static int child_pid_exec(void)
{
    make_live(PID_E, pid_size_e);
    return 0;
}

static int child_pid(void)
{
    pid_t f = fork();
    if (f == 0) {
        make_live(PID_F, pid_size_f);
        exit(0); /* exit, not _exit: the file is written by a destructor */
    }
    int st;
    if (f < 0 || waitpid(f, &st, 0) != f || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 1;
    pid_t e = fork();
    if (e == 0) {
        execl(child_self(), child_self(), "pidexec", (char *)NULL);
        _exit(127);
    }
    if (e < 0 || waitpid(e, &st, 0) != e || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 1;
    make_live(PID_N, pid_size_n);
    printf("self=%d fork=%d exec=%d\n", (int)getpid(), (int)f, (int)e);
    return 0;
}

static int case_pid(void)
{
    char dir[] = "/tmp/fa_stats_pid_XXXXXX", env[96];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(env, sizeof env, "json:%s/s.%%p.json", dir);
    char *argv[] = {(char *)child_self(), "pidparent", NULL};
    struct child_out r;
    child_run(&r, stats_env, env, argv);
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0 && r.err[0] == '\0', "status %#x: %s%s", r.status,
           r.out, r.err);
    int self = 0, f = 0, e = 0;
    const char *ids = strstr(r.out, "self=");
    CHECKF(ids != NULL && sscanf(ids, "self=%d fork=%d exec=%d", &self, &f, &e) == 3, "%s", r.out);
    /* Exactly the three files, each named with its process's pid. */
    char want[3][32], names[512] = "";
    snprintf(want[0], sizeof want[0], "s.%d.json", self);
    snprintf(want[1], sizeof want[1], "s.%d.json", f);
    snprintf(want[2], sizeof want[2], "s.%d.json", e);
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int found = 0, files = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (de->d_name[0] == '.')
            continue;
        files++;
        size_t len = strlen(names);
        snprintf(names + len, sizeof names - len, " %s", de->d_name);
        for (int i = 0; i < 3; i++)
            found += strcmp(de->d_name, want[i]) == 0;
    }
    closedir(d);
    CHECKF(files == 3 && found == 3, "in %s:%s; expected %s %s %s", dir, names, want[0], want[1], want[2]);
    /* Each parses; its own blocks are there, live, and the others' not. */
    static const char script[] =
        "import json, sys\n"
        "d, procs = sys.argv[1], [tuple(map(int, a.split(','))) for a in sys.argv[2:]]\n"
        "def cls(j, size):\n"
        "    return min((c for c in j['classes'] if c['size'] >= size), key=lambda c: c['size'])\n"
        "for pid, size, n in procs:\n"
        "    j = json.load(open('%s/s.%d.json' % (d, pid)))\n"
        "    assert j['allocs'] >= n and j['frees'] <= j['allocs'] and j['in_use_blocks'] >= n, (pid, j)\n"
        "    c = cls(j, size)\n"
        "    assert c['in_use_blocks'] >= n and c['allocs'] >= n, (pid, c)\n"
        "    for opid, osize, on in procs:\n"
        "        if opid != pid:\n"
        "            c = cls(j, osize)\n"
        "            assert c['in_use_blocks'] < on, ('blocks of process %d' % opid, pid, c)\n"
        "print('parsed', len(procs))\n";
    /* The script finds each size's class: the class of the size and, in
     * the hardened library, its tail (util.h, TEST_TAIL). */
    char proc[3][64];
    snprintf(proc[0], sizeof proc[0], "%d,%zu,%d", self, pid_size_n + TEST_TAIL, PID_N);
    snprintf(proc[1], sizeof proc[1], "%d,%zu,%d", f, pid_size_f + TEST_TAIL, PID_F);
    snprintf(proc[2], sizeof proc[2], "%d,%zu,%d", e, pid_size_e + TEST_TAIL, PID_E);
    char *pargv[] = {"python3", "-c", (char *)script, dir, proc[0], proc[1], proc[2], NULL};
    child_run(&r, NULL, NULL, pargv);
    for (int i = 0; i < 3; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, want[i]);
        unlink(path);
    }
    rmdir(dir);
    if (child_missing(&r, "python3"))
        return 77;
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0 && strstr(r.out, "parsed 3") != NULL,
           "the JSON files: %s%s", r.out, r.err);
    return check_done("test_stats pid");
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "child") == 0)
        return child_exit();
    if (argc == 2 && strcmp(argv[1], "pidparent") == 0)
        return child_pid();
    if (argc == 2 && strcmp(argv[1], "pidexec") == 0)
        return child_pid_exec();
    static const struct check_case cases[] = {
        {"one", case_one},
        {"threads", case_threads},
        {"print", case_print},
        {"exit", case_exit},
        {"pid", case_pid},
    };
    return check_run_case("test_stats", cases, sizeof cases / sizeof cases[0], argc, argv);
}
