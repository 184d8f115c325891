/* FASTALLOC_SECURE=1 (docs/SECURITY.md): which library a program gets.
 *
 *   run     fastalloc-run preloads the hardened library when
 *           FASTALLOC_SECURE is 1 or another word the library takes as
 *           yes, and the default one when it is unset or no: the program's
 *           /proc/self/maps shows which, and the library that serves its
 *           fa_malloc is that build (tests/which_build.h); a word the
 *           library would refuse, and no program, stop the wrapper with
 *           one line and status 2;
 *   notice  the default library, preloaded with FASTALLOC_SECURE=1 set,
 *           says once on stderr that it is not the hardened one, and goes
 *           on; the hardened library says nothing.
 *
 * The program checked is this one, run again as `probe`.  It is linked
 * against the default library, so that library is always in its maps; a
 * preload comes before it. */
#define _GNU_SOURCE
#include "check.h"
#include "child.h"
#include "which_build.h"

#include <stdlib.h>
#include <string.h>

#define NOTICE "fastalloc: FASTALLOC_SECURE=1, but this is the default library"

/* The probe: a few calls, then what serves them and which fastalloc
 * libraries are mapped, a line each. */
static int probe(void)
{
    for (int i = 0; i < 100; i++)
        fa_free(fa_malloc(100 + (size_t)i));
    struct which_build w;
    which_build_read(&w);
    const char *b = which_build_name(&w);
    char why[1200];
    which_build_describe(&w, why, sizeof why);
    printf("build=%s\nwhy=%s\n", b != NULL ? b : "unknown", why);
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    char line[4096], last[4096] = "";
    while (fgets(line, sizeof line, f) != NULL) {
        const char *lib = strstr(line, "/libfastalloc");
        if (lib != NULL && strcmp(lib, last) != 0) /* a library maps several ranges */
            printf("map=%s", lib + 1);             /* the line's own newline ends it */
        if (lib != NULL)
            snprintf(last, sizeof last, "%s", lib);
    }
    fclose(f);
    return 0;
}

struct env {
    const char *secure;  /* FASTALLOC_SECURE, or NULL: unset */
    const char *preload; /* LD_PRELOAD, or NULL: unset */
};

static void set_env(void *arg)
{
    const struct env *e = arg;
    if (e->secure != NULL)
        setenv("FASTALLOC_SECURE", e->secure, 1);
    else
        unsetenv("FASTALLOC_SECURE");
    if (e->preload != NULL)
        setenv("LD_PRELOAD", e->preload, 1);
    else
        unsetenv("LD_PRELOAD");
}

static void run_probe(struct child_out *r, const struct env *e, bool wrapped)
{
    char *argv[] = {FA_RUN, (char *)child_self(), "probe", NULL};
    child_run(r, set_env, (void *)e, wrapped ? argv : argv + 1);
    CHECKF(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0, "probe: status %#x: %s%s", r->status, r->out,
           r->err);
}

static int case_run(void)
{
    /* Every word the library takes as yes, in any case (the wrapper
     * preloaded the default library for all but "1" before 52). */
    static const struct env yes[] = {{"1", NULL}, {"yes", NULL}, {"TRUE", NULL}, {"On", NULL}};
    static const struct env no[] = {{NULL, NULL}, {"0", NULL}, {"no", NULL}, {"False", NULL}, {"OFF", NULL}};
    struct child_out r;
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        run_probe(&r, &yes[i], true);
        CHECKF(strstr(r.out, "build=secure\n") != NULL && strstr(r.out, "map=libfastalloc-secure.so") != NULL,
               "fastalloc-run with FASTALLOC_SECURE=%s did not give the hardened library:\n%s", yes[i].secure,
               r.out);
        CHECKF(r.err[0] == '\0', "stderr: %s", r.err);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        run_probe(&r, &no[i], true);
        CHECKF(strstr(r.out, "build=default\n") != NULL && strstr(r.out, "map=libfastalloc.so") != NULL &&
                   strstr(r.out, "libfastalloc-secure") == NULL,
               "fastalloc-run with FASTALLOC_SECURE=%s did not give the default library:\n%s",
               no[i].secure != NULL ? no[i].secure : "(unset)", r.out);
        CHECKF(r.err[0] == '\0', "stderr: %s", r.err);
    }
    /* A word the library would refuse: one line, status 2, no program. */
    static const struct env bad = {"maybe", NULL};
    char *argv[] = {FA_RUN, (char *)child_self(), "probe", NULL};
    child_run(&r, set_env, (void *)&bad, argv);
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 2 && r.out[0] == '\0' &&
               strncmp(r.err, "fastalloc-run: FASTALLOC_SECURE=maybe", 37) == 0 &&
               strchr(r.err, '\n') == r.err + strlen(r.err) - 1,
           "FASTALLOC_SECURE=maybe: status %#x, stdout %s, stderr %s", r.status, r.out, r.err);
    /* No program: the usage, status 2. */
    char *alone[] = {FA_RUN, NULL};
    child_run(&r, set_env, (void *)&no[0], alone);
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 2 && strstr(r.err, "usage: fastalloc-run") != NULL,
           "fastalloc-run alone: status %#x, stderr %s", r.status, r.err);
    return check_done("test_secure_run run");
}

static int case_notice(void)
{
    static const struct env wrong = {"1", FA_LIB}, right = {"1", FA_SECURE_LIB};
    struct child_out r;
    run_probe(&r, &wrong, false);
    CHECKF(strstr(r.out, "build=default\n") != NULL, "%s", r.out);
    /* One line, once, and nothing else. */
    CHECKF(strncmp(r.err, NOTICE, strlen(NOTICE)) == 0 && strchr(r.err, '\n') == r.err + strlen(r.err) - 1,
           "the default library with FASTALLOC_SECURE=1: stderr \"%s\"", r.err);
    run_probe(&r, &right, false);
    CHECKF(strstr(r.out, "build=secure\n") != NULL, "%s", r.out);
    CHECKF(r.err[0] == '\0', "the hardened library with FASTALLOC_SECURE=1: stderr \"%s\"", r.err);
    return check_done("test_secure_run notice");
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "probe") == 0)
        return probe();
    static const struct check_case cases[] = {
        {"run", case_run},
        {"notice", case_notice},
    };
    return check_run_case("test_secure_run", cases, sizeof cases / sizeof cases[0], argc, argv);
}
