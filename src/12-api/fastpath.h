/* The fast paths of malloc and free, inlined into every public entry point.
 * Their common case (a small block; the thread cache has one, or the block's
 * span is the thread's own) is straight-line code with no call, no lock and
 * no atomic read-modify-write: one TLS load, two or three table loads and a
 * free-list pop or push.  Everything else leaves through one unlikely branch into a
 * slow path; that branch is where debug modes, hooks and tracing attach. */
#ifndef FA_API_FASTPATH_H
#define FA_API_FASTPATH_H

#include "00-base/config.h"
#include "02-records/freelist.h"
#include "06-large/large.h"
#include "04-pageheap/pageheap.h"
#include "02-records/pagemap.h"
#include "02-records/sizeclass.h"
#include "02-records/tail.h"
#include "08-tcache/tcache.h"
#include "12-api/slow.h"

/* malloc's count of the block it hands out: one add to memory.  gcc, left
 * to itself, puts &heads[cls] in a register to share it with the counter,
 * which costs a lea and a move of the result (docs/HISTORY.md, #13); the
 * add is written out on x86-64 so that it indexes tc and cls as the
 * heads[] accesses do.  The asm writes memory that nothing in the fast
 * path reads. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define FA_COUNT_ALLOC(tc, cls)                                                                      \
    __asm__("addq $1, %c2(%0,%q1,8)" ::"r"(tc), "r"(cls), "i"(offsetof(struct fa__tcache, n.allocs)))
#else
#define FA_COUNT_ALLOC(tc, cls) FA_COUNT_ADD((tc)->n.allocs[cls], 1)
#endif

/* The hardened build's options are served by copies of these paths of
 * their own (zeroed.c), so that the common ones test them once and keep
 * no register for them.  zeroed: `secure_zero`; tails: `secure_tails`,
 * whose blocks hold FA_TAIL_BYTES more than asked for (02-records/tail.h). */
#define FA_BODY_TAIL(tails) ((tails) ? (size_t)FA_TAIL_BYTES : (size_t)0)
#if FA_SECURE
/* Either option makes these tests fail for every call (fa__fl_key), which
 * then leaves for zeroed.c: the common paths test the options nowhere. */
#define FA_SMALL_LIMIT(rare, t) ((rare) ? FA_SMALL_TABLE_MAX - (t) + 1 : fa__fl_key.small_limit)
#define FA_FREE_MASK(rare) ((rare) ? FA_MIN_ALIGN - 1 : fa__fl_key.free_mask)
#else
#define FA_SMALL_LIMIT(rare, t) (FA_SMALL_TABLE_MAX + 1)
#define FA_FREE_MASK(rare) (FA_MIN_ALIGN - 1)
#endif

/* A sized delete of a block of the calling thread's own span, whose size
 * is above the first table's or not of the block's class (cxx.c): the
 * check in full, then the free, or the program stops. */
FA_NOINLINE void fa__api_delete_check(void *p, size_t size) FA_HIDDEN;

FA_INLINE void *fa__malloc_body(size_t size, bool zeroed, bool tails)
{
    const bool rare = zeroed || tails;
    const size_t t = FA_BODY_TAIL(tails);
    size_t cls; /* the table's byte, zero-extended: indexes heads[] as it is */
    if (tails && FA_UNLIKELY(size == 0)) /* a block of no bytes, as without tails (06-large/empty.h) */
        return fa__api_alloc_slow(0, 0);
    if (FA_LIKELY(size < FA_SMALL_LIMIT(rare, t)))
        cls = __atomic_load_n(&fa__class_small[size + t], __ATOMIC_RELAXED); /* sizeclass.h */
    else if (!rare && FA_UNLIKELY(FA_FL_RARE))
        return fa__api_malloc_rare(size);
    else if (FA_LIKELY(size <= FA_SMALL_TABLE_MAX - t))
        cls = __atomic_load_n(&fa__class_small[size + t], __ATOMIC_RELAXED);
    else if (FA_LIKELY(size <= FA_MAX_SMALL - t))
        cls = __atomic_load_n(&fa__class_large[(size + t + 127) >> 7], __ATOMIC_RELAXED);
    else
        return fa__api_alloc_large(size, 0, false);
    struct fa__tcache *tc = fa__tls_cache;
    void *p = tc->heads[cls];
    if (FA_UNLIKELY(p == NULL))
        return fa__api_alloc_slow(size, cls);
    tc->heads[cls] = fa__fl_next_of(p, (unsigned)cls);
    FA_COUNT_ALLOC(tc, cls);
#if FA_SECURE
    size_t bsize = tc->bsize[cls];
#else
    size_t bsize = fa__classes[cls].size; /* unused but by AddressSanitizer */
#endif
    fa__fl_hand_out(p, bsize, zeroed);
    if (tails)
        fa__tail_write(p, size, bsize);
    return p;
}

FA_INLINE void *fa__do_malloc(size_t size)
{
    return fa__malloc_body(size, false, false);
}

