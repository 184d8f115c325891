/* Edge cases that need a process of their own, one per run, named on the
 * command line (ctest runs each as test_edge_<case>):
 *
 *   calloc  calloc over memory that was written and freed, then merged with
 *           its neighbours, purged by fa_trim, or purged at the free itself:
 *           the page heap's "zeroed" flag lets calloc skip its memset, and a
 *           flag that claims too much hands out dirty memory;
 *   tls     allocation from thread-specific-data destructors that run after
 *           fastalloc's own (in the same round and in later rounds);
 *   enomem  real out-of-memory: the OS refuses mmap under RLIMIT_AS; past
 *           the heap's first 1 GiB reserve, smaller reserves still serve.
 *
 * They change options and read fa_stats, so they do not share a process
 * with other tests. */
#include "check.h"
#include "util.h"

#include <errno.h>
#include <fastalloc.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE8K ((size_t)8192)
#define MAX_SMALL TEST_MAX_SMALL

static fa_stats_t stats(void)
{
    fa_stats_t st;
    fa_stats(&st);
    return st;
}

static void set_option(const char *name, long long v)
{
    CHECKF(fa_option_set(name, v) == 0, "fa_option_set(%s, %lld)", name, v);
}

/* ------------------------------------------------------------ calloc */

/* The class a small request lands in (docs/DESIGN.md: 8; 16 to 128 in steps
 * of 16; eight classes per doubling up to 1 KiB, four up to 256 KiB). */
static size_t class_size(size_t n)
{
    if (n <= 8)
        return 8;
    if (n <= 128)
        return (n + 15) / 16 * 16;
    size_t base = 128;
    while (base * 2 < n)
        base *= 2;
    size_t step = base / (base < 1024 ? 8 : 4);
    return (n + step - 1) / step * step;
}

static size_t first_nonzero(const unsigned char *p, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (p[k] != 0)
            return k;
    return (size_t)-1;
}

/* calloc(n, size) of a block that must be all zero; the block is left
 * written with a pattern, so that it is dirty when freed. */
static void calloc_zero(size_t n, size_t size, uint64_t seed, const char *what)
{
    unsigned char *q = fa_calloc(n, size);
    CHECKF(q != NULL, "%s: calloc(%zu, %zu)", what, n, size);
    size_t k = first_nonzero(q, n * size);
    CHECKF(k == (size_t)-1, "%s: calloc(%zu, %zu) byte %zu is %#x", what, n, size, k, q[k]);
    pat_fill(q, n * size, seed);
    fa_free(q);
}

/* A large block written, freed, then taken again by calloc: */
static void calloc_after_free(size_t size, uint64_t seed, const char *what, int trim)
{
    unsigned char *p = fa_malloc(size);
    CHECK(p != NULL);
    pat_fill(p, size, seed);
    fa_free(p);
    if (trim) {
        size_t purged = fa_trim();
        CHECKF(purged >= size, "%s: fa_trim purged %zu of the %zu freed", what, purged, size);
    }
    calloc_zero(1, size, seed + 1, what);
}

/* The size of a large block of at least n bytes whose free reaches the
 * page heap at once, where it merges with its free neighbours and is purged
 * at the free with purge_delay_ms 0: n (with thread_cache_bytes 0).  The
 * hardened library keeps a freed large block, guarded and apart from the
 * page heap, for the next large allocation of its size, unless it is bigger
 * than TEST_SHARED_MAX (util.h): there the block is that much bigger. */
#if FA_TEST_SECURE_LIB
#define TO_HEAP(n) (TEST_SHARED_MAX + (n))
#else
#define TO_HEAP(n) (n)
#endif

