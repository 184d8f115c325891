/* Thread exit through the one registry (src/01-os/exit.h).
 *
 *   all    rounds of threads that each use the thread cache (blocks freed
 *          by other threads too), an object pool (objects left in their
 *          local pools) and, with FASTALLOC_TRACE set as `traced` sets
 *          it, the trace; then exit.  Every part must have run once per
 *          thread, no local pool may keep an object, and no dead thread
 *          may keep a cache.
 *   order  one thread arms the three parts in the reverse of their order,
 *          and the last part arms the first again from inside its exit:
 *          they must run pool, trace, thread cache, then the pool again.
 *   traced `all` in a child with FASTALLOC_TRACE set, then the trace read
 *          back (`fastalloc-trace stat`).  Each worker's calls sit in its
 *          buffer until its exit writes them out (09-diag/trace.c), so an
 *          exit that runs the part but writes nothing, or loses a buffer,
 *          shows only here: the trace must be whole (the footer the
 *          process's exit writes, its checksum) and hold every worker's
 *          mallocs and frees, each worker as a thread of its own, every
 *          free a cross-thread one.
 *
 * STATIC: it reads the registry's counts and arms parts itself.  SECURE:
 * the hardened library runs the same exits. */
#define _GNU_SOURCE
#include "check.h"
#include "child.h"
#include "fastalloc.h"
#include "01-os/exit.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { THREADS = 4, ROUNDS = 8, BLOCKS = 300, KEEP = 40, SIZE = 5000 + 37 };

static fa_pool *pool;
static void *passed[THREADS][BLOCKS];
static pthread_barrier_t bar;

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    for (int i = 0; i < BLOCKS; i++) {
        passed[t][i] = fa_malloc(SIZE);
        CHECK(passed[t][i] != NULL);
        memset(passed[t][i], t + 1, SIZE);
    }
    /* Pool objects: some put back at once, so that the thread's local pool
     * holds free objects when it exits. */
    void *obj[KEEP];
    for (int i = 0; i < KEEP; i++)
        CHECK((obj[i] = fa_pool_get(pool)) != NULL);
    for (int i = 0; i < KEEP; i++)
        fa_pool_put(pool, obj[i]);
    pthread_barrier_wait(&bar);
    /* The next thread's blocks: frees that go to another thread's spans. */
    int u = (t + 1) % THREADS;
    for (int i = 0; i < BLOCKS; i++) {
        CHECK(((unsigned char *)passed[u][i])[SIZE - 1] == u + 1);
        fa_free(passed[u][i]);
    }
    return NULL;
}

static int case_all(void)
{
    const char *trace = getenv("FASTALLOC_TRACE");
    fa_pool_options o = {.object_size = 200, .name = "test_exit"};
    pool = fa_pool_create(&o);
    CHECK(pool != NULL);
    uint64_t before[FA_EXIT_PARTS];
    for (int p = 0; p < FA_EXIT_PARTS; p++)
        before[p] = fa__os_exit_runs((enum fa__exit_part)p);
    for (int r = 0; r < ROUNDS; r++) {
        pthread_t th[THREADS];
        pthread_barrier_init(&bar, NULL, THREADS);
        for (int t = 0; t < THREADS; t++)
            CHECK(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0);
        for (int t = 0; t < THREADS; t++)
            CHECK(pthread_join(th[t], NULL) == 0);
        pthread_barrier_destroy(&bar);
    }
    uint64_t n = THREADS * ROUNDS;
    uint64_t pool_runs = fa__os_exit_runs(FA_EXIT_POOL) - before[FA_EXIT_POOL];
    uint64_t trace_runs = fa__os_exit_runs(FA_EXIT_TRACE) - before[FA_EXIT_TRACE];
    uint64_t tc_runs = fa__os_exit_runs(FA_EXIT_TCACHE) - before[FA_EXIT_TCACHE];
    CHECKF(pool_runs == n, "the pool's exit ran %llu times for %llu threads", (unsigned long long)pool_runs,
           (unsigned long long)n);
    CHECKF(tc_runs == n, "the thread cache's exit ran %llu times for %llu threads", (unsigned long long)tc_runs,
           (unsigned long long)n);
    CHECKF(trace_runs == (trace != NULL ? n : 0), "the trace's exit ran %llu times for %llu threads (trace %s)",
           (unsigned long long)trace_runs, (unsigned long long)n, trace != NULL ? trace : "off");
    /* What the exits handed back. */
    fa_pool_stats_t ps;
    fa_pool_stats(pool, &ps);
    CHECKF(ps.free_local == 0, "%zu objects left in dead threads' local pools", ps.free_local);
    CHECKF(ps.free_global >= THREADS * KEEP, "%zu free objects in the global pools", ps.free_global);
    fa_stats_t st;
    fa_stats_get(&st);
    CHECKF(st.threads <= 1, "%u threads have a cache after all but main exited", st.threads);
    fa_pool_destroy(pool);
    return check_done("test_exit all");
}

