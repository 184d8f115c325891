/* Edge cases of every public function, through the fa_ names. */
#include "check.h"
#include "child.h"
#include "util.h"

#include <errno.h>
#include <fastalloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE8K ((size_t)8192)
#define MAX_SMALL TEST_MAX_SMALL

static int global_var;
static char global_buf[64];

static size_t os_page;

static bool aligned_to(const void *p, size_t a)
{
    return ((uintptr_t)p & (a - 1)) == 0;
}

static size_t round_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

/* The size class a request must land in, from the rule documented in
 * sizeclass.h (8; 16..128 in steps of 16; eight classes per doubling up to
 * 1 KiB, four up to 256 KiB), and whole 8 KiB pages above that. */
static size_t class_rule(size_t n)
{
    if (n <= 128)
        return n == 0 ? 16 : round_up(n, 16);
    if (n <= MAX_SMALL) {
        size_t base = 128;
        while (base * 2 < n)
            base *= 2;
        return round_up(n, base / (base < 1024 ? 8 : 4));
    }
    return round_up(n, PAGE8K);
}

/* The usable size of a block asked for n bytes: its class's (above), or in
 * the hardened library with tails exactly n (util.h, test_secure_usable);
 * a large block's in the hardened library, exactly n (its record); none
 * for 0 in the hardened library. */
static size_t expected_usable(size_t n)
{
    if (FA_TEST_SECURE_LIB && n == 0) /* a block of no bytes (test_malloc_zero) */
        return 0;
    if (test_tails_on() || (FA_TEST_SECURE_LIB && n > MAX_SMALL - TEST_TAIL))
        return test_secure_usable(n);
    return class_rule(n);
}

/* The most bytes a request may ask for and share the block of a request of
 * n bytes (n small): its class, less the hardened library's tail. */
static size_t class_top(size_t n)
{
    return class_rule(n + TEST_TAIL) - TEST_TAIL;
}

