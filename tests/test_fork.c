/* fork() from a multithreaded process.  Three modes, named by the first
 * argument:
 *
 *   (none)      4 threads keep allocating and freeing while the main thread
 *               forks 50 times (ctest runs it also with the background
 *               thread on, and with every free purged at once);
 *   background  the parent runs the background thread; each child must
 *               start its own (the parent's does not exist in it) when it
 *               allocates, and its timed purge must happen;
 *   trim        one thread calls fa_trim in a loop, over memory it keeps
 *               freeing, while the main thread forks.
 *
 * In the first mode each child works the allocator hard
 * (small and large blocks, its own thread too) and exits 0; a child that
 * finds a lock held by a thread that does not exist in it any more hangs,
 * and the alarm turns that into a failure.  With FASTALLOC_PURGE_DELAY_MS=0
 * (test_fork_purging) many forks land while a busy thread purges outside
 * the page heap's lock, and a child that waited for that purge to come back
 * would hang; with FASTALLOC_BACKGROUND=1 (test_fork_background) they also
 * land while the background thread purges and drains the central caches. */
#include "check.h"
#include "util.h"

#include <errno.h>
#include <fastalloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BUSY 4
/* Under ThreadSanitizer a fork copies its shadow too, and one takes
 * seconds: fewer there, the same kinds of landing. */
#define FORKS (TEST_TSAN ? 12 : 50)

static int stop;
static unsigned long busy_rounds[BUSY];

static void *busy(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    uint64_t rng = mix64(id + 1);
    struct {
        unsigned char *p;
        size_t n;
        uint64_t seed;
    } b[64];
    memset(b, 0, sizeof b);
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        size_t i = (size_t)rng_below(&rng, 64);
        if (b[i].p != NULL) {
            CHECK(pat_ok(b[i].p, b[i].n, b[i].seed));
            fa_free(b[i].p);
            b[i].p = NULL;
        } else {
            /* Half large blocks, which take the page heap's lock every
             * time, and small ones of every class, which move through the
             * central caches' locks: a fork that did not take these locks
             * first would often copy one of them held. */
            uint64_t r = rng_below(&rng, 100);
            b[i].n = r < 50 ? 1 + (size_t)rng_below(&rng, 64 * KiB)
                            : 300 * KiB + (size_t)rng_below(&rng, 2 * MiB);
            b[i].seed = rng_next(&rng);
            b[i].p = fa_malloc(b[i].n);
            CHECK(b[i].p != NULL);
            b[i].n = b[i].n < 1024 ? b[i].n : 1024;
            pat_fill(b[i].p, b[i].n, b[i].seed);
        }
        /* Leave the CPUs to the children now and then (2-core machines). */
        if (__atomic_add_fetch(&busy_rounds[id], 1, __ATOMIC_RELAXED) % 1024 == 0)
            usleep(100);
    }
    for (size_t i = 0; i < 64; i++)
        if (b[i].p != NULL) {
            CHECK(pat_ok(b[i].p, b[i].n, b[i].seed));
            fa_free(b[i].p);
        }
    return NULL;
}

static void *child_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < 2000; i++) {
        void *p = fa_malloc(1 + (size_t)i % 3000);
        CHECK(p != NULL);
        memset(p, i, 1 + (size_t)i % 3000);
        fa_free(p);
    }
    return NULL;
}

static void child(int n)
{
    signal(SIGALRM, SIG_DFL);
    /* A deadlocked child dies of SIGALRM.  Its work takes a fraction of a
     * second; a minute is reached by a hang alone, not by a loaded machine. */
    alarm(60);
    uint64_t rng = mix64((uint64_t)n + 1000);
    enum { NB = 1000 };
    static unsigned char *p[NB];
    static size_t sz[NB];
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < NB; i++) {
            sz[i] = i % 100 == 0 ? 300 * KiB + (size_t)rng_below(&rng, 3 * MiB)
                                 : 1 + (size_t)rng_below(&rng, 4096);
            if (i % 100 == 50)
                sz[i] = 4097 + (size_t)rng_below(&rng, 200 * KiB);
            p[i] = fa_malloc(sz[i]);
            CHECK(p[i] != NULL);
            pat_fill(p[i], sz[i], i * 31 + (size_t)round);
        }
        for (size_t i = 0; i < NB; i++) {
            CHECK(pat_ok(p[i], sz[i], i * 31 + (size_t)round));
            fa_free(p[i]);
        }
    }
    /* A big one, calloc'd. */
    unsigned char *big = fa_calloc(1, 16 * MiB);
    CHECK(big != NULL && all_bytes(big, 16 * MiB, 0));
    fa_free(big);
    /* Threads work in the child, except under ThreadSanitizer, whose
     * runtime cannot start a thread in the child of a multi-threaded fork
     * (it dies, or reuses a thread id the parent's threads held); main
     * reports the case as skipped there. */
    if (!TEST_TSAN) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, child_thread, NULL) == 0);
        CHECK(pthread_join(t, NULL) == 0);
    }
    _exit(0);
}