static void case_calloc(void)
{
    /* No timed purge: a purge between a free and the calloc would zero
     * the pages for real and hide a flag that says they were. */
    set_option("purge_delay_ms", -1);
    /* The frees below go to the page heap, not to this thread's cache. */
    set_option("thread_cache_bytes", 0);

    /* Two neighbouring large blocks, written and freed: they merge with each
     * other and with the fresh (never written, known zero) pages after
     * them, the rest of the heap's first growth in this young process.  A
     * calloc over the merged span must not take it for fresh. */
    const size_t nb = TO_HEAP(MiB);
    unsigned char *a = fa_malloc(nb);
    unsigned char *b = fa_malloc(nb);
    CHECK(a != NULL && b != NULL);
    /* (In the hardened library a guard page lies between them: util.h.) */
    CHECKF(b == a + nb + TEST_GUARD, "setup: the two blocks are not neighbours (%p, %p)", (void *)a,
           (void *)b);
    pat_fill(a, nb, 1);
    pat_fill(b, nb, 2);
    fa_free(a);
    fa_free(b);
    size_t span = 2 * (nb + TEST_GUARD) + MiB / 2; /* a, b and fresh pages */
    unsigned char *c = fa_calloc(1, span);
    CHECK(c != NULL);
    CHECKF(c == a, "setup: calloc(%zu) did not take the merged span (%p, not %p)", span, (void *)c,
           (void *)a);
    size_t k = first_nonzero(c, span);
    CHECKF(k == (size_t)-1, "calloc over merged blocks: byte %zu is %#x", k, c[k]);
    fa_free(c);

    /* The same block straight back, with no purge: dirty. */
    calloc_after_free(4 * MiB, 10, "reuse without purge", 0);
    calloc_after_free(MAX_SMALL + PAGE8K, 11, "reuse without purge (small large block)", 0);
#if FA_TEST_SECURE_LIB
    /* (The hardened library took those two back from its keeper of freed
     * large blocks: this one comes back from the page heap.) */
    calloc_after_free(TO_HEAP(4 * MiB), 12, "reuse without purge, from the page heap", 0);
#endif

    /* Purged by fa_trim, with MADV_DONTNEED (the pages read zero) and with
     * MADV_FREE (they keep their bytes until the kernel needs the memory:
     * not known zero), and keeping whole huge pages (the ends of a span
     * that are not whole huge pages stay dirty). */
    calloc_after_free(6 * MiB, 20, "after fa_trim", 1);
    set_option("purge_madv_free", 1);
    calloc_after_free(6 * MiB, 21, "after fa_trim, MADV_FREE", 1);
    set_option("purge_madv_free", 0);
    set_option("hugepages", 1);
    {
        /* A span that starts on a huge page and ends inside one, between two
         * live blocks: fa_trim gives back its whole huge pages only, and its
         * last pages keep their bytes.  Blocks are cut from the front of
         * the best-fitting free span, so the three become neighbours after
         * a few tries, each of which uses up a free span that fitted better;
         * the failed tries stay allocated until the end.  In the hardened
         * library a guard page follows each block (util.h, TEST_GUARD): l
         * is a page shorter there, so that x still starts on a huge page,
         * and y lies a guard page after x's end. */
        const size_t ln = 2 * MiB - TEST_GUARD, xn = 6 * MiB + 3 * PAGE8K, yn = 300 * KiB;
        unsigned char *l = NULL, *x = NULL, *y = NULL;
        static void *junk[256];
        size_t nj = 0;
        while (nj + 2 <= sizeof junk / sizeof junk[0]) {
            l = fa_aligned_alloc(2 * MiB, ln);
            x = fa_malloc(xn);
            CHECK(l != NULL && x != NULL);
            if (x == l + 2 * MiB)
                break;
            junk[nj++] = l;
            junk[nj++] = x;
        }
        while (nj < sizeof junk / sizeof junk[0]) {
            y = fa_malloc(yn);
            CHECK(y != NULL);
            if (y == x + xn + TEST_GUARD)
                break;
            junk[nj++] = y;
        }
        CHECKF(x == l + 2 * MiB && y == x + xn + TEST_GUARD, "setup: never got three neighbouring blocks");
        pat_fill(x, xn, 22);
        pat_fill(y, yn, 23);
        fa_free(x);
        CHECK(fa_trim() >= 6 * MiB);
        unsigned char *q = fa_calloc(1, xn);
        CHECKF(q == x, "setup: calloc(%zu) did not take the purged span (%p, not %p)", xn, (void *)q,
               (void *)x);
        size_t k = first_nonzero(q, xn);
        CHECKF(k == (size_t)-1, "after fa_trim, huge pages: calloc(1, %zu) byte %zu is %#x", xn, k, q[k]);
        CHECK(pat_ok(y, yn, 23));
        fa_free(q);
        fa_free(l);
        fa_free(y);
        for (size_t i = 0; i < nj; i++)
            fa_free(junk[i]);
    }
    set_option("hugepages", 0);

    /* Purged at the free itself (delay 0). */
    set_option("purge_delay_ms", 0);
    {
        const size_t pn = TO_HEAP(5 * MiB);
        unsigned char *p = fa_malloc(pn);
        CHECK(p != NULL);
        pat_fill(p, pn, 30);
        size_t before = stats().purged_total;
        fa_free(p);
        fa_stats_t st = stats();
        CHECKF(st.purged_total >= before + pn && st.dirty == 0,
               "delay 0: the free purged %zu, %zu dirty", st.purged_total - before, st.dirty);
        calloc_zero(1, pn, 31, "delay 0");
    }
    set_option("purge_madv_free", 1);
    calloc_after_free(TO_HEAP(5 * MiB), 32, "delay 0, MADV_FREE", 0);
    set_option("purge_madv_free", 0);
    set_option("purge_delay_ms", -1);

    /* Small blocks: every class, each written and freed, then calloc'd
     * (as n elements: the whole product must be zeroed).  Each asks for r,
     * the most a request of class c may ask: c, less the hardened library's
     * tail (util.h, TEST_TAIL). */
    static void *blk[64];
    for (size_t c = class_size(1); c <= MAX_SMALL; c = class_size(c + 1)) {
        size_t n = c <= 256 ? 64 : c <= 16 * KiB ? 16 : 4;
        size_t r = c > TEST_TAIL ? c - TEST_TAIL : 1;
        for (size_t i = 0; i < n; i++) {
            blk[i] = fa_malloc(r);
            CHECK(blk[i] != NULL);
            memset(blk[i], 0xa5, r);
        }
        for (size_t i = 0; i < n; i++)
            fa_free(blk[i]);
        for (size_t i = 0; i < n; i++) {
            size_t elems = r % 8 == 0 ? 8 : 1;
            unsigned char *q = fa_calloc(elems, r / elems);
            CHECK(q != NULL);
            CHECKF(all_bytes(q, r, 0), "calloc(%zu, %zu) after a free: not zero", elems, r / elems);
            blk[i] = q;
            memset(q, 0x5a, r);
        }
        for (size_t i = 0; i < n; i++)
            fa_free(blk[i]);
    }
}

