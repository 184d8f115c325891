/* The free-list seam's out-of-line parts: the hardened build's keys and
 * its checks (02-records/freelist.h). */
#include "02-records/freelist.h"
#include "00-base/diag.h"
#include "02-records/sizeclass.h"

#include <sys/auxv.h>
#include <sys/random.h>
#include <time.h>

#if FA_SECURE
uintptr_t fa__fl_key[2];

void fa__fl_corrupt(const void *b, const char *what)
{
    unsigned cls = fa__pm_class((uintptr_t)b);
    fa__fatal("fastalloc: heap corruption: the %s of the free %u-byte block at %p was overwritten "
              "(a write after free or an overflow)",
              what, cls != 0 ? fa__classes[cls].size : 0, b);
}

/* The bytes checked at hand-out: a write after free lands most often in a
 * structure's first fields, and an overflow from the block below in the
 * first bytes; a write through a stale pointer to an array's end, in the
 * last.  The middle of a block above 192 bytes is zeroed but not checked:
 * reading all of it at every hand-out nearly doubled what a 1 KiB
 * malloc+free costs this build (docs/HISTORY.md, #15). */
#define HEAD_BYTES 128
#define TAIL_BYTES 64

typedef uint64_t vec2 __attribute__((vector_size(16), may_alias));

/* Whether [p, p + n) is zero; p is 16-byte aligned, n a multiple of 16. */
static bool zero16(const char *p, size_t n)
{
    vec2 acc = {0, 0};
    for (size_t i = 0; i < n; i += 16)
        acc |= *(const vec2 *)(p + i);
    return (acc[0] | acc[1]) == 0;
}

void fa__fl_check_scrubbed(const void *b, size_t size)
{
    const char *c = b;
    size_t head = size < HEAD_BYTES ? size : HEAD_BYTES;
    size_t tail = size > head + TAIL_BYTES ? size - TAIL_BYTES : head;
    if (FA_UNLIKELY(!zero16(c + 16, head - 16) || !zero16(c + tail, size - tail)))
        fa__fatal("fastalloc: heap corruption: the free %zu-byte block at %p was written after it was "
                  "freed",
                  size, b);
}
#endif

void fa__fl_init(void)
{
#if FA_SECURE
    if (fa__fl_key[0] != 0)
        return;
    uintptr_t k[2] = {0, 0};
    if (getrandom(k, sizeof k, GRND_NONBLOCK) != (ssize_t)sizeof k) {
        /* No entropy pool yet (early boot): the kernel's 16 random bytes
         * given to every process, mixed with the clock. */
        const uintptr_t *r = (const uintptr_t *)getauxval(AT_RANDOM);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        k[0] = (r != NULL ? r[0] : 0) ^ (uintptr_t)ts.tv_nsec * 0x9e3779b97f4a7c15u;
        k[1] = (r != NULL ? r[1] : 0) ^ (uintptr_t)&ts;
    }
    /* Keys with their low four bits clear: a link's low bits stay the
     * block's alignment, which the decoding checks; a zero key is
     * replaced (a zero word would then decode to NULL). */
    fa__fl_key[0] = (k[0] & ~(uintptr_t)15) | ((uintptr_t)1 << 40);
    fa__fl_key[1] = k[1] | 1;
#endif
}
