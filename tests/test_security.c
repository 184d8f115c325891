/* What each mode promises against a program's memory errors (SECURITY.md),
 * tried as an attacker would, each attempt in a child process of its own at
 * 16 B, 1 KiB, 200 KiB and 2 MiB.  Built twice: test_security against the
 * default library, test_security_secure against libfastalloc-secure.so
 * (TEST_SECURE), which must also pass the hardened mode's cases.
 *
 *   double    a second free: at once, after other frees, interleaved (a b
 *             a), after the block was handed out again, from another thread
 *   invalid   free of the stack, alloca, a global, a far address, p + 8
 *             (unaligned); p + 16 and an interior pointer where the mode
 *             promises it
 *   huge      requests no heap can meet: NULL and errno, no crash
 *   exec      the heap is never executable
 *   forged    a link forged by a write after free (hardened)
 *   uaf       freed bytes read back, and a write after free (hardened,
 *             with FASTALLOC_SECURE_ZERO=1); a block freed is not the
 *             next one of its size, also once long lists of freed blocks
 *             come back (hardened)
 *   overflow  a write past a block's end, and one before its start; one
 *             1 MiB past the end of the heap's only block, and 1 MiB
 *             below its start (hardened)
 *   copy      memcpy, memmove, memset, strcpy, strcat and strncpy one byte
 *             past a block's end, in a program that never frees it, and
 *             memcpy, memmove and memset from 32 bytes before a block's
 *             start into it (hardened)
 *   order     small blocks handed out one after another lie one after
 *             another in memory, and with FASTALLOC_SECURE_SHUFFLE=1 they
 *             do not (hardened)
 *   correct   a correct program runs to its end under every set of the
 *             hardened build's options: blocks of one size written and
 *             freed, then blocks of another size cut from the same spans
 *             (secure_zero stopped it before 52's fix)
 *
 * A child that must die is checked for its signal and its one line; one
 * that must live, for exit status 0.  The parent prints each attempt. */
#include "check.h"
#include "child.h"
#include "fastalloc.h"

#include <alloca.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TEST_SECURE
#define TEST_SECURE 0
#endif

static const size_t sizes[] = {16, 1024, 200 << 10, 2 << 20};
/* Above this a block is a run of its own: 32 KiB in the default library,
 * 256 KiB in the hardened one (00-base/config.h, FA_MAX_SMALL). */
#define LARGE (TEST_SECURE ? (size_t)256 << 10 : (size_t)32 << 10)

static char global_buf[256] __attribute__((aligned(64)));
static char target[64] __attribute__((aligned(64))); /* a forged link's goal */

/* ---- the children: each does one wrong thing and reports what it saw */

static void *free_it(void *p)
{
    fa_free(p);
    return NULL;
}

static int child_double(const char *how, size_t n)
{
    char *a = fa_malloc(n), *b = fa_malloc(n), *c = fa_malloc(n);
    memset(a, 1, n);
    if (strcmp(how, "immediate") == 0) {
        fa_free(a);
        fa_free(a);
    } else if (strcmp(how, "after") == 0) {
        fa_free(a);
        fa_free(b);
        fa_free(c);
        fa_free(a);
    } else if (strcmp(how, "interleaved") == 0) {
        fa_free(a);
        fa_free(b);
        fa_free(a);
    } else if (strcmp(how, "reuse") == 0) {
        fa_free(a);
        char *d = fa_malloc(n); /* most often a again */
        memset(d, 2, n);
        fa_free(d);
        fa_free(a);
    } else if (strcmp(how, "thread") == 0) {
        pthread_t t;
        pthread_create(&t, NULL, free_it, a);
        pthread_join(t, NULL);
        fa_free(a);
    }
    return 0; /* not caught */
}