/* A block goes back to its span's own freelist when the calling thread owns
 * the span, which the page map says in one load; every other case (another
 * thread's span, no span nobody owns, a large block, no cache yet, NULL)
 * leaves through that one test.  used counts the span's blocks that are not
 * on its freelist: when it reaches 0, every block is free and the slow path
 * decides whether the thread keeps the span.
 * Two checks come first: a pointer that is no block's start by its low
 * bits, and a block already marked free, each a test and a branch (SECURITY.md
 * says what they catch).
 * tails: the blocks carry tails (`secure_tails`); check: look at them
 * here (not when the caller looked in full already).  sized: the default
 * build's C++ sized delete, of size bytes: a block of the thread's own
 * span must be of the class of size, or it leaves for cxx.c's check (a
 * load and a compare beside the span's record the free reads anyway; the
 * hardened build checks every sized delete in full before, cxx.c). */
FA_INLINE void fa__free_body(void *p, bool zeroed, bool tails, bool check, bool sized, size_t size)
{
    uintptr_t a = (uintptr_t)p;
#if FA_SECURE
    const bool rare = zeroed || tails;
    if (FA_UNLIKELY(a & FA_FREE_MASK(rare))) { /* or an option of the hardened build */
        /* Straight to zeroed.c's copy, not through slow.c: slow.c lies
         * below zeroed.c, whose paths leave into it. */
        if (!rare && FA_FL_RARE && a % FA_MIN_ALIGN == 0)
            fa__api_free_rare(p);
        else
            fa__api_free_misaligned(p);
        return;
    }
#endif
    /* A pointer with no leaf (NULL, a foreign one) finds no owner there
     * (02-records/pagemap.h) and leaves below, with no test of its own. */
    struct fa__pm_leaf *leaf = fa__pm_leaf_any(a);
    size_t i = fa__pm_index(a);
    const void *owner = __atomic_load_n(&leaf->owner[i], __ATOMIC_RELAXED);
    if (FA_UNLIKELY(owner != fa__tls_cache)) {
        fa__api_free_slow(p);
        return;
    }
    struct fa__span *s = leaf->span[i];
#if FA_SECURE
    /* p must be the start of a block that was cut: a pointer into a block
     * (free(p + 16) of a 1 KiB block) or past the blocks cut so far is
     * stopped off this path (fa__tc_free_bad).  With tails, the cut
     * bound alone is tested here, which keeps the tails' reads inside the
     * span; that p is a block's start the tails say: such a p's "tail" is
     * bytes of the program's or of the next block, which match a tail and
     * its canary by chance alone, with keys it does not know.  A block
     * first in its span, or a tail that looks bad, is looked at in full
     * off this path (fa__api_free_tails), which then finishes the free. */
    if (!tails) {
        if (FA_UNLIKELY(!fa__span_block_start(s, a)))
            fa__tc_free_bad(p, s);
    } else if (FA_UNLIKELY(fa__span_block_index(s, a) >= s->carved)) {
        fa__tc_free_bad(p, s);
    }
    if (tails && check && FA_UNLIKELY(!fa__tail_fast_ok(p, fa__classes[s->cls].size, &s->start))) {
        fa__api_free_tails(p);
        return;
    }
#else
    /* p must be a block's start: free(p + 16) of a live block would put
     * p + 16 on the list, and hand it out over p's bytes.  The test
     * (02-records/span.h, blockdiv) also finds a pointer that is not
     * 16-byte aligned, which the default build therefore does not test
     * before: blocks are of whole 16 bytes, from a page's start. */
    if (FA_UNLIKELY(!fa__span_at_block(s, a))) {
        fa__api_free_bad(p);
        return;
    }
#endif
    (void)tails;
    (void)check;
#if !FA_SECURE
    if (sized && FA_UNLIKELY(size > FA_SMALL_TABLE_MAX ||
                             __atomic_load_n(&fa__class_small[size], __ATOMIC_RELAXED) != s->cls)) {
        fa__api_delete_check(p, size);
        return;
    }
#endif
    (void)sized;
    (void)size;
    if (FA_UNLIKELY(fa__fl_marked(p, s))) {
        fa__api_free_marked(p);
        return;
    }
    fa__fl_push_free(&s->freelist, p, s);
#if FA_SECURE
    /* The owner is the calling thread's cache, in a register already
     * (a read of fa__tls_cache is one more instruction): fa__tc_not_last. */
    ((struct fa__tcache *)owner)->last_free = p;
#else
    (void)owner;
#endif
    if (zeroed)
        fa__fl_scrub(p, fa__classes[s->cls].size);
    fa__fl_poison(p, fa__classes[s->cls].size);
    if (FA_UNLIKELY(--s->used == 0))
        fa__tc_span_empty(s);
}

FA_INLINE void fa__do_free(void *p)
{
    fa__free_body(p, false, false, false, false, 0);
}

/* The default build's C++ sized delete of size bytes. */
FA_INLINE void fa__do_free_sized(void *p, size_t size)
{
    fa__free_body(p, false, false, false, true, size);
}

#endif