/* ------------------------------------------------------------ tls */

/* A thread that has allocated exits: fastalloc's destructor flushes its
 * cache.  Destructors of keys created after fastalloc's run after it in the
 * same round, and one that sets its value again runs again in the next
 * round, up to PTHREAD_DESTRUCTOR_ITERATIONS rounds.  Their allocations
 * must work (no cache to use any more: straight on the central cache), and
 * must neither bring a cache back to life (it would never be flushed: one
 * cache, and its blocks, lost per thread) nor use the one just recycled. */

enum { TLS_THREADS = 32 };

static pthread_key_t key_after, key_again;
static unsigned base_threads;

/* The fields main reads after the join are written atomically: the last
 * destructor rounds can run after the point where ThreadSanitizer takes
 * the thread as finished, so the join does not order them for it. */
struct tls_state {
    unsigned char *kept; /* allocated in the first round, freed in the last */
    size_t kept_n;
    uint64_t seed;
    unsigned rounds;
    unsigned after_calls;
};

static struct tls_state tls_states[TLS_THREADS];

/* Allocate, write, realloc, check and free blocks of every kind. */
static void dtor_work(uint64_t seed)
{
    CHECKF(stats().threads == base_threads, "a destructor found %u threads with a cache, not %u",
           stats().threads, base_threads);
    const size_t sizes[] = {1, 24, 100, 1000, 5000, 40000, 200000, 300000, 600000};
    unsigned char *p[sizeof sizes / sizeof sizes[0]];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        p[i] = i % 2 ? fa_calloc(1, sizes[i]) : fa_malloc(sizes[i]);
        CHECK(p[i] != NULL && fa_owns(p[i]) == 1);
        if (i % 2)
            CHECK(all_bytes(p[i], sizes[i], 0));
        pat_fill(p[i], sizes[i], seed + i);
    }
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i], m = n * 2 + 1;
        CHECK(pat_ok(p[i], n, seed + i));
        p[i] = fa_realloc(p[i], m);
        CHECK(p[i] != NULL && pat_ok(p[i], n, seed + i));
        pat_fill_range(p[i], n, m, seed + i);
        p[i] = fa_realloc(p[i], n / 2 + 1);
        CHECK(p[i] != NULL && pat_ok(p[i], n / 2 + 1, seed + i));
    }
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        fa_free(p[i]);
    /* Many of one class: more than a thread cache's list would hold. */
    static __thread void *many[600];
    for (size_t i = 0; i < 600; i++) {
        many[i] = fa_malloc(48);
        CHECK(many[i] != NULL);
        memset(many[i], (int)i, 48);
    }
    for (size_t i = 0; i < 600; i++) {
        CHECK(all_bytes(many[i], 48, (unsigned char)i));
        fa_free(many[i]);
    }
    CHECKF(stats().threads == base_threads, "allocating in a destructor made a cache (%u threads, not %u)",
           stats().threads, base_threads);
}

