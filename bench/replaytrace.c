/*
 * replaytrace: a real program's allocation trace, replayed under whatever
 * allocator was preloaded (make bench's replay table).
 *
 *   replaytrace --program python|sqlite|gcc --n N [--exe PATH] [--script PATH]
 *
 * The trace is recorded once, with fastalloc (FASTALLOC_TRACE), by
 * realprog running the program with the same options, into
 * <build>/bench/traces/PROGRAM-N.trace.  gcc's processes each write a file
 * (gcc, cc1, as, collect2, ld): the largest, cc1's, is kept.  The
 * recording runs in a process this one never waits for (a pipe says when
 * it is done), so that the peak RSS measured for this run is the replay's.
 * Then this process becomes `fastalloc-trace replay --json` on the trace
 * (exec, with the preload it was started with): its JSON line is the
 * result, elapsed_s the replay's own time.
 */
#include "bench_common.h"

#include <dirent.h>
#include <stdbool.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char dir[4096]; /* this program's folder: <build>/bench */

static void here(void)
{
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n <= 0)
        BENCH_FAIL("cannot read /proc/self/exe");
    dir[n] = '\0';
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        BENCH_FAIL("odd path %s", dir);
    *slash = '\0';
}

/* Record into path (in a grandchild: see above); false when it failed. */
static bool record(const char *path, char **realprog_argv)
{
    int fds[2];
    if (pipe(fds) != 0)
        BENCH_FAIL("pipe: %s", strerror(errno));
    pid_t a = fork();
    if (a < 0)
        BENCH_FAIL("fork: %s", strerror(errno));
    if (a == 0) {
        close(fds[0]);
        if (fork() != 0)
            _exit(0); /* the grandchild goes on, reparented */
        char lib[4400], tmp[8192];
        snprintf(lib, sizeof lib, "%s/../libfastalloc.so", dir);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        pid_t r = fork();
        if (r == 0) {
            int null = open("/dev/null", O_WRONLY);
            dup2(null, 1);
            setenv("LD_PRELOAD", lib, 1);
            setenv("FASTALLOC_TRACE", tmp, 1);
            /* The recording is not the run measured: its processes must
             * not leave statistics beside the replay's (run.py reads them
             * for the memory table). */
            unsetenv("FASTALLOC_STATS");
            execv(realprog_argv[0], realprog_argv);
            _exit(127);
        }
        int st = 1;
        if (r > 0)
            waitpid(r, &st, 0);
        bool ok = r > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
        /* The largest of tmp and tmp.PID: the process that allocated most;
         * the others go. */
        char best[8192] = "", name[8192], tdir[4400];
        off_t best_size = -1;
        struct stat sb;
        if (stat(tmp, &sb) == 0) {
            snprintf(best, sizeof best, "%s", tmp);
            best_size = sb.st_size;
        }
        snprintf(tdir, sizeof tdir, "%s/traces", dir);
        const char *base = strrchr(tmp, '/') + 1;
        size_t blen = strlen(base);
        for (int pass = 0; pass < 2; pass++) {
            DIR *d = opendir(tdir);
            struct dirent *e;
            while (d != NULL && (e = readdir(d)) != NULL) {
                if (strncmp(e->d_name, base, blen) != 0 || e->d_name[blen] != '.')
                    continue;
                snprintf(name, sizeof name, "%s/%s", tdir, e->d_name);
                if (pass == 0 && stat(name, &sb) == 0 && sb.st_size > best_size) {
                    snprintf(best, sizeof best, "%s", name);
                    best_size = sb.st_size;
                } else if (pass == 1 && strcmp(name, best) != 0) {
                    unlink(name);
                }
            }
            if (d != NULL)
                closedir(d);
        }
        ok = ok && best_size > 0 && rename(best, path) == 0;
        if (strcmp(best, tmp) != 0)
            unlink(tmp);
        char c = ok ? 'y' : 'n';
        if (write(fds[1], &c, 1) != 1)
            _exit(1);
        _exit(0);
    }
    close(fds[1]);
    waitpid(a, NULL, 0);
    char c = 'n';
    ssize_t got = read(fds[0], &c, 1);
    close(fds[0]);
    return got == 1 && c == 'y';
}

int main(int argc, char **argv)
{
    const char *program = NULL, *n = NULL, *exe = NULL, *script = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--program") == 0)
            program = argv[i + 1];
        else if (strcmp(argv[i], "--n") == 0)
            n = argv[i + 1];
        else if (strcmp(argv[i], "--exe") == 0)
            exe = argv[i + 1];
        else if (strcmp(argv[i], "--script") == 0)
            script = argv[i + 1];
        else
            BENCH_FAIL("unknown option %s", argv[i]);
    }
    if (program == NULL || n == NULL)
        BENCH_FAIL("usage: replaytrace --program python|sqlite|gcc --n N [--exe PATH] [--script PATH]");
    here();
    char traces[4200], path[4400], realprog[4200], tool[4200];
    snprintf(traces, sizeof traces, "%s/traces", dir);
    mkdir(traces, 0755);
    snprintf(path, sizeof path, "%s/%s-%s.trace", traces, program, n);
    snprintf(realprog, sizeof realprog, "%s/realprog", dir);
    snprintf(tool, sizeof tool, "%s/../fastalloc-trace", dir);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        char *rargv[12];
        int k = 0;
        rargv[k++] = realprog;
        rargv[k++] = "--program";
        rargv[k++] = (char *)program;
        rargv[k++] = "--n";
        rargv[k++] = (char *)n;
        if (exe != NULL) {
            rargv[k++] = "--exe";
            rargv[k++] = (char *)exe;
        }
        if (script != NULL) {
            rargv[k++] = "--script";
            rargv[k++] = (char *)script;
        }
        rargv[k] = NULL;
        if (!record(path, rargv))
            BENCH_FAIL("recording %s's trace with realprog failed", program);
    }
    execl(tool, "fastalloc-trace", "replay", "--json", path, (char *)NULL);
    BENCH_FAIL("cannot run %s: %s", tool, strerror(errno));
}
