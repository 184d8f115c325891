/* AddressSanitizer builds poison what fastalloc holds free: a read of a
 * block after its free is reported by ASan there and then, at 16 B, 1 KiB,
 * 200 KiB (small blocks) and 2 MiB (a large block), and at 512 KiB (a large
 * block a thread cache keeps), and of a pool object after its put.  Each
 * read runs in a child, which ASan must
 * stop with its report naming the address.  Registered only in
 * AddressSanitizer builds (tests/CMakeLists.txt). */
#define _GNU_SOURCE
#include "check.h"
#include "child.h"
#include "fastalloc.h"

#include <stdlib.h>
#include <string.h>

static const size_t sizes[] = {16, 1024, 200 << 10, 512 << 10, 2 << 20};

/* A pool object read after its put: pools with and without a ctor (the
 * link is before the object, or in its first word). */
static void ctor(void *obj, void *arg)
{
    (void)arg;
    memset(obj, 7, 48);
}

static int child_pool(int with_ctor)
{
    fa_pool_options o = {.object_size = 48, .ctor = with_ctor ? ctor : NULL, .name = "asan"};
    fa_pool *pool = fa_pool_create(&o);
    char *a = fa_pool_get(pool), *b = fa_pool_get(pool);
    if (pool == NULL || a == NULL || b == NULL)
        return 3;
    memset(b, 1, 48);
    char *volatile stale = a + 16;
    fa_pool_put(pool, a);
    printf("addr=%p\n", (void *)stale);
    fflush(stdout);
    return *stale; /* ASan: use-after-poison */
}

static int child(size_t n)
{
    char *p = fa_malloc(n);
    if (p == NULL)
        return 3;
    memset(p, 1, n); /* all of a new block is the program's */
    /* A live block beside it stays usable. */
    char *q = fa_malloc(n);
    if (q == NULL)
        return 4;
    char *volatile stale = p + n / 2;
    fa_free(p);
    memset(q, 2, n);
    printf("addr=%p\n", (void *)stale);
    fflush(stdout);
    return *stale; /* ASan: use-after-poison */
}

static int case_uaf(void)
{
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char size[32];
        snprintf(size, sizeof size, "%zu", sizes[i]);
        char *argv[] = {(char *)child_self(), "child", size, NULL};
        struct child_out r;
        child_run(&r, NULL, NULL, argv);
        const char *a = strstr(r.out, "addr=");
        CHECKF(a != NULL, "%zu B: the child did not reach the read: status %#x\n%s%s", sizes[i], r.status, r.out,
               r.err);
        char want[128];
        snprintf(want, sizeof want, "AddressSanitizer: use-after-poison on address %.*s", (int)strcspn(a + 5, "\n"),
                 a + 5);
        CHECKF(strstr(r.err, want) != NULL, "%zu B: no \"%s\" in:\n%s", sizes[i], want, r.err);
        CHECKF(!(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0), "%zu B: the child went on", sizes[i]);
    }
    for (int with_ctor = 0; with_ctor < 2; with_ctor++) {
        char *argv[] = {(char *)child_self(), "pool", with_ctor ? "1" : "0", NULL};
        struct child_out r;
        child_run(&r, NULL, NULL, argv);
        const char *a = strstr(r.out, "addr=");
        CHECKF(a != NULL, "pool: status %#x\n%s%s", r.status, r.out, r.err);
        char want[128];
        snprintf(want, sizeof want, "AddressSanitizer: use-after-poison on address %.*s", (int)strcspn(a + 5, "\n"),
                 a + 5);
        CHECKF(strstr(r.err, want) != NULL, "pool (ctor %d): no \"%s\" in:\n%s", with_ctor, want, r.err);
    }
    return check_done("test_asan uaf");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "child") == 0)
        return child(strtoull(argv[2], NULL, 10));
    if (argc == 3 && strcmp(argv[1], "pool") == 0)
        return child_pool(argv[2][0] == '1');
    static const struct check_case cases[] = {{"uaf", case_uaf}};
    return check_run_case("test_asan", cases, sizeof cases / sizeof cases[0], argc, argv);
}
