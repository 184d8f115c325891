/* Checked blocks (debug mode, and runs under memcheck): the header, the
 * canary, the fills, the quarantine, the live list, and the reports of
 * what the checks find.  What a block looks like here:
 *
 *   base                         hdr                  user                  user+size
 *   | alignment room (0 or more) | struct fa__dbg_hdr | the program's bytes | canary ...
 *
 * base is the block the page heap or a central span gave; hdr->off says
 * where the header sits in it.  The canary runs from the program's last byte
 * to the block's end, at most CANARY_MAX bytes, and is never shorter than
 * CANARY_MIN.  Blocks come from the thread's cache, hidden from the fast
 * paths while the mode is on, and go back only when they leave the
 * quarantine.  Calls backtrace.c and blocks.c (debug_int.h gives the
 * order). */
#include "09-diag/debug_int.h"
#include "00-base/mem.h"
#include "00-base/diag.h"
#include "01-os/sys.h"
#include "00-base/lock.h"
#include "00-base/options.h"
#include "08-tcache/tcache.h"
#include "09-diag/memcheck.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define FILL_NEW 0xAA
#define FILL_FREED 0xDD
#define FILL_CANARY 0xCB
#define CANARY_MIN 16u
#define CANARY_MAX 64u
/* The magic word holds its header's address, so a header copied elsewhere
 * (a realloc'd struct holding one) does not pass for a block. */
#define MAGIC_LIVE ((uintptr_t)0x6661646267616c6cULL)
#define MAGIC_FREED ((uintptr_t)0x6661646267667265ULL)

_Static_assert(sizeof(struct fa__dbg_hdr) % FA_MIN_ALIGN == 0, "the program's bytes stay aligned");
#define HDR sizeof(struct fa__dbg_hdr)

/* The live blocks (a circular list through live_head) and the quarantine (a
 * FIFO), under one lock: debug mode trades speed for checks. */
static fa__lock_t dbg_lock = FA_LOCK_INIT;
static struct fa__dbg_hdr live_head = {.next = &live_head, .prev = &live_head};
static struct fa__dbg_hdr *q_head, *q_tail;
static size_t q_bytes;

void fa__dbg_live_lock(void)
{
    fa__lock(&dbg_lock);
}

void fa__dbg_live_unlock(void)
{
    fa__unlock(&dbg_lock);
}

const struct fa__dbg_hdr *fa__dbg_live_head(void)
{
    return &live_head;
}

/* ---- reports ---- */

/* After the report's first line: the traces, then abort unless the
 * program asked to go on. */
static void report_end(const struct fa__dbg_hdr *h, bool here)
{
    if (here) {
        void *now[FA_DBG_FRAMES];
        uint16_t n = fa__dbg_capture(now);
        fa__dbg_print_trace("at:", now, n);
    }
    if (h != NULL) {
        if (h->nfree > 0 && __atomic_load_n(&h->magic, __ATOMIC_RELAXED) == (MAGIC_FREED ^ (uintptr_t)h))
            fa__dbg_print_trace("freed at:", h->free_at, h->nfree);
        fa__dbg_print_trace("allocated at:", h->alloc_at, h->nalloc);
    }
    if (!__atomic_load_n(&fa__opt.debug_continue, __ATOMIC_RELAXED))
        abort();
}

void fa__dbg_report_end(void)
{
    report_end(NULL, true);
}

static char *user_of(struct fa__dbg_hdr *h)
{
    return (char *)(h + 1);
}

/* Under valgrind, memcheck owns a freed block's bytes (reading them is an
 * error to it): no fill on free and no check of it. */
static bool fill_freed(void)
{
    return !(fa__diag_on() & FA_DIAG_VALGRIND);
}

/* ---- checks ---- */

