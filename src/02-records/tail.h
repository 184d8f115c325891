/* The tail seam: the hardened build's record of what a small block was
 * asked for, kept in the block's own last bytes, and a canary after it,
 * with the `secure_tails` option (off by default: they were most of the
 * build's cost, SECURITY.md).  Without it FA_TAIL is 0, a block's bytes
 * are its class's, and every function here but the fast paths' own
 * reads the option.
 *
 * A block of size bytes handed out for n bytes (16 <= n <= size - FA_TAIL)
 * has
 *   [n, n + 8)       canary: a per-process random byte, 8 times;
 *   [size - 2, size) tail: size - n, XORed with a per-process random
 *                    16-bit key.
 * A request of fewer than 16 bytes is recorded as 16: a free block keeps
 * its link and its mark in its first 16 bytes, where a canary would not
 * last, and with n at least 16 a check finds the canary at size minus
 * the tail, with no test.
 * A write past the n bytes asked for lands on the canary or the tail, and
 * a free finds it: free checks the block's own tail, and the tail of the
 * block just below it, where a write before the block's start lands (glibc
 * checks the next chunk's header at free; this is its check turned on the
 * block's neighbour).  Every request gains FA_TAIL bytes, so that every
 * block has room for both.  A free block keeps the tail of its last use,
 * and a block cut but never handed out has a tail that says size - FA_TAIL
 * (fa__tail_set at the cut), so that any block's tail can be checked at
 * any time.  malloc_usable_size says n.
 *
 * Another thread may check a tail while its block's owner rewrites it (a
 * realloc in place, a hand-out): the canary is one byte repeated, so that
 * a rewrite leaves the bytes of the old canary a canary's until the new
 * tail is in place, and a check that fails looks again while the tail
 * moves (fa__tail_corrupt).
 *
 * Blocks of 16 bytes carry no tail: their last 8 bytes are the free mark
 * (freelist.h).  Requests of up to 6 bytes take them unguarded. */
#ifndef FA_RECORDS_TAIL_H
#define FA_RECORDS_TAIL_H

#include "00-base/config.h"
#include "02-records/freelist.h"
#include "02-records/pagemap.h"

#if FA_SECURE
/* The bytes a request gains when tails are on. */
#define FA_TAIL_BYTES 10
#define FA_TAILS_ON (fa__fl_key.tails)
#define FA_TAIL ((size_t)(FA_TAILS_ON ? FA_TAIL_BYTES : 0))
#else
#define FA_TAIL_BYTES 0
#define FA_TAILS_ON false
#define FA_TAIL ((size_t)0)
#endif
/* The smallest block with a tail. */
#define FA_TAIL_MIN 32
/* The most bytes a tail records beyond n: a block asked for fewer bytes
 * than size - FA_TAIL_MAX (an aligned block, say) is checked from there. */
#define FA_TAIL_MAX 0xffffu

#if FA_SECURE
#ifdef FA_ASAN
/* An AddressSanitizer build poisons a free block past its link (asan.h),
 * and a free reads the tail of the free block below it: the reads are the
 * allocator's own, out of line, where the sanitizer does not look. */
uint64_t fa__tail_raw64(const char *p) FA_HIDDEN;
uint16_t fa__tail_raw16(const char *p) FA_HIDDEN;
#elif defined(__SANITIZE_THREAD__)
/* A free reads the canary of the block below while that block's owner may
 * be writing it (see above: a check that fails looks again), with plain
 * loads of 8 bytes at any alignment: out of line, where ThreadSanitizer
 * does not look.  The tail's record itself is atomic on both sides. */
uint64_t fa__tail_racy64(const char *p) FA_HIDDEN;
#endif

FA_INLINE uint64_t fa__tail_ld64(const char *p)
{
#if defined(__SANITIZE_THREAD__) && !defined(FA_ASAN)
    return fa__tail_racy64(p);
#elif defined(FA_ASAN)
    return fa__tail_raw64(p);
#else
    uint64_t v;
    __builtin_memcpy(&v, p, 8);
    return v;
#endif
}

FA_INLINE uint16_t fa__tail_ld16(const char *p)
{
#ifdef FA_ASAN
    return fa__tail_raw16(p);
#else
    return __atomic_load_n((const uint16_t *)p, __ATOMIC_ACQUIRE);
#endif
}

/* What the tail of a block asked for n bytes records: n, or 16 when n is
 * less. */
FA_INLINE size_t fa__tail_canary(size_t n)
{
    return n > 16 ? n : 16;
}

/* The tail of the block of size bytes at b failed its check: look again
 * while its owner moves it; stop the program if it stays bad.  below: b
 * is the block before the one being freed. */
FA_COLD void fa__tail_corrupt(const void *b, size_t size, bool below) FA_HIDDEN;
#endif

/* Write the tail of the block of size bytes at p, handed out for n bytes
 * (size - FA_TAIL_MAX <= n <= size - FA_TAIL), tails being on.  Bytes
 * below n are left as they are. */
FA_INLINE void fa__tail_write(void *p, size_t n, size_t size)
{
#if FA_SECURE
    if (size < FA_TAIL_MIN)
        return;
    char *b = p;
    n = fa__tail_canary(n);
    /* A span cut again (08-tcache, fa__tc_keep) is cut from blocks that
     * were freed, which an AddressSanitizer build poisoned past their
     * second word (freelist.h, fa__fl_poison). */
    FA_UNPOISON(b + n, size - n);
    __builtin_memcpy(b + n, &fa__fl_key.tail, 8);
    __atomic_store_n((uint16_t *)(b + size - 2), (uint16_t)((size - n) ^ fa__fl_key.tail_len),
                     __ATOMIC_RELEASE);
#else
    (void)p;
    (void)n;
    (void)size;
#endif
}

