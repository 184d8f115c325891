/* AddressSanitizer builds poison what fastalloc holds free: a read of a
 * block after its free is reported by ASan there and then, at 16 B, 1 KiB,
 * 200 KiB (small blocks) and 2 MiB (a large block), and at 512 KiB (a large
 * block a thread cache keeps).  Each read runs in a child, which ASan must
 * stop with its report naming the address.  Registered only in
 * AddressSanitizer builds (tests/CMakeLists.txt). */
#define _GNU_SOURCE
#include "check.h"
#include "child.h"
#include "fastalloc.h"

#include <stdlib.h>
#include <string.h>

static const size_t sizes[] = {16, 1024, 200 << 10, 512 << 10, 2 << 20};

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
    return check_done("test_asan uaf");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "child") == 0)
        return child(strtoull(argv[2], NULL, 10));
    static const struct check_case cases[] = {{"uaf", case_uaf}};
    return check_run_case("test_asan", cases, sizeof cases / sizeof cases[0], argc, argv);
}