static int child_invalid(const char *how, size_t n)
{
    char *p = fa_malloc(n);
    memset(p, 1, n);
    if (strcmp(how, "stack") == 0) {
        char local[64] __attribute__((aligned(16)));
        __asm__ volatile("" ::"r"(local) : "memory");
        fa_free(local);
    } else if (strcmp(how, "alloca") == 0) {
        char *a = alloca(n < 65536 ? n : 65536);
        __asm__ volatile("" ::"r"(a) : "memory");
        fa_free(a);
    } else if (strcmp(how, "global") == 0) {
        fa_free(global_buf + 64);
    } else if (strcmp(how, "far") == 0) {
        fa_free(p + ((size_t)1 << 40));
    } else if (strcmp(how, "unaligned") == 0) {
        fa_free(p + 8);
    } else if (strcmp(how, "plus16") == 0) {
        fa_free(p + 16);
    } else if (strcmp(how, "interior") == 0) {
        fa_free(p + (n / 2 & ~(size_t)15));
    } else if (strcmp(how, "realloc16") == 0) {
        p = fa_realloc(p + 16, n + 100);
    } else if (strcmp(how, "usable16") == 0) {
        printf("usable size %zu\n", fa_malloc_usable_size(p + 16));
    } else if (strcmp(how, "thread16") == 0) { /* the span is another thread's */
        pthread_t t;
        pthread_create(&t, NULL, free_it, p + 16);
        pthread_join(t, NULL);
    }
    /* Had the free taken p + 16, the next block of n bytes would be it,
     * over p's bytes (52: the default library did so). */
    char *q = fa_malloc(n);
    memset(q, 2, n);
    for (size_t i = 0; i < n; i++)
        if (p[i] != 1) {
            printf("byte %zu of the live block changed: the bad pointer was taken\n", i);
            return 4;
        }
    return 0;
}

/* Requests no heap can meet fail with NULL and errno, and leave what the
 * program had intact.  Exit 0 when every one did. */
static int child_huge(void)
{
    int bad = 0;
#define EXPECT(cond)                                                                                      \
    do {                                                                                                   \
        if (!(cond)) {                                                                                     \
            fprintf(stderr, "huge: %s failed\n", #cond);                                                   \
            bad = 1;                                                                                       \
        }                                                                                                  \
    } while (0)
    void *q = NULL;
    errno = 0;
    EXPECT(fa_malloc(opaque(SIZE_MAX)) == NULL && errno == ENOMEM);
    errno = 0;
    EXPECT(fa_malloc(opaque((size_t)PTRDIFF_MAX + 1)) == NULL && errno == ENOMEM);
    errno = 0;
    EXPECT(fa_malloc(opaque((size_t)1 << 46)) == NULL && errno == ENOMEM); /* 64 TiB */
    errno = 0;
    EXPECT(fa_calloc(opaque(SIZE_MAX / 2), 3) == NULL && errno == ENOMEM);
    errno = 0;
    EXPECT(fa_calloc(opaque((size_t)1 << 33), (size_t)1 << 33) == NULL && errno == ENOMEM);
    errno = 0;
    EXPECT(fa_aligned_alloc(64, opaque(SIZE_MAX - 63)) == NULL && errno == ENOMEM);
    errno = 0;
    EXPECT(fa_aligned_alloc(opaque(48), 64) == NULL && errno == EINVAL);
    EXPECT(fa_posix_memalign(&q, opaque(3), 16) == EINVAL && q == NULL);
    EXPECT(fa_posix_memalign(&q, 64, opaque(SIZE_MAX)) == ENOMEM && q == NULL);
    errno = 0;
    EXPECT(fa_reallocarray(NULL, opaque(SIZE_MAX / 4), 8) == NULL && errno == ENOMEM);
    char *p = fa_malloc(100);
    memset(p, 7, 100);
    errno = 0;
    EXPECT(fa_realloc(p, opaque(SIZE_MAX)) == NULL && errno == ENOMEM);
    errno = 0;
    EXPECT(fa_realloc(p, opaque((size_t)PTRDIFF_MAX)) == NULL && errno == ENOMEM);
    for (int i = 0; i < 100; i++)
        EXPECT(p[i] == 7);
    fa_free(p);
    return bad;
#undef EXPECT
}

/* The mapping that holds a block of each size is readable and writable,
 * never executable. */
static int child_exec(void)
{
    int bad = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uintptr_t a = (uintptr_t)fa_malloc(sizes[i]);
        FILE *f = fopen("/proc/self/maps", "r");
        char line[512];
        bool found = false;
        while (fgets(line, sizeof line, f) != NULL) {
            unsigned long lo, hi;
            char perms[8];
            if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || a < lo || a >= hi)
                continue;
            found = true;
            if (perms[0] != 'r' || perms[1] != 'w' || perms[2] != '-') {
                fprintf(stderr, "exec: the %zu-byte block at %#lx lies in a mapping %s", sizes[i],
                        (unsigned long)a, line);
                bad = 1;
            }
        }
        fclose(f);
        if (!found) {
            fprintf(stderr, "exec: no mapping holds %#lx\n", (unsigned long)a);
            bad = 1;
        }
    }
    return bad;
}

