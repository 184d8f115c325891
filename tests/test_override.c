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
