/* The sampled heap profile (FASTALLOC_PROFILE), read back by the tool its
 * users read it with: a child of this program keeps 40 MiB live from one
 * function and 16 MiB from another, allocates and frees 24 MiB from a
 * third, and writes its profile at exit, through fa_profile_dump, or on
 * its signal; `google-pprof --text` must then name the first two with
 * their live bytes within 20%, and the third with nearly nothing (a
 * sample whose free is missed would show there).  Each case is one way of
 * dumping; a fourth has threads that free each other's blocks, a fifth
 * hooks on for a while.  Skips (77) when google-pprof is not installed (Debian's
 * google-perftools). */
#define _GNU_SOURCE
#include "check.h"
#include "fastalloc.h"

#include <errno.h>
#include <pthread.h>
#include <limits.h>
#include <stdbool.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1024.0 * 1024.0)
#define SMALL_BYTES (40u << 20)
#define SMALL_SIZE 200u /* a class of 208 bytes */
#define BIG_BYTES (16u << 20)
#define BIG_SIZE 5000u /* a class of 5,120 */
#define FREED_BYTES (24u << 20)
#define INTERVAL "32768"
#define SIGNAL SIGUSR2

static void *volatile sink;

/* Each fills its blocks so that they are really used, and keeps them in a
 * list the program never frees.  Not static and never inlined: pprof
 * names them from the symbol table. */
__attribute__((noinline)) void **profile_hold_small(void)
{
    size_t n = SMALL_BYTES / SMALL_SIZE;
    void **v = fa_malloc(n * sizeof *v);
    CHECK(v != NULL);
    for (size_t i = 0; i < n; i++) {
        v[i] = fa_malloc(SMALL_SIZE);
        CHECK(v[i] != NULL);
        memset(v[i], 0x5a, SMALL_SIZE);
    }
    __asm__ __volatile__("" ::: "memory");
    return v;
}

__attribute__((noinline)) void **profile_hold_big(void)
{
    size_t n = BIG_BYTES / BIG_SIZE;
    void **v = fa_malloc(n * sizeof *v);
    CHECK(v != NULL);
    for (size_t i = 0; i < n; i++) {
        v[i] = fa_malloc(BIG_SIZE);
        CHECK(v[i] != NULL);
        memset(v[i], 0xa5, BIG_SIZE);
    }
    __asm__ __volatile__("" ::: "memory");
    return v;
}

__attribute__((noinline)) void profile_churn(void)
{
    enum { SIZE = 1000 };
    size_t n = FREED_BYTES / SIZE;
    void **v = fa_malloc(n * sizeof *v);
    CHECK(v != NULL);
    for (size_t i = 0; i < n; i++) {
        v[i] = fa_malloc(SIZE);
        CHECK(v[i] != NULL);
        memset(v[i], 1, SIZE);
    }
    for (size_t i = 0; i < n; i++)
        fa_free(v[i]);
    fa_free(v);
    __asm__ __volatile__("" ::: "memory");
}

/* The threads case: four threads each keep THREAD_BYTES from
 * profile_hold_small's sizes, and allocate as much again that the next
 * thread frees (cross-thread frees of sampled blocks must leave the
 * profile too). */
#define THREADS 4
#define THREAD_BYTES (8u << 20)
#define THREAD_SIZE 96u
#define THREAD_N (THREAD_BYTES / THREAD_SIZE)
static void **handed[THREADS];
static pthread_barrier_t barrier;

__attribute__((noinline)) void **profile_thread_keep(void)
{
    void **v = fa_malloc(THREAD_N * sizeof *v);
    CHECK(v != NULL);
    for (size_t i = 0; i < THREAD_N; i++) {
        v[i] = fa_malloc(THREAD_SIZE);
        CHECK(v[i] != NULL);
        memset(v[i], 3, THREAD_SIZE);
    }
    __asm__ __volatile__("" ::: "memory");
    return v;
}

__attribute__((noinline)) void **profile_thread_hand(void)
{
    void **v = fa_malloc(THREAD_N * sizeof *v);
    CHECK(v != NULL);
    for (size_t i = 0; i < THREAD_N; i++) {
        v[i] = fa_malloc(THREAD_SIZE);
        CHECK(v[i] != NULL);
        memset(v[i], 4, THREAD_SIZE);
    }
    __asm__ __volatile__("" ::: "memory");
    return v;
}