/* A write after free puts target's address in the freed block's first
 * word, where the link lies; then the program allocates.  The allocator
 * must never hand out target.  Exit 3 if it did, 0 if it never did. */
static int child_forged(size_t n)
{
    enum { KEEP = 4096 };
    static void *keep[KEEP];
    char *p = fa_malloc(n);
    fa_free(p);
    *(void **)p = target;
    for (int i = 0; i < KEEP; i++) {
        keep[i] = fa_malloc(n);
        if (keep[i] == (void *)target) {
            printf("forged address returned after %d allocations\n", i + 1);
            return 3;
        }
        if (n >= LARGE && i == 16)
            break;
    }
    return 0;
}

/* Freed bytes must read back as zero (exit 3), and a write after free must
 * stop the program before the block is handed out again (exit 4).  how
 * "again": a block just freed must not be the next one of its size (exit
 * 4), at once or after one in between of another size. */
static int child_uaf(const char *how, size_t n)
{
    if (strcmp(how, "again") == 0) {
        for (int r = 0; r < 100; r++) {
            void *p = opaque_ptr(fa_malloc(n)), *o = NULL;
            fa_free(p);
            if (r % 2 == 1)
                o = fa_malloc(n / 2 + 1);
            void *q = opaque_ptr(fa_malloc(n));
            fa_free(o);
            fa_free(q);
            if (q == p) {
                printf("the block freed was the next one handed out (round %d)\n", r);
                return 4;
            }
        }
        return 0;
    }
    if (strcmp(how, "again-long") == 0) {
        /* The same after 256 blocks were freed, so that the thread's cache
         * takes back long lists of freed blocks (a short one it cuts fresh
         * blocks ahead of, which the rounds above meet), the block freed
         * last on top; a block kept now and then shifts where in a round
         * the cache runs dry. */
        enum { MANY = 256 };
        static void *many[MANY];
        for (int i = 0; i < MANY; i++)
            many[i] = fa_malloc(n);
        for (int i = 0; i < MANY; i++)
            fa_free(many[i]);
        int kept = 0;
        for (int r = 0; r < 1000; r++) {
            if (r % 7 == 0 && kept < MANY)
                many[kept++] = fa_malloc(n);
            void *p = opaque_ptr(fa_malloc(n));
            fa_free(p);
            void *q = opaque_ptr(fa_malloc(n));
            fa_free(q);
            if (q == p) {
                printf("the block freed was the next one handed out (round %d)\n", r);
                return 4;
            }
        }
        return 0;
    }
    enum { KEEP = 4096 };
    static void *keep[KEEP];
    unsigned char *p = fa_malloc(n);
    memset(p, 0x5a, n);
    fa_free(p);
    size_t end = n < 4096 ? n : 4096;
    for (size_t i = 16; i < end; i++)
        if (p[i] != 0) {
            printf("byte %zu of the freed block still reads %#x\n", i, p[i]);
            return 3;
        }
    /* Flipped, not set: at 16 B the byte is the free mark's lowest, a
     * random key's, which held 0x77 once in 256 runs (the write then
     * changed nothing). */
    size_t w = n > 16 ? 24 : 8;
    p[w] = (unsigned char)~p[w];
    for (int i = 0; i < KEEP; i++)
        if ((keep[i] = fa_malloc(n)) == p) {
            printf("the block written after free was handed out again\n");
            return 4;
        }
    return 0;
}

/* Two bytes that differ: a canary of one byte repeated cannot match both. */
static void scribble(char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (char)(0x41 + (i & 1));
}

/* A write past the end of a block (over), or of 8 bytes before its start,
 * over the end of the block below it (under): the free of the block
 * written must stop the program (exit 4 if it does not).  Large blocks: a
 * write one byte past the end of a block of whole pages faults on the
 * guard page, or, on a block given pages to spare, lands on the canary,
 * and the free stops the program (guard; regrow and reshrink, after a
 * realloc that grew the block or shrank it by half, which move the guard);
 * one past a block that ends
 * inside its last page lands on the canary (tail). */