struct fa__dbg_hdr *fa__dbg_check_ptr(void *p, const char *op)
{
    uintptr_t a = (uintptr_t)p, base;
    size_t usable;
    if (a % FA_MIN_ALIGN != 0) {
        fa__diag("fastalloc: debug: misaligned pointer %p passed to %s, thread %d", p, op, fa__os_thread_id());
        report_end(NULL, true);
        return NULL;
    }
    if (!fa__dbg_block_of(a, &base, &usable)) {
        fa__diag("fastalloc: debug: invalid pointer %p passed to %s: not a block fastalloc returned, "
                 "thread %d",
                 p, op, fa__os_thread_id());
        report_end(NULL, true);
        return NULL;
    }
    struct fa__dbg_hdr *h = (struct fa__dbg_hdr *)(a - HDR);
    uintptr_t m = a >= base + HDR ? __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) ^ (uintptr_t)h : 0;
    if ((m != MAGIC_LIVE && m != MAGIC_FREED) || base + h->off != (uintptr_t)h) {
        /* Inside a block: name the block, when its header is where an
         * unaligned block keeps it. */
        struct fa__dbg_hdr *b = (struct fa__dbg_hdr *)base;
        if ((b->magic ^ base) == MAGIC_LIVE && b->off == 0 && a > base + HDR) {
            fa__diag("fastalloc: debug: interior pointer %p passed to %s: %zu bytes into the block "
                     "at %p (%zu bytes), thread %d",
                     p, op, (size_t)(a - (uintptr_t)user_of(b)), (void *)user_of(b), b->size, fa__os_thread_id());
            report_end(b, true);
        } else {
            fa__diag("fastalloc: debug: interior pointer %p passed to %s: inside a block of %zu "
                     "bytes at %p, thread %d",
                     p, op, usable, (void *)base, fa__os_thread_id());
            report_end(NULL, true);
        }
        return NULL;
    }
    if (m == MAGIC_FREED) {
        if (strcmp(op, "free") == 0)
            fa__diag("fastalloc: debug: double free of %p (%zu bytes), thread %d", p, h->size, fa__os_thread_id());
        else
            fa__diag("fastalloc: debug: %s of freed block %p (%zu bytes), thread %d", op, p, h->size,
                     fa__os_thread_id());
        report_end(h, true);
        return NULL;
    }
    return h;
}

/* The canary's end: the block's end, at most CANARY_MAX bytes on. */
static size_t canary_len(const struct fa__dbg_hdr *h)
{
    uintptr_t base = (uintptr_t)h - h->off, end = (uintptr_t)user_of((struct fa__dbg_hdr *)h) + h->size;
    size_t usable = 0;
    uintptr_t b;
    if (!fa__dbg_block_of(base, &b, &usable) || b != base)
        return CANARY_MIN;
    size_t room = base + usable - end;
    return room < CANARY_MAX ? room : CANARY_MAX;
}

/* The first byte of [p, p + n) that is not c, or n. */
static size_t first_not(const unsigned char *p, size_t n, unsigned char c)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        fa__memcpy(&w, p + i, 8);
        if (w != 0x0101010101010101ULL * c)
            break;
    }
    for (; i < n; i++)
        if (p[i] != c)
            return i;
    return n;
}

bool fa__dbg_canary_ok(struct fa__dbg_hdr *h, const char *op)
{
    const unsigned char *c = (const unsigned char *)user_of(h) + h->size;
    size_t n = canary_len(h), i = first_not(c, n, FILL_CANARY);
    if (i == n)
        return true;
    fa__diag("fastalloc: debug: canary overwritten after %p (%zu bytes), found by %s: byte %zu past "
             "the end is 0x%02x, thread %d",
             (void *)user_of(h), h->size, op, i, c[i], fa__os_thread_id());
    report_end(h, true);
    return false;
}

/* ---- blocks ---- */

void *fa__dbg_checked_alloc(size_t size, size_t align, bool zero)
{
    if (align < FA_MIN_ALIGN)
        align = FA_MIN_ALIGN;
    size_t room = align > FA_MIN_ALIGN ? align : 0, total;
    if (size > FA_MAX_REQUEST || __builtin_add_overflow(size, HDR + CANARY_MIN + room, &total) ||
        total > FA_MAX_REQUEST) {
        errno = ENOMEM;
        return NULL;
    }
    void *b = fa__dbg_block_alloc(total);
    if (b == NULL)
        return NULL;
    uintptr_t base = (uintptr_t)b;
    uintptr_t user = (base + HDR + align - 1) & ~(uintptr_t)(align - 1);
    struct fa__dbg_hdr *h = (struct fa__dbg_hdr *)(user - HDR);
    fa__memset(h, 0, HDR);
    h->size = size;
    h->off = (uint32_t)((uintptr_t)h - base);
    h->tid = fa__os_thread_id();
    h->nalloc = fa__dbg_capture(h->alloc_at);
    fa__memset((void *)user, zero ? 0 : FILL_NEW, size);
    fa__memset((void *)(user + size), FILL_CANARY, canary_len(h));
    FA_VG_ALLOC((void *)user, size, zero);
    fa__lock(&dbg_lock);
    h->next = live_head.next;
    h->prev = &live_head;
    live_head.next->prev = h;
    live_head.next = h;
    __atomic_store_n(&h->magic, MAGIC_LIVE ^ (uintptr_t)h, __ATOMIC_RELEASE);
    fa__unlock(&dbg_lock);
    return (void *)user;
}