/* ------------------------------------------------------------ malloc(0) */
static void test_malloc_zero(void)
{
    /* (laundered: the compiler takes alloc_size(0) to mean "no bytes", and
     * we write the usable size) */
    void *a = opaque_ptr(fa_malloc(0));
    void *b = opaque_ptr(fa_malloc(0));
    CHECK(a != NULL && b != NULL);
    CHECK(a != b);
    CHECK((uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0);
    CHECK(fa_owns(a) && fa_owns(b));
    /* The hardened library's blocks of no bytes have no bytes to use: any
     * access faults (test_security overflow); the default library's are
     * blocks of the smallest class. */
    if (FA_TEST_SECURE_LIB) {
        CHECK(fa_malloc_usable_size(a) == 0 && fa_malloc_usable_size(b) == 0);
        void *m[64];
        for (int i = 0; i < 64; i++) { /* no two alike, none a block of bytes */
            m[i] = opaque_ptr(fa_malloc(0));
            CHECK(m[i] != NULL && m[i] != a && m[i] != b && fa_malloc_usable_size(m[i]) == 0);
            for (int j = 0; j < i; j++)
                CHECK(m[i] != m[j]);
        }
        /* realloc: a block of bytes from it, and one of no bytes again */
        char *r = opaque_ptr(fa_realloc(m[0], 100));
        CHECK(r != NULL && fa_malloc_usable_size(r) >= 100);
        memset(r, 1, 100);
        void *z = opaque_ptr(fa_realloc(NULL, 0));
        CHECK(z != NULL && fa_malloc_usable_size(z) == 0);
        fa_free(z);
        fa_free(r);
        for (int i = 1; i < 64; i++)
            fa_free(m[i]);
    } else {
        CHECK(fa_malloc_usable_size(a) >= 1);
        memset(a, 0x5a, fa_malloc_usable_size(a));
        memset(b, 0xa5, fa_malloc_usable_size(b));
        CHECK(all_bytes(a, fa_malloc_usable_size(a), 0x5a));
    }
    fa_free(a);
    fa_free(b);

    void *c = fa_calloc(0, 0), *d = fa_calloc(0, 17), *e = fa_calloc(17, 0);
    CHECK(c != NULL && d != NULL && e != NULL);
    CHECK(c != d && d != e && c != e);
    fa_free(c);
    fa_free(d);
    fa_free(e);
}

/* What the header advises before writing past the size asked for: under
 * _FORTIFY_SOURCE=3 the compiler bounds a block by its alloc_size, and a
 * realloc to the usable size (which never moves the block) widens that. */
static void *whole(void *p)
{
    CHECK(p != NULL);
    void *q = fa_realloc(p, fa_malloc_usable_size(p));
    /* Compared through a laundered copy: a plain q == p lets the compiler
     * use p, and p's narrower bound, for q. */
    CHECKF(opaque_ptr(q) == p, "realloc to the usable size moved %p to %p", p, q);
    return q;
}

/* ------------------------------------------------------------ alignment, usable size, neighbours */
static void check_block(void *p, size_t n)
{
    CHECKF(p != NULL, "size %zu", n);
    if (n >= 16)
        CHECKF(aligned_to(p, 16), "size %zu p %p", n, p);
    else
        CHECKF(aligned_to(p, 8), "size %zu p %p", n, p);
    size_t u = fa_malloc_usable_size(p);
    CHECKF(u >= n, "size %zu usable %zu", n, u);
    CHECKF(u == expected_usable(n), "size %zu usable %zu expected %zu", n, u, expected_usable(n));
    CHECK(fa_owns(p) == 1);
}

static void test_sizes_and_alignment(void)
{
    /* Every size 1..4096, all alive at once, each filled up to its usable
     * size: a block that overlapped a neighbour, or a usable size that
     * promised too much, would break another block's pattern. */
    enum { N = 4096 };
    static void *blk[N + 1];
    for (size_t n = 1; n <= N; n++) {
        blk[n] = fa_malloc(n);
        check_block(blk[n], n);
        pat_fill(blk[n], fa_malloc_usable_size(blk[n]), n);
    }
    for (size_t n = 1; n <= N; n++) {
        size_t bad = pat_find_bad(blk[n], fa_malloc_usable_size(blk[n]), n);
        CHECKF(bad == (size_t)-1, "block of %zu corrupted at %zu", n, bad);
    }
    for (size_t n = 1; n <= N; n += 2)
        fa_free(blk[n]);
    for (size_t n = 2; n <= N; n += 2)
        CHECK(pat_ok(blk[n], fa_malloc_usable_size(blk[n]), n));
    for (size_t n = 2; n <= N; n += 2)
        fa_free(blk[n]);

    /* A sample up to 2 MiB, with the edges of the small/large boundary. */
    static void *big[512];
    static size_t bigsz[512];
    size_t nb = 0;
    for (size_t n = 4097; n <= 2 * MiB && nb < 480; n = n + n / 9 + 13)
        bigsz[nb++] = n;
    const size_t edges[] = {MAX_SMALL - 1, MAX_SMALL, MAX_SMALL + 1, MAX_SMALL + PAGE8K,
                            MAX_SMALL + PAGE8K + 1, 1 * MiB, 1 * MiB + 1, 2 * MiB - 1, 2 * MiB,
                            8192, 8193, 16384, 65536, 65537, 131072};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        bigsz[nb++] = edges[i];
    for (size_t i = 0; i < nb; i++) {
        big[i] = fa_malloc(bigsz[i]);
        check_block(big[i], bigsz[i]);
        pat_fill(big[i], fa_malloc_usable_size(big[i]), i * 7919 + 1);
    }
    for (size_t i = 0; i < nb; i++)
        CHECKF(pat_ok(big[i], fa_malloc_usable_size(big[i]), i * 7919 + 1), "size %zu", bigsz[i]);
    for (size_t i = 0; i < nb; i++)
        fa_free(big[i]);
}

/* ------------------------------------------------------------ impossible sizes */
static void test_impossible(void)
{
    const size_t huge[] = {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 8192, (size_t)PTRDIFF_MAX,
                           (size_t)PTRDIFF_MAX + 1, (size_t)PTRDIFF_MAX - 4096,
                           (size_t)1 << 62, (size_t)1 << 48};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        size_t n = opaque(huge[i]);
        errno = 0;
        CHECKF(fa_malloc(n) == NULL, "malloc(%zu)", n);
        CHECKF(errno == ENOMEM, "malloc(%zu) errno %d", n, errno);
        errno = 0;
        CHECKF(fa_calloc(1, n) == NULL, "calloc(1, %zu)", n);
        CHECK(errno == ENOMEM);
        errno = 0;
        CHECK(fa_aligned_alloc(64, n) == NULL);
        CHECK(errno == ENOMEM);
        errno = 0;
        CHECK(fa_aligned_alloc(1 << 16, n) == NULL);
        CHECK(errno == ENOMEM);
        errno = 0;
        CHECK(fa_memalign(16, n) == NULL);
        CHECK(errno == ENOMEM);
        errno = 0;
        CHECK(fa_valloc(n) == NULL);
        CHECK(errno == ENOMEM);
        errno = 0;
        CHECK(fa_pvalloc(n) == NULL);
        CHECK(errno == ENOMEM);
        /* posix_memalign reports through its result and leaves errno and
         * *out alone. */
        void *out = &global_var;
        errno = EBUSY;
        CHECK(fa_posix_memalign(&out, 64, n) == ENOMEM);
        CHECK(out == &global_var);
        CHECK(errno == EBUSY);
        CHECK(fa_posix_memalign(&out, 1 << 20, n) == ENOMEM);
        CHECK(out == &global_var);
    }

    /* Alignments no address space can satisfy. */
    const size_t huge_align[] = {(size_t)1 << 50, (size_t)1 << 56, (size_t)1 << 62, (size_t)1 << 63};
    for (size_t i = 0; i < sizeof huge_align / sizeof huge_align[0]; i++) {
        void *out = &global_var;
        CHECKF(fa_posix_memalign(&out, opaque(huge_align[i]), 1) == ENOMEM, "align %#zx", huge_align[i]);
        CHECK(out == &global_var);
        errno = 0;
        CHECK(fa_aligned_alloc(opaque(huge_align[i]), 1) == NULL);
        CHECK(errno == ENOMEM);
    }
    /* memalign as glibc: EINVAL above 2^63 (half the address space),
     * ENOMEM for 2^63 itself, which no heap can meet. */
    errno = 0;
    CHECK(fa_memalign(opaque((size_t)1 << 63), 1) == NULL);
    CHECK(errno == ENOMEM);
    errno = 0;
    CHECK(fa_memalign(opaque(((size_t)1 << 63) + 1), 1) == NULL);
    CHECK(errno == EINVAL);

    /* calloc's n * size overflows. */
    const size_t pairs[][2] = {{SIZE_MAX / 2 + 1, 2}, {2, SIZE_MAX / 2 + 1}, {SIZE_MAX, SIZE_MAX},
                               {(size_t)1 << 32, (size_t)1 << 32}, {SIZE_MAX, 2},
                               {(size_t)1 << 33, (size_t)1 << 31}, {SIZE_MAX / 3 + 1, 3}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        errno = 0;
        CHECKF(fa_calloc(opaque(pairs[i][0]), opaque(pairs[i][1])) == NULL, "pair %zu", i);
        CHECK(errno == ENOMEM);
    }
    /* Products that fit but are impossible. */
    errno = 0;
    CHECK(fa_calloc(opaque((size_t)PTRDIFF_MAX / 2 + 1), 2) == NULL);
    CHECK(errno == ENOMEM);

    /* A failed realloc leaves the block as it was. */
    const size_t from[] = {24, 5000, 300000, 3 * MiB};
    for (size_t i = 0; i < sizeof from / sizeof from[0]; i++) {
        unsigned char *p = fa_malloc(from[i]);
        CHECK(p != NULL);
        pat_fill(p, from[i], 77 + i);
        errno = 0;
        CHECK(fa_realloc(p, opaque(SIZE_MAX)) == NULL);
        CHECK(errno == ENOMEM);
        errno = 0;
        CHECK(fa_realloc(p, opaque((size_t)PTRDIFF_MAX)) == NULL);
        CHECK(errno == ENOMEM);
        errno = 0;
        CHECK(fa_realloc(p, opaque((size_t)1 << 48)) == NULL);
        CHECK(errno == ENOMEM);
        errno = 0;
        CHECK(fa_reallocarray(p, opaque(SIZE_MAX / 2 + 1), 2) == NULL);
        CHECK(errno == ENOMEM);
        errno = 0;
        CHECK(fa_reallocarray(p, opaque((size_t)1 << 32), opaque((size_t)1 << 32)) == NULL);
        CHECK(errno == ENOMEM);
        CHECK(fa_owns(p));
        CHECK(pat_ok(p, from[i], 77 + i));
        /* Still a live block: it can grow and be freed. */
        p = fa_reallocarray(p, 2, from[i]);
        CHECK(p != NULL);
        CHECK(pat_ok(p, from[i], 77 + i));
        fa_free(p);
    }
    errno = 0;
    CHECK(fa_reallocarray(NULL, opaque(SIZE_MAX), 3) == NULL);
    CHECK(errno == ENOMEM);
}

