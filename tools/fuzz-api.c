/* The fa_ API under libFuzzer (tools/fuzz-api.sh, tools/fuzz-replay.sh): a
 * differential fuzzer of the whole API.  The input is a program of calls
 * (the malloc family, the aligned calls, the frees and sized frees,
 * fa_malloc_usable_size, fa_trim, the object pool) on 64 slots of blocks, 64
 * slots of pool objects and 4 pools, run against the library's sources
 * compiled with it, with ASan and UBSan.  Each call's outcome is held to
 * what glibc's malloc must do with the same arguments (see "The model"):
 * where glibc must fail, glibc itself is asked too, so that the model
 * cannot drift from the glibc it claims to be.  Every block's bytes are
 * written and read back: what a block held must still be there at its
 * free, across a realloc (up to the smaller size), a trim, and in a pool
 * object put and got again.
 *
 * The library's options come from the environment, as in any program
 * (FASTALLOC_DEBUG=1, FASTALLOC_LIMIT=48M, ...; tools/fuzz-replay.sh
 * names the sets it runs): at start-up the target checks that each
 * FASTALLOC_ variable names an option and was taken, so that a set with a
 * typo or a value the library ignored cannot pass unseen.  The bugs it
 * found are listed, with their inputs, in tests/fuzz/README.md.
 * FUZZ_API_TRACE=1 prints each call on stderr.
 *
 * Two input formats; in both, the patterns cover a block's first 8 KiB
 * and its last 4 KiB, so that the fuzzer's speed goes to calls, not to
 * bytes.
 *
 * Version 1 (every input not starting with 0xFA, the first kept inputs):
 * 4 bytes an op; the op in the first byte's low 3 bits (0, 1 malloc;
 * 2 calloc; 3 aligned; 4 realloc; 5, 6 free; 7 write the usable size) and
 * the slot in its next 5; a size from the next two bytes (up to 64 KiB,
 * or scaled by the last byte's high bits up to 4 or 16 MiB); in the last,
 * an alignment exponent (low 4 bits, 8 at least) and, bit 5, posix_memalign
 * instead of aligned_alloc.
 *
 * Version 2: the byte 0xFA, then 6 bytes an op:
 *   [0] the op, modulo NOPS (enum op below)
 *   [1] the slot of a block or a pool object (low 6 bits) and the pool
 *       (high 2 bits); for a new pool, its low 6 bits are options too
 *   [2..3] v, little-endian, and [4] high nibble: the size (size_of())
 *   [4] low nibble: where the size a sized free names lies between the
 *       size asked for and the usable size; a new pool's flags
 *   [5] the alignment, or calloc's and reallocarray's element size
 *       (arg_of())
 * decode_v2() bounds the sizes and alignments (ASan), and a new pool's
 * options are pool_options()'s. */
#include "fastalloc.h"
#include "00-base/config.h"
#include "00-base/options.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <gnu/libc-version.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLOTS 64
#define OBJS 64
#define POOLS 4
#define V2 0xFA

static void fail(const char *what, size_t a, size_t b)
{
    fprintf(stderr, "fuzz-api: %s (%zu, %zu)\n", what, a, b);
    abort();
}

/* ---- patterns ---- */

/* The loops over a block's bytes are the target's own work, not the
 * library's: left out of libFuzzer's coverage, whose hook on each compare
 * took most of the time. */
#ifdef __clang__
#define PLAIN __attribute__((no_sanitize("coverage"), noinline))
#else
#define PLAIN
#endif

#define HEAD 8192
#define TAIL 4096

/* The next byte at or after k that the patterns cover, in a block of n. */
PLAIN static size_t covered(size_t k, size_t n)
{
    return k < HEAD || n < TAIL || k >= n - TAIL ? k : n - TAIL;
}

PLAIN static void fill(unsigned char *p, size_t n, uint8_t seed)
{
    for (size_t k = covered(0, n); k < n; k = covered(k + 1, n))
        p[k] = (uint8_t)(seed + k * 7);
}

/* The covered bytes among the first n of a block of size still hold the
 * pattern. */
PLAIN static bool holds(const unsigned char *p, size_t n, size_t size, uint8_t seed)
{
    for (size_t k = covered(0, size); k < n; k = covered(k + 1, size))
        if (p[k] != (uint8_t)(seed + k * 7))
            return false;
    return true;
}

PLAIN static bool all(const unsigned char *p, size_t n, uint8_t byte)
{
    for (size_t k = covered(0, n); k < n; k = covered(k + 1, n))
        if (p[k] != byte)
            return false;
    return true;
}

/* A pool's ctor writes this; a pool object that no put left in a state of
 * ours must hold it (SEED_CTOR is no seed the counter hands out to objects:
 * those are odd). */
#define SEED_CTOR 0x5A

/* ---- the state ---- */

static struct blk {
    unsigned char *p;
    size_t size;   /* the bytes asked for (pvalloc: rounded to its page) */
    size_t usable; /* fa_malloc_usable_size when it was made */
    size_t align;  /* the alignment asked for, 0 for none */
    uint8_t seed;
} slot[SLOTS];

static struct pslot {
    fa_pool *pool;
    size_t size, align;
    bool ctor, debug;
    size_t max_objects; /* 0: none */
    bool may_fail;      /* a get may fail below max_objects (pool_create()) */
    bool lifo;          /* the next get must return last_put */
    bool idle;          /* trims itself when idle */
    void *last_put;
    size_t out;
    unsigned long long gets, puts, ctors, dtors;
} pool[POOLS];

