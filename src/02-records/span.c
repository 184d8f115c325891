/* The span protocol's primitives (span.h): cutting fresh blocks, and the
 * remote-free list xfree with its detached bit. */
#include "02-records/span.h"
#include "00-base/mem.h"
#include "00-base/diag.h"
#include "02-records/freelist.h"
#include "02-records/tail.h"

#include <string.h>

#if FA_SECURE
/* With `secure_shuffle`, the hardened build hands a fresh span's blocks
 * out in a random order, so that where the next block lies cannot be told
 * from where the last one did.  A thread's own xorshift stream, seeded
 * from the list key. */
static __thread uint64_t carve_rng __attribute__((tls_model("initial-exec")));

static uint32_t carve_random(uint32_t bound)
{
    uint64_t x = carve_rng;
    if (x == 0)
        x = fa__fl_key.mark ^ (uintptr_t)&carve_rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    carve_rng = x;
    return (uint32_t)(((x >> 32) * bound) >> 32);
}
#endif

void *fa__span_carve(struct fa__span *s, uint32_t n, void *tail)
{
    const struct fa__class_info *ci = &fa__classes[s->cls];
    if (n > FA_SPAN_CARVE_MAX)
        n = FA_SPAN_CARVE_MAX;
    if (n > ci->objs - s->carved)
        n = ci->objs - s->carved;
    uintptr_t first = s->start + (uintptr_t)s->carved * ci->size;
    /* Blocks cut from pages known zero are fresh, and every other block cut
     * is not, whatever a bit said of the block of that place before (a
     * span whose blocks are cut again after all came back). */
    if (ci->objs <= FA_SPAN_FRESH_OBJS) {
        uint8_t mask = (uint8_t)(((1u << n) - 1) << s->carved);
        uint8_t f = __atomic_load_n(&s->fresh, __ATOMIC_RELAXED);
        __atomic_store_n(&s->fresh, (uint8_t)(s->zeroed ? f | mask : f & ~mask), __ATOMIC_RELAXED);
    }
    /* Atomic, for the hardened build's block-start check in other
     * threads' frees (span.h); a plain store on x86. */
    __atomic_store_n(&s->carved, (uint16_t)(s->carved + n), __ATOMIC_RELAXED);
    s->used += n;
#if FA_SECURE
    /* Zeroed, as a freed block is (scrubbed) with `secure_zero`, then
     * linked, each with a fresh block's tail. */
    if (fa__fl_key.zero && !s->zeroed) {
        /* The frees of a span cut again left its blocks poisoned (asan.h). */
        FA_UNPOISON((void *)first, (size_t)n * ci->size);
        fa__memset((void *)first, 0, (size_t)n * ci->size);
    }
    if (FA_LIKELY(!fa__fl_key.shuffle)) {
        /* Forwards, in address order, as the default build cuts them:
         * a program that walks its blocks in the order it got them walks
         * memory forwards, which the processor prefetches (SECURITY.md,
         * Random order). */
        uintptr_t b = first;
        for (uint32_t k = 0; k + 1 < n; k++, b += ci->size) {
            fa__fl_mark((void *)b, s);
            fa__tail_set((void *)b, ci->size - FA_TAIL, ci->size);
            fa__fl_set_next((void *)b, (void *)(b + ci->size));
        }
        fa__fl_mark((void *)b, s);
        fa__tail_set((void *)b, ci->size - FA_TAIL, ci->size);
        fa__fl_set_next((void *)b, tail);
        return (void *)first;
    }
    /* In a random order: next[k] is the block after block k, a random
     * cycle through all n drawn by Sattolo's algorithm (each cycle equally
     * likely), cut before a random block, the head.  So every order of the
     * n blocks is equally likely.  The links are written in address order,
     * forwards through the batch, which the hardware prefetches: written
     * in the order the blocks are handed out, they jumped about it. */
    uint16_t next[FA_SPAN_CARVE_MAX];
    for (uint32_t i = 0; i < n; i++)
        next[i] = (uint16_t)i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = carve_random(i); /* j < i: Sattolo's, not Fisher and Yates's */
        uint16_t t = next[i];
        next[i] = next[j];
        next[j] = t;
    }
    uint32_t head = carve_random(n);
    for (uint32_t k = 0; k < n; k++) {
        void *b = (void *)(first + (uintptr_t)k * ci->size);
        fa__fl_mark(b, s);
        fa__tail_set(b, ci->size - FA_TAIL, ci->size);
        fa__fl_set_next(b, next[k] == head ? tail : (void *)(first + (uintptr_t)next[k] * ci->size));
    }
    return (void *)(first + (uintptr_t)head * ci->size);
#else
    /* Forwards, in the order the blocks are handed out. */
    uintptr_t last = first + (uintptr_t)(n - 1) * ci->size;
    for (uintptr_t b = first; b < last; b += ci->size) {
        fa__fl_mark((void *)b, s);
        fa__fl_set_next((void *)b, (void *)(b + ci->size));
    }
    fa__fl_mark((void *)last, s);
    fa__fl_set_next((void *)last, tail);
    return (void *)first;
#endif
}

unsigned fa__span_collect(struct fa__span *s, bool *peer)
{
    uintptr_t x = __atomic_load_n(&s->xfree, __ATOMIC_RELAXED);
    if (peer != NULL)
        *peer = false;
    /* A detached span's word is no list (whoever takes it clears it). */
    if (FA_XFREE_LIST(x) == NULL || (x & FA_XFREE_DETACHED))
        return 0;
    /* The listed bit stays: it changes only under the class lock, which a
     * caller that finds it set holds. */
    x = __atomic_exchange_n(&s->xfree, x & FA_XFREE_LISTED, __ATOMIC_ACQUIRE);
    if (peer != NULL)
        *peer = (x & FA_XFREE_PEER) != 0;
    return fa__span_absorb(s, FA_XFREE_LIST(x));
}

unsigned fa__span_absorb(struct fa__span *s, void *head)
{
    if (head == NULL)
        return 0;
    unsigned n = 1;
    void *last = head;
    for (void *b = fa__fl_next(head); b != NULL; b = fa__fl_next(b)) {
        last = b;
        /* used counts every block on xfree: a longer list holds a block
         * twice (two frees from other threads, the first already pushed)
         * or loops back on itself. */
        if (++n > s->used)
            fa__fatal("fastalloc: free(): double free among the %u-byte blocks freed by other threads "
                      "near %p",
                      fa__classes[s->cls].size, last);
    }
    fa__fl_set_next(last, s->freelist);
    s->freelist = head;
    s->used -= n;
    s->nonuser += n; /* remote frees: counted by the threads that made them */
    return n;
}

bool fa__span_detach(struct fa__span *s, const void *by)
{
    uintptr_t zero = 0;
    return __atomic_compare_exchange_n(&s->xfree, &zero, (uintptr_t)by | FA_XFREE_DETACHED, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_RELAXED);
}