/* ------------------------------------------------------------ calloc */
static void test_calloc(void)
{
    const size_t sizes[] = {1, 7, 8, 16, 24, 100, 1000, 1024, 1025, 4096, 10000, 65536, 200000,
                            MAX_SMALL, MAX_SMALL + 1, 1 * MiB, 10 * MiB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        /* Make the block that calloc will most likely get back dirty. */
        unsigned char *p = whole(fa_malloc(n));
        memset(p, 0xff, fa_malloc_usable_size(p));
        fa_free(p);
        unsigned char *q = fa_calloc(1, n);
        CHECK(q != NULL);
        CHECKF(all_bytes(q, n, 0), "calloc(1, %zu) not zeroed", n);
        memset(q, 0xee, n);
        fa_free(q);
        /* The same total as n * size. */
        q = fa_calloc(n, 1);
        CHECK(q != NULL);
        CHECKF(all_bytes(q, n, 0), "calloc(%zu, 1) not zeroed", n);
        q = whole(q);
        memset(q, 0xdd, fa_malloc_usable_size(q));
        fa_free(q);
    }
    /* Many small callocs over a pool of dirtied blocks of every class. */
    static void *blk[2048];
    for (size_t i = 0; i < 2048; i++) {
        blk[i] = whole(fa_malloc(1 + i));
        memset(blk[i], 0xff, fa_malloc_usable_size(blk[i]));
    }
    for (size_t i = 0; i < 2048; i++)
        fa_free(blk[i]);
    for (size_t i = 0; i < 2048; i++) {
        blk[i] = fa_calloc(1 + i, 1);
        CHECKF(all_bytes(blk[i], 1 + i, 0), "calloc(%zu)", 1 + i);
        memset(blk[i], 0x11, 1 + i);
    }
    for (size_t i = 0; i < 2048; i++)
        fa_free(blk[i]);

    /* A large calloc carved out of a bigger dirty block that was freed, and
     * one that spans a dirty freed block and fresh pages next to it. */
    unsigned char *d = fa_malloc(12 * MiB);
    CHECK(d != NULL);
    memset(d, 0xff, 12 * MiB);
    fa_free(d);
    unsigned char *c1 = fa_calloc(3 * MiB, 1);
    unsigned char *c2 = fa_calloc(MiB, 5);
    CHECK(c1 != NULL && c2 != NULL);
    CHECK(all_bytes(c1, 3 * MiB, 0));
    CHECK(all_bytes(c2, 5 * MiB, 0));
    fa_free(c1);
    fa_free(c2);
    unsigned char *c3 = fa_calloc(1, 20 * MiB);
    CHECK(c3 != NULL);
    CHECK(all_bytes(c3, 20 * MiB, 0));
    memset(c3, 0xff, 20 * MiB);
    fa_free(c3);
    /* Aligned large allocations leave dirty heads and tails behind. */
    void *al = fa_aligned_alloc(4 * MiB, 5 * MiB);
    CHECK(al != NULL && aligned_to(al, 4 * MiB));
    memset(al, 0xff, 5 * MiB);
    fa_free(al);
    for (int i = 0; i < 6; i++) {
        c3 = fa_calloc(1 + (size_t)i, 1 * MiB + 1);
        CHECK(c3 != NULL);
        CHECK(all_bytes(c3, (1 + (size_t)i) * (MiB + 1), 0));
        memset(c3, 0xff, (1 + (size_t)i) * (MiB + 1));
        fa_free(c3);
    }
}

