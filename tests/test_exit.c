/* Thread exit through the one registry (src/01-os/exit.h).
 *
 *   all    rounds of threads that each use the thread cache (blocks freed
 *          by other threads too), an object pool (objects left in their
 *          local pools) and, with FASTALLOC_TRACE set as ctest sets it, the
 *          trace; then exit.  Every part must have run once per thread,
 *          no local pool may keep an object, no dead thread may keep a
 *          cache, and the trace must hold every call the threads made.
 *   order  one thread arms the three parts in the reverse of their order,
 *          and the last part arms the first again from inside its exit:
 *          they must run pool, trace, thread cache, then the pool again.
 *
 * STATIC: it reads the registry's counts and arms parts itself. */
#define _GNU_SOURCE
#include "check.h"
#include "child.h"
#include "fastalloc.h"
#include "01-os/exit.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
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

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "all") == 0)
        return case_all();
    if (argc == 2 && strcmp(argv[1], "order") == 0) {
        struct child_out r;
        child_call(&r, order_child, NULL);
        fputs(r.out, stdout);
        CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "child: status %#x: %s", r.status, r.err);
        return check_done("test_exit order (in a child)");
    }
    fprintf(stderr, "usage: test_exit all|order\n");
    return 2;
}
