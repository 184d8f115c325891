/* Huge requests cost what is live, not what was asked for (#52): the page
 * map keeps a huge block's first and last page and a slot, not an entry
 * for every page (02-records/pagemap.h).  Built twice (fa_test SECURE).
 *
 *   map       malloc of 64 GiB and of 1 TiB (four at once) adds at most
 *             2 MiB resident each; the blocks' ends and middle are written
 *             and read back; a realloc that shrinks or grows one in place,
 *             and its free
 *   interior  a free and a malloc_usable_size of a pointer inside a huge
 *             block stop the program, or say so, naming the call
 *   refused   a request no address space could back returns NULL with
 *             ENOMEM, and the heap serves the next request
 *   rlimit    so does one past RLIMIT_AS
 * Under the sanitizers, whose shadow of a block is an eighth of it, written
 * (AddressSanitizer) or whose own mappings RLIMIT_AS would refuse, map and
 * rlimit do not run (tests/CMakeLists.txt), and interior's block is 1 GiB,
 * still huge. */
#include "check.h"
#include "child.h"
#include "util.h"

#include <fastalloc.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#ifndef FA_TEST_SECURE_LIB
#define FA_TEST_SECURE_LIB 0
#endif

#define GiB ((size_t)1 << 30)
#define TiB ((size_t)1 << 40)
#ifdef FA_TEST_SANITIZED
#define INTERIOR_BLOCK GiB
#else
#define INTERIOR_BLOCK (64 * GiB)
#endif

/* 136 MiB for 64 GiB before 52's fix, 2.2 GiB for 1 TiB. */
#define MAP_MAX (2 * MiB)

/* Write and read back a few bytes spread over the block. */
static void poke(unsigned char *p, size_t n, unsigned char v)
{
    size_t at[] = {0, 4095, n / 3, n / 2, n - 4096, n - 1};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
        p[at[i]] = (unsigned char)(v + i);
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
        CHECKF(p[at[i]] == (unsigned char)(v + i), "byte %zu of the %zu-byte block", at[i], n);
}

static int case_map(void)
{
    /* Each byte written makes a page resident: with transparent huge
     * pages on for every mapping, one of 2 MiB. */
    prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
    fa_free(fa_malloc(1));
    size_t base = rss_bytes();
    unsigned char *p = fa_malloc(64 * GiB);
    CHECKF(p != NULL, "malloc(64 GiB): errno %d", errno);
    size_t after = rss_bytes();
    printf("malloc(64 GiB): %zu KiB more resident\n", (after - base) / KiB);
    CHECKF(after < base + MAP_MAX, "malloc(64 GiB) made %zu KiB resident", (after - base) / KiB);
    CHECK(fa_malloc_usable_size(p) >= 64 * GiB);
    CHECK(fa_owns(p));
    poke(p, 64 * GiB, 1);
    /* Shrunk by half in place, then grown by a page (in place or moved:
     * the bytes kept are the block's first). */
    unsigned char *q = fa_realloc(p, 32 * GiB);
    CHECK(q == p && q[0] == 1 && q[4095] == 2);
    poke(q, 32 * GiB, 11);
    fa_free(q);

    base = rss_bytes();
    unsigned char *t[4];
    for (int i = 0; i < 4; i++) {
        t[i] = fa_malloc(TiB);
        CHECKF(t[i] != NULL, "malloc(1 TiB) #%d: errno %d", i, errno);
        size_t now = rss_bytes();
        printf("malloc(1 TiB) #%d: %zd KiB more resident\n", i, (ssize_t)(now - base) / (ssize_t)KiB);
        CHECKF(now < base + (size_t)(i + 1) * MAP_MAX, "%d blocks of 1 TiB made %zu KiB resident", i + 1,
               (now - base) / KiB);
    }
    for (int i = 0; i < 4; i++)
        poke(t[i], TiB, (unsigned char)(20 + 10 * i));
    for (int i = 0; i < 4; i++)
        fa_free(t[i]);
    /* The heap goes on: a small and a large block. */
    void *s = fa_malloc(100), *l = fa_malloc(3 * MiB);
    CHECK(s != NULL && l != NULL);
    fa_free(s);
    fa_free(l);
    return check_done("test_huge map");
}

static void interior_free(void *arg)
{
    (void)arg;
    unsigned char *p = fa_malloc(INTERIOR_BLOCK);
    CHECK(p != NULL);
    fa_free(p + INTERIOR_BLOCK / 4);
}

static void interior_usable(void *arg)
{
    (void)arg;
    unsigned char *p = fa_malloc(INTERIOR_BLOCK);
    CHECK(p != NULL);
    printf("usable %zu\n", fa_malloc_usable_size(p + INTERIOR_BLOCK / 4));
}

static int case_interior(void)
{
    struct child_out r;
    child_call(&r, interior_free, NULL);
    CHECKF(WIFSIGNALED(r.status) && strstr(r.err, "free(): pointer") && strstr(r.err, "inside a block"),
           "free inside a huge block: status %#x, stderr: %s", r.status, r.err);
    child_call(&r, interior_usable, NULL);
    CHECKF(strstr(r.err, "malloc_usable_size()") != NULL, "malloc_usable_size inside a huge block: status %#x, "
           "stdout: %s, stderr: %s", r.status, r.out, r.err);
    return check_done("test_huge interior");
}

static void refused_limit(void *arg)
{
    (void)arg;
    fa_free(fa_malloc(1));
    struct rlimit as = {4 * GiB, 4 * GiB};
    struct rlimit old;
    CHECK(getrlimit(RLIMIT_AS, &old) == 0);
    CHECK(setrlimit(RLIMIT_AS, &as) == 0);
    errno = 0;
    void *p = fa_malloc(8 * GiB);
    CHECKF(p == NULL && errno == ENOMEM, "malloc(8 GiB) under a 4 GiB RLIMIT_AS: %p, errno %d", p, errno);
    void *q = fa_malloc(1 * MiB);
    CHECK(q != NULL);
    memset(q, 1, MiB);
    fa_free(q);
}

static int case_refused(void)
{
    static const size_t sizes[] = {(size_t)1 << 47, (size_t)1 << 50, SIZE_MAX / 2, SIZE_MAX - 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        errno = 0;
        void *p = fa_malloc(sizes[i]);
        CHECKF(p == NULL && errno == ENOMEM, "malloc(%#zx): %p, errno %d", sizes[i], p, errno);
    }
    void *q = fa_malloc(100);
    CHECK(q != NULL);
    fa_free(q);
    return check_done("test_huge refused");
}

static int case_rlimit(void)
{
    struct child_out r;
    child_call(&r, refused_limit, NULL);
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "under RLIMIT_AS: status %#x, stderr: %s",
           r.status, r.err);
    return check_done("test_huge rlimit");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    static const struct check_case cases[] = {
        {"map", case_map}, {"interior", case_interior}, {"refused", case_refused}, {"rlimit", case_rlimit}};
    return check_run_case(FA_TEST_SECURE_LIB ? "test_huge_secure" : "test_huge", cases, sizeof cases / sizeof cases[0], argc, argv);
}
