/*
 * runwrap: run one program and write its exit status and resource usage
 * (wait4 rusage) to a file.  bench/run.py starts every benchmark through it.
 *
 *   runwrap [-e NAME=VALUE]... OUTFILE PROGRAM [ARG]...
 *
 * Why not let the Python driver call os.wait4 itself: on Linux, exec() folds
 * the peak RSS of the address space being replaced into the process's
 * ru_maxrss.  A child forked (or vforked) from the driver therefore reports at
 * least the driver's own peak RSS (10+ MiB of Python), which hides the few
 * MiB a micro-benchmark uses.  runwrap is a small C program: the program it
 * forks starts from runwrap's own tiny footprint, so ru_maxrss is the
 * benchmark's.
 *
 * -e sets an environment variable for PROGRAM only (not for runwrap), so a
 * preloaded allocator never runs inside runwrap.  PROGRAM's stdin, stdout and
 * stderr are runwrap's.  OUTFILE gets one line:
 *   exit=N signal=N maxrss_kib=N utime_s=F stime_s=F wall_s=F minflt=N majflt=N
 * (exit=-1 when killed by a signal, signal=0 otherwise; exit=127 when PROGRAM
 * could not be executed).  minflt and majflt are the program's page faults
 * (ru_minflt, ru_majflt): minor ones are the pages it touched that were not
 * mapped yet, so an allocator that gives memory back to the kernel and takes
 * it again pays one for every page each time (the kernel zeroes it).  Counted
 * from the fork on: the exec, the dynamic loader and a preloaded allocator's
 * start add about a hundred (69 for /bin/true).  runwrap's own exit status is 0 when OUTFILE was
 * written, 125 on a usage or system error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h" /* now_s */

#define MAX_ENV 64

static double tv_s(struct timeval tv)
{
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

int main(int argc, char **argv)
{
    char *env[MAX_ENV];
    int nenv = 0, i = 1;
    while (i < argc && strcmp(argv[i], "-e") == 0) {
        if (i + 1 >= argc || strchr(argv[i + 1], '=') == NULL || nenv == MAX_ENV) {
            fprintf(stderr, "runwrap: bad -e\n");
            return 125;
        }
        env[nenv++] = argv[i + 1];
        i += 2;
    }
    if (i < argc && strcmp(argv[i], "--") == 0)
        i++;
    if (argc - i < 2) {
        fprintf(stderr, "usage: runwrap [-e NAME=VALUE]... OUTFILE PROGRAM [ARG]...\n");
        return 125;
    }
    const char *outfile = argv[i];
    char **cmd = &argv[i + 1];

    double t0 = now_s();
    pid_t pid = fork();
    if (pid < 0) {
        perror("runwrap: fork");
        return 125;
    }
    if (pid == 0) {
        for (int k = 0; k < nenv; k++) {
            char *eq = strchr(env[k], '=');
            *eq = '\0';
            int bad = eq == env[k] || setenv(env[k], eq + 1, 1) != 0;
            *eq = '=';
            if (bad) {
                fprintf(stderr, "runwrap: cannot set %s\n", env[k]);
                _exit(125);
            }
        }
        execvp(cmd[0], cmd);
        fprintf(stderr, "runwrap: cannot execute %s: %s\n", cmd[0], strerror(errno));
        _exit(127);
    }

    int status;
    struct rusage ru;
    pid_t r;
    do
        r = wait4(pid, &status, 0, &ru);
    while (r < 0 && errno == EINTR);
    double wall = now_s() - t0;
    if (r < 0) {
        perror("runwrap: wait4");
        return 125;
    }

    FILE *f = fopen(outfile, "w");
    if (f == NULL) {
        fprintf(stderr, "runwrap: cannot write %s: %s\n", outfile, strerror(errno));
        return 125;
    }
    fprintf(f, "exit=%d signal=%d maxrss_kib=%ld utime_s=%.6f stime_s=%.6f wall_s=%.6f minflt=%ld majflt=%ld\n",
            WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0,
            ru.ru_maxrss, tv_s(ru.ru_utime), tv_s(ru.ru_stime), wall, ru.ru_minflt, ru.ru_majflt);
    if (fclose(f) != 0) {
        fprintf(stderr, "runwrap: cannot write %s: %s\n", outfile, strerror(errno));
        return 125;
    }
    return 0;
}