/* ------------------------------------------------------------ posix_memalign & co */
static void test_aligned_api(void)
{
    void *out;
    const size_t bad[] = {0, 1, 2, 3, 4, 12, 24, 40, 48, 96, 4097, 3 * 4096, SIZE_MAX, SIZE_MAX / 2};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (bad[i] == sizeof(void *))
            continue;
        out = &global_var;
        errno = 0;
        CHECKF(fa_posix_memalign(&out, opaque(bad[i]), 16) == EINVAL, "align %zu", bad[i]);
        CHECK(out == &global_var);
        CHECK(errno == 0);
    }
    for (size_t a = sizeof(void *); a <= ((size_t)1 << 22); a *= 2) {
        const size_t sizes[] = {0, 1, 100, a, 3 * a + 1};
        for (size_t j = 0; j < 5; j++) {
            out = NULL;
            CHECK(fa_posix_memalign(&out, a, sizes[j]) == 0);
            CHECK(out != NULL && aligned_to(out, a));
            CHECK(fa_owns(out));
            CHECK(fa_malloc_usable_size(out) >= sizes[j]);
            memset(out, 0x42, sizes[j]);
            fa_free(out);
        }
    }

    /* aligned_alloc: any power of two, else EINVAL. */
    const size_t badaa[] = {0, 3, 5, 6, 24, 48, 100, 3000, 12288, SIZE_MAX};
    for (size_t i = 0; i < sizeof badaa / sizeof badaa[0]; i++) {
        errno = 0;
        CHECKF(fa_aligned_alloc(opaque(badaa[i]), 64) == NULL, "align %zu", badaa[i]);
        CHECK(errno == EINVAL);
    }
    for (size_t a = 1; a <= ((size_t)1 << 21); a *= 2) {
        void *p = fa_aligned_alloc(a, 3 * a);
        CHECK(p != NULL && aligned_to(p, a));
        CHECK(fa_malloc_usable_size(p) >= 3 * a);
        pat_fill(p, 3 * a, a);
        CHECK(pat_ok(p, 3 * a, a));
        fa_free(p);
    }

    /* memalign: a non-power of two rounds up to the next power of two.  Half
     * of the blocks stay alive until the end, so that the results are not
     * all the same lucky address. */
    const size_t odd[][2] = {{3, 8}, {24, 32}, {48, 64}, {100, 128}, {129, 256}, {3000, 4096},
                             {5000, 8192}, {8193, 16384}, {100000, 131072}, {(1 << 20) + 1, 2 << 20}};
    enum { NODD = sizeof odd / sizeof odd[0], PER = 8 };
    void *held[NODD * PER];
    size_t nheld = 0;
    for (size_t i = 0; i < NODD; i++) {
        for (size_t k = 0; k < PER; k++) {
            size_t n = 1 + k * 37;
            void *p = fa_memalign(odd[i][0], n);
            CHECK(p != NULL);
            CHECKF(aligned_to(p, odd[i][1]), "memalign(%zu) -> %p", odd[i][0], p);
            CHECK(fa_malloc_usable_size(p) >= n);
            pat_fill(p, n, i * PER + k);
            if (k & 1)
                fa_free(p);
            else
                held[nheld++] = p;
        }
    }
    for (size_t h = 0; h < nheld; h++) {
        size_t i = h / (PER / 2), k = (h % (PER / 2)) * 2;
        CHECK(pat_ok(held[h], 1 + k * 37, i * PER + k));
        fa_free_aligned_sized(held[h], odd[i][1], 1 + k * 37);
    }
    for (size_t a = 0; a <= 16; a++) {
        void *p = fa_memalign(a, 40);
        CHECK(p != NULL && aligned_to(p, 8));
        fa_free(p);
    }
    errno = 0;
    CHECK(fa_memalign(opaque(SIZE_MAX), 10) == NULL);
    CHECK(errno == EINVAL);

    /* valloc / pvalloc: page aligned; pvalloc rounds the size up to pages. */
    const size_t vs[] = {0, 1, 100, 4095, 4096, 4097, 5000, 8192, 100000, 1 * MiB, 1 * MiB + 1};
    void *keep[2 * sizeof vs / sizeof vs[0]];
    size_t nk = 0;
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        void *p = fa_valloc(vs[i]);
        CHECK(p != NULL && aligned_to(p, os_page));
        CHECK(fa_malloc_usable_size(p) >= vs[i]);
        pat_fill(p, vs[i], 1000 + i);
        keep[nk++] = p;
        void *q = fa_pvalloc(vs[i]);
        size_t want = vs[i] == 0 ? os_page : round_up(vs[i], os_page);
        CHECK(q != NULL && aligned_to(q, os_page));
        CHECKF(fa_malloc_usable_size(q) >= want, "pvalloc(%zu) usable %zu", vs[i], fa_malloc_usable_size(q));
        pat_fill(q, want, 2000 + i);
        keep[nk++] = q;
    }
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        size_t want = vs[i] == 0 ? os_page : round_up(vs[i], os_page);
        CHECK(pat_ok(keep[2 * i], vs[i], 1000 + i));
        CHECK(pat_ok(keep[2 * i + 1], want, 2000 + i));
        fa_free(keep[2 * i]);
        fa_free(keep[2 * i + 1]);
    }
}

/* ------------------------------------------------------------ realloc */
static void realloc_case(size_t from, size_t to, uint64_t seed)
{
    unsigned char *p = fa_malloc(from);
    CHECK(p != NULL);
    pat_fill(p, from, seed);
    unsigned char *q = fa_realloc(p, to);
    CHECKF(q != NULL, "realloc %zu -> %zu", from, to);
    size_t keep = from < to ? from : to;
    size_t bad = pat_find_bad(q, keep, seed);
    CHECKF(bad == (size_t)-1, "realloc %zu -> %zu lost byte %zu", from, to, bad);
    CHECK(fa_owns(q));
    CHECKF(fa_malloc_usable_size(q) >= to, "realloc %zu -> %zu usable %zu", from, to,
           fa_malloc_usable_size(q));
    pat_fill(q, fa_malloc_usable_size(q), seed + 1);
    CHECK(pat_ok(q, fa_malloc_usable_size(q), seed + 1));
    fa_free(q);
}

