/* Debug mode (FASTALLOC_DEBUG=1).  Each error is provoked in a child that
 * runs this program again with the mode on; the child must die of SIGABRT
 * after the documented line, naming the pointer and the block's size, and a
 * backtrace naming the function that made the call (the program is linked
 * with -rdynamic, so dladdr finds its functions).  Then: going on after an
 * error, the leak report, and what a good program sees of debug mode
 * (fills, sizes, alignment, realloc, fa_owns).
 *
 * The children call the fa_ names, so the test also runs in sanitizer
 * builds, where malloc is the sanitizer's. */
#define _GNU_SOURCE
#include "check.h"
#include "child.h"
#include "fastalloc.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const size_t sizes[] = {16, 1024, 200 << 10, 2 << 20};

/* ---- the children ---- */

/* Not static: dladdr names only the symbols the program exports.  Each
 * ends with a barrier, so that its last call is not a jump that leaves no
 * frame of its own. */
#define NO_TAIL_CALL() __asm__ __volatile__("" ::: "memory")
void bad_double(char *p);
void bad_invalid(void);
void bad_interior(char *p);
void bad_misaligned(char *p);
void bad_canary(char *p, size_t n);
void bad_after_free(char *p, size_t n);
void *leaky_site(size_t n);
int child(const char *kind, size_t n);
int child_good(void);

/* Each error in a function of its own, so that the trace must name it. */
__attribute__((noinline)) void bad_double(char *p)
{
    fa_free(p);
    fa_free(p);
    NO_TAIL_CALL();
}

__attribute__((noinline)) void bad_invalid(void)
{
    static _Alignas(16) char not_ours[64];
    fa_free(not_ours);
    NO_TAIL_CALL();
}

__attribute__((noinline)) void bad_interior(char *p)
{
    fa_free(p + 16);
    NO_TAIL_CALL();
}

__attribute__((noinline)) void bad_misaligned(char *p)
{
    fa_free(p + 8);
    NO_TAIL_CALL();
}

__attribute__((noinline)) void bad_canary(char *p, size_t n)
{
    p[n] = 'X';
    fa_free(p);
    NO_TAIL_CALL();
}

__attribute__((noinline)) void bad_after_free(char *p, size_t n)
{
    fa_free(p);
    p[n / 2] = 'X';
    /* 5 MiB of frees pass the child's 4 MiB quarantine: p leaves it. */
    for (int i = 0; i < 5; i++)
        fa_free(fa_malloc(1 << 20));
    NO_TAIL_CALL();
}

__attribute__((noinline)) void *leaky_site(size_t n)
{
    void *p = fa_malloc(n);
    NO_TAIL_CALL();
    return p;
}

static void *volatile sink[8];

int child(const char *kind, size_t n)
{
    char *p = fa_malloc(n);
    if (p == NULL || !fa_owns(p))
        return 3;
    /* The parent checks that the report names this address. */
    char *named = strcmp(kind, "interior") == 0 ? p + 16 : strcmp(kind, "misaligned") == 0 ? p + 8 : p;
    printf("ptr=%p\n", (void *)named);
    fflush(stdout);
    if (strcmp(kind, "double") == 0)
        bad_double(p);
    else if (strcmp(kind, "invalid") == 0)
        bad_invalid();
    else if (strcmp(kind, "interior") == 0)
        bad_interior(p);
    else if (strcmp(kind, "misaligned") == 0)
        bad_misaligned(p);
    else if (strcmp(kind, "canary") == 0)
        bad_canary(p, n);
    else if (strcmp(kind, "afterfree") == 0)
        bad_after_free(p, n);
    else if (strcmp(kind, "leak") == 0) {
        /* One call site, the loop kept whole: a group is a whole trace. */
        static volatile int three = 3;
        for (int i = 0; i < three; i++)
            sink[i] = leaky_site(n);
        fa_free(p);
        exit(0);
    } else
        return 4;
    printf("survived\n");
    fflush(stdout);
    return 0;
}