static int child_overflow(const char *how, size_t n)
{
    if (strncmp(how, "far-", 4) == 0) { /* far-over, far-under */
        char *p = opaque_ptr(fa_malloc(n));
        memset(p, 1, n);
        volatile char *w = strcmp(how, "far-over") == 0 ? p + n + ((size_t)1 << 20) : p - ((size_t)1 << 20);
        printf("writing 1 MiB away: faults next\n");
        fflush(stdout);
        *w = 1;
        return 4;
    }
    if (strncmp(how, "zero-", 5) == 0) { /* zero-write, zero-read, zero-calloc: a block of no bytes */
        volatile char *p = opaque_ptr(strcmp(how, "zero-calloc") == 0 ? fa_calloc(4, 0) : fa_malloc(0));
        if (p == NULL)
            return 3;
        printf("a byte of a block of no bytes: faults next\n");
        fflush(stdout);
        if (strcmp(how, "zero-read") == 0)
            return p[0] == 42 ? 5 : 4;
        p[0] = 'A';
        return 4;
    }
    if (strcmp(how, "guard") == 0 || strcmp(how, "regrow") == 0 || strcmp(how, "reshrink") == 0) {
        /* Every usable byte of large blocks of many sizes, on pages other
         * blocks had, is writable: the guard is past them all.  (Hidden
         * from the compiler, whose _FORTIFY_SOURCE=3 bounds a block by the
         * size asked for.) */
        for (size_t k = 1; k <= 40; k++) {
            char *q = opaque_ptr(fa_malloc(n / 2 + k * 12345));
            char *r = opaque_ptr(fa_malloc(n / 3 + k * 54321));
            memset(q, 1, fa_malloc_usable_size(q));
            memset(r, 1, fa_malloc_usable_size(r));
            fa_free(q);
            if (k % 3 != 0)
                fa_free(r);
        }
        char *p = opaque_ptr(fa_malloc(n));
        if (strcmp(how, "regrow") == 0) /* in place where the pages after are free */
            p = opaque_ptr(fa_realloc(p, n + 5 * 4096));
        else if (strcmp(how, "reshrink") == 0) /* by more than a quarter: in place */
            p = opaque_ptr(fa_realloc(p, n / 2));
        memset(p, 1, fa_malloc_usable_size(p));
        printf("usable bytes written\n");
        fflush(stdout);
        volatile char *end = p + fa_malloc_usable_size(p);
        *end = 1;
        fa_free(p); /* a block with pages to spare: its canary's */
        return 0;
    }
    if (strcmp(how, "over") == 0 || strcmp(how, "tail") == 0) {
        char *p = opaque_ptr(fa_malloc(n));
        memset(p, 1, n);
        scribble(p + n, 2);
        fa_free(p);
        return 4;
    }
    /* under: a block whose neighbour below is among the 64 taken.  Their
     * bytes are 0xff, which the canary's byte never is: the write below a
     * block lands on the tail's record of the block under it, which then
     * names a place in that block's bytes for its canary, and bytes of 1
     * matched a canary of 1 (one process in 254: a case that failed about
     * one run in 200, found with 800 runs). */
    enum { K = 64 };
    char *b[K];
    for (int i = 0; i < K; i++) {
        b[i] = opaque_ptr(fa_malloc(n));
        memset(b[i], 0xff, n);
    }
    size_t step = SIZE_MAX; /* the class's size: the least distance */
    for (int i = 0; i < K; i++)
        for (int j = 0; j < K; j++)
            if (b[j] > b[i] && (size_t)(b[j] - b[i]) < step)
                step = (size_t)(b[j] - b[i]);
    for (int i = 0; i < K; i++)
        for (int j = 0; j < K; j++) {
            if (b[j] != b[i] - step)
                continue;
            scribble(b[i] - 8, 8);
            fa_free(b[i]);
            return 4;
        }
    printf("no two neighbours among %d blocks\n", K);
    return 5;
}

/* The bounded copies (12-api/bounds.c): each writes all n usable bytes of
 * a block, which must pass, then n + 1, which must stop the program (exit
 * 4 if it does not).  n is the block's class's bytes, or with tails those
 * asked for (exit 6 if it is not).  Called through volatile pointers, so
 * that the compiler neither inlines them nor bounds them itself
 * (_FORTIFY_SOURCE). */
