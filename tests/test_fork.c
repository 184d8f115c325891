/* fork() from a multithreaded process: 4 threads keep allocating and freeing
 * while the main thread forks 50 times.  Each child works the allocator hard
 * (small and large blocks, its own thread too) and exits 0; a child that
 * finds a lock held by a thread that does not exist in it any more hangs,
 * and the alarm turns that into a failure.  ctest also runs it with
 * FASTALLOC_PURGE_DELAY_MS=0 (test_fork_purging): then many forks land while
 * a busy thread purges outside the page heap's lock, and a child that waited
 * for that purge to come back would hang. */
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
#define FORKS 50

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
    alarm(10); /* a deadlocked child dies of SIGALRM */
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
    /* Threads work in the child. */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, child_thread, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
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

int main(void)
{
    /* Initialise fastalloc (and register its fork handlers) before any
     * thread exists. */
    fa_free(fa_malloc(1));
    signal(SIGALRM, on_alarm);

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
        waiting_for = pid;
        alarm(30);
        int st = 0;
        pid_t w;
        do
            w = waitpid(pid, &st, 0);
        while (w < 0 && errno == EINTR);
        alarm(0);
        CHECK(w == pid);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %#x%s", n, st,
               WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? " (hung)" : "");
        /* The parent's copy is untouched by the child's free. */
        CHECK(pat_ok(held, 100000, 4242));
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < BUSY; i++)
        CHECK(pthread_join(th[i], NULL) == 0);
    fa_free(held);
    return check_done("test_fork");
}