static pid_t waiting_for;

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_fork: timed out waiting for a child\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    if (waiting_for > 0)
        kill(waiting_for, SIGKILL);
    _exit(1);
}

/* Wait for child n (pid) to exit 0; the alarm ends the test after secs if
 * it hangs (and kills it). */
static void wait_child(pid_t pid, int n, unsigned secs)
{
    waiting_for = pid;
    alarm(secs);
    int st = 0;
    pid_t w;
    do
        w = waitpid(pid, &st, 0);
    while (w < 0 && errno == EINTR);
    alarm(0);
    CHECK(w == pid);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %#x%s", n, st,
           WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? " (hung)" : "");
}

/* Fork, let the child run fn, and check that it exits 0.  The alarm ends
 * the test if the child hangs (and kills it). */
static void fork_and_wait(int n, void (*fn)(int))
{
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        signal(SIGALRM, SIG_DFL);
        alarm(60); /* a deadlocked child dies of SIGALRM */
        fn(n);
        _exit(0);
    }
    wait_child(pid, n, 90);
}

/* ---- background */

/* Free a written large block and wait until the timed purge has given it
 * back.  The caller makes no other call into fastalloc meanwhile (fa_stats
 * does no housekeeping), so only the background thread can purge it: the
 * block is below the dirty memory kept without a purge, and the free's own
 * look at aged spans finds it too young.  The wait is bounded so that a
 * purge that never comes fails instead of hanging; the bound is far above
 * the purge delay and says nothing about speed. */
static void timed_purge_happens(const char *who)
{
    enum { SIZE = 4 << 20 };
    unsigned char *p = fa_malloc(SIZE);
    CHECK(p != NULL);
    memset(p, 0x5a, SIZE);
    fa_stats_t st;
    fa_stats(&st);
    size_t purged0 = st.purged_total;
    fa_free(p);
    double deadline = now_s() + 60;
    for (;;) {
        fa_stats(&st);
        if (st.dirty == 0 && st.purged_total >= purged0 + SIZE)
            break;
        CHECKF(now_s() < deadline, "%s: no timed purge: %zu bytes still dirty, %zu purged", who, st.dirty,
               st.purged_total - purged0);
        usleep(5000);
    }
}

static void background_child(int n)
{
    (void)n;
    /* Empty this thread's cache (and purge everything), so that the next
     * allocation takes the slow path, where the background thread starts. */
    fa_trim();
    void *p = fa_malloc(100);
    CHECK(p != NULL);
    timed_purge_happens("child");
    fa_free(p);
}

static void mode_background(void)
{
    CHECK(fa_option_set("purge_delay_ms", 50) == 0);
    CHECK(fa_option_set("background", 1) == 0);
    fa_trim();
    fa_free(fa_malloc(100)); /* starts the parent's background thread */
    timed_purge_happens("parent");
    for (int n = 0; n < 5; n++)
        fork_and_wait(n, background_child);
    timed_purge_happens("parent after the forks");
}

/* ---- trim */

static void *trimmer(void *arg)
{
    (void)arg;
    uint64_t rng = 77;
    static void *small[256];
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        /* Memory for the trim to give back: a large block, and small blocks
         * of a few classes (they go through the central caches' locks). */
        size_t n = 2 * MiB + (size_t)rng_below(&rng, 6 * MiB);
        unsigned char *p = fa_malloc(n);
        CHECK(p != NULL);
        for (size_t k = 0; k < n; k += 4096)
            p[k] = (unsigned char)k;
        for (size_t i = 0; i < 256; i++) {
            small[i] = fa_malloc(16 + i * 64);
            CHECK(small[i] != NULL);
            memset(small[i], (int)i, 16);
        }
        for (size_t i = 0; i < 256; i++)
            fa_free(small[i]);
        fa_free(p);
        fa_trim();
        if (__atomic_add_fetch(&busy_rounds[0], 1, __ATOMIC_RELAXED) % 16 == 0)
            usleep(100);
    }
    return NULL;
}