static void *(*volatile cpy)(void *, const void *, size_t) = memcpy;
static void *(*volatile mov)(void *, const void *, size_t) = memmove;
static void *(*volatile set)(void *, int, size_t) = memset;
static char *(*volatile scpy)(char *, const char *, size_t) = strncpy;
static char *(*volatile str)(char *, const char *) = strcpy;
static char *(*volatile cat)(char *, const char *) = strcat;

/* A copy that starts 32 bytes before a block and runs 8 bytes into it:
 * whatever lies below the block (another block, or no block at all), the
 * write leaves the block one of its ends lies in. */
static int child_copy_under(const char *how, size_t n)
{
    char *p = opaque_ptr(fa_malloc(n));
    char *src = opaque_ptr(fa_malloc(64));
    set(src, 'A', 64);
    printf("%s starting 32 bytes before a block of %zu\n", how, n);
    fflush(stdout);
    if (strcmp(how, "memcpy-under") == 0)
        cpy(p - 32, src, 40);
    else if (strcmp(how, "memmove-under") == 0)
        mov(p - 32, src, 40);
    else
        set(p - 32, 1, 40);
    return 4;
}

static int child_copy(const char *how, size_t n)
{
    if (strstr(how, "-under") != NULL)
        return child_copy_under(how, n);
    char *p = opaque_ptr(fa_malloc(n));
    size_t u = fa_malloc_usable_size(p); /* the bound: the class's, or the tail's n */
    if (getenv("FASTALLOC_SECURE_TAILS") != NULL && u != (n < 16 ? 16 : n)) {
        printf("%zu bytes usable of a block asked for %zu, with tails\n", u, n);
        return 6;
    }
    n = u;
    char *src = opaque_ptr(fa_malloc(n + 2));
    set(src, 'A', n + 1);
    src[n + 1] = 0;
    for (size_t w = n; w <= n + 1; w++) {
        if (w > n) {
            printf("%s of %zu bytes into %zu passed\n", how, n, n);
            fflush(stdout);
        }
        if (strcmp(how, "memcpy") == 0)
            cpy(p, src, w);
        else if (strcmp(how, "memmove") == 0)
            mov(p, src, w);
        else if (strcmp(how, "memset") == 0)
            set(p, 1, w);
        else if (strcmp(how, "strncpy") == 0)
            scpy(p, src, w);
        else { /* a string of w - 1 bytes and its NUL */
            src[w - 1] = 0;
            if (strcmp(how, "strcpy") == 0) {
                str(p, src);
            } else { /* half of it, then the rest */
                p[0] = 0;
                src[(w - 1) / 2] = 0;
                cat(p, src);
                src[(w - 1) / 2] = 'A';
                cat(p, src + (w - 1) / 2);
            }
            src[w - 1] = 'A';
        }
    }
    return 4;
}

/* 64 blocks of n bytes asked for one after another in a fresh process:
 * with `secure_shuffle`, at most half may lie just past the one before;
 * without it, nearly all must, as the blocks are cut in address order (the
 * first may follow blocks that libc took).  In a random order of a batch of
 * blocks, one block on average follows the one before it by chance: of the
 * 64, 0 of 16 B (batches of up to 256), and 8 to 16 of 1 KiB in six runs
 * (batches of a few). */
static int child_order(size_t n)
{
    enum { N = 64 };
    char *p[N];
    for (int i = 0; i < N; i++)
        if ((p[i] = malloc(n)) == NULL)
            return 2;
    size_t step = fa_malloc_usable_size(p[0]);
    int next = 0;
    for (int i = 1; i < N; i++)
        next += p[i] == p[i - 1] + step;
    const char *e = getenv("FASTALLOC_SECURE_SHUFFLE");
    bool shuffled = e != NULL && strcmp(e, "1") == 0;
    printf("%d of %d blocks of %zu B lie just past the one before%s\n", next, N - 1, step,
           shuffled ? " (shuffled)" : "");
    return shuffled ? next > N / 2 : next < N - 4;
}

/* A correct program: n blocks of one size written and freed, then as
 * many of another (how is "FROM-TO"), each checked for its own pattern,
 * so that the spans the first size left go to the second (exit 5 if a
 * block's bytes change under it). */
