/* Alignment: every power of two from 1 byte to 4 MiB through posix_memalign,
 * aligned_alloc and memalign, with sizes around the alignment.  All blocks
 * stay alive, each filled with its own pattern, and are checked at the end,
 * so two blocks that overlapped would be caught. */
#include "check.h"
#include "util.h"

#include <errno.h>
#include <fastalloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct blk {
    unsigned char *p;
    size_t size, align;
    uint64_t seed;
    int how;
};

enum { HOW_POSIX, HOW_ALIGNED, HOW_MEMALIGN, HOW_N };
static const char *const how_name[HOW_N] = {"posix_memalign", "aligned_alloc", "memalign"};

#define MAXB 4096
static struct blk blks[MAXB];
static size_t nblk;

static void *alloc_how(int how, size_t align, size_t size)
{
    void *p = NULL;
    switch (how) {
    case HOW_POSIX: {
        int rc = fa_posix_memalign(&p, align, size);
        CHECKF(rc == 0, "posix_memalign(%zu, %zu) = %d", align, size, rc);
        break;
    }
    case HOW_ALIGNED:
        p = fa_aligned_alloc(align, size);
        break;
    default:
        p = fa_memalign(align, size);
        break;
    }
    return p;
}

static void add(int how, size_t align, size_t size)
{
    if (how == HOW_POSIX && align < sizeof(void *))
        return; /* EINVAL, tested in test_api */
    CHECK(nblk < MAXB);
    struct blk *b = &blks[nblk];
    b->p = alloc_how(how, align, size);
    CHECKF(b->p != NULL, "%s(%zu, %zu) failed", how_name[how], align, size);
    CHECKF(((uintptr_t)b->p & (align - 1)) == 0, "%s(%zu, %zu) = %p misaligned", how_name[how],
           align, size, (void *)b->p);
    /* Never less than 8-aligned, and 16 from 16 bytes on. */
    CHECK(((uintptr_t)b->p & 7) == 0);
    if (size >= 16)
        CHECK(((uintptr_t)b->p & 15) == 0);
    CHECK(fa_owns(b->p) == 1);
    size_t u = fa_malloc_usable_size(b->p);
    CHECKF(u >= size, "%s(%zu, %zu): usable %zu", how_name[how], align, size, u);
    b->size = u; /* the whole block is ours to write */
    b->align = align;
    b->how = how;
    b->seed = mix64(nblk + 1);
    pat_fill(b->p, b->size, b->seed);
    nblk++;
}

static void verify_all(void)
{
    for (size_t i = 0; i < nblk; i++) {
        struct blk *b = &blks[i];
        size_t bad = pat_find_bad(b->p, b->size, b->seed);
        CHECKF(bad == (size_t)-1, "%s(%zu) block of %zu at %p overwritten at +%zu", how_name[b->how],
               b->align, b->size, (void *)b->p, bad);
    }
}

static void free_all(uint64_t *rng)
{
    /* In a random order, checking the survivors now and then. */
    while (nblk > 0) {
        size_t i = (size_t)rng_below(rng, nblk);
        struct blk *b = &blks[i];
        CHECK(pat_ok(b->p, b->size, b->seed));
        if (i & 1)
            fa_free(b->p);
        else
            fa_free_aligned_sized(b->p, b->align, b->size);
        blks[i] = blks[--nblk];
        if (nblk % 64 == 0)
            verify_all();
    }
}

/* ---- large aligned blocks across threads: one thread allocates them,
 * another checks them and reallocs half of them (grown and shrunk), a third
 * frees them all.  Alignments of 16 KiB and more are large blocks whatever
 * the size (no class has them), cut from bigger free spans with a head left
 * over; sizes below and above the 256 KiB bound, so both kinds of large
 * request meet.  All blocks stay alive until the last thread, with their
 * patterns checked at each hand-over: a block that overlapped a neighbour
 * or a left-over head would be caught. */
static void *remote_alloc(void *arg)
{
    (void)arg;
    for (size_t a = 16 * KiB; a <= 4 * MiB; a *= 2) {
        const size_t sizes[] = {1, 100000, 256 * KiB - 1, 256 * KiB + 1, a + 1, MiB + 3 * KiB};
        for (int how = 0; how < HOW_N; how++)
            for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++)
                add(how, a, sizes[j]);
    }
    verify_all();
    return NULL;
}

