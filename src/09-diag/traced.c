/* Traced blocks: recording a trace without checked blocks (no debug mode,
 * no memcheck), each block has a trace header (struct fa__trace_hdr,
 * 09-diag/trace.h) just before it, and alignment room when asked for, in a
 * plain block.  The recorder (trace.c) keeps the block's object id there.
 * Calls blocks.c (debug_int.h gives the order). */
#include "09-diag/debug_int.h"
#include "00-base/mem.h"
#include "00-base/diag.h"
#include "09-diag/trace.h"

#include <errno.h>
#include <string.h>

void *fa__dbg_traced_alloc(size_t size, size_t align, bool zero, struct fa__trace_hdr **hp)
{
    if (align < FA_MIN_ALIGN)
        align = FA_MIN_ALIGN;
    size_t room = align > FA_MIN_ALIGN ? align : 0, total;
    if (__builtin_add_overflow(size, FA_TRACE_HDR + room, &total) || total > FA_MAX_REQUEST) {
        errno = ENOMEM;
        return NULL;
    }
    void *b = fa__dbg_plain_alloc(total, 0, false);
    if (b == NULL)
        return NULL;
    uintptr_t user = ((uintptr_t)b + FA_TRACE_HDR + align - 1) & ~(uintptr_t)(align - 1);
    struct fa__trace_hdr *h = (struct fa__trace_hdr *)(user - FA_TRACE_HDR);
    h->off = (uint32_t)((uintptr_t)h - (uintptr_t)b);
    if (zero)
        fa__memset((void *)user, 0, size);
    *hp = h;
    return (void *)user;
}

struct fa__trace_hdr *fa__dbg_traced_hdr(const void *p)
{
    uintptr_t a = (uintptr_t)p, base;
    size_t usable;
    if (a % FA_MIN_ALIGN != 0 || !fa__dbg_block_of(a - FA_TRACE_HDR, &base, &usable))
        return NULL;
    struct fa__trace_hdr *h = (struct fa__trace_hdr *)(a - FA_TRACE_HDR);
    return base + h->off == (uintptr_t)h ? h : NULL;
}

struct fa__trace_hdr *fa__dbg_traced_hdr_or_die(void *p, const char *who)
{
    struct fa__trace_hdr *h = fa__dbg_traced_hdr(p);
    if (h == NULL) {
        fa__dbg_plain_usable(p, who); /* stops the program on a bad pointer */
        fa__fatal("fastalloc: %s(): %p is not a block fastalloc returned", who, p);
    }
    return h;
}

/* The usable bytes past p: the underlying block's, less the header and the
 * alignment room before p. */
size_t fa__dbg_traced_usable(void *p, const char *who)
{
    struct fa__trace_hdr *h = fa__dbg_traced_hdr_or_die(p, who);
    void *base = (char *)h - h->off;
    return fa__dbg_plain_usable(base, who) - ((uintptr_t)p - (uintptr_t)base);
}
