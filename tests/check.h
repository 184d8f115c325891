/* Tiny assertion helpers shared by the fastalloc tests.
 *
 *   CHECK(cond)                 fail with file:line and the expression
 *   CHECKF(cond, fmt, ...)      same, plus a printf-style explanation
 *   check_done(name)            print "name: N checks passed", return 0
 *
 * A failed check prints to stderr and ends the process with status 1 at once
 * (die_v in common.h: one write, then _exit, so that other threads and
 * atexit handlers cannot hide or delay the failure; stdout is flushed
 * first).  The counter is atomic: checks may run in any thread. */
#ifndef FA_TEST_CHECK_H
#define FA_TEST_CHECK_H

#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static unsigned long check_count_;

__attribute__((noreturn, format(printf, 4, 5), cold, noinline, unused))
static void check_fail_(const char *file, int line, const char *expr, const char *fmt, ...)
{
    fflush(stdout);
    char head[512];
    snprintf(head, sizeof head, "%s:%d: CHECK failed: %s%s", file, line, expr,
             fmt[0] != '\0' ? " -- " : "");
    va_list ap;
    va_start(ap, fmt);
    die_v(1, head, fmt, ap);
}

#define CHECKF(cond, ...)                                                                 \
    do {                                                                                  \
        if (__builtin_expect(!(cond), 0))                                                 \
            check_fail_(__FILE__, __LINE__, #cond, __VA_ARGS__);                          \
        __atomic_fetch_add(&check_count_, 1, __ATOMIC_RELAXED);                           \
    } while (0)

#define CHECK(cond) CHECKF(cond, "%s", "")

/* Print the summary line; use as `return check_done("test_x");`. */
__attribute__((unused)) static int check_done(const char *name)
{
    printf("%s: %lu checks passed\n", name, __atomic_load_n(&check_count_, __ATOMIC_RELAXED));
    fflush(stdout);
    return 0;
}

/* A test program of several cases, one per process (tests/CMakeLists.txt,
 * fa_test CASES): run the case argv[1] names; exit status 2 and the list
 * of cases for any other. */
struct check_case {
    const char *name;
    int (*run)(void);
};

__attribute__((unused)) static int check_run_case(const char *prog, const struct check_case *cases, size_t n,
                                                  int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    for (size_t i = 0; i < n; i++)
        if (strcmp(c, cases[i].name) == 0)
            return cases[i].run();
    fprintf(stderr, "usage: %s CASE, one of:", prog);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %s", cases[i].name);
    fprintf(stderr, "\n");
    return 2;
}

#endif