static void test_realloc(void)
{
    /* realloc(NULL, n) is malloc(n). */
    const size_t ns[] = {0, 1, 17, 1000, 70000, 300000, 5 * MiB};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        void *p = fa_realloc(NULL, ns[i]);
        CHECK(p != NULL && fa_owns(p));
        CHECK(fa_malloc_usable_size(p) == expected_usable(ns[i]));
        memset(p, 1, ns[i]);
        fa_free(p);
    }

    /* realloc(p, 0) frees p and returns NULL (glibc).  The thread hands its
     * span's blocks out before it moves to another span, freed ones
     * included: p comes back within one span's worth of allocations (at
     * most 4,096 blocks; a block not freed never would). */
    for (size_t n = 1; n <= 2048; n = n * 2 + 3) {
        void *p = fa_malloc(n);
        CHECK(p != NULL);
        uintptr_t was = (uintptr_t)p;
        CHECK(fa_realloc(p, 0) == NULL);
        static void *got[4096];
        size_t k = 0;
        bool back = false;
        while (k < 4096 && !back) {
            got[k] = fa_malloc(n);
            CHECK(got[k] != NULL);
            back = (uintptr_t)got[k++] == was;
        }
        CHECKF(back, "realloc(p, 0) did not free a block of %zu", n);
        while (k > 0)
            fa_free(got[--k]);
    }
    {
        void *p = fa_malloc(3 * MiB);
        CHECK(fa_realloc(p, 0) == NULL);
    }

    /* Contents survive every kind of move. */
    const size_t cases[][2] = {
        {24, 100},       {100, 24},        {1000, 3000},     {3000, 1000},     {1, 2},
        {8, 9},          {16, 128},        {129, 4096},      {200, 300000},    {4000, 2 * MiB},
        {65536, MAX_SMALL + 1},            {MAX_SMALL, MAX_SMALL + 1},         {300000, 3 * MiB},
        {3 * MiB, 1 * MiB},                {1 * MiB, 900000}, {5 * MiB, 20 * MiB},
        {1 * MiB, 100},  {300000, 200000}, {2 * MiB, MAX_SMALL}, {MAX_SMALL + 1, MAX_SMALL},
        {20 * MiB, 5 * MiB}, {3 * MiB, 3 * MiB + 1}, {10, 10}, {1 * MiB, 1 * MiB}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        realloc_case(cases[i][0], cases[i][1], 500 + i);
    /* A chain through every size region. */
    {
        size_t n = 1;
        unsigned char *p = fa_malloc(n);
        pat_fill(p, n, 9);
        while (n < 6 * MiB) {
            size_t m = n * 3 / 2 + 1;
            p = fa_realloc(p, m);
            CHECK(p != NULL);
            CHECKF(pat_ok(p, n, 9), "grow chain at %zu", n);
            pat_fill_range(p, n, m, 9);
            n = m;
        }
        while (n > 1) {
            size_t m = n / 3;
            p = fa_realloc(p, m);
            CHECK(p != NULL);
            CHECKF(pat_ok(p, m, 9), "shrink chain at %zu", m);
            n = m;
        }
        fa_free(p);
    }

    /* Within a size class the block stays where it is. */
    for (size_t n = 1; n <= 8192; n++) {
        size_t cs = class_top(n);
        unsigned char *p = fa_malloc(n);
        pat_fill(p, n, n);
        CHECKF(fa_realloc(p, cs) == p, "realloc %zu -> %zu (same class) moved", n, cs);
        size_t lo = n; /* smallest size of the same class */
        while (lo > 1 && class_top(lo - 1) == cs)
            lo--;
        CHECKF(fa_realloc(p, lo) == p, "realloc %zu -> %zu (same class) moved", cs, lo);
        CHECK(pat_ok(p, lo, n));
        fa_free(p);
    }
    /* And a large block within its page count. */
    {
        unsigned char *p = fa_malloc(MiB + 1);
        CHECK(fa_malloc_usable_size(p) == expected_usable(MiB + 1));
        CHECK(fa_realloc(p, MiB + PAGE8K) == p);
        CHECK(fa_realloc(p, MiB + 100) == p);
        fa_free(p);
    }
}

/* Send the large blocks just freed to the page heap, where a neighbour can
 * grow into them and the next large blocks are cut: the hardened library
 * keeps them, guarded, for the next large allocations of their sizes until
 * fa_trim (util.h); the default one sent them there at the free. */
static void freed_to_heap(void)
{
#if FA_TEST_SECURE_LIB
    fa_trim();
#endif
}

/* n 1 MiB blocks that sit next to each other, in blk; false when 16 tries
 * found none.  Spans are cut from the front of the best-fitting free span,
 * so this takes a try or two at most; the failed tries go to junk (*nj of
 * its cap used) and stay allocated until the caller frees them.  In the
 * hardened library neighbours lie a guard page apart (util.h, TEST_GUARD). */
static bool adjacent_mib_blocks(unsigned char **blk, int n, void **junk, size_t *nj, size_t cap)
{
    for (int tries = 0; tries < 16; tries++) {
        bool adjacent = true;
        freed_to_heap();
        for (int i = 0; i < n; i++) {
            blk[i] = fa_malloc(MiB);
            CHECK(blk[i] != NULL);
            adjacent = adjacent && (i == 0 || blk[i] == blk[i - 1] + MiB + TEST_GUARD);
        }
        if (adjacent)
            return true;
        CHECK(*nj + (size_t)n <= cap);
        for (int i = 0; i < n; i++)
            junk[(*nj)++] = blk[i];
    }
    return false;
}

/* Large blocks are spans of the page heap: a block whose next pages are free
 * grows into them, and one that shrinks gives its tail back. */
static void test_realloc_in_place(void)
{
    void *junk[112];
    size_t nj = 0;
    unsigned char *blk[3];
    CHECKF(adjacent_mib_blocks(blk, 2, junk, &nj, sizeof junk / sizeof junk[0]),
           "never got two adjacent 1 MiB blocks");
    unsigned char *a = blk[0], *b = blk[1];
    pat_fill(a, MiB, 31);
    pat_fill(b, MiB, 32);

    /* B is live: A cannot grow over it, so it moves, and B is untouched. */
    unsigned char *a2 = fa_realloc(a, MiB + MiB / 2);
    CHECK(a2 != NULL && a2 != a);
    CHECK(pat_ok(a2, MiB, 31));
    CHECK(pat_ok(b, MiB, 32));
    fa_free(a2);
    fa_free(b);

    /* Now the real case: A and B adjacent, B freed, A grows in place.  B
     * must reach the page heap: this thread keeps no large block meanwhile. */
    long long tcb = 0;
    CHECK(fa_option_get("thread_cache_bytes", &tcb) == 0);
    CHECK(fa_option_set("thread_cache_bytes", 0) == 0);
    CHECKF(adjacent_mib_blocks(blk, 2, junk, &nj, sizeof junk / sizeof junk[0]),
           "never got two adjacent 1 MiB blocks");
    a = blk[0];
    b = blk[1];
    pat_fill(a, MiB, 41);
    fa_free(b);
    freed_to_heap();
    unsigned char *g = fa_realloc(a, MiB + MiB / 2);
    CHECKF(g == a, "realloc did not grow into the free span after it (%p -> %p)", (void *)a, (void *)g);
    CHECK(fa_malloc_usable_size(g) == MiB + MiB / 2);
    CHECK(pat_ok(g, MiB, 41));
    pat_fill_range(g, MiB, MiB + MiB / 2, 41);
    /* Grow again by one page: B's last half is still free. */
    g = fa_realloc(a, MiB + MiB / 2 + PAGE8K);
    CHECK(g == a);
    pat_fill_range(g, MiB + MiB / 2, MiB + MiB / 2 + PAGE8K, 41);
    /* Shrink (by more than a quarter) stays in place and frees the tail,
     * so growing back is in place again. */
    g = fa_realloc(a, MiB / 2 + PAGE8K * 8);
    CHECK(g == a);
    CHECK(fa_malloc_usable_size(g) == MiB / 2 + PAGE8K * 8);
    CHECK(pat_ok(g, MiB / 2 + PAGE8K * 8, 41));
    g = fa_realloc(a, 2 * MiB);
    CHECK(g == a);
    CHECK(pat_ok(g, MiB / 2 + PAGE8K * 8, 41));
    memset(g, 0, 2 * MiB);
    fa_free(g);

    /* A free neighbour that is too small is no help: A, B, C adjacent, B
     * freed, A grows past B's pages into C's: A must move, and C is
     * untouched. */
    CHECKF(adjacent_mib_blocks(blk, 3, junk, &nj, sizeof junk / sizeof junk[0]),
           "never got three adjacent 1 MiB blocks");
    a = blk[0];
    b = blk[1];
    unsigned char *c = blk[2];
    pat_fill(a, MiB, 51);
    pat_fill(c, MiB, 53);
    fa_free(b);
    freed_to_heap();
    g = fa_realloc(a, 2 * MiB + MiB / 2);
    CHECK(g != NULL && g != a);
    CHECK(pat_ok(g, MiB, 51));
    CHECK(pat_ok(c, MiB, 53));
    pat_fill(g, 2 * MiB + MiB / 2, 52);
    CHECK(pat_ok(c, MiB, 53));
    fa_free(g);
    fa_free(c);

    for (size_t i = 0; i < nj; i++)
        fa_free(junk[i]);
    CHECK(fa_option_set("thread_cache_bytes", tcb) == 0);
}