/* ---- order ---- */

static char order_log[64];
static void logged(void *arg)
{
    strcat(order_log, (const char *)arg);
}
static void logged_then_arm(void *arg)
{
    logged(arg);
    /* The pool armed again by the last part: a second pass runs it. */
    fa__os_exit_arm(FA_EXIT_POOL, logged, "late ");
}

static void *arming(void *arg)
{
    (void)arg;
    CHECK(fa__os_exit_arm(FA_EXIT_TCACHE, logged_then_arm, "tcache "));
    CHECK(fa__os_exit_arm(FA_EXIT_TRACE, logged, "trace "));
    CHECK(fa__os_exit_arm(FA_EXIT_POOL, logged, "pool "));
    return NULL;
}

static void order_child(void *unused)
{
    (void)unused;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, arming, NULL) == 0);
    CHECK(pthread_join(th, NULL) == 0);
    CHECKF(strcmp(order_log, "pool trace tcache late ") == 0, "exits ran in the order \"%s\"", order_log);
    check_done("test_exit order");
}

/* ---- traced ---- */

static void trace_env(void *path)
{
    setenv("FASTALLOC_TRACE", path, 1);
}

/* The number after key at the start of a line of out (stat's layout:
 * "threads   33"), or -1 when there is no such line. */
static long long stat_field(const char *out, const char *key)
{
    size_t k = strlen(key);
    for (const char *p = out; p != NULL;) {
        long long v;
        if (strncmp(p, key, k) == 0 && p[k] == ' ' && sscanf(p + k, "%lld", &v) == 1)
            return v;
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return -1;
}

/* The allocations and frees of the row of size in stat's "commonest
 * sizes"; false when it has no such row. */
static bool size_counts(const char *out, unsigned long size, unsigned long *allocs, unsigned long *frees)
{
    const char *p = strstr(out, "commonest sizes");
    for (p = p != NULL ? strchr(p, '\n') : NULL; p != NULL; p = strchr(p + 1, '\n')) {
        unsigned long s;
        if (sscanf(p + 1, "%lu %lu %lu", &s, allocs, frees) == 3 && s == size)
            return true;
    }
    return false;
}

static int case_traced(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/fa_exit_trace_%d", (int)getpid());
    unlink(path);
    struct child_out r;
    char *argv[] = {(char *)child_self(), "all", NULL};
    child_run(&r, trace_env, path, argv);
    fputs(r.out, stdout);
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "test_exit all, traced: status %#x: %s", r.status,
           r.err);
    char *tool[] = {FA_TRACE_TOOL, "stat", path, NULL};
    child_run(&r, NULL, NULL, tool);
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "fastalloc-trace stat %s: status %#x: %s", path,
           r.status, r.err);
    const unsigned long blocks = THREADS * ROUNDS * BLOCKS;
    const long long threads = THREADS * ROUNDS;
    unsigned long allocs = 0, frees = 0;
    CHECKF(size_counts(r.out, SIZE, &allocs, &frees) && allocs == blocks && frees == blocks,
           "%d B: %lu allocations and %lu frees in the trace, the workers made %lu of each\n%s", SIZE, allocs, frees,
           blocks, r.out);
    /* Main's own calls (fa_pool_create's, stdio's) make one thread more. */
    long long seen = stat_field(r.out, "threads");
    CHECKF(seen == threads || seen == threads + 1, "%lld threads in the trace for %lld workers\n%s", seen, threads,
           r.out);
    long long cross = stat_field(r.out, "frees");
    CHECKF(cross == (long long)blocks, "%lld cross-thread frees in the trace, the workers made %lu\n%s", cross,
           blocks, r.out);
    unlink(path);
    return check_done("test_exit traced");
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "all") == 0)
        return case_all();
    if (argc == 2 && strcmp(argv[1], "traced") == 0)
        return case_traced();
    if (argc == 2 && strcmp(argv[1], "order") == 0) {
        struct child_out r;
        child_call(&r, order_child, NULL);
        fputs(r.out, stdout);
        CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "child: status %#x: %s", r.status, r.err);
        return check_done("test_exit order (in a child)");
    }
    fprintf(stderr, "usage: test_exit all|order|traced\n");
    return 2;
}