static void trim_child(int n)
{
    uint64_t rng = mix64((uint64_t)n + 99);
    static unsigned char *p[500];
    static size_t sz[500];
    for (size_t i = 0; i < 500; i++) {
        sz[i] = i % 50 == 0 ? 300 * KiB + (size_t)rng_below(&rng, MiB) : 1 + (size_t)rng_below(&rng, 8192);
        p[i] = fa_malloc(sz[i]);
        CHECK(p[i] != NULL);
        pat_fill(p[i], sz[i], i);
    }
    for (size_t i = 0; i < 500; i++) {
        CHECK(pat_ok(p[i], sz[i], i));
        fa_free(p[i]);
    }
    fa_trim();
    /* A trim gives back what was freed (by the trim or by a timed purge
     * that came first: the purge total counts both). */
    fa_stats_t st0, st1;
    fa_stats(&st0);
    unsigned char *big = fa_malloc(8 * MiB);
    CHECK(big != NULL);
    memset(big, 1, 8 * MiB);
    fa_free(big);
    fa_trim();
    fa_stats(&st1);
    CHECKF(st1.dirty == 0 && st1.purged_total >= st0.purged_total + 8 * MiB,
           "the child's fa_trim left %zu bytes dirty, purged %zu", st1.dirty,
           st1.purged_total - st0.purged_total);
}

static void mode_trim(void)
{
    pthread_t t;
    CHECK(pthread_create(&t, NULL, trimmer, NULL) == 0);
    while (__atomic_load_n(&busy_rounds[0], __ATOMIC_RELAXED) < 10)
        usleep(1000);
    for (int n = 0; n < 30; n++)
        fork_and_wait(n, trim_child);
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    CHECK(pthread_join(t, NULL) == 0);
}

int main(int argc, char **argv)
{
    /* Initialise fastalloc (and register its fork handlers) before any
     * thread exists. */
    fa_free(fa_malloc(1));
    signal(SIGALRM, on_alarm);
    if (argc > 1 && strcmp(argv[1], "background") == 0) {
        mode_background();
        return check_done("test_fork background");
    }
    if (argc > 1 && strcmp(argv[1], "trim") == 0) {
        mode_trim();
        return check_done("test_fork trim");
    }
    CHECKF(argc == 1, "unknown mode %s", argv[1]);

    pthread_t th[BUSY];
    for (uintptr_t i = 0; i < BUSY; i++)
        CHECK(pthread_create(&th[i], NULL, busy, (void *)i) == 0);
    /* Let every busy thread get going before the first fork.  (Besides,
     * a thread that has not finished starting may be inside the C
     * library's or a sanitizer runtime's allocator, whose locks are not
     * fastalloc's business: a child forked then can hang in them.  From
     * here on the busy threads call nothing but fastalloc and usleep.) */
    for (int i = 0; i < BUSY; i++)
        while (__atomic_load_n(&busy_rounds[i], __ATOMIC_RELAXED) < 1000)
            usleep(1000);

    /* Blocks the parent holds across the forks: the children see them. */
    unsigned char *held = fa_malloc(100000);
    pat_fill(held, 100000, 4242);

    for (int n = 0; n < FORKS; n++) {
        fflush(stdout);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            CHECK(pat_ok(held, 100000, 4242));
            fa_free(held);
            child(n);
        }
        wait_child(pid, n, 90); /* past the child's own minute */
        /* The parent's copy is untouched by the child's free. */
        CHECK(pat_ok(held, 100000, 4242));
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < BUSY; i++)
        CHECK(pthread_join(th[i], NULL) == 0);
    fa_free(held);
    if (TEST_TSAN) {
        check_done("test_fork");
        printf("SKIP: under ThreadSanitizer the children started no thread (its runtime cannot, after a "
               "multi-threaded fork): all the rest ran\n");
        return 77;
    }
    return check_done("test_fork");
}