/* A large block that realloc must move gets a quarter more room than it
 * had, so that a block grown a little at a time moves at most every
 * quarter, and the old block's pages go back to the OS at once: a growing
 * block's old pages seldom fit the next request, and kept they only add to
 * the peak (#24). */
static void test_realloc_moved(void)
{
    void *junk[112];
    size_t nj = 0;
    unsigned char *blk[2];
    CHECKF(adjacent_mib_blocks(blk, 2, junk, &nj, sizeof junk / sizeof junk[0]),
           "never got two adjacent 1 MiB blocks");
    unsigned char *a = blk[0], *b = blk[1];
    pat_fill(a, MiB, 61);
    CHECK(resident_bytes(a, MiB) == MiB);
    /* B is live: A moves. */
    unsigned char *g = fa_realloc(a, MiB + PAGE8K);
    CHECK(g != NULL && g != a);
    CHECK(pat_ok(g, MiB, 61));
    size_t u = fa_malloc_usable_size(g);
    CHECKF(u >= MiB + MiB / 4, "a 1 MiB block grown by 8 KiB moved to a block of %zu bytes", u);
    size_t left = resident_bytes(a, MiB);
    CHECKF(left == 0, "the old block of a moved realloc keeps %zu of its %zu bytes resident", left,
           (size_t)MiB);
    /* Growing into the room stays in place. */
    pat_fill_range(g, MiB, MiB + PAGE8K, 61);
    unsigned char *h = fa_realloc(g, MiB + MiB / 4);
    CHECKF(h == g, "realloc within the room it was given moved (%p -> %p)", (void *)g, (void *)h);
    CHECK(pat_ok(h, MiB + PAGE8K, 61));
    fa_free(h);
    fa_free(b);
    for (size_t i = 0; i < nj; i++)
        fa_free(junk[i]);
}

/* ------------------------------------------------------------ realloc at every class boundary */

/* One realloc of a block that holds the pattern of seed on its first `from`
 * bytes: the prefix survives, the result is a block of its own with room
 * for `to` bytes, and a small result is exactly the class of `to` (a block
 * left in a class bigger than its size would break sized free, and one in a
 * smaller class has no room).  The new bytes get the pattern too, so the
 * block is whole for the next step. */
static unsigned char *realloc_step(unsigned char *p, size_t from, size_t to, uint64_t seed)
{
    unsigned char *q = fa_realloc(p, to);
    CHECKF(q != NULL, "realloc %zu -> %zu", from, to);
    CHECKF(fa_owns(q) == 1, "realloc %zu -> %zu: %p not a block", from, to, (void *)q);
    size_t u = fa_malloc_usable_size(q);
    if (to <= MAX_SMALL)
        CHECKF(u == expected_usable(to), "realloc %zu -> %zu: usable %zu, class %zu", from, to, u,
               expected_usable(to));
    else
        CHECKF(u >= to, "realloc %zu -> %zu: usable %zu", from, to, u);
    size_t keep = from < to ? from : to;
    size_t bad = pat_find_bad(q, keep, seed);
    CHECKF(bad == (size_t)-1, "realloc %zu -> %zu lost byte %zu of %zu", from, to, bad, keep);
    if (to > from)
        pat_fill_range(q, from, to, seed);
    return q;
}

/* Blocks of the class of n, each with its own pattern: taken just before a
 * realloc into that class, they are the blocks next to the one it gets, and
 * a copy that ran past the new block's end would land in one of them. */
enum { GUARDS = 2 };

static void guards_take(unsigned char **g, size_t n, uint64_t seed)
{
    for (int i = 0; i < GUARDS; i++) {
        g[i] = fa_malloc(n);
        CHECK(g[i] != NULL);
        pat_fill(g[i], n, seed + 1000 + (uint64_t)i);
    }
}

static void guards_check_free(unsigned char **g, size_t n, uint64_t seed, size_t from, size_t to)
{
    for (int i = 0; i < GUARDS; i++) {
        size_t bad = pat_find_bad(g[i], n, seed + 1000 + (uint64_t)i);
        CHECKF(bad == (size_t)-1, "realloc %zu -> %zu overwrote a neighbour at +%zu", from, to, bad);
        fa_free(g[i]);
    }
}