static struct obj {
    unsigned char *p;
    unsigned pool;
    uint8_t seed;
} obj[OBJS];

static uint8_t counter;
static size_t live_bytes; /* the usable bytes of the blocks in slot[] */
static size_t page;
static size_t limit;      /* the library's (FASTALLOC_LIMIT) */
static bool debug_mode;   /* FASTALLOC_DEBUG */

/* The state of free pool objects that a put left: pointer -> pool and
 * seed, open addressing with linear probing.  An input of at most 4 KiB
 * puts at most 700 objects. */
#define STATES 4096
static struct state {
    void *p;
    unsigned pool;
    uint8_t seed;
} states[STATES];

static size_t state_home(const void *p)
{
    return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull >> 52) & (STATES - 1);
}

static void state_put(void *p, unsigned k, uint8_t seed)
{
    size_t i = state_home(p);
    while (states[i].p != NULL && states[i].p != p)
        i = (i + 1) & (STATES - 1);
    if (states[i].p == p)
        fail("a pool object put twice without a get between", (uintptr_t)p, k);
    states[i] = (struct state){p, k, seed};
}

/* Take p's entry out (backward shift, so that no probe chain breaks). */
static bool state_take(const void *p, struct state *out)
{
    size_t i = state_home(p);
    while (states[i].p != NULL && states[i].p != p)
        i = (i + 1) & (STATES - 1);
    if (states[i].p == NULL)
        return false;
    *out = states[i];
    for (size_t j = (i + 1) & (STATES - 1); states[j].p != NULL; j = (j + 1) & (STATES - 1)) {
        size_t h = state_home(states[j].p);
        /* j's entry may move to the hole at i unless its home lies in (i, j]. */
        if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
            states[i] = states[j];
            i = j;
        }
    }
    states[i].p = NULL;
    return true;
}

/* Forget pool k's entries: true when it had any. */
static bool state_drop(unsigned k)
{
    static struct state kept[STATES];
    size_t n = 0;
    bool had = false;
    for (size_t i = 0; i < STATES; i++) {
        if (states[i].p != NULL && states[i].pool == k)
            had = true;
        else if (states[i].p != NULL)
            kept[n++] = states[i];
    }
    if (had) {
        memset(states, 0, sizeof states);
        for (size_t i = 0; i < n; i++)
            state_put(kept[i].p, kept[i].pool, kept[i].seed);
    }
    return had;
}

/* ---- glibc, for the cases where the model says a call fails ---- */

/* The malloc family as a table: fastalloc's (fa_api, below), and glibc's
 * own functions, not the sanitizer's, looked up in libc.so.6. */
struct api {
    void *(*malloc)(size_t);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void *(*reallocarray)(void *, size_t, size_t);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    void (*free)(void *);
};
static struct api glibc;
/* glibc 2.38 on: EINVAL for an alignment not a power of two. */
static bool glibc_aligned_alloc_checks;

static void glibc_init(void)
{
    void *h = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL)
        fail("libc.so.6 is not loaded", 0, 0);