static void *thread_main(void *arg)
{
    size_t me = (size_t)(uintptr_t)arg;
    void **kept = profile_thread_keep();
    handed[me] = profile_thread_hand();
    pthread_barrier_wait(&barrier);
    void **other = handed[(me + 1) % THREADS];
    for (size_t i = 0; i < THREAD_N; i++)
        fa_free(other[i]);
    fa_free(other);
    return kept;
}

static void threads(void)
{
    pthread_t t[THREADS];
    CHECK(pthread_barrier_init(&barrier, NULL, THREADS) == 0);
    for (size_t i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, thread_main, (void *)(uintptr_t)i) == 0);
    for (size_t i = 0; i < THREADS; i++) {
        void *kept;
        CHECK(pthread_join(t[i], &kept) == 0);
        sink = kept;
    }
}

static unsigned long hooked;
static void count_alloc(void *p, size_t size, void *caller)
{
    (void)p, (void)size, (void)caller;
    hooked++;
}

/* The child: the heap above, then the dump its mode asks for.  In the
 * hooks case, hooks are on for the first function (every call then takes
 * the diagnostic modes' own path, where the profile samples too) and off
 * from the churn on, whose blocks are freed back in the profile's own. */
static int child(const char *mode, const char *dir)
{
    bool hooks = strcmp(mode, "hooks") == 0;
    if (hooks)
        CHECK(fa_set_hooks(&(fa_hooks){count_alloc, NULL, 0}) == 0);
    void **a = profile_hold_small();
    if (hooks) {
        CHECK(fa_set_hooks(NULL) == 0);
        CHECKF(hooked >= SMALL_BYTES / SMALL_SIZE, "the hook saw %lu calls", hooked);
    }
    profile_churn();
    void **b = profile_hold_big();
    sink = a;
    sink = b;
    if (strcmp(mode, "threads") == 0)
        threads();
    if (strcmp(mode, "api") == 0) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/api.heap", dir);
        CHECK(fa_profile_dump(path) == 0);
        /* A path that cannot be written: an errno value, no crash. */
        CHECK(fa_profile_dump("/nonexistent-dir/x.heap") == ENOENT);
        _exit(0); /* no exit dump: the file checked is the API's */
    }
    if (strcmp(mode, "signal") == 0) {
        CHECK(raise(SIGNAL) == 0);
        /* The dump is written at the next call that leaves the fast
         * paths: a large block's always does. */
        fa_free(fa_malloc(1u << 20));
        _exit(0);
    }
    return 0; /* exit: the destructor writes it */
}

static int pprof_missing(void)
{
    return system("google-pprof --version >/dev/null 2>&1") != 0;
}

/* Run the child, with the profile on, in a fresh folder. */
static void run_child(const char *self, const char *mode, char *dir, size_t dirsize)
{
    snprintf(dir, dirsize, "/tmp/fa-profile-%s-XXXXXX", mode);
    CHECK(mkdtemp(dir) != NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char prof[PATH_MAX + 16], sig[16];
        snprintf(prof, sizeof prof, "%s/exit.heap", dir);
        snprintf(sig, sizeof sig, "%d", SIGNAL);
        setenv("FASTALLOC_PROFILE", prof, 1);
        setenv("FASTALLOC_PROFILE_INTERVAL", INTERVAL, 1);
        setenv("FASTALLOC_PROFILE_SIGNAL", sig, 1);
        execl(self, self, "child", mode, dir, (char *)NULL);
        _exit(127);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child ended with status 0x%x", st);
}

/* MiB that `google-pprof --text` gives each function, flat. */
static void read_profile(const char *self, const char *file, double *small, double *big, double *churn,
                         double *keep, double *hand)
{
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "google-pprof --text '%s' '%s' 2>&1", self, file);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    char line[1024];
    bool header = false;
    *small = *big = *churn = *keep = *hand = 0;
    while (fgets(line, sizeof line, p) != NULL) {
        fputs(line, stdout);
        if (strncmp(line, "Total:", 6) == 0)
            header = true;
        double flat, cum;
        char name[512];
        if (sscanf(line, " %lf %*f%% %*f%% %lf %*f%% %511s", &flat, &cum, name) != 3)
            continue;
        if (strcmp(name, "profile_hold_small") == 0)
            *small = flat;
        else if (strcmp(name, "profile_hold_big") == 0)
            *big = flat;
        else if (strcmp(name, "profile_churn") == 0)
            *churn = flat;
        else if (strcmp(name, "profile_thread_keep") == 0)
            *keep = flat;
        else if (strcmp(name, "profile_thread_hand") == 0)
            *hand = flat;
    }
    int st = pclose(p);
    CHECKF(st == 0, "google-pprof failed (status 0x%x)", st);
    CHECKF(header, "google-pprof printed no Total line");
}