static void test_realloc_boundaries(void)
{
    /* Every class size c, with c - 1 and c + 1 around it (c + 1 of the last
     * class is the first large size), then large sizes around 8 KiB pages.
     * In the hardened library c is the class size less the tail: the most
     * a request of that class asks for. */
    static size_t sizes[400];
    size_t ns = 0;
    for (size_t k = class_rule(1 + TEST_TAIL);; k = class_rule(k + 1)) {
        size_t c = k - TEST_TAIL; /* the most a request of class k asks */
        if (c > 1 && (ns == 0 || sizes[ns - 1] < c - 1))
            sizes[ns++] = c - 1;
        sizes[ns++] = c;
        sizes[ns++] = c + 1;
        if (k >= MAX_SMALL)
            break;
    }
    const size_t large[] = {MAX_SMALL + PAGE8K - 1, MAX_SMALL + PAGE8K, MAX_SMALL + PAGE8K + 1,
                            300000, MiB - 1, MiB, MiB + 1, 3 * MiB + 1};
    for (size_t i = 0; i < sizeof large / sizeof large[0]; i++)
        sizes[ns++] = large[i];
    CHECK(ns <= sizeof sizes / sizeof sizes[0]);
    for (size_t i = 1; i < ns; i++)
        CHECKF(sizes[i] > sizes[i - 1], "size list not increasing at %zu", i);

    /* One block grown through every size, then shrunk through every size. */
    unsigned char *p = fa_malloc(sizes[0]);
    CHECK(p != NULL);
    pat_fill(p, sizes[0], 71);
    for (size_t i = 1; i < ns; i++)
        p = realloc_step(p, sizes[i - 1], sizes[i], 71);
    for (size_t i = ns - 1; i > 0; i--)
        p = realloc_step(p, sizes[i], sizes[i - 1], 71);
    fa_free(p);

    /* Each boundary crossed on its own, both ways, with live neighbours in
     * the class the block moves to; and each small size into a large block
     * and back. */
    unsigned char *g[GUARDS];
    for (size_t i = 0; i + 1 < ns; i++) {
        size_t a = sizes[i], b = sizes[i + 1];
        uint64_t seed = 5000 + i;
        p = fa_malloc(a);
        CHECK(p != NULL);
        pat_fill(p, a, seed);
        guards_take(g, b, seed);
        p = realloc_step(p, a, b, seed);
        guards_check_free(g, b, seed, a, b);
        guards_take(g, a, seed);
        p = realloc_step(p, b, a, seed);
        guards_check_free(g, a, seed, b, a);
        if (a <= MAX_SMALL) {
            p = realloc_step(p, a, MiB + 1, seed);
            guards_take(g, a, seed);
            p = realloc_step(p, MiB + 1, a, seed);
            guards_check_free(g, a, seed, MiB + 1, a);
        }
        CHECK(pat_ok(p, a, seed));
        fa_free(p);
    }
}

/* ------------------------------------------------------------ reallocarray */
static void test_reallocarray(void)
{
    unsigned char *p = fa_reallocarray(NULL, 10, 10);
    CHECK(p != NULL && fa_malloc_usable_size(p) >= 100);
    pat_fill(p, 100, 5);
    p = fa_reallocarray(p, 100, 30);
    CHECK(p != NULL && fa_malloc_usable_size(p) >= 3000);
    CHECK(pat_ok(p, 100, 5));
    errno = 0;
    CHECK(fa_reallocarray(p, opaque(SIZE_MAX / 2 + 1), 2) == NULL);
    CHECK(errno == ENOMEM);
    CHECK(pat_ok(p, 100, 5));
    CHECK(fa_reallocarray(p, 0, 16) == NULL); /* size 0: frees */
}

/* ------------------------------------------------------------ usable size, free(NULL) */
static void test_usable_and_null(void)
{
    CHECK(fa_malloc_usable_size(NULL) == 0);
    fa_free(NULL);
    fa_free_sized(NULL, 0);
    fa_free_sized(NULL, 100);
    fa_free_sized(NULL, 5000);
    fa_free_aligned_sized(NULL, 64, 64);
    CHECK(fa_owns(NULL) == 0);
}

/* ------------------------------------------------------------ sized frees */
static void test_free_sized(void)
{
    /* Blocks of every size up to 2 KiB and some larger ones, freed with the
     * requested size or the usable size; then the same again, all alive:
     * a sized free that filed a block under the wrong class would hand it
     * out again as a block too big for it, and the patterns would clash. */
    enum { N = 2048 };
    static void *blk[N + 1];
    for (int round = 0; round < 3; round++) {
        for (size_t n = 1; n <= N; n++) {
            if (round == 1)
                blk[n] = fa_calloc(n, 1);
            else if (round == 2)
                blk[n] = fa_realloc(fa_malloc(n / 2 + 1), n);
            else
                blk[n] = fa_malloc(n);
            CHECK(blk[n] != NULL);
            pat_fill(blk[n], fa_malloc_usable_size(blk[n]), n * 3 + (size_t)round);
        }
        for (size_t n = 1; n <= N; n++) {
            CHECKF(pat_ok(blk[n], fa_malloc_usable_size(blk[n]), n * 3 + (size_t)round), "size %zu", n);
            if (n % 3 == 0)
                fa_free_sized(blk[n], n);
            else if (n % 3 == 1)
                fa_free_sized(blk[n], fa_malloc_usable_size(blk[n]));
            else
                fa_free_sized(blk[n], (n + fa_malloc_usable_size(blk[n])) / 2);
        }
    }
    for (size_t n = 1; n <= N; n++) {
        blk[n] = fa_malloc(n);
        CHECK(fa_malloc_usable_size(blk[n]) == expected_usable(n));
        pat_fill(blk[n], fa_malloc_usable_size(blk[n]), n ^ 0xabc);
    }
    for (size_t n = 1; n <= N; n++) {
        CHECKF(pat_ok(blk[n], fa_malloc_usable_size(blk[n]), n ^ 0xabc), "size %zu", n);
        fa_free(blk[n]);
    }
    const size_t big[] = {4096, 5000, 65536, MAX_SMALL, MAX_SMALL + 1, 3 * MiB};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        void *p = fa_malloc(big[i]);
        pat_fill(p, big[i], i);
        CHECK(pat_ok(p, big[i], i));
        fa_free_sized(p, big[i]);
    }

    /* free_aligned_sized after every aligned allocator. */
    static void *al[64];
    static size_t alsz[64], ala[64];
    size_t na = 0;
    for (size_t a = 16; a <= ((size_t)1 << 20); a *= 4) {
        const size_t sizes[] = {1, a - 1, a + 1, 3 * a};
        for (size_t j = 0; j < 4; j++) {
            void *p;
            if (j == 0)
                CHECK(fa_posix_memalign(&p, a, sizes[j]) == 0);
            else if (j == 1)
                p = fa_aligned_alloc(a, sizes[j]);
            else
                p = fa_memalign(a, sizes[j]);
            CHECK(p != NULL && aligned_to(p, a));
            pat_fill(p, sizes[j], na);
            al[na] = p;
            alsz[na] = sizes[j];
            ala[na] = a;
            na++;
        }
    }
    for (size_t i = 0; i < na; i++) {
        CHECK(pat_ok(al[i], alsz[i], i));
        fa_free_aligned_sized(al[i], ala[i], alsz[i]);
    }
}

