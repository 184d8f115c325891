/* Hooks (fa_set_hooks): a hook sees exactly the calls made, with sizes and
 * the call's site; its own allocations are not hooked; removed, it sees
 * nothing more.  Sampling: about one block per sample_bytes, and the frees
 * of exactly the sampled blocks. */
#define _GNU_SOURCE
#include "check.h"
#include "fastalloc.h"
#include "util.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NO_TAIL_CALL() __asm__ __volatile__("" ::: "memory")

static unsigned long n_alloc, n_free, n_inner;
static size_t bytes_alloc, bytes_free;
static void *last_caller, *last_ptr;
static void *volatile sink;

static void on_alloc(void *p, size_t size, void *caller)
{
    n_alloc++;
    bytes_alloc += size;
    last_caller = caller;
    last_ptr = p;
    /* A hook may allocate: not hooked, no recursion. */
    void *q = fa_malloc(64);
    n_inner += q != NULL;
    fa_free(q);
}

static void on_free(void *p, size_t size)
{
    (void)p;
    n_free++;
    bytes_free += size;
}

/* Not static: dladdr names the call's site by its exported symbol. */
void *hook_site(size_t n);
__attribute__((noinline)) void *hook_site(size_t n)
{
    void *p = fa_malloc(n);
    NO_TAIL_CALL();
    return p;
}

/* on_free's size is the block's usable size: a 100-byte block's is its
 * class's, 112, or in the hardened library with tails the 100 bytes asked
 * for (util.h, test_secure_usable). */
#if FA_TEST_SECURE_LIB
#define OLD_USABLE (test_tails_on() ? test_secure_usable(100) : (size_t)112)
#else
#define OLD_USABLE ((size_t)112)
#endif

static int case_count(void)
{
    fa_hooks h = {on_alloc, on_free, 0};
    fa_hooks none = {NULL, NULL, 0};
    CHECK(fa_set_hooks(&none) == EINVAL);
    /* Blocks from before the hooks: freed under them, seen as frees. */
    void *old = fa_malloc(100);
    CHECK(fa_set_hooks(&h) == 0);
    fa_free(old);
    CHECKF(n_free == 1 && bytes_free == OLD_USABLE, "%lu frees, %zu bytes", n_free, bytes_free);
    n_free = bytes_free = 0;

    static const size_t sizes[] = {1, 16, 100, 1000, 5000, 100000, 300000, 3 << 20};
    enum { NS = sizeof sizes / sizeof sizes[0], R = 50 };
    static void *p[NS][R];
    size_t want_alloc = 0, want_free = 0;
    for (int r = 0; r < R; r++) {
        for (int i = 0; i < NS; i++) {
            CHECK((p[i][r] = fa_malloc(sizes[i])) != NULL);
            CHECK(last_ptr == p[i][r]);
            want_alloc += sizes[i];
        }
    }
    CHECKF(n_alloc == NS * R && bytes_alloc == want_alloc, "%lu allocs, %zu bytes", n_alloc, bytes_alloc);
    CHECK(n_inner == n_alloc);
    for (int r = 0; r < R; r++) {
        for (int i = 0; i < NS; i++) {
            want_free += fa_malloc_usable_size(p[i][r]);
            fa_free(p[i][r]);
        }
    }
    CHECKF(n_free == NS * R && bytes_free == want_free, "%lu frees, %zu bytes", n_free, bytes_free);
    /* calloc, aligned, realloc (a move: an allocation and a free). */
    unsigned long a0 = n_alloc, f0 = n_free;
    char *c = fa_calloc(10, 10);
    void *al = fa_aligned_alloc(4096, 5000);
    char *r = fa_realloc(c, 500);
    CHECK(c != NULL && al != NULL && r != NULL);
    CHECK(n_alloc - a0 == 3 && n_free - f0 == 1);
    fa_free(r);
    fa_free(al);
    fa_free(NULL);
    CHECK(n_alloc - a0 == 3 && n_free - f0 == 3);
    /* The site: the function that called malloc. */
    sink = hook_site(48);
    Dl_info info;
    CHECK(last_caller != NULL && dladdr(last_caller, &info) != 0);
    CHECKF(info.dli_sname != NULL && strcmp(info.dli_sname, "hook_site") == 0, "caller %p is %s", last_caller,
           info.dli_sname ? info.dli_sname : "?");
    fa_free(sink);
    /* Removed: nothing more is seen. */
    CHECK(fa_set_hooks(NULL) == 0);
    a0 = n_alloc;
    f0 = n_free;
    for (int i = 0; i < 1000; i++)
        fa_free(fa_malloc(32));
    CHECK(n_alloc == a0 && n_free == f0);
    return check_done("test_hooks count");
}

static int case_sample(void)
{
    fa_hooks h = {on_alloc, on_free, 64 << 10};
    CHECK(fa_set_hooks(&h) == 0);
    enum { N = 20000, SZ = 1024 };
    static void *p[N];
    for (int i = 0; i < N; i++)
        CHECK((p[i] = fa_malloc(SZ)) != NULL);
    /* 20 MB at one sample per 64 KiB: 305 expected. */
    unsigned long sampled = n_alloc;
    CHECKF(sampled >= 200 && sampled <= 420, "%lu samples", sampled);
    CHECK(n_free == 0);
    for (int i = 0; i < N; i++)
        fa_free(p[i]);
    CHECKF(n_free == sampled, "%lu frees seen of %lu sampled blocks", n_free, sampled);
    CHECK(fa_set_hooks(NULL) == 0);
    return check_done("test_hooks sample");
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"count", case_count},
        {"sample", case_sample},
    };
    return check_run_case("test_hooks", cases, sizeof cases / sizeof cases[0], argc, argv);
}