static void *remote_realloc(void *arg)
{
    (void)arg;
    verify_all();
    for (size_t i = 0; i < nblk; i += 2) {
        struct blk *b = &blks[i];
        /* grow past the block's pages, or shrink to less than half */
        size_t to = i % 4 == 0 ? b->size * 2 + 5 * KiB : b->size / 3 + 1;
        size_t keep = to < b->size ? to : b->size;
        unsigned char *q = fa_realloc(b->p, to);
        CHECKF(q != NULL, "realloc %zu -> %zu", b->size, to);
        CHECK(fa_owns(q) == 1);
        size_t bad = pat_find_bad(q, keep, b->seed);
        CHECKF(bad == (size_t)-1, "realloc of a %zu-aligned block %zu -> %zu lost byte %zu", b->align,
               b->size, to, bad);
        size_t u = fa_malloc_usable_size(q);
        CHECKF(u >= to, "realloc %zu -> %zu: usable %zu", b->size, to, u);
        b->p = q;
        b->size = u;
        b->align = 16; /* realloc keeps only the malloc alignment */
        pat_fill(q, u, b->seed);
    }
    verify_all();
    return NULL;
}

static void *remote_free(void *arg)
{
    uint64_t *rng = arg;
    verify_all();
    free_all(rng);
    return NULL;
}

static void test_remote_large(uint64_t *rng)
{
    void *(*const steps[])(void *) = {remote_alloc, remote_realloc, remote_free};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, steps[i], rng) == 0);
        CHECK(pthread_join(t, NULL) == 0);
    }
    CHECK(nblk == 0);
}

int main(void)
{
    uint64_t rng = 0x1234567;
    for (int round = 0; round < 2; round++) {
        for (size_t a = 1; a <= MiB; a *= 2) {
            const size_t sizes[] = {1, a > 1 ? a - 1 : 1, a, a + 1, 3 * a, 100000};
            for (int how = 0; how < HOW_N; how++)
                for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++)
                    add(how, a, sizes[j]);
            /* Interleave some plain mallocs, which must not land inside
             * the aligned blocks either. */
            for (size_t j = 0; j < 8; j++) {
                CHECK(nblk < MAXB);
                struct blk *b = &blks[nblk];
                size_t n = 1 + (size_t)rng_below(&rng, a < 4096 ? 4096 : a);
                b->p = fa_malloc(n);
                CHECK(b->p != NULL);
                b->size = fa_malloc_usable_size(b->p);
                b->align = 8;
                b->how = HOW_MEMALIGN;
                b->seed = mix64(nblk + 1);
                pat_fill(b->p, b->size, b->seed);
                nblk++;
            }
        }
        /* Alignments bigger than any size class and than the page heap's
         * growth unit. */
        for (size_t a = 2 * MiB; a <= 4 * MiB; a *= 2) {
            const size_t sizes[] = {1, a - 1, a, a + 1, 3 * a, 100000};
            for (int how = 0; how < HOW_N; how++)
                for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++)
                    add(how, a, sizes[j]);
        }
        verify_all();
        if (round == 0) {
            /* Free half and allocate again into the holes. */
            for (size_t i = 0; i < nblk;) {
                if (rng_below(&rng, 2)) {
                    CHECK(pat_ok(blks[i].p, blks[i].size, blks[i].seed));
                    fa_free(blks[i].p);
                    blks[i] = blks[--nblk];
                } else {
                    i++;
                }
            }
            verify_all();
        }
    }
    free_all(&rng);

    /* Many small aligned blocks of one alignment, all alive: they come from
     * size classes that are multiples of the alignment. */
    for (size_t a = 16; a <= 8192; a *= 2) {
        for (size_t i = 0; i < 200; i++)
            add((int)(i % HOW_N), a, 1 + i * 7 % (2 * a));
        verify_all();
        free_all(&rng);
    }

    test_remote_large(&rng);
    return check_done("test_align");
}
