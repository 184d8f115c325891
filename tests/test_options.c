/* The options table (src/00-base/options.c) against its three readers:
 *  - the environment: every malformed, negative, out-of-range or
 *    overflowing value gets one line on stderr naming the variable, and
 *    the option keeps its default (each case runs in a fresh process,
 *    since the environment is read once, at start-up);
 *  - fa_option_set / fa_option_get, and their errors;
 *  - the tables in README.md and docs/TUNING.md, which must hold exactly
 *    the rows the table gives, so that the docs cannot drift.
 * Links the static archive, where the table is visible.
 *
 *   test_options                       the environment, set and get, defaults
 *   test_options REPO_ROOT             the docs' tables
 *   test_options --child NAME          print option NAME's value (internal) */
#include "check.h"
#include "child.h"
#include "fastalloc.h"
#include "00-base/options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct env_case {
    const char *var, *value;   /* what the environment says */
    const char *option;        /* the option it sets */
    long long expect;          /* the option's value after start-up */
    const char *warning;       /* a piece of the line on stderr, NULL for none */
};

static const struct env_case cases[] = {
    /* The cases: each used to be taken silently, and wrongly. */
    {"FASTALLOC_LIMIT", "-5", "limit", 0, "FASTALLOC_LIMIT=-5 ignored: negative"},
    {"FASTALLOC_LIMIT", "18014398509481985K", "limit", 0, "FASTALLOC_LIMIT=18014398509481985K ignored: too large"},
    {"FASTALLOC_HUGEPAGES", "2", "hugepages", 0, "FASTALLOC_HUGEPAGES=2 ignored: not 0 or 1"},
    {"FASTALLOC_PURGE", "fre", "purge_madv_free", 0, "FASTALLOC_PURGE=fre ignored: not one of"},
    /* More of each kind. */
    {"FASTALLOC_LIMIT", "12Q", "limit", 0, "FASTALLOC_LIMIT=12Q ignored: not a size"},
    {"FASTALLOC_LIMIT", "99999999999999999999999", "limit", 0, "ignored: too large"},
    {"FASTALLOC_LIMIT", "", "limit", 0, "FASTALLOC_LIMIT= ignored: not a number"},
    {"FASTALLOC_LIMIT", " 5M", "limit", 0, "ignored: not a number"},
    {"FASTALLOC_THREAD_CACHE_MAX", "+64M", "thread_cache_max", 64 << 20, "ignored: not a number"},
    {"FASTALLOC_THREAD_CACHE_BYTES", "1M2", "thread_cache_bytes", 2 << 20, "ignored: not a size"},
    {"FASTALLOC_PURGE_DELAY_MS", "-2", "purge_delay_ms", 1000, "FASTALLOC_PURGE_DELAY_MS=-2 ignored: too small"},
    {"FASTALLOC_PURGE_DELAY_MS", "2147483648", "purge_delay_ms", 1000, "ignored: too large"},
    {"FASTALLOC_PURGE_DELAY_MS", "10s", "purge_delay_ms", 1000, "ignored: not a number"},
    {"FASTALLOC_PURGE_DELAY_MS", "-", "purge_delay_ms", 1000, "ignored: not a number"},
    {"FASTALLOC_BACKGROUND", "maybe", "background", 0, "FASTALLOC_BACKGROUND=maybe ignored: not 0 or 1"},
    {"FASTALLOC_PURGE_DELAY", "5", "purge_delay_ms", 1000, "FASTALLOC_PURGE_DELAY: unknown variable"},
    /* Good values: taken, and no line. */
    {"FASTALLOC_LIMIT", "256M", "limit", 256 << 20, NULL},
    {"FASTALLOC_LIMIT", "3g", "limit", 3LL << 30, NULL},
    {"FASTALLOC_THREAD_CACHE_BYTES", "512k", "thread_cache_bytes", 512 << 10, NULL},
    {"FASTALLOC_THREAD_CACHE_MAX", "1000000", "thread_cache_max", 1000000, NULL},
    {"FASTALLOC_PURGE_DELAY_MS", "-1", "purge_delay_ms", -1, NULL},
    {"FASTALLOC_PURGE_DELAY_MS", "0", "purge_delay_ms", 0, NULL},
    {"FASTALLOC_PURGE", "free", "purge_madv_free", 1, NULL},
    {"FASTALLOC_PURGE", "dontneed", "purge_madv_free", 0, NULL},
    {"FASTALLOC_HUGEPAGES", "1", "hugepages", 1, NULL},
    {"FASTALLOC_BACKGROUND", "on", "background", 1, NULL},
};

static int child(const char *name)
{
    long long v;
    if (fa_option_get(name, &v) != 0)
        return 2;
    printf("%lld\n", v);
    return 0;
}

/* Only this case's variable: a stray FASTALLOC_ one in the test's own
 * environment would add a line. */
static void case_env(void *arg)
{
    const struct env_case *c = arg;
    for (unsigned i = 0; i < fa__option_count; i++)
        unsetenv(fa__option_defs[i].env);
    setenv(c->var, c->value, 1);
}

