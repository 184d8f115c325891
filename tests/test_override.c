/* The exported standard names are fastalloc's (FA_OVERRIDE=ON builds only;
 * linked against the shared library, which then provides malloc for the
 * whole process, libc's own calls to it included). */
#define _GNU_SOURCE
#include "check.h"
#include "util.h"

#include <dlfcn.h>
#include <errno.h>
#include <fastalloc.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* C23 names that older C libraries do not declare. */
void free_sized(void *ptr, size_t size);
void free_aligned_sized(void *ptr, size_t alignment, size_t size);

/* fa_owns on a block the compiler knows is uninitialised (it takes a
 * const void *, which gcc reads as "will read the bytes"). */
static int owned(const void *p)
{
    return fa_owns(opaque_ptr((void *)(uintptr_t)p));
}

static void *thread_alloc(void *arg)
{
    (void)arg;
    char *s = opaque_ptr(malloc(1000));
    if (s != NULL)
        memset(s, 'x', 1000);
    return s;
}

/* A symbol that must be found: the names below are not all declared by
 * every C library's headers (cfree went in glibc 2.26). */
static void *sym(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    CHECKF(f != NULL, "dlsym(%s) found nothing", name);
    return f;
}

/* glibc's internal names, which glibc itself and some programs call: each
 * must be fastalloc's function (a name left to glibc hands out glibc blocks,
 * which fa_owns does not know, or frees fastalloc blocks with glibc's free,
 * which aborts), and behave as its public twin. */
static void test_libc_names(void)
{
    void *(*l_malloc)(size_t) = (void *(*)(size_t))sym("__libc_malloc");
    void (*l_free)(void *) = (void (*)(void *))sym("__libc_free");
    void *(*l_calloc)(size_t, size_t) = (void *(*)(size_t, size_t))sym("__libc_calloc");
    void *(*l_realloc)(void *, size_t) = (void *(*)(void *, size_t))sym("__libc_realloc");
    void *(*l_memalign)(size_t, size_t) = (void *(*)(size_t, size_t))sym("__libc_memalign");
    void *(*l_valloc)(size_t) = (void *(*)(size_t))sym("__libc_valloc");
    void *(*l_pvalloc)(size_t) = (void *(*)(size_t))sym("__libc_pvalloc");
    int (*p_memalign)(void **, size_t, size_t) = (int (*)(void **, size_t, size_t))sym("__posix_memalign");
    void (*c_free)(void *) = (void (*)(void *))sym("cfree");
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    unsigned char *p = opaque_ptr(l_malloc(300));
    CHECK(p != NULL && owned(p) && malloc_usable_size(p) == 320);
    pat_fill(p, 300, 1);
    /* grown into another class, then into a large block: the contents move */
    p = opaque_ptr(l_realloc(p, 5000));
    CHECK(p != NULL && owned(p) && pat_ok(p, 300, 1));
    pat_fill(p, 5000, 1);
    p = opaque_ptr(l_realloc(p, MiB));
    CHECK(p != NULL && owned(p) && malloc_usable_size(p) == MiB && pat_ok(p, 5000, 1));
    l_free(p);
    CHECK(!owned(p)); /* a large block, freed: its span is free */

    unsigned char *z = opaque_ptr(l_malloc(4000));
    CHECK(z != NULL && owned(z));
    memset(z, 0xff, 4000);
    free(z);
    z = opaque_ptr(l_calloc(40, 100));
    CHECK(z != NULL && owned(z) && all_bytes(z, 4000, 0));
    l_free(z);
    z = opaque_ptr(l_calloc(3, MiB));
    CHECK(z != NULL && owned(z) && all_bytes(z, 3 * MiB, 0));
    l_free(z);

    void *a = opaque_ptr(l_memalign(4096, 100));
    CHECK(a != NULL && owned(a) && ((uintptr_t)a & 4095) == 0);
    pat_fill(a, 100, 2);
    free(a);
    a = opaque_ptr(l_memalign(64 * KiB, 70000));
    CHECK(a != NULL && owned(a) && ((uintptr_t)a & (64 * KiB - 1)) == 0);
    free(a);
    a = opaque_ptr(l_valloc(10));
    CHECK(a != NULL && owned(a) && ((uintptr_t)a & (page - 1)) == 0);
    free(a);
    a = opaque_ptr(l_pvalloc(page + 1));
    CHECK(a != NULL && owned(a) && ((uintptr_t)a & (page - 1)) == 0);
    CHECK(malloc_usable_size(a) >= 2 * page);
    free(a);
    a = NULL;
    CHECK(p_memalign(&a, 256, 1000) == 0);
    CHECK(a != NULL && owned(a) && ((uintptr_t)a & 255) == 0);
    free(a);
    a = &a;
    CHECK(p_memalign(&a, 24, 100) == EINVAL && a == &a);

    /* cfree is free: a large block's span is free afterwards, and its bytes
     * leave the statistics. */
    fa_stats_t st0, st1;
    fa_stats(&st0);
    p = opaque_ptr(malloc(2 * MiB));
    CHECK(p != NULL && owned(p));
    fa_stats(&st1);
    CHECK(st1.large == st0.large + 2 * MiB);
    c_free(p);
    fa_stats(&st1);
    CHECK(st1.large == st0.large && !owned(p));
    p = opaque_ptr(malloc(50));
    CHECK(owned(p));
    c_free(p);
    /* a small block freed by cfree is handed out again within its span's
     * blocks (512 of 64 B; a block not freed never would be) */
    static void *got[512];
    size_t k = 0;
    bool back = false;
    while (k < 512 && !back) {
        got[k] = opaque_ptr(malloc(50));
        CHECK(got[k] != NULL);
        back = got[k++] == p;
    }
    CHECK(back);
    while (k > 0)
        free(got[--k]);
}

