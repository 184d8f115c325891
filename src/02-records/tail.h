/* The tail seam: the hardened build's record of what a small block was
 * asked for, kept in the block's own last bytes, and a canary after it.
 *
 * A block of size bytes handed out for n bytes (n <= size - FA_TAIL) has
 *   [c, c + 8)       canary: a per-process random byte, 8 times, at
 *                    c = n, or at byte 16 when n is less (below 16 a free
 *                    block keeps its link and its mark);
 *   [size - 2, size) tail: size - n, XORed with a per-process random
 *                    16-bit key.
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
#define FA_TAIL 10
#else
#define FA_TAIL 0
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
#endif

FA_INLINE uint64_t fa__tail_ld64(const char *p)
{
#ifdef FA_ASAN
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

/* Where the canary of a block asked for n bytes starts. */
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
 * (size - FA_TAIL_MAX <= n <= size - FA_TAIL).  Bytes below n are left as
 * they are. */
FA_INLINE void fa__tail_set(void *p, size_t n, size_t size)
{
#if FA_SECURE
    if (size < FA_TAIL_MIN)
        return;
    char *b = p;
    __builtin_memcpy(b + fa__tail_canary(n), &fa__fl_key.tail, 8);
    __atomic_store_n((uint16_t *)(b + size - 2), (uint16_t)((size - n) ^ fa__fl_key.tail_len),
                     __ATOMIC_RELEASE);
#else
    (void)p;
    (void)n;
    (void)size;
#endif
}

/* What a tail records for a block of size bytes asked for n bytes, when
 * size may be far larger (an aligned block): n, or as much as it can. */
FA_INLINE size_t fa__tail_n(size_t n, size_t size)
{
    return size - n > FA_TAIL_MAX ? size - FA_TAIL_MAX : n;
}

/* The bytes the block of size bytes at p was handed out for, as its tail
 * records them; SIZE_MAX when the tail or the canary was overwritten.  A
 * block without a tail: size. */
FA_INLINE size_t fa__tail_get(const void *p, size_t size)
{
#if FA_SECURE
    if (size < FA_TAIL_MIN)
        return size;
    const char *b = p;
    size_t d = (uint16_t)(fa__tail_ld16(b + size - 2) ^ fa__fl_key.tail_len);
    if (FA_UNLIKELY(d - FA_TAIL > size - FA_TAIL)) /* d < FA_TAIL or d > size */
        return SIZE_MAX;
    size_t n = size - d;
    return FA_LIKELY(fa__tail_ld64(b + fa__tail_canary(n)) == fa__fl_key.tail) ? n : SIZE_MAX;
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
#if FA_SECURE
    if (size < FA_TAIL_MIN)
        return true;
    size_t d = (uint16_t)(fa__tail_ld16((const char *)b + size - 2) ^ fa__fl_key.tail_len);
    return FA_LIKELY(d - FA_TAIL <= size - FA_TAIL) &&
           FA_LIKELY(fa__tail_ld64((const char *)b + fa__tail_canary(size - d)) == fa__fl_key.tail);
#else
    (void)b;
    (void)size;
    return true;
#endif
}

/* Measuring knob: 0 no check at free, 1 the block's own tail, 2 its
 * neighbour's too.  Not a build anyone ships. */
#ifndef FA_TAIL_CHECKS
#define FA_TAIL_CHECKS 2
#endif

/* The free fast path's look at the tails of the block p of size bytes, at
 * offset off in its span, and of the block below it: true when both are
 * as written; false when one is not, or when p is first in a span of
 * blocks of FA_TAIL_BELOW bytes or more (the block below is in another
 * span), and fa__tail_check_free must look.  The first block of a span of
 * smaller blocks is not looked below: a program that frees and takes back
 * the same block would take the slow path every time (the 1 KiB reuse
 * loop cost 157 instructions a pair, against 116). */
#define FA_TAIL_BELOW 4096
FA_INLINE bool fa__tail_fast_ok(void *p, size_t size, uintptr_t off)
{
#if FA_SECURE
    if (FA_TAIL_CHECKS == 0)
        return true;
    if (FA_TAIL_CHECKS == 1)
        return fa__tail_ok(p, size);
    return fa__tail_ok(p, size) &&
           (off != 0 ? fa__tail_ok((char *)p - size, size) : size < FA_TAIL_BELOW);
#else
    (void)p;
    (void)size;
    (void)off;
    return true;
#endif
}


/* At a free of the block p of size bytes, at offset off in its span, by
 * the thread whose cache is me: stop the program if its tail, or the tail
 * of the block below it, was overwritten. */
FA_INLINE void fa__tail_check_free(void *p, size_t size, uintptr_t off, const void *me)
{
#if FA_SECURE
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