#define LOOK(f)                                                                                    \
    do {                                                                                           \
        *(void **)&glibc.f = dlsym(h, #f);                                                         \
        if (glibc.f == NULL)                                                                       \
            fail("glibc lacks " #f, 0, 0);                                                         \
    } while (0)
    LOOK(malloc);
    LOOK(calloc);
    LOOK(realloc);
    LOOK(reallocarray);
    LOOK(posix_memalign);
    LOOK(aligned_alloc);
    LOOK(memalign);
    LOOK(valloc);
    LOOK(pvalloc);
    LOOK(free);
#undef LOOK
    unsigned major = 0, minor = 0;
    sscanf(gnu_get_libc_version(), "%u.%u", &major, &minor);
    glibc_aligned_alloc_checks = major > 2 || (major == 2 && minor >= 38);
}

/* ---- the model ---- */

/* What the model expects of a call: success, a failure with this errno,
 * or either success or ENOMEM. */
#define OK 0
#define MAY (-1)

/* glibc refuses a request past PTRDIFF_MAX, and the OS one for more
 * address space than any 64-bit machine maps (2^57: five-level page
 * tables); from 1 GiB, a request may fail for want of memory, and its
 * failure says nothing about the allocator. */
#define IMPOSSIBLE ((size_t)1 << 57)
#define HUGE ((size_t)1 << 30)

static size_t add_sat(size_t a, size_t b)
{
    return a + b < a ? SIZE_MAX : a + b;
}

/* A request that needs need bytes of the heap. */
static int judge(size_t need)
{
    if (need > IMPOSSIBLE)
        return ENOMEM;
    /* FASTALLOC_LIMIT: a block larger than the limit fails on its own;
     * below, the limit counts the heap's free and partly used spans too,
     * so only a request that fits twice over with what is live must be
     * met. */
    if (limit != 0 && need > limit)
        return ENOMEM;
    if (need >= HUGE || (limit != 0 && add_sat(live_bytes, need) > limit / 2))
        return MAY;
    return OK;
}

static bool pow2(size_t x)
{
    return x != 0 && (x & (x - 1)) == 0;
}

/* The alignment C asks of a block of size bytes with no alignment named:
 * any type that fits (glibc gives 16 to all, fastalloc.h promises 16 from
 * 16 bytes). */
static size_t natural(size_t size)
{
    if (size >= 16)
        return 16;
    size_t a = 1;
    while (a * 2 <= size)
        a *= 2;
    return a;
}

/* ---- blocks ---- */

PLAIN static bool overlaps(const void *p, size_t n, const void *q, size_t m)
{
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    n = n ? n : 1;
    m = m ? m : 1;
    return a < b + m && b < a + n;
}

/* A block, or a pool object, [p, p + n) overlaps no other live one. */
PLAIN static void alone(const void *p, size_t n, const void *self)
{
    for (unsigned j = 0; j < SLOTS; j++)
        if (slot[j].p != NULL && slot[j].p != self && overlaps(p, n, slot[j].p, slot[j].usable))
            fail("a block overlaps a live block", (uintptr_t)p, (uintptr_t)slot[j].p);
    for (unsigned j = 0; j < OBJS; j++)
        if (obj[j].p != NULL && obj[j].p != self && overlaps(p, n, obj[j].p, pool[obj[j].pool].size))
            fail("a block overlaps a live pool object", (uintptr_t)p, (uintptr_t)obj[j].p);
}

/* Slot i's new block of size bytes: what every block must be, then the
 * pattern written. */
static void keep(unsigned i, void *p, size_t size, size_t align, int zero)
{
    unsigned char *b = p;
    size_t want = align > natural(size) ? align : natural(size);
    if (((uintptr_t)b & (want - 1)) != 0)
        fail("a block is misaligned", size, want);
    if (!fa_owns(b))
        fail("fa_owns denies a block", size, 0);
    if (fa_owns(b + 1))
        fail("fa_owns takes a pointer inside a block for one", size, 0);
    size_t u = fa_malloc_usable_size(b);
    if (u < size)
        fail("the usable size is below the size asked", size, u);
    alone(b, u, NULL);
    if (zero && !all(b, size, 0))
        fail("calloc's block is not zero", size, 0);
    slot[i] = (struct blk){b, size, u, align, counter++};
    live_bytes += u;
    fill(b, size, slot[i].seed);
}

static void check(unsigned i)
{
    if (!holds(slot[i].p, slot[i].size, slot[i].size, slot[i].seed))
        fail("a block's bytes changed", i, slot[i].size);
}

static void forget(unsigned i)
{
    live_bytes -= slot[i].usable;
    slot[i].p = NULL;
}

/* The free of version 1, and before a slot takes a new block. */
static void release(unsigned i)
{
    if (slot[i].p == NULL)
        return;
    check(i);
    if (slot[i].size % 3 == 0)
        fa_free_sized(slot[i].p, slot[i].size);
    else
        fa_free(slot[i].p);
    forget(i);
}

/* ---- the calls ---- */

enum op {
    OP_MALLOC,
    OP_CALLOC,
    OP_REALLOC,
    OP_REALLOCARRAY,
    OP_POSIX_MEMALIGN,
    OP_ALIGNED_ALLOC,
    OP_MEMALIGN,
    OP_VALLOC,
    OP_PVALLOC,
    OP_FREE,
    OP_FREE_SIZED,
    OP_FREE_ALIGNED_SIZED,
    OP_USABLE, /* fa_malloc_usable_size, and all of it written */
    OP_TRIM,
    OP_POOL_CREATE,
    OP_POOL_GET,
    OP_POOL_PUT,
    OP_POOL_TRIM,
    OP_POOL_DESTROY,
    NOPS
};

struct call {
    enum op op;
    unsigned slot, pool;
    size_t size; /* calloc and reallocarray: the count */
    size_t arg;  /* the alignment; calloc and reallocarray: the element's size */
    unsigned aux;
};

static const struct api fa_api = {
    .malloc = fa_malloc,
    .calloc = fa_calloc,
    .realloc = fa_realloc,
    .reallocarray = fa_reallocarray,
    .posix_memalign = fa_posix_memalign,
    .aligned_alloc = fa_aligned_alloc,
    .memalign = fa_memalign,
    .valloc = fa_valloc,
    .pvalloc = fa_pvalloc,
    .free = fa_free,
};

/* An allocating call but realloc's, through x: the block, or NULL with
 * *err the errno (posix_memalign's answer). */
static void *call_api(const struct api *x, const struct call *c, int *err)
{
    size_t size = c->size, a = c->arg;
    void *p = NULL;
    errno = 0;
    switch (c->op) {
    case OP_MALLOC:
    default:
        p = x->malloc(size);
        break;
    case OP_CALLOC:
        p = x->calloc(size, a);
        break;
    case OP_POSIX_MEMALIGN: {
        /* *out stays as it was on failure, and errno is not the answer. */
        static char sentinel;
        void *q = &sentinel;
        int r = x->posix_memalign(&q, a, size);
        if ((r == 0) != (q != &sentinel))
            fail("posix_memalign's answer and its *out disagree", size, a);
        p = r == 0 ? q : NULL;
        errno = r;
        break;
    }
    case OP_ALIGNED_ALLOC:
        p = x->aligned_alloc(a, size);
        break;
    case OP_MEMALIGN:
        p = x->memalign(a, size);
        break;
    case OP_VALLOC:
        p = x->valloc(size);
        break;
    case OP_PVALLOC:
        p = x->pvalloc(size);
        break;
    }
    *err = errno;
    return p;
}


/* Where glibc fails the call too (a bad argument, an overflow, a size past
 * any address space), glibc is asked: the same errno, or the model is
 * wrong.  Where only the limit fails it, glibc is not asked. */
static void ask_glibc(const struct call *c, int expect)
{
    size_t total = c->size;
    void *g;
    int gerr;
    /* Before 2.38 glibc's aligned_alloc is memalign, which takes any
     * alignment: the model holds the later rule, fastalloc.h's. */
    if (c->op == OP_ALIGNED_ALLOC && !pow2(c->arg) && !glibc_aligned_alloc_checks)
        return;
    if (c->op == OP_REALLOC || (c->op == OP_REALLOCARRAY && !__builtin_mul_overflow(c->size, c->arg, &total))) {
        /* glibc's reallocarray calls realloc through the PLT, the
         * sanitizer's: only its own overflow check is asked of it. */
        errno = 0;
        g = glibc.realloc(NULL, total);
        gerr = errno;
    } else if (c->op == OP_REALLOCARRAY) {
        errno = 0;
        g = glibc.reallocarray(NULL, c->size, c->arg);
        gerr = errno;
    } else {
        g = call_api(&glibc, c, &gerr);
    }
    if (g != NULL) {
        glibc.free(g);
        fail("glibc meets a call that the model fails", c->size, c->arg);
    }
    if (gerr != expect)
        fail("glibc fails a call with another errno than the model's", (size_t)gerr, (size_t)expect);
}

/* The expectation of an allocating call (not realloc's), with the block's
 * size and alignment; *glibc_fails when glibc's own rules fail it. */
static int expect_of(const struct call *c, size_t *total, size_t *align, bool *glibc_fails)
{
    size_t size = c->size, a = c->arg;
    *total = size;
    *align = 0;
    *glibc_fails = true;
    switch (c->op) {
    case OP_MALLOC:
    default:
        break;
    case OP_CALLOC:
        if (__builtin_mul_overflow(size, a, total))
            return ENOMEM;
        break;
    case OP_POSIX_MEMALIGN:
        /* glibc: EINVAL unless a power of two and a multiple of a pointer. */
        if (!pow2(a) || a % sizeof(void *) != 0)
            return EINVAL;
        *align = a;
        break;
    case OP_ALIGNED_ALLOC:
        /* glibc 2.38 on, and fastalloc.h: EINVAL unless a power of two. */
        if (!pow2(a))
            return EINVAL;
        *align = a;
        break;
    case OP_MEMALIGN:
        /* glibc: EINVAL past SIZE_MAX / 2 + 1; an alignment up to 16 is
         * malloc's; another rounds up to a power of two. */
        if (a > SIZE_MAX / 2 + 1)
            return EINVAL;
        *align = a <= 16 ? 16 : a;
        while (!pow2(*align))
            *align += *align & -*align;
        break;
    case OP_VALLOC:
        *align = page;
        break;
    case OP_PVALLOC:
        /* Rounded up to whole pages, the usable size included. */
        *align = page;
        *total = size > SIZE_MAX - page ? SIZE_MAX : (size + page - 1) & ~(page - 1);
        break;
    }
    /* An alignment past a page: glibc asks the heap for size + alignment. */
    size_t need = add_sat(*total, *align > page ? *align : 0);
    *glibc_fails = need > IMPOSSIBLE;
    return judge(need);
}

/* The outcome of a call, p or NULL with errno err, against the expectation;
 * true when p is a block to keep. */
static bool outcome(const char *call, const void *p, int err, int expect, size_t size)
{
    if (p == NULL) {
        if (expect == OK)
            fail(call, size, (size_t)err);
        if (err != (expect == MAY ? ENOMEM : expect))
            fail("a call failed with another errno than glibc's", size, (size_t)err);
        return false;
    }
    if (expect != OK && expect != MAY)
        fail("a call succeeded where glibc's fails", size, (size_t)expect);
    return true;
}

static const char *const failed[NOPS] = {
    [OP_MALLOC] = "malloc failed",
    [OP_CALLOC] = "calloc failed",
    [OP_REALLOC] = "realloc failed",
    [OP_REALLOCARRAY] = "reallocarray failed",
    [OP_POSIX_MEMALIGN] = "posix_memalign failed",
    [OP_ALIGNED_ALLOC] = "aligned_alloc failed",
    [OP_MEMALIGN] = "memalign failed",
    [OP_VALLOC] = "valloc failed",
    [OP_PVALLOC] = "pvalloc failed",
};

static void do_alloc(const struct call *c)
{
    size_t total, align;
    bool glibc_fails;
    int expect = expect_of(c, &total, &align, &glibc_fails), err;
    release(c->slot);
    void *p = call_api(&fa_api, c, &err);
    if (glibc_fails && expect > 0)
        ask_glibc(c, expect);
    if (outcome(failed[c->op], p, err, expect, total))
        keep(c->slot, p, total, align, c->op == OP_CALLOC);
}

/* realloc and reallocarray: the old bytes stay up to the smaller size; a
 * failure leaves the block as it was; a size of 0 frees it and returns
 * NULL (glibc; fastalloc.h). */
static void do_realloc(const struct call *c)
{
    unsigned i = c->slot;
    size_t size = c->size;
    bool overflow = c->op == OP_REALLOCARRAY && __builtin_mul_overflow(c->size, c->arg, &size);
    int expect = overflow ? ENOMEM : judge(size);
    unsigned char *old = slot[i].p;
    if (old != NULL)
        check(i);
    errno = 0;
    unsigned char *q = c->op == OP_REALLOCARRAY ? fa_reallocarray(old, c->size, c->arg) : fa_realloc(old, size);
    int err = errno;
    if ((overflow || size > IMPOSSIBLE) && expect > 0)
        ask_glibc(c, expect);
    if (old != NULL && size == 0 && !overflow) {
        if (q != NULL)
            fail("realloc(p, 0) did not return NULL", i, 0);
        forget(i);
        return;
    }
    if (!outcome(failed[c->op], q, err, expect, size)) {
        if (old != NULL)
            check(i);
        return;
    }
    if (old == NULL) {
        keep(i, q, size, 0, 0);
        return;
    }
    size_t kept = size < slot[i].size ? size : slot[i].size;
    if (!holds(q, kept, slot[i].size, slot[i].seed))
        fail("realloc lost the old bytes", slot[i].size, size);
    forget(i);
    keep(i, q, size, 0, 0);
}

static void do_free(const struct call *c)
{
    unsigned i = c->slot;
    struct blk *b = &slot[i];
    if (b->p == NULL) { /* free(NULL) and its sized forms do nothing */
        if (c->op == OP_FREE)
            fa_free(NULL);
        else if (c->op == OP_FREE_SIZED)
            fa_free_sized(NULL, c->size);
        else
            fa_free_aligned_sized(NULL, 16, c->size);
        return;
    }
    check(i);
    /* A sized free may name any size from the one asked for to the usable
     * size (fastalloc.h). */
    size_t named = b->size + (b->usable - b->size) / 15 * c->aux;
    if (c->aux == 15)
        named = b->usable;
    if (c->op == OP_FREE)
        fa_free(b->p);
    else if (c->op == OP_FREE_ALIGNED_SIZED && b->align != 0)
        fa_free_aligned_sized(b->p, b->align, named);
    else
        fa_free_sized(b->p, named);
    forget(i);
}

/* All of the usable size is the program's: written whole. */
static void do_usable(const struct call *c)
{
    unsigned i = c->slot;
    if (slot[i].p == NULL) {
        if (fa_malloc_usable_size(NULL) != 0)
            fail("fa_malloc_usable_size(NULL) is not 0", 0, 0);
        return;
    }
    check(i);
    size_t u = fa_malloc_usable_size(slot[i].p);
    if (u < slot[i].size)
        fail("the usable size fell below the size asked", slot[i].size, u);
    memset(slot[i].p, 0, u);
    slot[i].size = u;
    slot[i].seed = counter++;
    fill(slot[i].p, u, slot[i].seed);
}

/* fa_trim gives back free memory only. */
static void do_trim(void)
{
    fa_trim();
    for (unsigned i = 0; i < SLOTS; i++)
        if (slot[i].p != NULL)
            check(i);
}

/* ---- the object pool ---- */

static void ctor(void *o, void *arg)
{
    struct pslot *ps = arg;
    if (((uintptr_t)o & (ps->align - 1)) != 0)
        fail("ctor got a misaligned object", (uintptr_t)o, ps->align);
    fill(o, ps->size, SEED_CTOR);
    ps->ctors++;
}

/* An object leaving the pool: free, so in the state its put left it, or,
 * never got, in the ctor's. */
static void dtor(void *o, void *arg)
{
    struct pslot *ps = arg;
    unsigned k = (unsigned)(ps - pool);
    for (unsigned j = 0; j < OBJS; j++)
        if (obj[j].p == o)
            fail("dtor on an object that is out", (uintptr_t)o, k);
    struct state s;
    uint8_t seed = SEED_CTOR;
    if (state_take(o, &s)) {
        if (s.pool != k)
            fail("dtor on another pool's object", s.pool, k);
        seed = s.seed;
    }
    if (!holds(o, ps->size, ps->size, seed))
        fail("a free pool object changed", (uintptr_t)o, seed);
    ps->dtors++;
    if (o == ps->last_put)
        ps->last_put = NULL;
}

/* Pool k's counts: what this thread got and put, to the object (the one
 * thread's own counts are exact). */
static void pool_check(unsigned k)
{
    struct pslot *ps = &pool[k];
    fa_pool_stats_t st;
    fa_pool_stats(ps->pool, &st);
    if (st.live != ps->out || st.gets != ps->gets || st.puts != ps->puts)
        fail("fa_pool_stats disagrees with the gets and puts made", st.live, ps->out);
    if (st.object_size < ps->size)
        fail("fa_pool_stats' object size is below the one asked", st.object_size, ps->size);
}

/* A pool's options from an op: object size and alignment as a block's;
 * aux bit 0 a ctor and dtor, bit 1 debug, bits 2-3 a cap (none,
 * max_objects, max_bytes) or an idle trim after 1 ms; the slot's low
 * nibble the cap's amount, its next 2 bits the block size (the default,
 * 4 KiB, 256 KiB, or 12 KiB, which is no power of two). */
static int pool_options(const struct call *c, fa_pool_options *o)
{
    static const size_t block[4] = {0, 4096, (size_t)256 << 10, 12288};
    unsigned amount = c->slot & 15, cap = (c->aux >> 2) & 3;
    *o = (fa_pool_options){.object_size = c->size, .object_align = c->arg, .idle_trim_ms = -1};
    if (c->aux & 1) {
        o->ctor = ctor;
        o->dtor = dtor;
        o->arg = &pool[c->pool];
    }
    o->debug = (c->aux >> 1) & 1;
    o->block_size = block[(c->slot >> 4) & 3];
    if (cap == 1)
        o->max_objects = 1 + amount * 3;
    else if (cap == 2)
        o->max_bytes = (size_t)(1 + amount) << 16;
    else if (cap == 3)
        o->idle_trim_ms = 1;
    /* fastalloc.h: EINVAL for a size of 0, an alignment not a power of two,
     * a block size not a power of two from 4096; the library also refuses
     * objects past 1 GiB and alignments past a page: a limit of its own. */
    if (o->object_size == 0 || (o->object_align & (o->object_align - 1)) != 0 ||
        (o->block_size != 0 && (!pow2(o->block_size) || o->block_size < 4096)))
        return EINVAL;
    if (o->object_size > ((size_t)1 << 30) || o->object_align > 4096)
        return MAY;
    return OK;
}

static void pool_destroy(unsigned k)
{
    struct pslot *ps = &pool[k];
    if (ps->pool == NULL)
        return;
    pool_check(k);
    /* Objects still out go without dtor: dropped. */
    size_t out = ps->out;
    for (unsigned j = 0; j < OBJS; j++)
        if (obj[j].p != NULL && obj[j].pool == k)
            obj[j].p = NULL;
    fa_pool_destroy(ps->pool);
    if (ps->ctor && ps->ctors != ps->dtors + out)
        fail("dtor did not run on every free object", ps->ctors, ps->dtors + out);
    if (state_drop(k) && ps->ctor)
        fail("destroy left a put object without dtor", k, 0);
    memset(ps, 0, sizeof *ps);
}

static bool pool_create(const struct call *c)
{
    unsigned k = c->pool;
    fa_pool_options o;
    int expect = pool_options(c, &o);
    pool_destroy(k);
    errno = 0;
    fa_pool *p = fa_pool_create(&o);
    int err = errno;
    if (p == NULL) {
        if (expect == OK || err != (expect == MAY ? EINVAL : expect))
            fail("fa_pool_create failed, or with another errno than EINVAL", c->size, (size_t)err);
        return false;
    }
    if (expect > 0)
        fail("fa_pool_create took bad options", c->size, c->arg);
    struct pslot *ps = &pool[k];
    *ps = (struct pslot){.pool = p, .size = o.object_size, .align = o.object_align ? o.object_align : 16};
    ps->ctor = o.ctor != NULL;
    ps->debug = o.debug;
    ps->max_objects = o.max_objects;
    /* max_bytes counts blocks, whose objects this thread need not all
     * reach; a debug pool holds a put object in its quarantine, and under
     * max_objects that object counts without being there to get. */
    ps->may_fail = o.max_bytes != 0 || (o.debug && o.max_objects != 0);
    ps->idle = o.idle_trim_ms > 0;
    return true;
}

static void pool_put(unsigned j)
{
    struct obj *ob = &obj[j];
    if (ob->p == NULL)
        return;
    struct pslot *ps = &pool[ob->pool];
    if (!holds(ob->p, ps->size, ps->size, ob->seed))
        fail("a pool object's bytes changed", (uintptr_t)ob->p, ob->pool);
    /* The state it is put in is the one it must come back in: kept, where
     * the pool says when the object leaves it (by its dtor), or where the
     * program does (fa_pool_trim and fa_pool_destroy, here; not so with
     * idle trims), and unless a debug pool with no ctor fills it instead
     * (13-pool/debug.c). */
    if (ps->ctor || (!ps->idle && !ps->debug))
        state_put(ob->p, ob->pool, ob->seed);
    fa_pool_put(ps->pool, ob->p);
    ps->out--;
    ps->puts++;
    ps->last_put = ob->p;
    ps->lifo = !ps->debug;
    ob->p = NULL;
}

static void pool_get(const struct call *c)
{
    unsigned k = c->pool, j = c->slot;
    struct pslot *ps = &pool[k];
    if (ps->pool == NULL && !pool_create(c))
        return;
    pool_put(j);
    errno = 0;
    unsigned char *o = fa_pool_get(ps->pool);
    int err = errno;
    bool full = ps->max_objects != 0 && ps->out >= ps->max_objects;
    if (o == NULL) {
        if (err != ENOMEM)
            fail("fa_pool_get failed with another errno than ENOMEM", k, (size_t)err);
        if (!full && !ps->may_fail)
            fail("fa_pool_get failed below the pool's caps", ps->out, ps->max_objects);
        return;
    }
    if (full)
        fail("fa_pool_get passed max_objects", ps->out, ps->max_objects);
    if (((uintptr_t)o & (ps->align - 1)) != 0)
        fail("a pool object is misaligned", (uintptr_t)o, ps->align);
    if (ps->lifo && o != ps->last_put)
        fail("fa_pool_get did not return the object put last", (uintptr_t)o, (uintptr_t)ps->last_put);
    alone(o, ps->size, NULL);
    struct state s;
    if (state_take(o, &s)) {
        if (s.pool != k || !holds(o, ps->size, ps->size, s.seed))
            fail("a pool object came back in another state than it was put in", (uintptr_t)o, k);
    } else if (ps->ctor) {
        if (!holds(o, ps->size, ps->size, SEED_CTOR))
            fail("a new pool object is not in its ctor's state", (uintptr_t)o, k);
    } else if (ps->debug && !all(o, ps->size, 0xAA)) {
        fail("a debug pool's object is not filled with 0xAA", (uintptr_t)o, k);
    }
    ps->out++;
    ps->gets++;
    ps->lifo = false;
    ps->last_put = NULL;
    /* Odd seeds: never SEED_CTOR's. */
    obj[j] = (struct obj){o, k, (uint8_t)(counter++ | 1)};
    fill(o, ps->size, obj[j].seed);
}

static void do_pool(const struct call *c)
{
    struct pslot *ps = &pool[c->pool];
    switch (c->op) {
    case OP_POOL_CREATE:
    default:
        pool_create(c);
        break;
    case OP_POOL_GET:
        pool_get(c);
        break;
    case OP_POOL_PUT:
        pool_put(c->slot);
        break;
    case OP_POOL_TRIM:
        if (ps->pool == NULL)
            break;
        /* A trim takes the thread's cached objects back to their blocks:
         * the next get need not be the last put. */
        ps->lifo = false;
        fa_pool_trim(ps->pool);
        pool_check(c->pool);
        /* With no dtor, the objects it gave back go unseen: an object at
         * the same place later is a new one. */
        if (!ps->ctor)
            state_drop(c->pool);
        break;
    case OP_POOL_DESTROY:
        pool_destroy(c->pool);
        break;
    }
}

static const char *const names[NOPS] = {
    "malloc", "calloc", "realloc", "reallocarray", "posix_memalign", "aligned_alloc", "memalign",
    "valloc", "pvalloc", "free", "free_sized", "free_aligned_sized", "usable", "trim",
    "pool_create", "pool_get", "pool_put", "pool_trim", "pool_destroy"};

/* FUZZ_API_TRACE=1: each call on stderr, for a failure's story. */
static bool trace;

static void run(const struct call *c)
{
    if (trace)
        fprintf(stderr, "fuzz-api: %s slot %u pool %u size %#zx arg %#zx aux %u\n", names[c->op], c->slot,
                c->pool, c->size, c->arg, c->aux);
    switch (c->op) {
    case OP_MALLOC:
    case OP_CALLOC:
    case OP_POSIX_MEMALIGN:
    case OP_ALIGNED_ALLOC:
    case OP_MEMALIGN:
    case OP_VALLOC:
    case OP_PVALLOC:
        do_alloc(c);
        break;
    case OP_REALLOC:
    case OP_REALLOCARRAY:
        do_realloc(c);
        break;
    case OP_FREE:
    case OP_FREE_SIZED:
    case OP_FREE_ALIGNED_SIZED:
        do_free(c);
        break;
    case OP_USABLE:
        do_usable(c);
        break;
    case OP_TRIM:
        do_trim();
        break;
    default:
        do_pool(c);
        break;
    }
}

/* ---- the formats ---- */

/* Version 1's op (the format at the top): the same calls as before. */
static void decode_v1(const uint8_t *d, struct call *c)
{
    static const enum op ops[8] = {OP_MALLOC, OP_MALLOC, OP_CALLOC, OP_ALIGNED_ALLOC,
                                   OP_REALLOC, OP_FREE, OP_FREE, OP_USABLE};
    size_t size = (size_t)d[1] | (size_t)d[2] << 8;
    if (d[3] & 0x80)
        size <<= (d[3] & 0x40) ? 8 : 6;
    *c = (struct call){.op = ops[d[0] & 7], .slot = (d[0] >> 3) & (SLOTS - 1), .size = size};
    switch (c->op) {
    case OP_CALLOC: /* as n blocks of 16 where it divides */
        c->size = size % 16 == 0 ? size / 16 : 1;
        c->arg = size % 16 == 0 ? 16 : size;
        break;
    case OP_ALIGNED_ALLOC:
        c->arg = (size_t)1 << (d[3] & 15);
        if (c->arg < sizeof(void *))
            c->arg = sizeof(void *);
        if (d[3] & 0x20)
            c->op = OP_POSIX_MEMALIGN;
        break;
    case OP_FREE: /* version 1's free was release() */
        c->op = slot[c->slot].size % 3 == 0 ? OP_FREE_SIZED : OP_FREE;
        c->aux = 0;
        break;
    default:
        break;
    }
}

/* Version 2's size: mode m (a nibble) applied to v.  Small sizes most of
 * the time; then up to 16 MiB and 1 GiB, around the largest small class and
 * around whole pages, powers of two near each other up to 2^63, and the
 * impossible sizes near PTRDIFF_MAX and SIZE_MAX. */
static size_t size_of(unsigned m, size_t v)
{
    switch (m) {
    default: /* 0 to 4, and 15 */
        return v;
    case 5:
        return v & 255;
    case 6:
        return v << 4;
    case 7:
        return v << 8;
    case 8:
        return v << 14;
    case 9:
        return FA_MAX_SMALL - 2048 + (v & 4095);
    case 10:
        return (v >> 4) * 4096 + (v & 15) - 8; /* 0 - 8 wraps: an impossible size */
    case 11:
        return ((size_t)1 << (v & 63)) + ((v >> 6) & 3) - 1;
    case 12:
        return (size_t)PTRDIFF_MAX - 32768 + v;
    case 13:
        return SIZE_MAX - v;
    case 14:
        return v & 15;
    }
}

/* Version 2's alignment, from one byte: a power of two up to 64 KiB most
 * of the time, else any power of two, 0, a multiple of three, or one near
 * 2^62 or 2^63. */
static size_t arg_of(uint8_t b)
{
    unsigned e = b & 31;
    switch (b >> 5) {
    default: /* 0 to 2 */
        return (size_t)1 << (e % 17);
    case 3:
        return (size_t)1 << (e * 2 + (b >> 7));
    case 4:
        return 0;
    case 5:
        return (size_t)3 << (e % 16);
    case 6:
        return ((size_t)1 << (62 + (e & 1))) + (e >> 1) - 8;
    case 7:
        return (size_t)1 << (e % 6); /* an element's size for calloc */
    }
}

/* Under ASan a block's shadow is written whole when the block is handed
 * out and when it is freed, an eighth of its size: a block of 64 GiB would
 * cost 8 GiB.  So a block asked for is at most 64 MiB (in debug mode 320 KiB,
 * still past the small classes: the mode fills and reads every byte of a
 * block, three times), or so large that no address space holds it (2^48)
 * and it fails before any shadow is touched; so is an alignment (debug
 * mode takes size + alignment bytes for an aligned block); a pool's
 * objects are at most 1 MiB (a block holds 8 of them at least), or past
 * the 1 GiB that fa_pool_create refuses. */
static size_t asked_max = (size_t)64 << 20;
#define ASKED_MAX asked_max
#define NO_SPACE ((size_t)1 << 48)
#define OBJECT_MAX ((size_t)1 << 20)


static void decode_v2(const uint8_t *d, struct call *c)
{
    size_t v = (size_t)d[2] | (size_t)d[3] << 8, total;
    *c = (struct call){.op = (enum op)(d[0] % NOPS), .slot = d[1] & (SLOTS - 1), .pool = d[1] >> 6,
                       .size = size_of(d[4] >> 4, v), .arg = arg_of(d[5]), .aux = d[4] & 15};
    bool array = c->op == OP_CALLOC || c->op == OP_REALLOCARRAY;
    /* calloc and reallocarray: small elements most of the time, so that a
     * count and an element do not overflow far more often than not. */
    if (array && d[5] < 0x80)
        c->arg = 1 + (d[5] & 31);
    if (c->op == OP_POOL_CREATE || c->op == OP_POOL_GET) {
        if (c->size > OBJECT_MAX && c->size <= ((size_t)1 << 30))
            c->size = OBJECT_MAX;
    } else if (array && c->arg != 0 && !__builtin_mul_overflow(c->size, c->arg, &total)) {
        if (total > ASKED_MAX && total < NO_SPACE)
            c->size = ASKED_MAX / c->arg;
    } else if (c->size > ASKED_MAX && c->size < NO_SPACE) {
        c->size = ASKED_MAX;
    }
    if (!array && c->arg > ASKED_MAX && c->arg < NO_SPACE)
        c->arg = ASKED_MAX;
}

/* ---- the start ---- */

/* Each FASTALLOC_ variable names an option, and the library took its value:
 * a set of options with a typo, or a value that the library ignored (it
 * says so on stderr and keeps the default), would run the default. */
static void check_environment(void)
{
    extern char **environ;
    char line[512] = "";
    for (char **e = environ; *e != NULL; e++) {
        if (strncmp(*e, "FASTALLOC_", 10) != 0)
            continue;
        size_t len = strcspn(*e, "=");
        const struct fa__option_def *d = NULL;
        for (unsigned k = 0; k < fa__option_count && d == NULL; k++)
            if (strlen(fa__option_defs[k].env) == len && strncmp(*e, fa__option_defs[k].env, len) == 0)
                d = &fa__option_defs[k];
        if (d == NULL) {
            fprintf(stderr, "fuzz-api: %s: no such option\n", *e);
            abort();
        }
        long long want, have;
        if (fa__option_parse(d, *e + len + 1, &want) != NULL || fa_option_get(d->name, &have) != 0 ||
            have != (d->type == FA_OPT_TEXT ? want != 0 : want)) {
            fprintf(stderr, "fuzz-api: %s was not taken\n", *e);
            abort();
        }
        if (!FA_SECURE && strncmp(d->name, "secure", 6) == 0) {
            fprintf(stderr, "fuzz-api: %s: an option of the hardened build, and this is not it\n", *e);
            abort();
        }
        size_t n = strlen(line);
        snprintf(line + n, sizeof line - n, " %s", *e + 10);
    }
    fprintf(stderr, "fuzz-api: %s build, options:%s\n", FA_SECURE ? "hardened" : "default",
            line[0] ? line : " none");
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fa_free(fa_malloc(1)); /* the library reads its options */
    check_environment();
    long long l = 0, debug = 0;
    fa_option_get("limit", &l);
    limit = (size_t)l;
    fa_option_get("debug", &debug);
    debug_mode = debug != 0;
    if (debug_mode)
        asked_max = (size_t)320 << 10;
    page = (size_t)sysconf(_SC_PAGESIZE);
    glibc_init();
    trace = getenv("FUZZ_API_TRACE") != NULL;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    static unsigned runs;
    bool v2 = len > 0 && data[0] == V2;
    size_t step = v2 ? 6 : 4;
    for (size_t at = v2; at + step <= len; at += step) {
        struct call c;
        if (v2)
            decode_v2(data + at, &c);
        else
            decode_v1(data + at, &c);
        run(&c);
    }
    for (unsigned k = 0; k < POOLS; k++)
        pool_destroy(k);
    for (unsigned i = 0; i < SLOTS; i++)
        release(i);
    if (live_bytes != 0)
        fail("the live bytes do not add up", live_bytes, 0);
    /* Everything was freed, and the calling thread's counts are exact
     * (fastalloc.h, fa_stats_t); but debug mode's quarantine holds freed
     * blocks, in use to the heap below it. */
    fa_stats_t st;
    fa_stats_get(&st);
    if ((st.in_use_blocks != 0 && !debug_mode) || st.npools != 0)
        fail("fa_stats counts blocks or pools after all were freed", st.in_use_blocks, st.npools);
    if (++runs % 64 == 0)
        fa_trim();
    return 0;
}