/* malloc_trim(0) gives back free pages: 1 when it released any, 0 when
 * there was nothing to release. */
static void test_malloc_trim(void)
{
    /* No purge but the trim's: none at the frees, none with time; and no
     * thread cache, so that the frees reach the page heap. */
    long long delay, tcb;
    CHECK(fa_option_get("purge_delay_ms", &delay) == 0);
    CHECK(fa_option_set("purge_delay_ms", -1) == 0);
    CHECK(fa_option_get("thread_cache_bytes", &tcb) == 0);
    CHECK(fa_option_set("thread_cache_bytes", 0) == 0);
    fa_trim();
    enum { N = 8 };
    void *blk[N];
    for (int i = 0; i < N; i++) {
        blk[i] = opaque_ptr(malloc(MiB)); /* (or the compiler drops the pair) */
        CHECK(blk[i] != NULL);
        memset(blk[i], i + 1, MiB);
    }
    for (int i = 0; i < N; i++)
        free(blk[i]);
    fa_stats_t st0, st1;
    fa_stats(&st0);
    CHECKF(st0.dirty >= N * MiB, "only %zu bytes dirty after freeing %d MiB", st0.dirty, (int)N);
    CHECK(malloc_trim(0) == 1);
    fa_stats(&st1);
    CHECKF(st1.dirty == 0 && st1.purged_total >= st0.purged_total + N * MiB,
           "malloc_trim left %zu bytes dirty, purged %zu", st1.dirty, st1.purged_total - st0.purged_total);
    /* Nothing freed since: nothing to give back. */
    CHECK(malloc_trim(0) == 0);
    CHECK(fa_option_set("purge_delay_ms", delay) == 0);
    CHECK(fa_option_set("thread_cache_bytes", tcb) == 0);
}