/* A good program under debug mode: what it sees. */
int child_good(void)
{
    unsigned char *p = fa_malloc(100);
    if (p == NULL)
        return 10;
    for (int i = 0; i < 100; i++)
        if (p[i] != 0xAA)
            return 11;
    if (fa_malloc_usable_size(p) != 100 || !fa_owns(p) || fa_owns(p + 16))
        return 12;
    memset(p, 7, 100);
    unsigned char *q = fa_realloc(p, 5000);
    if (q == NULL || q == p || q[0] != 7 || q[99] != 7 || q[100] != 0xAA)
        return 13;
    /* p sits in the quarantine, filled. */
    if (p[0] != 0xDD || p[99] != 0xDD)
        return 14;
    unsigned char *z = fa_calloc(1000, 3);
    for (int i = 0; z != NULL && i < 3000; i++)
        if (z[i] != 0)
            return 15;
    void *a = NULL;
    if (fa_posix_memalign(&a, 4096, 100) != 0 || (uintptr_t)a % 4096 != 0 || !fa_owns(a))
        return 16;
    void *big = fa_aligned_alloc(1 << 16, 300 << 10);
    if (big == NULL || (uintptr_t)big % (1 << 16) != 0 || fa_malloc_usable_size(big) != 300 << 10)
        return 17;
    if (fa_option_set("debug", 0) != EPERM)
        return 18;
    /* Large blocks that realloc moves and keeps: the hardened library's
     * canary after a large block's bytes was overwritten by debug mode's,
     * which ran to the block's whole pages (#52). */
    static const size_t from[] = {300000, 300000, 300000, 5000000}, to[] = {450000, 300000, 2000000, 300000};
    for (int i = 0; i < 4; i++) {
        unsigned char *l = fa_malloc(from[i]);
        if (l == NULL)
            return 20;
        memset(l, i + 1, from[i]);
        l = fa_realloc(l, to[i]);
        size_t keep = from[i] < to[i] ? from[i] : to[i];
        if (l == NULL || l[0] != i + 1 || l[keep - 1] != i + 1)
            return 21;
        memset(l, i + 2, to[i]);
        fa_free(l);
    }
    fa_free(q);
    fa_free(z);
    fa_free(a);
    fa_free(big);
    fa_free(NULL);
    /* write, not stdio: a stdout buffer would be a live block at exit. */
    if (write(1, "good\n", 5) != 5)
        return 19;
    return 0;
}

/* ---- the parent ---- */

static void debug_env(void *arg)
{
    setenv("FASTALLOC_DEBUG", "1", 1);
    setenv("FASTALLOC_DEBUG_QUARANTINE", "4M", 1);
    const char *extra = arg;
    if (extra != NULL)
        putenv((char *)extra);
}

/* Run this program as `child KIND SIZE` with debug mode on (and the extra
 * variable, if any). */
static void run(struct child_out *r, const char *kind, size_t n, const char *extra)
{
    char size[32];
    snprintf(size, sizeof size, "%zu", n);
    char *argv[] = {(char *)child_self(), "child", (char *)kind, size, NULL};
    child_run(r, debug_env, (void *)extra, argv);
}

static bool aborted(const struct child_out *r)
{
    return WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGABRT;
}

/* The pointer the child printed, as %p writes it. */
static const char *child_ptr(const struct child_out *r, char *buf, size_t cap)
{
    const char *s = strstr(r->out, "ptr=");
    CHECKF(s != NULL, "child printed no pointer; stdout: %s; stderr: %s", r->out, r->err);
    snprintf(buf, cap, "%.*s", (int)strcspn(s + 4, "\n"), s + 4);
    return buf;
}