/* ------------------------------------------------------------ fa_owns */
static void test_owns(void)
{
    int local = 0;
    CHECK(fa_owns(&local) == 0);
    CHECK(fa_owns(&global_var) == 0);
    CHECK(fa_owns(global_buf) == 0);
    CHECK(fa_owns("a string literal") == 0);
    CHECK(fa_owns((const void *)(uintptr_t)&test_owns) == 0);
    CHECK(fa_owns(NULL) == 0);
    CHECK(fa_owns((void *)(uintptr_t)1) == 0);
    CHECK(fa_owns((void *)(uintptr_t)0x7fffffffe000ull) == 0);
    CHECK(fa_owns((void *)UINTPTR_MAX) == 0);
    void *m = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    CHECK(fa_owns(m) == 0);
    munmap(m, 65536);

    const size_t sizes[] = {1, 8, 16, 24, 100, 1000, 5000, 65536, MAX_SMALL, MAX_SMALL + 1, 3 * MiB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = fa_malloc(sizes[i]);
        CHECK(fa_owns(p) == 1);
        size_t u = fa_malloc_usable_size(p);
        /* Interior pointers are not blocks. */
        CHECK(fa_owns(p + 1) == 0);
        CHECK(fa_owns(p + u - 1) == 0);
        if (u >= 16)
            CHECK(fa_owns(p + 8) == 0);
        if (u > 16 && (u % 16) != 0)
            CHECK(fa_owns(p + 16) == 0);
        if (u > PAGE8K)
            CHECK(fa_owns(p + PAGE8K) == 0);
        if (u >= 16)
            CHECK(fa_owns(p + u / 2) == 0);
        fa_free(p);
    }
    void *q;
    CHECK(fa_posix_memalign(&q, 1 << 16, 100) == 0);
    CHECK(fa_owns(q) == 1);
    CHECK(fa_owns((char *)q + 64) == 0);
    fa_free(q);
    /* A large block that went back to the page heap is no longer owned. */
    unsigned char *l = fa_malloc(5 * MiB);
    CHECK(fa_owns(l) == 1);
    fa_free(l);
    CHECK(fa_owns(l) == 0);
}

/* ------------------------------------------------------------ invalid pointers */
/* Each runs in a child (child_call), given the bad pointer. */
static void do_free_bad(void *p) { fa_free(p); }
static void do_realloc_bad(void *p) { (void)!fa_realloc(p, 100); }
static void do_usable_bad(void *p) { _exit(fa_malloc_usable_size(p) == 0 ? 0 : 3); }

static void expect_abort(void (*fn)(void *), void *p, const char *what, const char *text)
{
    struct child_out r;
    child_call(&r, fn, p);
    CHECKF(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT, "%s did not abort (status %#x)", what,
           r.status);
    CHECKF(strstr(r.err, text) != NULL, "%s: diagnostic \"%s\" lacks \"%s\"", what, r.err, text);
}

static void test_invalid_pointers(void)
{
    int local;
    struct child_out r;
    unsigned char *l = fa_malloc(2 * MiB);
    CHECK(l != NULL);
    memset(l, 1, 2 * MiB);

    expect_abort(do_free_bad, &local, "free(stack)", "free(): invalid pointer");
    expect_abort(do_free_bad, &global_var, "free(global)", "free(): invalid pointer");
    expect_abort(do_realloc_bad, &local, "realloc(stack)", "realloc(): invalid pointer");
    expect_abort(do_free_bad, l + PAGE8K, "free(inside a large block)", "inside a block");
    expect_abort(do_free_bad, l + 16, "free(inside a large block)", "inside a block");
    expect_abort(do_realloc_bad, l + 3 * PAGE8K, "realloc(inside a large block)", "inside a block");

    /* malloc_usable_size of a pointer that is not a block: 0, and a note. */
    child_call(&r, do_usable_bad, &local);
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "status %#x", r.status);
    CHECK(strstr(r.err, "malloc_usable_size(): invalid pointer") != NULL);
    child_call(&r, do_usable_bad, l + PAGE8K);
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "status %#x", r.status);

    /* A large block freed twice. */
    fa_free(l);
    expect_abort(do_free_bad, l, "double free of a large block", "double free");
}

int main(int argc, char **argv)
{
    /* Built twice (shared and static library): report under our own name. */
    const char *name = argc > 0 && strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : "test_api";
    os_page = (size_t)sysconf(_SC_PAGESIZE);
    /* fa_owns before anything was allocated: nothing is owned yet. */
    CHECK(fa_owns(&global_var) == 0);
    test_malloc_zero();
    test_sizes_and_alignment();
    test_impossible();
    test_calloc();
    test_aligned_api();
    test_realloc();
    test_realloc_in_place();
    test_realloc_moved();
    test_realloc_boundaries();
    test_reallocarray();
    test_usable_and_null();
    test_free_sized();
    test_owns();
    test_invalid_pointers();
    return check_done(name);
}