/* The destructor rounds the test asks for.  ThreadSanitizer takes a thread
 * as finished in its own destructor at the last round, which runs before
 * ours there (its key is older): an atomic operation after that crashes its
 * runtime (the hardened library's tails are written atomically), so under
 * TSan the last round is left out. */
#define TLS_ROUNDS (PTHREAD_DESTRUCTOR_ITERATIONS - (TEST_TSAN ? 1 : 0))

static void dtor_after(void *arg)
{
    struct tls_state *s = arg;
    __atomic_add_fetch(&s->after_calls, 1, __ATOMIC_RELAXED);
    dtor_work(s->seed + 100);
}

static void dtor_again(void *arg)
{
    struct tls_state *s = arg;
    __atomic_add_fetch(&s->rounds, 1, __ATOMIC_RELAXED);
    dtor_work(s->seed + 200 + s->rounds);
    if (s->kept == NULL) {
        s->kept_n = 70000;
        __atomic_store_n(&s->kept, fa_malloc(s->kept_n), __ATOMIC_RELAXED);
        CHECK(s->kept != NULL);
        pat_fill(s->kept, s->kept_n, s->seed);
    } else {
        CHECK(pat_ok(s->kept, s->kept_n, s->seed));
        size_t m = s->kept_n * 3;
        __atomic_store_n(&s->kept, fa_realloc(s->kept, m), __ATOMIC_RELAXED);
        CHECK(s->kept != NULL && pat_ok(s->kept, s->kept_n, s->seed));
        pat_fill_range(s->kept, s->kept_n, m, s->seed);
        s->kept_n = m;
    }
    if (s->rounds < TLS_ROUNDS) {
        CHECK(pthread_setspecific(key_again, s) == 0); /* run again next round */
    } else {
        fa_free(s->kept);
        __atomic_store_n(&s->kept, NULL, __ATOMIC_RELAXED);
    }
}