/* A block leaves the quarantine: its fill must be intact. */
static void release(struct fa__dbg_hdr *h)
{
    const unsigned char *u = (const unsigned char *)user_of(h);
    size_t i = fill_freed() ? first_not(u, h->size, FILL_FREED) : h->size;
    if (i < h->size) {
        fa__diag("fastalloc: debug: write after free to %p (%zu bytes): byte %zu is 0x%02x, found "
                 "by thread %d",
                 (void *)u, h->size, i, u[i], fa__os_thread_id());
        report_end(h, false);
    }
    fa__tc_free_slow((char *)h - h->off);
}

static size_t q_cost(const struct fa__dbg_hdr *h)
{
    return h->off + HDR + h->size + CANARY_MIN;
}

void fa__dbg_checked_free(void *p)
{
    if (p == NULL)
        return;
    struct fa__dbg_hdr *h = fa__dbg_check_ptr(p, "free");
    if (h == NULL)
        return;
    /* One winner when two threads free the block at once. */
    uintptr_t live = MAGIC_LIVE ^ (uintptr_t)h;
    if (!__atomic_compare_exchange_n(&h->magic, &live, MAGIC_FREED ^ (uintptr_t)h, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED)) {
        fa__diag("fastalloc: debug: double free of %p (%zu bytes), thread %d", p, h->size, fa__os_thread_id());
        report_end(h, true);
        return;
    }
    fa__dbg_canary_ok(h, "free");
    h->tid = fa__os_thread_id();
    h->nfree = fa__dbg_capture(h->free_at);
    if (fill_freed())
        fa__memset(p, FILL_FREED, h->size);
    FA_VG_FREE(p);
    struct fa__dbg_hdr *out = NULL;
    fa__lock(&dbg_lock);
    h->prev->next = h->next;
    h->next->prev = h->prev;
    h->next = NULL;
    h->prev = NULL;
    if (q_tail != NULL)
        q_tail->next = h;
    else
        q_head = h;
    q_tail = h;
    q_bytes += q_cost(h);
    /* The oldest leave while the quarantine is over its bound. */
    size_t bound = __atomic_load_n(&fa__opt.debug_quarantine, __ATOMIC_RELAXED);
    struct fa__dbg_hdr **tail = &out;
    while (q_head != NULL && q_bytes > bound) {
        struct fa__dbg_hdr *o = q_head;
        q_head = o->next;
        if (q_head == NULL)
            q_tail = NULL;
        q_bytes -= q_cost(o);
        o->next = NULL;
        *tail = o;
        tail = &o->next;
    }
    fa__unlock(&dbg_lock);
    while (out != NULL) {
        struct fa__dbg_hdr *o = out;
        out = o->next;
        release(o);
    }
}

size_t fa__dbg_checked_usable(void *p)
{
    struct fa__dbg_hdr *h = fa__dbg_check_ptr(p, "malloc_usable_size");
    return h != NULL ? h->size : 0;
}

int fa__dbg_checked_owns(const void *p)
{
    uintptr_t a = (uintptr_t)p, base;
    size_t usable;
    if (p == NULL || a % FA_MIN_ALIGN != 0 || !fa__dbg_block_of(a, &base, &usable) || a < base + HDR)
        return 0;
    const struct fa__dbg_hdr *h = (const struct fa__dbg_hdr *)(a - HDR);
    return (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) ^ (uintptr_t)h) == MAGIC_LIVE &&
           base + h->off == (uintptr_t)h;
}
