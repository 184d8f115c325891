/* Double frees.  A free that finds its block carrying the free mark
 * (02-records/freelist.h) asks here whether the block is really free: it
 * is looked for on the lists the calling thread may read.  A block that is
 * not found had its mark copied from a freed block, and is live. */
#include "08-tcache/internal.h"
#include "00-base/diag.h"
#include "02-records/pagemap.h"

#include <string.h>

/* Whether p is on the list from head, which holds at most bound blocks: a
 * longer one has been corrupted, most likely by a double free that got past
 * these checks (one whose first free sat in another thread's outbox). */
static bool list_has(void *head, const void *p, uint32_t bound, uint32_t size)
{
    for (void *b = head; b != NULL; b = fa__fl_next(b)) {
        if (b == p)
            return true;
        if (bound-- == 0)
            fa__fatal("fastalloc: free(): the free list of %u-byte blocks that should hold %p is corrupt "
                      "(a double free or a write after free)",
                      size, p);
    }
    return false;
}

/* Whether p, a block of s that carries s's free mark, is free.  Looked
 * for where the calling thread may read: its own heads[] and outbox (tc,
 * its real cache, hidden or not; NULL if it has none), and for a span it
 * owns, the span's freelist and the remote frees on its xfree, which only
 * the owner takes.  A block that is not found had its mark copied from a
 * freed block: it is live. */
bool fa__tc_seen_free(struct fa__tcache *tc, struct fa__span *s, const void *p)
{
    if (tc == NULL)
        return false;
    const struct fa__class_info *ci = &fa__classes[s->cls];
    /* heads[cls] holds the current span's blocks and at most FA_TC_GATHER more. */
    if (list_has(tc->heads[s->cls], p, ci->objs + FA_TC_GATHER + ci->max_list, ci->size))
        return true;
    if (tc->out[s->cls].s == s && list_has(tc->out[s->cls].head, p, ci->objs, ci->size))
        return true;
    uintptr_t a = (uintptr_t)p;
    if (__atomic_load_n(&fa__pm_leaf_of(a)->owner[fa__pm_index(a)], __ATOMIC_RELAXED) != tc)
        return false;
    /* Past the blocks cut: a span whose blocks all came back starts over
     * (keep), and its blocks are free without being on a list. */
    if (fa__span_block_index(s, a) >= s->carved)
        return true;
    if (list_has(s->freelist, p, ci->objs, ci->size))
        return true;
    uintptr_t x = __atomic_load_n(&s->xfree, __ATOMIC_ACQUIRE);
    return (x & FA_XFREE_DETACHED) == 0 && list_has(FA_XFREE_LIST(x), p, ci->objs, ci->size);
}

void fa__tc_double_free(const void *p, const struct fa__span *s)
{
    fa__fatal("fastalloc: free(): double free of %p (a block of %u bytes)", p, fa__classes[s->cls].size);
}

void fa__tc_bad_block(const void *p, const struct fa__span *s, const char *who)
{
    uintptr_t off = (uintptr_t)p - s->start;
    if ((uintptr_t)p % FA_MIN_ALIGN != 0)
        fa__fatal("fastalloc: %s(): invalid pointer %p (not 16-byte aligned, so no block's start)", who, p);
    if (off % fa__classes[s->cls].size != 0)
        fa__fatal("fastalloc: %s(): pointer %p is inside a block, not at its start", who, p);
    if (strcmp(who, "free") == 0 && fa__fl_marked(p, s))
        fa__tc_double_free(p, s);
    fa__fatal("fastalloc: %s(): invalid pointer %p (a block never handed out)", who, p);
}
