/* Running a function or a program in a child with its output captured: the
 * tests that must see a process die (debug mode's reports, bad pointers),
 * or see what start-up printed (options), or run under valgrind.
 *
 *   child_call(&r, fn, arg)           fork; in the child, stdout and stderr
 *                                     go to pipes, fn(arg) runs, and the
 *                                     child exits with status 0 if fn
 *                                     returns; the parent collects both
 *                                     outputs and the status
 *   child_run(&r, setup, arg, argv)   the same, with a child that runs
 *                                     setup(arg) (to set the environment),
 *                                     then execs argv (found in PATH)
 *
 * An exec that fails ends the child with status 127 (child_missing).  The
 * children leave no core file: many die on purpose, and a test that runs
 * dozens of them would fill the folder. */
#ifndef FA_TEST_CHILD_H
#define FA_TEST_CHILD_H

#include "check.h"

#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

struct child_out {
    int status;
    char out[4096];
    char err[65536];
};

/* Read what fd has into buf at *n, keeping a NUL at the end; false at the
 * end of the stream. */
static inline bool child_read_(int fd, char *buf, size_t cap, size_t *n)
{
    char sink[4096];
    ssize_t r = *n + 1 < cap ? read(fd, buf + *n, cap - 1 - *n) : read(fd, sink, sizeof sink);
    if (r <= 0)
        return false;
    if (*n + 1 < cap)
        *n += (size_t)r; /* past cap, the rest is read and dropped */
    buf[*n] = '\0';
    return true;
}

__attribute__((unused)) static void child_call(struct child_out *r, void (*fn)(void *), void *arg)
{
    int o[2], e[2];
    CHECK(pipe(o) == 0 && pipe(e) == 0);
    /* What stdio holds now is the parent's to write, not the child's too. */
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        dup2(o[1], 1);
        dup2(e[1], 2);
        close(o[0]);
        close(e[0]);
        fn(arg);
        _exit(0);
    }
    close(o[1]);
    close(e[1]);
    /* Both at once: a child that fills one pipe while the parent waits on
     * the other would never finish. */
    size_t no = 0, ne = 0;
    r->out[0] = r->err[0] = '\0';
    struct pollfd p[2] = {{o[0], POLLIN, 0}, {e[0], POLLIN, 0}};
    for (int open_fds = 2; open_fds > 0;) {
        CHECK(poll(p, 2, -1) > 0);
        if (p[0].revents != 0 && !child_read_(o[0], r->out, sizeof r->out, &no)) {
            p[0].fd = -1;
            open_fds--;
        }
        if (p[1].revents != 0 && !child_read_(e[0], r->err, sizeof r->err, &ne)) {
            p[1].fd = -1;
            open_fds--;
        }
    }
    close(o[0]);
    close(e[0]);
    CHECK(waitpid(pid, &r->status, 0) == pid);
}

struct child_exec_ {
    void (*setup)(void *);
    void *arg;
    char *const *argv;
};

static inline void child_exec_(void *p)
{
    const struct child_exec_ *x = p;
    if (x->setup != NULL)
        x->setup(x->arg);
    execvp(x->argv[0], x->argv);
    _exit(127);
}

__attribute__((unused)) static void child_run(struct child_out *r, void (*setup)(void *), void *arg,
                                              char *const argv[])
{
    struct child_exec_ x = {setup, arg, argv};
    child_call(r, child_exec_, &x);
}

/* Whether the child's exec failed (status 127): the program is not
 * installed.  Says so on stdout, "SKIP: NAME is not installed", for the
 * caller to skip (exit status 77). */
__attribute__((unused)) static bool child_missing(const struct child_out *r, const char *name)
{
    if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) != 127)
        return false;
    printf("SKIP: %s is not installed\n", name);
    return true;
}

/* The path of the running program: /proc/self/exe names valgrind itself to
 * a program valgrind runs. */
__attribute__((unused)) static const char *child_self(void)
{
    static char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(len > 0);
    self[len] = '\0';
    return self;
}

#endif