static int child_correct(const char *how, size_t n)
{
    size_t from = strtoull(how, NULL, 10), to = strtoull(strchr(how, '-') + 1, NULL, 10);
    unsigned char **p = fa_malloc(n * sizeof *p);
    for (int round = 0; round < 2; round++) {
        size_t sz = round == 0 ? from : to;
        for (size_t i = 0; i < n; i++) {
            p[i] = fa_malloc(sz);
            memset(p[i], (int)(i * 7 + round), sz);
        }
        for (size_t i = 0; i < n; i++) {
            for (size_t k = 0; k < sz; k++)
                if (p[i][k] != (unsigned char)(i * 7 + round)) {
                    printf("byte %zu of block %zu (%zu B) changed\n", k, i, sz);
                    return 5;
                }
            fa_free(p[i]);
        }
    }
    fa_free(p);
    return 0;
}

static int child(const char *kind, const char *how, size_t n)
{
    if (strcmp(kind, "correct") == 0)
        return child_correct(how, n);
    if (strcmp(kind, "double") == 0)
        return child_double(how, n);
    if (strcmp(kind, "invalid") == 0)
        return child_invalid(how, n);
    if (strcmp(kind, "huge") == 0)
        return child_huge();
    if (strcmp(kind, "exec") == 0)
        return child_exec();
    if (strcmp(kind, "forged") == 0)
        return child_forged(n);
    if (strcmp(kind, "uaf") == 0)
        return child_uaf(how, n);
    if (strcmp(kind, "overflow") == 0)
        return child_overflow(how, n);
    if (strcmp(kind, "copy") == 0)
        return child_copy(how, n);
    if (strcmp(kind, "order") == 0)
        return child_order(n);
    return 99;
}

/* ---- the parent */

enum outcome { EXIT0, ABORT, SEGV, FAULT };

/* The hardened build's options a child runs with. */
enum { OPT_ZERO = 1, OPT_TAILS = 2, OPT_SHUFFLE = 4 };
static const int opt_sets[8] = {0, 1, 2, 3, 4, 5, 6, 7}; /* each set, by its value */

static void opts_on(void *arg)
{
    int opts = *(const int *)arg;
    if (opts & OPT_ZERO)
        setenv("FASTALLOC_SECURE_ZERO", "1", 1);
    if (opts & OPT_TAILS)
        setenv("FASTALLOC_SECURE_TAILS", "1", 1);
    if (opts & OPT_SHUFFLE)
        setenv("FASTALLOC_SECURE_SHUFFLE", "1", 1);
}

/* A child that runs with the hardened build's `secure_zero` option on
 * (OPT_ZERO), its `secure_tails` (OPT_TAILS), both, or with the options as
 * they are (0). */
static void run_opt(const char *kind, const char *how, size_t n, enum outcome want, const char *line, int opts)
{
    char size[32];
    snprintf(size, sizeof size, "%zu", n);
    char *argv[] = {(char *)child_self(), "child", (char *)kind, (char *)how, size, NULL};
    struct child_out r;
    child_run(&r, opts != 0 ? opts_on : NULL, (void *)&opt_sets[opts], argv);
    const char *what = WIFSIGNALED(r.status) ? strsignal(WTERMSIG(r.status)) : "exit";
    printf("%-8s %-13s %8zu B%s%s%s: %s %d\n", kind, how, n, opts & OPT_ZERO ? " zero" : "",
           opts & OPT_TAILS ? " tails" : "", opts & OPT_SHUFFLE ? " shuffle" : "", what,
           WIFEXITED(r.status) ? WEXITSTATUS(r.status) : WTERMSIG(r.status));
    switch (want) {
    case EXIT0:
        CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "%s %s at %zu B: status %#x; stdout: %s; stderr: %s",
               kind, how, n, r.status, r.out, r.err);
        return;
    case SEGV: /* past the usable bytes, which must all have been written */
        CHECKF(WIFSIGNALED(r.status) &&
                   (WTERMSIG(r.status) == SIGSEGV ||
                    (WTERMSIG(r.status) == SIGABRT && strstr(r.err, "written past its end"))) &&
                   strstr(r.out, "usable bytes written"),
               "%s %s at %zu B: status %#x, not SIGSEGV past the usable bytes; stdout: %s; stderr: %s", kind, how,
               n, r.status, r.out, r.err);
        return;
    case FAULT: /* a write into memory with no access */
        CHECKF(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGSEGV && strstr(r.out, "faults next"),
               "%s %s at %zu B: status %#x, not SIGSEGV; stdout: %s; stderr: %s", kind, how, n, r.status, r.out,
               r.err);
        return;
    case ABORT:
        CHECKF(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT,
               "%s %s at %zu B: status %#x, not SIGABRT; stdout: %s; stderr: %s", kind, how, n, r.status, r.out,
               r.err);
        /* One line, from fastalloc, that says what happened. */
        CHECKF(strncmp(r.err, "fastalloc: ", 11) == 0 && strchr(r.err, '\n') == r.err + strlen(r.err) - 1,
               "%s %s at %zu B: stderr is not one fastalloc line: %s", kind, how, n, r.err);
        CHECKF(strstr(r.err, line) != NULL, "%s %s at %zu B: stderr lacks \"%s\": %s", kind, how, n, line, r.err);
        return;
    }
}