/* fa__tail_write, when tails are on. */
FA_INLINE void fa__tail_set(void *p, size_t n, size_t size)
{
    if (FA_TAILS_ON)
        fa__tail_write(p, n, size);
}

/* What a tail records for a block of size bytes asked for n bytes, when
 * size may be far larger (an aligned block): n, or as much as it can. */
FA_INLINE size_t fa__tail_n(size_t n, size_t size)
{
    return size - n > FA_TAIL_MAX ? size - FA_TAIL_MAX : n;
}

#if FA_SECURE
/* Whether the block that ends at end, room + FA_TAIL_BYTES bytes long, has its
 * tail and canary as written; the keys klen and canary are passed in so
 * that a caller checking two blocks reads them once.  Its d, the tail's
 * record, is set in *dp. */
FA_INLINE bool fa__tail_end_ok(const char *end, size_t room, uint16_t klen, uint64_t canary,
                               size_t *dp)
{
    size_t d = (size_t)fa__tail_ld16(end - 2) ^ (size_t)klen;
    *dp = d;
    /* FA_TAIL_BYTES <= d <= size, so that the canary lies in the block, below
     * the tail; then it is at n = size - d.  Written with e = d - FA_TAIL_BYTES
     * so that the free fast path needs one register fewer. */
    size_t e = d - FA_TAIL_BYTES;
    return FA_LIKELY(e <= room) && FA_LIKELY(fa__tail_ld64(end - FA_TAIL_BYTES - e) == canary);
}
#endif

/* The bytes the block of size bytes at p was handed out for, as its tail
 * records them; SIZE_MAX when the tail or the canary was overwritten.  A
 * block without a tail: size. */
FA_INLINE size_t fa__tail_get(const void *p, size_t size)
{
#if FA_SECURE
    if (!FA_TAILS_ON || size < FA_TAIL_MIN)
        return size;
    size_t d;
    if (!fa__tail_end_ok((const char *)p + size, size - FA_TAIL_BYTES, fa__fl_key.tail_len, fa__fl_key.tail,
                         &d))
        return SIZE_MAX;
    return size - d;
#else
    (void)p;
    return size;
#endif
}

#if FA_SECURE
/* The first block of a span is freed by its owner me: check the last
 * block of the span below, when it ends at p and me owns that span too (a
 * span another thread owns may go back to the page heap meanwhile). */
void fa__tail_check_below(void *p, const void *me) FA_HIDDEN;
#endif

/* Whether the tail of the block of size bytes at b is as written. */
FA_INLINE bool fa__tail_ok(const void *b, size_t size)
{
    return fa__tail_get(b, size) != SIZE_MAX;
}

/* Measuring knob: 0 no check at free, 1 the block's own tail, 2 its
 * neighbour's too.  Not a build anyone ships. */
#ifndef FA_TAIL_CHECKS
#define FA_TAIL_CHECKS 2
#endif

/* The free fast path's look, tails being on, at the tails of the block p of size bytes, in
 * the span that starts at *span_start, and of the block below it: true when both are
 * as written; false when one is not, or when p is first in a span of
 * blocks of FA_TAIL_BELOW bytes or more (the block below is in another
 * span), and fa__tail_check_free must look.  The first block of a span of
 * smaller blocks is not looked below: a program that frees and takes back
 * the same block would take the slow path every time (a reuse loop of
 * 1 KiB blocks did: docs/HISTORY.md, #26). */
#define FA_TAIL_BELOW 4096
FA_INLINE bool fa__tail_fast_ok(void *p, size_t size, const uintptr_t *span_start)
{
#if FA_SECURE
    if (FA_TAIL_CHECKS == 0 || size < FA_TAIL_MIN)
        return true;
    uint16_t klen = fa__fl_key.tail_len;
    uint64_t canary = fa__fl_key.tail;
    size_t d;
    if (!fa__tail_end_ok((char *)p + size, size - FA_TAIL_BYTES, klen, canary, &d))
        return false;
    if (FA_TAIL_CHECKS == 1)
        return true;
    /* The span's start is read again here, not kept from before: the
     * free fast path has no register to spare for it. */
    if ((uintptr_t)p != __atomic_load_n(span_start, __ATOMIC_RELAXED))
        return fa__tail_end_ok(p, size - FA_TAIL_BYTES, klen, canary, &d);
    return size < FA_TAIL_BELOW;
#else
    (void)p;
    (void)size;
    (void)span_start;
    return true;
#endif
}

/* At a free of the block p of size bytes, at offset off in its span, by
 * the thread whose cache is me: stop the program if its tail, or the tail
 * of the block below it, was overwritten. */
FA_INLINE void fa__tail_check_free(void *p, size_t size, uintptr_t off, const void *me)
{
#if FA_SECURE
    if (!FA_TAILS_ON)
        return;
    if (FA_TAIL_CHECKS >= 1 && FA_UNLIKELY(!fa__tail_ok(p, size)))
        fa__tail_corrupt(p, size, false);
    if (FA_TAIL_CHECKS < 2)
        return;
    if (FA_UNLIKELY(off == 0))
        fa__tail_check_below(p, me);
    else if (FA_UNLIKELY(!fa__tail_ok((char *)p - size, size)))
        fa__tail_corrupt((char *)p - size, size, true);
#else
    (void)p;
    (void)size;
    (void)off;
    (void)me;
#endif
}

#endif