static void run_case(const struct env_case *c)
{
    char *argv[] = {(char *)child_self(), "--child", (char *)c->option, NULL};
    struct child_out r;
    child_run(&r, case_env, (void *)c, argv);
    int st = r.status;
    const char *so = r.out, *se = r.err;
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s=%s: child status %d, stderr: %s", c->var, c->value, st, se);
    long long got = strtoll(so, NULL, 10);
    CHECKF(got == c->expect, "%s=%s: %s is %lld, expected %lld", c->var, c->value, c->option, got, c->expect);
    /* ASan and valgrind add nothing to stderr in a clean run. */
    if (c->warning == NULL) {
        CHECKF(se[0] == '\0', "%s=%s: unexpected stderr: %s", c->var, c->value, se);
        return;
    }
    CHECKF(strstr(se, c->warning) != NULL, "%s=%s: stderr lacks '%s': %s", c->var, c->value, c->warning, se);
    CHECKF(strncmp(se, "fastalloc: ", 11) == 0, "%s=%s: stderr: %s", c->var, c->value, se);
    char *nl = strchr(se, '\n');
    CHECKF(nl != NULL && nl[1] == '\0', "%s=%s: not one line: %s", c->var, c->value, se);
}

static void test_set_get(void)
{
    long long v;
    CHECK(fa_option_get("no_such_option", &v) == EINVAL);
    CHECK(fa_option_set("no_such_option", 1) == EINVAL);
    CHECK(fa_option_get(NULL, &v) == EINVAL);
    CHECK(fa_option_set(NULL, 1) == EINVAL);
    CHECK(fa_option_get("limit", NULL) == EINVAL);
    for (unsigned i = 0; i < fa__option_count; i++) {
        const struct fa__option_def *d = &fa__option_defs[i];
        long long before;
        CHECK(fa_option_get(d->name, &before) == 0);
        /* Out of range on both sides: refused, the value unchanged. */
        if (d->min > -0x7fffffffffffffffLL)
            CHECKF(fa_option_set(d->name, d->min - 1) == EINVAL, "%s", d->name);
        CHECKF(fa_option_set(d->name, d->max + 1) == EINVAL, "%s", d->name);
        CHECK(fa_option_get(d->name, &v) == 0 && v == before);
        /* Fixed at start-up: refused in range too, the value unchanged. */
        if (d->startup_only) {
            CHECKF(fa_option_set(d->name, d->max) == EPERM, "%s", d->name);
            CHECKF(fa_option_set(d->name, d->min) == EPERM, "%s", d->name);
            CHECK(fa_option_get(d->name, &v) == 0 && v == before);
            continue;
        }
        /* In range: taken, read back, restored. */
        CHECKF(fa_option_set(d->name, d->max) == 0, "%s", d->name);
        CHECK(fa_option_get(d->name, &v) == 0 && v == d->max);
        CHECKF(fa_option_set(d->name, before) == 0, "%s", d->name);
        CHECK(fa_option_get(d->name, &v) == 0 && v == before);
    }
}

/* Each row's printed default parses to its value. */
static void test_defaults(void)
{
    for (unsigned i = 0; i < fa__option_count; i++) {
        const struct fa__option_def *d = &fa__option_defs[i];
        long long v;
        if (strcmp(d->dflt, "none") == 0) {
            CHECKF(d->value == 0, "%s", d->name);
            continue;
        }
        CHECKF(fa__option_parse(d, d->dflt, &v) == NULL && v == d->value, "%s: default '%s' vs %lld",
               d->name, d->dflt, d->value);
    }
}

/* The docs' rows, exactly as the table gives them. */
static void test_doc(const char *root, const char *doc)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, doc);
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "cannot read %s", path);
    bool seen[64] = {0};
    char line[2048];
    unsigned rows = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "| `FASTALLOC_", 13) != 0)
            continue;
        line[strcspn(line, "\n")] = '\0';
        rows++;
        bool found = false;
        for (unsigned i = 0; i < fa__option_count && !found; i++) {
            const struct fa__option_def *d = &fa__option_defs[i];
            char want[2048];
            snprintf(want, sizeof want, "| `%s` | `%s` | %s | `%s` |", d->env, d->name, d->doc, d->dflt);
            if (strcmp(line, want) == 0) {
                CHECKF(!seen[i], "%s: %s twice", doc, d->env);
                seen[i] = found = true;
            }
        }
        CHECKF(found, "%s: this row matches no row of src/00-base/options.c "
                      "(or differs from it):\n  %s", doc, line);
    }
    fclose(f);
    for (unsigned i = 0; i < fa__option_count; i++) {
        const struct fa__option_def *d = &fa__option_defs[i];
        CHECKF(seen[i], "%s lacks the row of %s; it should read:\n  | `%s` | `%s` | %s | `%s` |", doc,
               d->env, d->env, d->name, d->doc, d->dflt);
    }
    CHECK(rows == fa__option_count);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--child") == 0)
        return child(argv[2]);
    CHECK(fa__option_count <= 64);
    if (argc == 2) {
        test_doc(argv[1], "README.md");
        test_doc(argv[1], "docs/TUNING.md");
        return check_done("test_options_docs");
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
    test_set_get();
    test_defaults();
    return check_done("test_options");
}
