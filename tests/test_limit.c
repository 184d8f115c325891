/* Run under FASTALLOC_LIMIT=256M: allocating in a loop ends in NULL with
 * ENOMEM before the limit is passed, and the process can still free,
 * allocate and exit cleanly. */
#include <errno.h>
#include <stdio.h>

#include "check.h"
#include "fastalloc.h"
#include "util.h"

int main(void)
{
    const char *env = getenv("FASTALLOC_LIMIT");
    CHECKF(env != NULL && strcmp(env, "256M") == 0, "run me with FASTALLOC_LIMIT=256M");
    enum { MAX = 1 << 20 };
    static void *v[MAX];
    size_t n = 0, bytes = 0;
    /* Mixed sizes: small blocks through the caches, and large ones.  errno
     * is cleared before each call, so the ENOMEM read after the loop is the
     * failing call's. */
    for (;;) {
        size_t s = (n % 64 == 63) ? (1u << 20) + (n % 7) * 4096 : 64 + (n % 13) * 200;
        errno = 0;
        void *p = fa_malloc(s);
        if (p == NULL)
            break;
        memset(p, 0x5a, s < 4096 ? s : 4096);
        CHECK(n < MAX);
        v[n++] = p;
        bytes += s;
    }
    CHECK(errno == ENOMEM);
    printf("allocated %zu MiB in %zu blocks before ENOMEM\n", bytes >> 20, n);
    CHECK(bytes <= (256u << 20));
    /* What counts against the limit is what is in use: each block rounded
     * up to its class (at most 1/8 more) or to whole pages, and the few
     * spans the caches are cutting.  So at least 7/8 of the limit was
     * handed out (253 MiB here); counting large blocks twice stops at
     * 131 MiB. */
    CHECKF(bytes >= (256u << 20) / 8 * 7, "%zu MiB before ENOMEM", bytes >> 20);
    fa_stats_t st;
    fa_stats(&st);
    CHECK(st.limit == (256u << 20));
    CHECK(st.in_spans + st.large <= st.limit);
    /* Still sane: everything frees, and memory can be had again. */
    for (size_t i = 0; i < n; i++)
        fa_free(v[i]);
    void *again = fa_malloc(64u << 20);
    CHECK(again != NULL);
    memset(again, 1, 64u << 20);
    fa_free(again);
    /* A limit set from code works the same way. */
    fa_set_limit(32u << 20);
    errno = 0;
    CHECK(fa_malloc(64u << 20) == NULL && errno == ENOMEM);
    fa_set_limit(0);
    again = fa_malloc(64u << 20);
    CHECK(again != NULL);
    fa_free(again);
    return check_done("test_limit");
}