static void run(const char *kind, const char *how, size_t n, enum outcome want, const char *line)
{
    run_opt(kind, how, n, want, line, 0);
}

static int case_double(void)
{
    static const char *const hows[] = {"immediate", "after", "interleaved", "reuse", "thread"};
    for (size_t h = 0; h < sizeof hows / sizeof hows[0]; h++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            run("double", hows[h], sizes[i], ABORT, "double free");
    /* With tails the largest class's last bytes are large blocks, and a
     * process's first malloc, before start-up, chose a class not knowing
     * of them (it returned NULL for these two). */
    if (TEST_SECURE)
        for (size_t n = LARGE - 5; n <= LARGE; n += 5)
            run_opt("double", "immediate", n, ABORT, "double free", OPT_TAILS);
    return check_done("test_security double");
}

static int case_invalid(void)
{
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        run("invalid", "stack", n, ABORT, "invalid pointer");
        run("invalid", "alloca", n, ABORT, "invalid pointer");
        run("invalid", "global", n, ABORT, "invalid pointer");
        run("invalid", "far", n, ABORT, "invalid pointer");
        run("invalid", "unaligned", n, ABORT, "not 16-byte aligned");
        /* At 16 B, p + 16 is the next block's start: a free of it is a
         * double free if that block is free, and a free of another
         * block if not; no allocator can tell the latter. */
        if (n == 16)
            continue;
        /* Both modes check that a pointer is a block's start, and the
         * line names the call (52: the default library took p + 16 of a
         * small block, and the hardened one named free() for all three). */
        run("invalid", "plus16", n, ABORT, "free(): pointer");
        run("invalid", "interior", n, ABORT, "inside a block");
        run("invalid", "realloc16", n, ABORT, "realloc(): pointer");
        if (n <= LARGE) /* a large block's says so and returns 0 */
            run("invalid", "usable16", n, ABORT, "malloc_usable_size(): pointer");
        run("invalid", "thread16", n, ABORT, "inside a block");
    }
    return check_done("test_security invalid");
}

static int case_huge(void)
{
    run("huge", "-", 0, EXIT0, NULL);
    return check_done("test_security huge");
}

static int case_exec(void)
{
    run("exec", "-", 0, EXIT0, NULL);
    return check_done("test_security exec");
}

static int hardened_only(const char *name)
{
    printf("SKIP: %s: the default library does not promise this; test_security_secure runs it\n", name);
    return 77;
}

static int case_forged(void)
{
    if (!TEST_SECURE)
        return hardened_only("forged");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        /* A large block has no link to forge: the program goes on. */
        run("forged", "-", sizes[i], sizes[i] > LARGE ? EXIT0 : ABORT, "heap corruption: the link of");
    return check_done("test_security forged");
}

static int case_uaf(void)
{
    if (!TEST_SECURE)
        return hardened_only("uaf");
    /* With `secure_zero` only; large blocks are not scrubbed (SECURITY.md). */
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] <= LARGE)
            run_opt("uaf", "-", sizes[i], ABORT, "heap corruption", OPT_ZERO);
    /* A block freed is not the next one of its size handed out
     * (SECURITY.md); the long lists are the small blocks' (256 large
     * blocks of 2 MiB would be 512 MiB). */
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        run("uaf", "again", sizes[i], EXIT0, NULL);
        if (sizes[i] <= LARGE)
            run("uaf", "again-long", sizes[i], EXIT0, NULL);
    }
    return check_done("test_security uaf");
}

