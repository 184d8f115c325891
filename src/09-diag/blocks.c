/* The underlying blocks of the diagnostic modes: the blocks the lower
 * layers hand out, which a mode uses as they are (plain blocks, hooks
 * alone) or lays out its own block in (checked blocks, traced ones).
 * Taking one: a small block from the thread's cache (hidden from the fast
 * paths while a mode is on), a large one through the thread cache's one
 * entry for them (fa__tc_alloc_large), as the api layer takes it.
 * Finding the one that holds an address, through the page map.  Calls
 * nothing else in 09-diag (debug_int.h gives the order). */
#include "09-diag/debug_int.h"
#include "00-base/mem.h"
#include "02-records/freelist.h"
#include "02-records/pagemap.h"
#include "02-records/sizeclass.h"
#include "02-records/tail.h"
#include "04-pageheap/pageheap.h"
#include "06-large/large.h"
#include "08-tcache/tcache.h"

#include <string.h>

/* A small block of the hardened build carries a tail past the size asked
 * for (02-records/tail.h), as a block of the api layer does: frees check
 * it, and its neighbours'. */
static void *small(size_t size, unsigned cls)
{
    void *p = fa__tc_alloc_slow(fa__classes[cls].size - FA_TAIL);
    if (p != NULL) {
        /* Handed out as the api layer hands a block out: unpoisoned (the
         * heap profile alone leaves the fast paths on, whose frees poison
         * the block in an AddressSanitizer build) and its link cleared.
         * Not checked as zeroed: a mode's own frees do not zero. */
        fa__fl_hand_out(p, fa__classes[cls].size, false);
        fa__tail_set(p, fa__tail_n(size, fa__classes[cls].size), fa__classes[cls].size);
    }
    return p;
}

void *fa__dbg_block_alloc(size_t size)
{
    return size <= FA_MAX_SMALL - FA_TAIL ? small(size, fa__size_to_class(size + FA_TAIL))
                                          : fa__tc_alloc_large(size, 0, false);
}

bool fa__dbg_block_of(uintptr_t p, uintptr_t *base, size_t *usable)
{
    struct fa__span *s = fa__pm_span_holding(p);
    if (s == NULL || s->npages == 0 || p < s->start || p >= s->start + s->npages * FA_PAGE_SIZE)
        return false;
    unsigned state = __atomic_load_n(&s->state, __ATOMIC_RELAXED);
    if (state == FA_SPAN_LARGE) {
        /* The bytes the block may hold: in the hardened build its canary
         * follows the bytes asked for, and debug mode's canary, which runs
         * to the block's end, wrote over it (#52). */
        *base = s->start;
        *usable = fa__large_held(s);
        return true;
    }
    if (state != FA_SPAN_SMALL || s->cls == 0)
        return false;
    const struct fa__class_info *ci = &fa__classes[s->cls];
    size_t i = (p - s->start) / ci->size;
    if (i >= ci->objs)
        return false;
    *base = s->start + i * ci->size;
    *usable = ci->size;
    if (FA_SECURE) {
        size_t n = fa__tail_get((void *)*base, ci->size);
        if (n != SIZE_MAX)
            *usable = n;
    }
    return true;
}

size_t fa__dbg_plain_usable(void *p, const char *who)
{
    unsigned cls = fa__pm_class((uintptr_t)p);
    if (cls != 0) {
        size_t n = fa__tail_get(p, fa__classes[cls].size);
        return n != SIZE_MAX ? n : fa__classes[cls].size;
    }
    return fa__large_held(fa__large_span_of(p, who));
}

void *fa__dbg_plain_alloc(size_t size, size_t align, bool zero)
{
    unsigned cls = 0;
    if (align <= FA_MIN_ALIGN && size <= FA_MAX_SMALL - FA_TAIL)
        cls = fa__size_to_class(size + FA_TAIL);
    else if (align <= FA_PAGE_SIZE && size <= FA_MAX_SMALL - FA_TAIL)
        cls = fa__class_for_aligned(size + FA_TAIL, align);
    if (cls == 0)
        return fa__tc_alloc_large(size, align, zero);
    void *p = small(size, cls);
    if (p != NULL && zero)
        fa__memset(p, 0, size);
    return p;
}