static void *tls_thread(void *arg)
{
    struct tls_state *s = arg;
    /* A cache of its own, with blocks in it. */
    void *p[32];
    for (size_t i = 0; i < 32; i++) {
        p[i] = fa_malloc(16 + i * 100);
        CHECK(p[i] != NULL);
    }
    for (size_t i = 0; i < 32; i++)
        fa_free(p[i]);
    CHECK(stats().threads == base_threads + 1);
    CHECK(pthread_setspecific(key_after, s) == 0);
    CHECK(pthread_setspecific(key_again, s) == 0);
    return NULL;
}

static void case_tls(void)
{
    /* fastalloc's key exists once it has started; these come after it. */
    fa_free(fa_malloc(1));
    CHECK(pthread_key_create(&key_after, dtor_after) == 0);
    CHECK(pthread_key_create(&key_again, dtor_again) == 0);

    fa_trim();
    fa_stats_t before = stats();
    base_threads = before.threads;
    CHECK(base_threads >= 1);
    /* One at a time, so that the counts in the destructors are exact. */
    for (size_t t = 0; t < TLS_THREADS; t++) {
        tls_states[t].seed = mix64(t + 1);
        pthread_t th;
        CHECK(pthread_create(&th, NULL, tls_thread, &tls_states[t]) == 0);
        CHECK(pthread_join(th, NULL) == 0);
        CHECK(__atomic_load_n(&tls_states[t].after_calls, __ATOMIC_RELAXED) == 1);
        unsigned rounds = __atomic_load_n(&tls_states[t].rounds, __ATOMIC_RELAXED);
        CHECKF(rounds == TLS_ROUNDS, "thread %zu: %u rounds", t, rounds);
        CHECK(__atomic_load_n(&tls_states[t].kept, __ATOMIC_RELAXED) == NULL);
    }
    fa_trim();
    fa_stats_t after = stats();
    CHECKF(after.threads == before.threads, "%u threads with a cache, %u before", after.threads,
           before.threads);
    CHECKF(after.thread_caches == before.thread_caches, "thread caches hold %zu bytes, %zu before",
           after.thread_caches, before.thread_caches);
    CHECKF(after.thread_caches_claimed == before.thread_caches_claimed,
           "thread caches claim %zu bytes, %zu before", after.thread_caches_claimed,
           before.thread_caches_claimed);
    /* Every block the destructors freed went back: spans whose blocks are
     * all free return to the page heap at once, so a lost block keeps a
     * whole span.  (A span's worth of slack for the C library's own
     * per-thread allocations, when malloc is fastalloc's.) */
    CHECKF(after.in_spans <= before.in_spans + 256 * KiB,
           "%zu bytes in small spans, %zu before: blocks lost", after.in_spans, before.in_spans);
    CHECKF(after.large == before.large, "%zu bytes in large blocks, %zu before", after.large,
           before.large);
}

/* ------------------------------------------------------------ enomem */

/* Address space mapped now (VmSize). */
static size_t vm_bytes(void)
{
    char buf[256];
    FILE *f = fopen("/proc/self/statm", "r");
    CHECK(f != NULL);
    CHECK(fgets(buf, sizeof buf, f) != NULL);
    fclose(f);
    return (size_t)strtoull(buf, NULL, 10) * (size_t)sysconf(_SC_PAGESIZE);
}