int main(void)
{
    /* malloc & co hand out fastalloc blocks. */
    void *p = opaque_ptr(malloc(40));
    CHECK(p != NULL && owned(p) == 1);
    CHECK(malloc_usable_size(p) == fa_malloc_usable_size(p));
    CHECK(malloc_usable_size(p) == 48);
    free(p);

    p = opaque_ptr(malloc(100));
    CHECK(owned(p));
    CHECK(malloc_usable_size(p) == fa_malloc_usable_size(p) && malloc_usable_size(p) == 112);
    p = opaque_ptr(realloc(p, 5000));
    CHECK(p != NULL && owned(p));
    CHECK(malloc_usable_size(p) == 5120);
    fa_free(p); /* the two APIs mix freely */

    unsigned char *z = opaque_ptr(calloc(100, 10));
    CHECK(z != NULL && owned(z) && all_bytes(z, 1000, 0));
    free(z);

    void *a = NULL;
    CHECK(posix_memalign(&a, 256, 100) == 0);
    CHECK(owned(a) && ((uintptr_t)a & 255) == 0);
    free(a);
    a = &a;
    CHECK(posix_memalign(&a, 24, 100) == EINVAL && a == &a);
    a = opaque_ptr(aligned_alloc(4096, 4096));
    CHECK(a != NULL && owned(a) && ((uintptr_t)a & 4095) == 0);
    free_aligned_sized(a, 4096, 4096);
    a = opaque_ptr(memalign(64, 10));
    CHECK(a != NULL && owned(a) && ((uintptr_t)a & 63) == 0);
    free(a);
    a = opaque_ptr(valloc(10));
    CHECK(a != NULL && owned(a) && ((uintptr_t)a & 4095) == 0);
    free(a);
    a = opaque_ptr(pvalloc(10));
    CHECK(a != NULL && owned(a) && malloc_usable_size(a) >= 4096);
    free(a);
    a = opaque_ptr(reallocarray(NULL, 10, 10));
    CHECK(a != NULL && owned(a));
    errno = 0;
    CHECK(opaque_ptr(reallocarray(a, opaque(SIZE_MAX / 2 + 1), 2)) == NULL && errno == ENOMEM);
    CHECK(owned(a));
    free_sized(a, 100);
    errno = 0;
    CHECK(opaque_ptr(malloc(opaque(SIZE_MAX))) == NULL && errno == ENOMEM);

    /* Large blocks too. */
    p = opaque_ptr(malloc(3 * MiB));
    CHECK(p != NULL && owned(p) && malloc_usable_size(p) == 3 * MiB);
    free(p);

    /* The C library's own allocations come from fastalloc. */
    char *s = opaque_ptr(strdup("hello, world"));
    CHECK(s != NULL && owned(s) && strcmp(s, "hello, world") == 0);
    free(s);
    s = opaque_ptr(strndup("abcdefgh", 3));
    CHECK(s != NULL && owned(s) && strcmp(s, "abc") == 0);
    free(s);
    s = NULL;
    CHECK(asprintf(&s, "%d-%s", 42, "x") == 4);
    CHECK(s != NULL && owned(s) && strcmp(s, "42-x") == 0);
    free(s);
    s = opaque_ptr(realpath(".", NULL));
    CHECK(s != NULL && owned(s));
    free(s);
    {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = fmemopen((void *)"line one\nline two\n", 18, "r");
        CHECK(f != NULL);
        CHECK(getline(&buf, &len, f) == 9);
        CHECK(buf != NULL && owned(buf) && strcmp(buf, "line one\n") == 0);
        fclose(f);
        free(buf);
    }
    {
        char *ms = NULL;
        size_t msz = 0;
        FILE *f = open_memstream(&ms, &msz);
        CHECK(f != NULL);
        for (int i = 0; i < 1000; i++)
            fprintf(f, "%d,", i);
        fclose(f);
        CHECK(ms != NULL && owned(ms) && msz > 3000);
        free(ms);
    }

    /* The glibc-internal names resolve to fastalloc as well. */
    void *(*libc_malloc)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "__libc_malloc");
    void (*libc_free)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "__libc_free");
    CHECK(libc_malloc != NULL && libc_free != NULL);
    p = opaque_ptr(libc_malloc(77));
    CHECK(p != NULL && owned(p));
    libc_free(p);
    test_libc_names();
    test_malloc_trim();
    /* And dlsym("malloc") is ours. */
    void *(*dl_malloc)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "malloc");
    CHECK(dl_malloc != NULL);
    p = opaque_ptr(dl_malloc(10));
    CHECK(owned(p));
    free(p);

    /* Blocks from another thread, freed here. */
    pthread_t t;
    void *res = NULL;
    CHECK(pthread_create(&t, NULL, thread_alloc, NULL) == 0);
    CHECK(pthread_join(t, &res) == 0);
    CHECK(res != NULL && owned(res) && all_bytes(res, 1000, 'x'));
    free(res);
    return check_done("test_override");
}
