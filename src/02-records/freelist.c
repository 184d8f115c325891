/* The free-list seam's out-of-line parts: the hardened build's keys and
 * its checks (02-records/freelist.h). */
#include "02-records/freelist.h"
#include "00-base/mem.h"
#include "00-base/diag.h"
#include "02-records/sizeclass.h"
#include "02-records/tail.h"
#include "02-records/span.h"
#include "00-base/options.h"
#include "01-os/sys.h"

#include <sched.h>
#include <string.h>


#if FA_SECURE
/* The fast paths' tests hold from the first call, before start-up. */
struct fa__fl_secrets fa__fl_key = {.free_mask = FA_MIN_ALIGN - 1,
                                    .small_limit = FA_SMALL_TABLE_MAX + 1};

void fa__fl_corrupt(const void *b, const char *what)
{
    unsigned cls = fa__pm_class((uintptr_t)b);
    fa__fatal("fastalloc: heap corruption: the %s of the free %u-byte block at %p was overwritten "
              "(a write after free or an overflow)",
              what, cls != 0 ? fa__classes[cls].size : 0, b);
}

void fa__tail_corrupt(const void *b, size_t size, bool below)
{
    /* The owner of b may be rewriting its tail (tail.h): a check that
     * sees the same tail twice, bad both times, is no race. */
    const char *t = (const char *)b + size - 2;
    for (int i = 0; i < 64; i++) {
        uint16_t before = fa__tail_ld16(t);
        if (fa__tail_get(b, size) != SIZE_MAX)
            return;
        if (fa__tail_ld16(t) == before && i >= 3)
            break;
        sched_yield();
    }
    fa__fatal("fastalloc: heap corruption: the %zu-byte block at %p was written past its end%s "
              "(an overflow, or an underflow of the block after it)",
              size, b, below ? " (found at the free of the block after it)" : "");
}

#ifdef FA_ASAN
__attribute__((no_sanitize_address)) uint64_t fa__tail_raw64(const char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) /* byte by byte: memcpy would be intercepted */
        v = v << 8 | (unsigned char)p[i];
    return v;
}

__attribute__((no_sanitize_address)) uint16_t fa__tail_raw16(const char *p)
{
    return __atomic_load_n((const uint16_t *)p, __ATOMIC_ACQUIRE);
}
#elif FA_SECURE && defined(__SANITIZE_THREAD__)
FA_RACY_READER uint64_t fa__tail_racy64(const char *p)
{
    uint64_t v;
    __builtin_memcpy(&v, p, 8);
    return v;
}
#endif

void fa__tail_check_below(void *p, const void *me)
{
    uintptr_t a = (uintptr_t)p - 1;
    struct fa__pm_leaf *leaf = fa__pm_leaf_of(a);
    if (leaf == NULL || me == NULL || __atomic_load_n(&leaf->owner[fa__pm_index(a)], __ATOMIC_RELAXED) != me)
        return;
    const struct fa__span *s = leaf->span[fa__pm_index(a)];
    if (s == NULL || s->state != FA_SPAN_SMALL || s->cls == 0)
        return;
    size_t size = fa__classes[s->cls].size;
    uint64_t q = fa__span_block_index(s, a);
    char *b = (char *)s->start + q * size;
    if (q < s->carved && b + size == (char *)p && fa__tail_get(b, size) == SIZE_MAX)
        fa__tail_corrupt(b, size, true);
}

/* The bytes checked at hand-out: a write after free lands most often in a
 * structure's first fields, and an overflow from the block below in the
 * first bytes; a write through a stale pointer to an array's end, in the
 * last.  The middle of a block above 192 bytes is zeroed but not checked:
 * reading all of it at every hand-out nearly doubled what a 1 KiB
 * malloc+free costs this build (docs/HISTORY.md, #15). */
#define HEAD_BYTES 128
#define TAIL_BYTES 64

/* Whether [p, p + n) is zero. */
static bool all_zero(const char *p, size_t n)
{
    uint64_t acc = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc |= fa__tail_ld64(p + i);
    for (; i < n; i++)
        acc |= (unsigned char)p[i];
    return acc == 0;
}

/* The bytes of the block of size bytes at b that the program had: its
 * tail's n, or all of a block without one. */
static size_t held(const void *b, size_t size)
{
    size_t n = fa__tail_get(b, size);
    if (n == SIZE_MAX)
        fa__tail_corrupt(b, size, false);
    return n;
}

void fa__fl_scrub_slow(void *b, size_t size)
{
    /* Up to the canary, which stays: another thread may be checking it
     * (tail.h). */
    size_t n = held(b, size);
    if (n > 2 * sizeof(void *)) {
        /* A slow path's free may have poisoned the block already (asan.h). */
        FA_UNPOISON((char *)b + 2 * sizeof(void *), n - 2 * sizeof(void *));
        fa__memset((char *)b + 2 * sizeof(void *), 0, n - 2 * sizeof(void *));
    }
}

void fa__fl_check_scrubbed(const void *b, size_t size)
{
    const char *c = b;
    size_t n = held(b, size);
    if (n <= 16)
        return;
    size_t head = n < HEAD_BYTES ? n : HEAD_BYTES;
    size_t tail = n > head + TAIL_BYTES ? n - TAIL_BYTES : head;
    if (FA_UNLIKELY(!all_zero(c + 16, head - 16) || !all_zero(c + tail, n - tail)))
        fa__fatal("fastalloc: heap corruption: the free %zu-byte block at %p was written after it was "
                  "freed",
                  size, b);
}
#endif

void fa__fl_init(void)
{
#if FA_SECURE
    if (fa__fl_key.link != 0)
        return;
    uintptr_t k[2];
    fa__os_random(k, sizeof k);
    /* Keys with their low four bits clear: a link's low bits stay the
     * block's alignment, which the decoding checks; a zero key is
     * replaced (a zero word would then decode to NULL). */
    fa__fl_key.link = (k[0] & ~(uintptr_t)15) | ((uintptr_t)1 << 40);
    fa__fl_key.mark = k[1] | 1;
    /* The canary's byte: never 0 nor 0xff, which a program's own writes
     * past the end most often hold; the tail's key, from other bits. */
    unsigned char byte = (unsigned char)(k[1] >> 24);
    if (byte == 0 || byte == 0xff)
        byte = 0xa5;
    fa__fl_key.tail = (uint64_t)byte * 0x0101010101010101u;
    fa__fl_key.tail_len = (uint16_t)(k[0] >> 48) | 0x8000u;
    fa__fl_key.zero = fa__opt.secure_zero;
    fa__fl_key.tails = fa__opt.secure_tails;
    fa__fl_key.shuffle = fa__opt.secure_shuffle;
    fa__fl_key.rare = fa__fl_key.zero || fa__fl_key.tails;
    if (fa__fl_key.rare) { /* every malloc and free leaves for zeroed.c */
        fa__fl_key.free_mask = ~(uintptr_t)0;
        fa__fl_key.small_limit = 0;
    }
#endif
}