static int case_overflow(void)
{
    if (!TEST_SECURE)
        return hardened_only("overflow");
    /* malloc(0) and calloc of no bytes: a block of no bytes, whose every
     * byte faults (06-large/empty.h), with tails too. */
    static const char *const zeros[] = {"zero-write", "zero-read", "zero-calloc"};
    for (size_t z = 0; z < sizeof zeros / sizeof zeros[0]; z++)
        for (int t = 0; t <= OPT_TAILS; t += OPT_TAILS)
            run_opt("overflow", zeros[z], 0, FAULT, NULL, t);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        /* The reserve no span uses has no access, and none has the
         * bottom of the heap's range (04-pageheap/grow.c). */
        run("overflow", "far-over", n, FAULT, NULL);
        run("overflow", "far-under", n, FAULT, NULL);
        if (n > LARGE) {
            run("overflow", "guard", n, SEGV, NULL);
            run("overflow", "regrow", n, SEGV, NULL);
            run("overflow", "reshrink", n, SEGV, NULL);
            run("overflow", "tail", n + 100, ABORT, "written past its end");
            continue; /* a large block has no guard before it (SECURITY.md) */
        }
        /* Small blocks: found by their tails, an option (SECURITY.md). */
        run_opt("overflow", "over", n, ABORT, "written past its end", OPT_TAILS);
        run_opt("overflow", "under", n, ABORT, "found at the free of the block after it", OPT_TAILS);
    }
    return check_done("test_security overflow");
}

static int case_copy(void)
{
    if (!TEST_SECURE)
        return hardened_only("copy");
    /* Bounded by the block's size class, or with tails by the bytes asked
     * for (child_copy writes what malloc_usable_size says, then a byte
     * more). */
    static const char *const hows[] = {"memcpy", "memmove", "memset", "strcpy", "strcat", "strncpy"};
    for (int t = 0; t <= OPT_TAILS; t += OPT_TAILS)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            for (size_t h = 0; h < sizeof hows / sizeof hows[0]; h++)
                run_opt("copy", hows[h], sizes[i] - (t ? 7 : 0), ABORT, "writes past the end", t);
    /* Bounded at both ends: below a large block, or below a span's first
     * block, there is no block for the start to be bounded by. */
    static const char *const unders[] = {"memcpy-under", "memmove-under", "memset-under"};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (size_t h = 0; h < sizeof unders / sizeof unders[0]; h++)
            run("copy", unders[h], sizes[i], ABORT, "heap overflow:");
    return check_done("test_security copy");
}

static int case_order(void)
{
    if (!TEST_SECURE)
        return hardened_only("order");
    /* The small blocks whose spans hold many (SECURITY.md, Random order). */
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] <= 1024) {
            run("order", "-", sizes[i], EXIT0, NULL);
            run_opt("order", "-", sizes[i], EXIT0, NULL, OPT_SHUFFLE);
        }
    return check_done("test_security order");
}

static int case_correct(void)
{
    /* The sizes secure_zero stopped (52), each under every set of the
     * hardened build's options (the default library has none). */
    static const char *const pairs[] = {"48-64", "32-48", "64-48", "80-64", "100-200", "1000-700", "990-1010"};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        for (int o = 0; o < (TEST_SECURE ? 8 : 1); o++)
            run_opt("correct", pairs[i], 20000, EXIT0, NULL, o);
    return check_done("test_security correct");
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "child") == 0)
        return child(argv[2], argv[3], strtoull(argv[4], NULL, 10));
    setvbuf(stdout, NULL, _IOLBF, 0);
    static const struct check_case cases[] = {
        {"double", case_double},     {"invalid", case_invalid}, {"huge", case_huge},
        {"exec", case_exec},         {"forged", case_forged},   {"uaf", case_uaf},
        {"overflow", case_overflow}, {"copy", case_copy},        {"order", case_order},
        {"correct", case_correct},
    };
    return check_run_case(TEST_SECURE ? "test_security_secure" : "test_security", cases,
                          sizeof cases / sizeof cases[0], argc, argv);
}
