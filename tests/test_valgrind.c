/* Valgrind's memcheck sees fastalloc's blocks while fastalloc runs.  Each
 * case runs this program again under
 *   valgrind --soname-synonyms=somalloc=nouserintercepts
 * (memcheck then leaves the program's own malloc alone, fastalloc's), and
 * the child makes one error: a read after free, a branch on an
 * uninitialized byte, a leak.  The child checks fa_owns on its blocks, so a
 * run where memcheck's malloc served them fails; memcheck must report the
 * error, with the function that allocated the block.  Skipped when valgrind
 * is not installed. */
#define _GNU_SOURCE
#include "check.h"
#include "child.h"
#include "fastalloc.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NO_TAIL_CALL() __asm__ __volatile__("" ::: "memory")

/* Not static, so that memcheck's traces can name them. */
char *vg_alloc_site(size_t n);
int vg_child(const char *kind);

__attribute__((noinline)) char *vg_alloc_site(size_t n)
{
    char *p = malloc(n);
    NO_TAIL_CALL();
    return p;
}

static void *volatile sink;

int vg_child(const char *kind)
{
    char *p = vg_alloc_site(16);
    char *q = malloc(100);
    if (p == NULL || q == NULL || !fa_owns(p) || !fa_owns(q)) {
        printf("not fastalloc's blocks\n");
        return 3;
    }
    printf("fastalloc owns them\n");
    fflush(stdout);
    free(q);
    if (strcmp(kind, "uaf") == 0) {
        /* Through a volatile copy, which gcc cannot see is freed. */
        char *volatile stale = p;
        free(p);
        volatile char c = stale[3]; /* memcheck: invalid read, inside a freed block */
        (void)c;
    } else if (strcmp(kind, "uninit") == 0) {
        if (p[5] == 42) /* memcheck: a branch on an uninitialised value */
            printf("42\n");
        free(p);
    } else if (strcmp(kind, "leak") == 0) {
        p = NULL; /* memcheck: definitely lost */
        sink = NULL;
    } else if (strcmp(kind, "clean") == 0) {
        free(p);
    }
    return 0;
}

static void run(struct child_out *r, const char *kind)
{
    char *argv[] = {"valgrind", "--soname-synonyms=somalloc=nouserintercepts", "--leak-check=full",
                    "--error-exitcode=99", (char *)child_self(), "child", (char *)kind, NULL};
    child_run(r, NULL, NULL, argv);
}

/* The child ran on fastalloc, and memcheck found its error (exit 99). */
static void expect(const char *kind, const char *const *lines, size_t n)
{
    struct child_out r;
    run(&r, kind);
    if (child_missing(&r, "valgrind"))
        exit(77);
    CHECKF(strstr(r.out, "fastalloc owns them") != NULL, "%s: the blocks were not fastalloc's: %s\n%s", kind,
           r.out, r.err);
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == (n > 0 ? 99 : 0), "%s: status %#x\n%s", kind,
           r.status, r.err);
    for (size_t i = 0; i < n; i++)
        CHECKF(strstr(r.err, lines[i]) != NULL, "%s: memcheck did not say \"%s\":\n%s", kind, lines[i], r.err);
}

static int case_uaf(void)
{
    static const char *const lines[] = {"Invalid read of size 1", "is 3 bytes inside a block of size 16 free'd",
                                        "vg_alloc_site"};
    expect("uaf", lines, 3);
    return check_done("test_valgrind uaf");
}

static int case_uninit(void)
{
    static const char *const lines[] = {"Conditional jump or move depends on uninitialised value",
                                        "vg_child"};
    expect("uninit", lines, 2);
    return check_done("test_valgrind uninit");
}

static int case_leak(void)
{
    static const char *const lines[] = {"16 bytes in 1 blocks are definitely lost", "vg_alloc_site"};
    expect("leak", lines, 2);
    return check_done("test_valgrind leak");
}

static int case_clean(void)
{
    expect("clean", NULL, 0);
    return check_done("test_valgrind clean");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "child") == 0)
        return vg_child(argv[2]);
    static const struct check_case cases[] = {
        {"uaf", case_uaf},
        {"uninit", case_uninit},
        {"leak", case_leak},
        {"clean", case_clean},
    };
    return check_run_case("test_valgrind", cases, sizeof cases / sizeof cases[0], argc, argv);
}