static void enomem_child(void)
{
    alarm(60);
    /* A live large block, to be grown past what the OS gives. */
    unsigned char *keep = fa_malloc(MiB);
    CHECK(keep != NULL);
    pat_fill(keep, MiB, 77);
    /* Room for the small allocations below, not for HUGE. */
    size_t cap = vm_bytes() + 256 * MiB;
    struct rlimit rl = {cap, cap};
    CHECK(setrlimit(RLIMIT_AS, &rl) == 0);
    const size_t HUGE = 4096 * MiB;

    errno = 0;
    CHECK(fa_malloc(opaque(HUGE)) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(fa_calloc(1, opaque(HUGE)) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(fa_calloc(opaque(HUGE / 4096), 4096) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(fa_realloc(keep, opaque(HUGE)) == NULL && errno == ENOMEM);
    /* The old block is still there, whole. */
    CHECK(fa_owns(keep) == 1 && fa_malloc_usable_size(keep) == MiB && pat_ok(keep, MiB, 77));
    void *out = &out;
    CHECK(fa_posix_memalign(&out, 64 * KiB, opaque(HUGE)) == ENOMEM && out == &out);
    CHECK(fa_posix_memalign(&out, 16, opaque(HUGE)) == ENOMEM && out == &out);
    errno = 0;
    CHECK(fa_aligned_alloc(2 * MiB, opaque(HUGE)) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(fa_memalign(4096, opaque(HUGE)) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(fa_valloc(opaque(HUGE)) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(fa_pvalloc(opaque(HUGE)) == NULL && errno == ENOMEM);

    /* The allocator still works: small blocks, a large one, and the kept
     * block grown within the room left. */
    static unsigned char *p[2000];
    for (size_t i = 0; i < 2000; i++) {
        size_t n = 1 + i * 37 % 5000;
        p[i] = fa_malloc(n);
        CHECKF(p[i] != NULL, "malloc(%zu) after the failures", n);
        pat_fill(p[i], n, i);
    }
    for (size_t i = 0; i < 2000; i++) {
        CHECK(pat_ok(p[i], 1 + i * 37 % 5000, i));
        fa_free(p[i]);
    }
    unsigned char *big = fa_calloc(1, 8 * MiB);
    CHECK(big != NULL && all_bytes(big, 8 * MiB, 0));
    fa_free(big);
    keep = fa_realloc(keep, 4 * MiB);
    CHECK(keep != NULL && pat_ok(keep, MiB, 77));

    /* Blocks of 64 MiB (two bytes of each written) until the OS says no.
     * The heap's 1 GiB reserve was taken before the limit; past it, a new
     * reserve of 1 GiB is refused, and the page heap must reserve just what
     * the request needs from the 256 MiB left: more than 1 GiB in all
     * (with no such fallback the count stops near 15). */
    enum { MAXB = 64 };
    static unsigned char *b[MAXB];
    size_t nb = 0;
    for (; nb < MAXB; nb++) {
        errno = 0;
        b[nb] = fa_malloc(64 * MiB);
        if (b[nb] == NULL) {
            CHECKF(errno == ENOMEM, "errno %d", errno);
            break;
        }
        b[nb][0] = (unsigned char)nb;
        b[nb][64 * MiB - 1] = (unsigned char)~nb;
    }
    printf("64 MiB blocks before ENOMEM: %zu\n", nb);
    CHECKF(nb < MAXB, "no ENOMEM after %zu blocks of 64 MiB under a limit", nb);
    CHECKF(nb * 64 > 1024 + 64, "only %zu blocks of 64 MiB: no reserve past the first 1 GiB", nb);
    void *after = fa_malloc(100);
    CHECK(after != NULL);
    fa_free(after);
    for (size_t i = 0; i < nb; i++) {
        CHECK(b[i][0] == (unsigned char)i && b[i][64 * MiB - 1] == (unsigned char)~i);
        fa_free(b[i]);
    }
    fa_free(keep);
    _exit(check_done("test_edge enomem child"));
}

static void case_enomem(void)
{
    /* Under valgrind the limit would bind valgrind's own mappings too (they
     * share the process): the case does not run there. */
    if (getenv("FA_TEST_UNDER_VALGRIND") != NULL) {
        printf("test_edge enomem: skipped under valgrind\n");
        exit(77);
    }
    fa_free(fa_malloc(1));
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        enomem_child();
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: status %#x%s", st,
           WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? " (hung)" : "");
}

int main(int argc, char **argv)
{
    die_prefix = "test_edge";
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {{"calloc", case_calloc}, {"tls", case_tls}, {"enomem", case_enomem}};
    if (argc != 2)
        die(2, "usage: test_edge calloc|tls|enomem");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0) {
            cases[i].fn();
            char name[64];
            snprintf(name, sizeof name, "test_edge %s", argv[1]);
            return check_done(name);
        }
    die(2, "unknown case %s", argv[1]);
}