static size_t usable(size_t size)
{
    void *p = fa_malloc(size);
    CHECK(p != NULL);
    size_t n = fa_malloc_usable_size(p);
    fa_free(p);
    return n;
}

static int check_file(const char *mode, const char *file)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(n > 0);
    self[n] = '\0';
    char dir[PATH_MAX], path[PATH_MAX + 64];
    run_child(self, mode, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    struct stat sb;
    CHECKF(stat(path, &sb) == 0 && sb.st_size > 0, "%s: no profile written (%s)", path, strerror(errno));
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    char head[256] = "";
    CHECK(fgets(head, sizeof head, f) != NULL);
    fclose(f);
    CHECKF(strncmp(head, "heap profile:", 13) == 0 && strstr(head, "@ heap_v2/" INTERVAL) != NULL,
           "header: %s", head);
    double small, big, churn, keep, hand;
    read_profile(self, path, &small, &big, &churn, &keep, &hand);
    /* A small block counts at its usable size, its size class (README.md,
     * "Heap profiles"); each function's list of pointers, a large block,
     * is live too. */
    double want_small = (double)(SMALL_BYTES / SMALL_SIZE) * (usable(SMALL_SIZE) + sizeof(void *)) / MIB;
    double want_big = (double)(BIG_BYTES / BIG_SIZE) * (usable(BIG_SIZE) + sizeof(void *)) / MIB;
    printf("%s: profile_hold_small %.1f MiB (live %.1f), profile_hold_big %.1f MiB (live %.1f), "
           "profile_churn %.1f MiB (live 0)\n",
           mode, small, want_small, big, want_big, churn);
    CHECKF(small > 0.8 * want_small && small < 1.2 * want_small, "profile_hold_small: %.1f MiB, live %.1f",
           small, want_small);
    CHECKF(big > 0.8 * want_big && big < 1.2 * want_big, "profile_hold_big: %.1f MiB, live %.1f", big,
           want_big);
    CHECKF(churn < 0.05 * want_big, "profile_churn: %.1f MiB, all freed", churn);
    if (strcmp(mode, "threads") == 0) {
        double want_keep = (double)THREADS * THREAD_N * (usable(THREAD_SIZE) + sizeof(void *)) / MIB;
        printf("threads: profile_thread_keep %.1f MiB (live %.1f), profile_thread_hand %.1f MiB (live 0)\n", keep,
               want_keep, hand);
        CHECKF(keep > 0.8 * want_keep && keep < 1.2 * want_keep, "profile_thread_keep: %.1f MiB, live %.1f", keep,
               want_keep);
        CHECKF(hand < 0.05 * want_keep, "profile_thread_hand: %.1f MiB, all freed by another thread", hand);
    }
    char rm[PATH_MAX + 16];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    CHECK(system(rm) == 0);
    return check_done("test_profile");
}

static int case_exit(void)
{
    if (pprof_missing())
        return 77;
    /* With the profile off, the API says so. */
    CHECK(fa_profile_dump("/tmp/never-written.heap") == EINVAL);
    return check_file("exit", "exit.heap");
}

static int case_api(void)
{
    if (pprof_missing())
        return 77;
    return check_file("api", "api.heap");
}

static int case_signal(void)
{
    if (pprof_missing())
        return 77;
    return check_file("signal", "exit.heap.1");
}

static int case_threads(void)
{
    if (pprof_missing())
        return 77;
    return check_file("threads", "exit.heap");
}

static int case_hooks(void)
{
    if (pprof_missing())
        return 77;
    return check_file("hooks", "exit.heap");
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "child") == 0)
        return child(argv[2], argv[3]);
    static const struct check_case cases[] = {{"exit", case_exit}, {"api", case_api}, {"signal", case_signal},
                                             {"threads", case_threads}, {"hooks", case_hooks}};
    return check_run_case("test_profile", cases, sizeof cases / sizeof cases[0], argc, argv);
}