static int case_errors(void)
{
    static const struct {
        const char *kind, *line, *func;
        bool sized; /* the line gives the block's size */
    } kinds[] = {
        {"double", "fastalloc: debug: double free of %s (%zu bytes)", "bad_double", true},
        {"invalid", "fastalloc: debug: invalid pointer 0x", "bad_invalid", false},
        {"interior", "fastalloc: debug: interior pointer %s passed to free: 16 bytes into the block at ",
         "bad_interior", false},
        {"misaligned", "fastalloc: debug: misaligned pointer %s passed to free", "bad_misaligned", false},
        {"canary", "fastalloc: debug: canary overwritten after %s (%zu bytes), found by free: byte 0 past "
                   "the end is 0x58",
         "bad_canary", true},
        {"afterfree", "fastalloc: debug: write after free to %s (%zu bytes): byte %zu is 0x58",
         "bad_after_free", true},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            size_t n = sizes[i];
            struct child_out r;
            run(&r, kinds[k].kind, n, NULL);
            CHECKF(aborted(&r), "%s at %zu B: status %#x, not SIGABRT; stderr:\n%s", kinds[k].kind, n, r.status,
                   r.err);
            char ptr[64], want[256];
            child_ptr(&r, ptr, sizeof ptr);
            if (strcmp(kinds[k].kind, "afterfree") == 0)
                snprintf(want, sizeof want, kinds[k].line, ptr, n, n / 2);
            else if (kinds[k].sized)
                snprintf(want, sizeof want, kinds[k].line, ptr, n);
            else
                snprintf(want, sizeof want, kinds[k].line, ptr);
            CHECKF(strstr(r.err, want) != NULL, "%s at %zu B: no line \"%s\" in stderr:\n%s", kinds[k].kind, n,
                   want, r.err);
            /* One line of report, then the traces; the one of the call
             * names its function, except a write after free, found later,
             * whose trace is that of the free. */
            CHECKF(strstr(r.err, kinds[k].func) != NULL, "%s at %zu B: no frame names %s:\n%s", kinds[k].kind, n,
                   kinds[k].func, r.err);
            CHECKF(strstr(r.err, " thread ") != NULL, "%s: no thread in the line", kinds[k].kind);
            if (kinds[k].sized) /* the block's allocation is traced too */
                CHECKF(strstr(r.err, "allocated at:") != NULL && strstr(r.err, "child+") != NULL,
                       "%s at %zu B: no allocation trace:\n%s", kinds[k].kind, n, r.err);
            CHECKF(strstr(r.out, "survived") == NULL, "%s: the child went on", kinds[k].kind);
        }
    }
    return check_done("test_debug errors");
}

static int case_continue(void)
{
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        struct child_out r;
        run(&r, "double", sizes[i], "FASTALLOC_DEBUG_CONTINUE=1");
        CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "status %#x; stderr:\n%s", r.status, r.err);
        CHECK(strstr(r.err, "fastalloc: debug: double free of") != NULL);
        CHECK(strstr(r.out, "survived") != NULL);
    }
    return check_done("test_debug continue");
}

static int case_leak(void)
{
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        struct child_out r;
        run(&r, "leak", n, NULL);
        CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "status %#x; stderr:\n%s", r.status, r.err);
        CHECKF(strstr(r.err, "fastalloc: debug: leak report: ") != NULL, "no report:\n%s", r.err);
        /* The three blocks of leaky_site make one group, traced to it. */
        char want[128];
        snprintf(want, sizeof want, "fastalloc:   %zu bytes in 3 blocks\n", 3 * n);
        const char *g = strstr(r.err, want);
        CHECKF(g != NULL, "%zu B: no line \"%s\" in:\n%s", n, want, r.err);
        const char *next = strstr(g + strlen(want), " bytes in ");
        const char *site = strstr(g, "leaky_site");
        CHECKF(site != NULL && (next == NULL || site < next), "%zu B: the group is not traced to leaky_site:\n%s",
               n, r.err);
    }
    return check_done("test_debug leak");
}

static int case_good(void)
{
    struct child_out r;
    run(&r, "good", 0, NULL);
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "status %#x (exit %d); stderr:\n%s", r.status,
           WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1, r.err);
    CHECK(strstr(r.out, "good") != NULL);
    /* Every block was freed: no report, and no other line. */
    CHECKF(r.err[0] == '\0', "stderr:\n%s", r.err);
    return check_done("test_debug good");
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "child") == 0)
        return strcmp(argv[2], "good") == 0 ? child_good() : child(argv[2], strtoull(argv[3], NULL, 10));
    static const struct check_case cases[] = {
        {"errors", case_errors},
        {"continue", case_continue},
        {"leak", case_leak},
        {"good", case_good},
    };
    return check_run_case("test_debug", cases, sizeof cases / sizeof cases[0], argc, argv);
}
