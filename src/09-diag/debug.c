/* Debug mode: checked, filled, traced blocks, a quarantine, and a leak
 * report at exit.  What a block looks like here:
 *
 *   base                     hdr            user                 user+size
 *   | alignment room (0 or more) | struct dbg_hdr | the program's bytes | canary ...
 *
 * base is the block the page heap or a central span gave; hdr->off says
 * where the header sits in it.  The canary runs from the program's last byte
 * to the block's end, at most CANARY_MAX bytes, and is never shorter than
 * CANARY_MIN.  Blocks come from the thread's cache, hidden from the fast
 * paths while the mode is on, and go back only when they leave the
 * quarantine. */
#define _GNU_SOURCE
#include "09-diag/debug.h"
#include "fastalloc.h"
#include "00-base/diag.h"
#include "00-base/lock.h"
#include "00-base/options.h"
#include "06-large/large.h"
#include "04-pageheap/pageheap.h"
#include "02-records/pagemap.h"
#include "02-records/sizeclass.h"
#include "08-tcache/tcache.h"
#include "01-os/os.h"
#include "07-decay/decay.h"
#include "09-diag/format.h"
#include "09-diag/trace.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <unwind.h>

/* Valgrind's client requests, when its header was there at build time:
 * memcheck then sees each block as a heap block (MALLOCLIKE/FREELIKE), with
 * its own checks of uninitialized reads, use after free and leaks.  Each
 * request costs a few instructions outside valgrind, and runs only here,
 * off the fast paths. */
#ifdef FA_HAVE_VALGRIND
#include <valgrind/memcheck.h>
#include <valgrind/valgrind.h>
#define ON_VALGRIND() RUNNING_ON_VALGRIND
#define VG_ALLOC(p, n, zero) VALGRIND_MALLOCLIKE_BLOCK(p, n, 0, zero)
#define VG_FREE(p) VALGRIND_FREELIKE_BLOCK(p, 0)
#else
#define ON_VALGRIND() 0
#define VG_ALLOC(p, n, zero) ((void)0)
#define VG_FREE(p) ((void)0)
#endif

#define FILL_NEW 0xAA
#define FILL_FREED 0xDD
#define FILL_CANARY 0xCB
#define CANARY_MIN 16u
#define CANARY_MAX 64u
#define FRAMES 6
/* The magic word holds its header's address, so a header copied elsewhere
 * (a realloc'd struct holding one) does not pass for a block. */
#define MAGIC_LIVE ((uintptr_t)0x6661646267616c6cULL)
#define MAGIC_FREED ((uintptr_t)0x6661646267667265ULL)

struct dbg_hdr {
    uintptr_t magic;            /* MAGIC_LIVE or MAGIC_FREED, xor this header's address */
    size_t size;                /* bytes the program asked for */
    struct dbg_hdr *next, *prev; /* the live list; then the quarantine (next only) */
    uint32_t off;               /* from the block's base to this header */
    int32_t tid;                /* the thread that allocated it, then that freed it */
    uint16_t nalloc, nfree;     /* frames recorded */
    uint32_t unused;
    void *alloc_at[FRAMES];
    void *free_at[FRAMES];
};
_Static_assert(sizeof(struct dbg_hdr) % FA_MIN_ALIGN == 0, "the program's bytes stay aligned");
#define HDR sizeof(struct dbg_hdr)

/* The live blocks (a circular list through live_head) and the quarantine (a
 * FIFO), under one lock: debug mode trades speed for checks. */
static fa__lock_t dbg_lock = FA_LOCK_INIT;
static struct dbg_hdr live_head = {.next = &live_head, .prev = &live_head};
static struct dbg_hdr *q_head, *q_tail;
static size_t q_bytes;

/* ---- backtraces ---- */

/* The allocator's own code, whose frames a trace leaves out: the
 * executable segment of the object that holds this file.  Unknown (0, 0)
 * when the allocator is linked into the program itself, whose frames it
 * would share. */
static uintptr_t self_lo, self_hi;
static int self_found;

static int find_self(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t me = (uintptr_t)arg;
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (me >= lo && me < lo + ph->p_memsz) {
            if (info->dlpi_name != NULL && info->dlpi_name[0] != '\0') {
                self_lo = lo;
                self_hi = lo + ph->p_memsz;
            }
            return 1;
        }
    }
    return 0;
}

/* Set while this thread records a trace: an allocation the unwinder makes
 * then gets a block with no trace instead of recursing. */
static __thread int in_trace __attribute__((tls_model("initial-exec")));
static __thread int my_tid __attribute__((tls_model("initial-exec")));

static int tid(void)
{
    if (my_tid == 0)
        my_tid = (int)syscall(SYS_gettid);
    return my_tid;
}

struct trace {
    void **out;
    unsigned n;
};

static _Unwind_Reason_Code trace_step(struct _Unwind_Context *ctx, void *arg)
{
    struct trace *t = arg;
    uintptr_t ip = _Unwind_GetIP(ctx);
    if (ip == 0)
        return _URC_END_OF_STACK;
    if (t->n == 0 && ip >= self_lo && ip < self_hi)
        return _URC_NO_REASON; /* still inside the allocator */
    t->out[t->n++] = (void *)ip;
    return t->n == FRAMES ? _URC_END_OF_STACK : _URC_NO_REASON;
}

/* The calling stack, the allocator's frames left out, into out[FRAMES];
 * returns the number of frames. */
static uint16_t capture(void **out)
{
    if (in_trace)
        return 0;
    in_trace = 1;
    if (!__atomic_load_n(&self_found, __ATOMIC_ACQUIRE)) {
        dl_iterate_phdr(find_self, (void *)(uintptr_t)&capture);
        __atomic_store_n(&self_found, 1, __ATOMIC_RELEASE);
    }
    struct trace t = {out, 0};
    _Unwind_Backtrace(trace_step, &t);
    in_trace = 0;
    return (uint16_t)t.n;
}

/* One line per frame: "what" on the first. */
static void print_trace(const char *what, void *const *frames, unsigned n)
{
    if (n == 0) {
        fa__diag("fastalloc:   %s: (no trace)", what);
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        /* A return address: the call is the byte before it. */
        uintptr_t ip = (uintptr_t)frames[i];
        Dl_info info;
        const char *obj = "?", *sym = NULL;
        uintptr_t symoff = 0;
        if (dladdr((void *)(ip - 1), &info) != 0) {
            obj = info.dli_fname != NULL ? info.dli_fname : "?";
            if (info.dli_sname != NULL) {
                sym = info.dli_sname;
                symoff = ip - (uintptr_t)info.dli_saddr;
            }
        }
        if (sym != NULL)
            fa__diag("fastalloc:   %-13s #%u %p %s+0x%lx (%s)", i == 0 ? what : "", i, (void *)ip, sym,
                     (unsigned long)symoff, obj);
        else
            fa__diag("fastalloc:   %-13s #%u %p (%s)", i == 0 ? what : "", i, (void *)ip, obj);
    }
}

/* ---- reports ---- */

/* After the report's first line: the traces, then abort unless the
 * program asked to go on. */
static void report_end(const struct dbg_hdr *h, bool here)
{
    if (here) {
        void *now[FRAMES];
        uint16_t n = capture(now);
        print_trace("at:", now, n);
    }
    if (h != NULL) {
        if (h->nfree > 0 && __atomic_load_n(&h->magic, __ATOMIC_RELAXED) == (MAGIC_FREED ^ (uintptr_t)h))
            print_trace("freed at:", h->free_at, h->nfree);
        print_trace("allocated at:", h->alloc_at, h->nalloc);
    }
    if (!__atomic_load_n(&fa__opt.debug_continue, __ATOMIC_RELAXED))
        abort();
}

static char *user_of(struct dbg_hdr *h)
{
    return (char *)(h + 1);
}

/* ---- modes ---- */

/* Under valgrind's memcheck, which alone uses the block requests.  Other
 * tools (callgrind counting the fast paths' instructions, for one) must see
 * fastalloc as it runs outside valgrind.  valgrind names its tool's preload
 * in the program's LD_PRELOAD; getenv does not allocate. */
static bool under_memcheck(void)
{
    if (!ON_VALGRIND())
        return false;
    const char *pre = getenv("LD_PRELOAD");
    return pre != NULL && strstr(pre, "vgpreload_memcheck") != NULL;
}

void fa__dbg_init(void)
{
    int mode = 0;
    if (fa__opt.debug)
        mode |= FA_DIAG_DEBUG;
    if (under_memcheck())
        mode |= FA_DIAG_VALGRIND;
    __atomic_fetch_or(&fa__diag_mode, mode, __ATOMIC_RELAXED);
    fa__trace_init(); /* sets its own bit when FASTALLOC_TRACE is set */
}

/* Under valgrind, memcheck owns a freed block's bytes (reading them is an
 * error to it): no fill on free and no check of it. */
static bool fill_freed(void)
{
    return !(fa__diag_on() & FA_DIAG_VALGRIND);
}

/* ---- blocks ---- */

/* The block the page map says holds p: its base and usable bytes, or false
 * when p is in no live block of fastalloc's. */
static bool block_of(uintptr_t p, uintptr_t *base, size_t *usable)
{
    struct fa__span *s = fa__pm_span(p);
    if (s == NULL || s->npages == 0 || p < s->start || p >= s->start + s->npages * FA_PAGE_SIZE)
        return false;
    unsigned state = __atomic_load_n(&s->state, __ATOMIC_RELAXED);
    if (state == FA_SPAN_LARGE) {
        *base = s->start;
        *usable = fa__large_size(s);
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
    return true;
}

/* The header of the block the program's pointer p names, after every
 * check a pointer passed to op ("free", "realloc", ...) must pass; NULL
 * (after the report, when going on) when it fails one. */
static struct dbg_hdr *check_ptr(void *p, const char *op)
{
    uintptr_t a = (uintptr_t)p, base;
    size_t usable;
    if (a % FA_MIN_ALIGN != 0) {
        fa__diag("fastalloc: debug: misaligned pointer %p passed to %s, thread %d", p, op, tid());
        report_end(NULL, true);
        return NULL;
    }
    if (!block_of(a, &base, &usable)) {
        fa__diag("fastalloc: debug: invalid pointer %p passed to %s: not a block fastalloc returned, "
                 "thread %d",
                 p, op, tid());
        report_end(NULL, true);
        return NULL;
    }
    struct dbg_hdr *h = (struct dbg_hdr *)(a - HDR);
    uintptr_t m = a >= base + HDR ? __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) ^ (uintptr_t)h : 0;
    if ((m != MAGIC_LIVE && m != MAGIC_FREED) || base + h->off != (uintptr_t)h) {
        /* Inside a block: name the block, when its header is where an
         * unaligned block keeps it. */
        struct dbg_hdr *b = (struct dbg_hdr *)base;
        if ((b->magic ^ base) == MAGIC_LIVE && b->off == 0 && a > base + HDR) {
            fa__diag("fastalloc: debug: interior pointer %p passed to %s: %zu bytes into the block "
                     "at %p (%zu bytes), thread %d",
                     p, op, (size_t)(a - (uintptr_t)user_of(b)), (void *)user_of(b), b->size, tid());
            report_end(b, true);
        } else {
            fa__diag("fastalloc: debug: interior pointer %p passed to %s: inside a block of %zu "
                     "bytes at %p, thread %d",
                     p, op, usable, (void *)base, tid());
            report_end(NULL, true);
        }
        return NULL;
    }
    if (m == MAGIC_FREED) {
        if (strcmp(op, "free") == 0)
            fa__diag("fastalloc: debug: double free of %p (%zu bytes), thread %d", p, h->size, tid());
        else
            fa__diag("fastalloc: debug: %s of freed block %p (%zu bytes), thread %d", op, p, h->size,
                     tid());
        report_end(h, true);
        return NULL;
    }
    return h;
}

/* The canary's end: the block's end, at most CANARY_MAX bytes on. */
static size_t canary_len(const struct dbg_hdr *h)
{
    uintptr_t base = (uintptr_t)h - h->off, end = (uintptr_t)user_of((struct dbg_hdr *)h) + h->size;
    size_t usable = 0;
    uintptr_t b;
    if (!block_of(base, &b, &usable) || b != base)
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
        memcpy(&w, p + i, 8);
        if (w != 0x0101010101010101ULL * c)
            break;
    }
    for (; i < n; i++)
        if (p[i] != c)
            return i;
    return n;
}

static bool canary_ok(struct dbg_hdr *h, const char *op)
{
    const unsigned char *c = (const unsigned char *)user_of(h) + h->size;
    size_t n = canary_len(h), i = first_not(c, n, FILL_CANARY);
    if (i == n)
        return true;
    fa__diag("fastalloc: debug: canary overwritten after %p (%zu bytes), found by %s: byte %zu past "
             "the end is 0x%02x, thread %d",
             (void *)user_of(h), h->size, op, i, c[i], tid());
    report_end(h, true);
    return false;
}

static void *checked_alloc(size_t size, size_t align, bool zero)
{
    if (align < FA_MIN_ALIGN)
        align = FA_MIN_ALIGN;
    size_t room = align > FA_MIN_ALIGN ? align : 0, total;
    if (size > FA_MAX_REQUEST || __builtin_add_overflow(size, HDR + CANARY_MIN + room, &total) ||
        total > FA_MAX_REQUEST) {
        errno = ENOMEM;
        return NULL;
    }
    void *b = total <= FA_MAX_SMALL ? fa__tc_alloc_slow(total) : fa__tc_alloc_large(total, 0, false);
    if (b == NULL)
        return NULL;
    uintptr_t base = (uintptr_t)b;
    uintptr_t user = (base + HDR + align - 1) & ~(uintptr_t)(align - 1);
    struct dbg_hdr *h = (struct dbg_hdr *)(user - HDR);
    memset(h, 0, HDR);
    h->size = size;
    h->off = (uint32_t)((uintptr_t)h - base);
    h->tid = tid();
    h->nalloc = capture(h->alloc_at);
    memset((void *)user, zero ? 0 : FILL_NEW, size);
    memset((void *)(user + size), FILL_CANARY, canary_len(h));
    VG_ALLOC((void *)user, size, zero);
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
static void release(struct dbg_hdr *h)
{
    const unsigned char *u = (const unsigned char *)user_of(h);
    size_t i = fill_freed() ? first_not(u, h->size, FILL_FREED) : h->size;
    if (i < h->size) {
        fa__diag("fastalloc: debug: write after free to %p (%zu bytes): byte %zu is 0x%02x, found "
                 "by thread %d",
                 (void *)u, h->size, i, u[i], tid());
        report_end(h, false);
    }
    fa__tc_free_slow((char *)h - h->off);
}

static size_t q_cost(const struct dbg_hdr *h)
{
    return h->off + HDR + h->size + CANARY_MIN;
}

static void checked_free(void *p)
{
    if (p == NULL)
        return;
    struct dbg_hdr *h = check_ptr(p, "free");
    if (h == NULL)
        return;
    /* One winner when two threads free the block at once. */
    uintptr_t live = MAGIC_LIVE ^ (uintptr_t)h;
    if (!__atomic_compare_exchange_n(&h->magic, &live, MAGIC_FREED ^ (uintptr_t)h, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED)) {
        fa__diag("fastalloc: debug: double free of %p (%zu bytes), thread %d", p, h->size, tid());
        report_end(h, true);
        return;
    }
    canary_ok(h, "free");
    h->tid = tid();
    h->nfree = capture(h->free_at);
    if (fill_freed())
        memset(p, FILL_FREED, h->size);
    VG_FREE(p);
    struct dbg_hdr *out = NULL;
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
    struct dbg_hdr **tail = &out;
    while (q_head != NULL && q_bytes > bound) {
        struct dbg_hdr *o = q_head;
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
        struct dbg_hdr *o = out;
        out = o->next;
        release(o);
    }
}

static size_t checked_usable(void *p)
{
    struct dbg_hdr *h = check_ptr(p, "malloc_usable_size");
    return h != NULL ? h->size : 0;
}

static int checked_owns(const void *p)
{
    uintptr_t a = (uintptr_t)p, base;
    size_t usable;
    if (p == NULL || a % FA_MIN_ALIGN != 0 || !block_of(a, &base, &usable) || a < base + HDR)
        return 0;
    const struct dbg_hdr *h = (const struct dbg_hdr *)(a - HDR);
    return (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) ^ (uintptr_t)h) == MAGIC_LIVE &&
           base + h->off == (uintptr_t)h;
}

void fa__dbg_report_end(void)
{
    report_end(NULL, true);
}

int fa__dbg_tid(void)
{
    return tid();
}

/* ---- hooks ---- */

/* The hooks in force: one of two copies, so that a thread calling through
 * the old one is not torn by a change (changes are rare: a profiler sets
 * its hooks once). */
static fa_hooks hook_copy[2];
static const fa_hooks *hooks_now;
static fa__lock_t hooks_lock = FA_LOCK_INIT;

/* Set while this thread runs a hook: its own calls are not hooked. */
static __thread int in_hook __attribute__((tls_model("initial-exec")));
/* Sampling: bytes until this thread's next sample, and its random state. */
static __thread long long sample_left __attribute__((tls_model("initial-exec")));
static __thread uint64_t sample_rng __attribute__((tls_model("initial-exec")));

/* Sampled blocks, whose frees on_free sees: an open-addressing set of
 * addresses (0 empty, 1 deleted) in memory from the OS, under a lock. */
static fa__lock_t sampled_lock = FA_LOCK_INIT;
static uintptr_t *sampled;
static size_t sampled_cap, sampled_used; /* used counts deleted slots too */

static size_t slot_of(uintptr_t p, size_t cap)
{
    return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ULL >> 7) & (cap - 1);
}

/* Caller holds sampled_lock. */
static void sampled_put(uintptr_t p)
{
    if (2 * (sampled_used + 1) > sampled_cap) {
        size_t cap = sampled_cap ? 2 * sampled_cap : 4096;
        uintptr_t *t = fa__os_map(cap * sizeof *t, 0);
        if (t == NULL)
            return; /* this block's free goes unseen */
        size_t used = 0;
        for (size_t i = 0; i < sampled_cap; i++) {
            if (sampled[i] > 1) {
                size_t k = slot_of(sampled[i], cap);
                while (t[k] != 0)
                    k = (k + 1) & (cap - 1);
                t[k] = sampled[i];
                used++;
            }
        }
        if (sampled != NULL)
            fa__os_unmap(sampled, sampled_cap * sizeof *sampled);
        sampled = t;
        sampled_cap = cap;
        sampled_used = used;
    }
    size_t k = slot_of(p, sampled_cap);
    while (sampled[k] > 1)
        k = (k + 1) & (sampled_cap - 1);
    if (sampled[k] == 0)
        sampled_used++;
    sampled[k] = p;
}

static bool sampled_take(uintptr_t p)
{
    bool found = false;
    fa__lock(&sampled_lock);
    if (sampled_cap != 0) {
        for (size_t k = slot_of(p, sampled_cap); sampled[k] != 0; k = (k + 1) & (sampled_cap - 1)) {
            if (sampled[k] == p) {
                sampled[k] = 1;
                found = true;
                break;
            }
        }
    }
    fa__unlock(&sampled_lock);
    return found;
}

/* The next sample point: uniform in [1, 2 * mean], so one block per mean
 * bytes on average, with no period for a program's pattern to beat with. */
static long long next_sample(size_t mean)
{
    if (sample_rng == 0)
        sample_rng = ((uint64_t)(uintptr_t)&sample_rng ^ (uint64_t)tid()) | 1;
    sample_rng ^= sample_rng << 13;
    sample_rng ^= sample_rng >> 7;
    sample_rng ^= sample_rng << 17;
    return 1 + (long long)(sample_rng % (2 * (uint64_t)mean));
}

int fa__dbg_set_hooks(const fa_hooks *h)
{
    if (h != NULL && h->on_alloc == NULL && h->on_free == NULL)
        return EINVAL;
    fa__lock(&hooks_lock);
    if (h != NULL) {
        fa_hooks *next = hooks_now == &hook_copy[0] ? &hook_copy[1] : &hook_copy[0];
        *next = *h;
        __atomic_store_n(&hooks_now, next, __ATOMIC_RELEASE);
        __atomic_fetch_or(&fa__diag_mode, FA_DIAG_HOOKS, __ATOMIC_RELEASE);
    } else {
        __atomic_fetch_and(&fa__diag_mode, ~FA_DIAG_HOOKS, __ATOMIC_RELEASE);
        __atomic_store_n(&hooks_now, NULL, __ATOMIC_RELEASE);
    }
    fa__unlock(&hooks_lock);
    return 0;
}

/* The first frame outside the allocator: the call's site. */
static void *call_site(void)
{
    void *at[FRAMES];
    return capture(at) > 0 ? at[0] : NULL;
}

static void hook_alloc(void *p, size_t size)
{
    const fa_hooks *h = __atomic_load_n(&hooks_now, __ATOMIC_ACQUIRE);
    if (h == NULL || h->on_alloc == NULL || in_hook || p == NULL)
        return;
    if (h->sample_bytes != 0) {
        if (sample_left == 0)
            sample_left = next_sample(h->sample_bytes);
        if ((sample_left -= (long long)size) > 0)
            return;
        sample_left = next_sample(h->sample_bytes);
        fa__lock(&sampled_lock);
        sampled_put((uintptr_t)p);
        fa__unlock(&sampled_lock);
    }
    in_hook = 1;
    h->on_alloc(p, size, call_site());
    in_hook = 0;
}

static void hook_free(void *p, size_t size)
{
    const fa_hooks *h = __atomic_load_n(&hooks_now, __ATOMIC_ACQUIRE);
    if (h == NULL || h->on_free == NULL || in_hook || p == NULL)
        return;
    if (h->sample_bytes != 0 && !sampled_take((uintptr_t)p))
        return;
    in_hook = 1;
    h->on_free(p, size);
    in_hook = 0;
}

/* ---- the entry points: checked blocks (debug mode, memcheck) or plain
 * ones (hooks alone), and the hooks on either ---- */

static bool checked(void)
{
    return fa__diag_on() & (FA_DIAG_DEBUG | FA_DIAG_VALGRIND);
}

/* The usable bytes of a plain block; a bad pointer stops the program as
 * it does outside the modes. */
static size_t plain_usable(void *p, const char *who)
{
    unsigned cls = fa__pm_class((uintptr_t)p);
    if (cls != 0)
        return fa__classes[cls].size;
    return fa__large_size(fa__large_span_of(p, who));
}

static void *plain_alloc(size_t size, size_t align, bool zero)
{
    unsigned cls = 0;
    if (align <= FA_MIN_ALIGN && size <= FA_MAX_SMALL)
        cls = fa__size_to_class(size);
    else if (align <= FA_PAGE_SIZE)
        cls = fa__class_for_aligned(size, align);
    if (cls == 0)
        return fa__tc_alloc_large(size, align, zero);
    void *p = fa__tc_alloc_slow(fa__classes[cls].size);
    if (p != NULL && zero)
        memset(p, 0, size);
    return p;
}

static bool tracing(void)
{
    return fa__diag_on() & FA_DIAG_TRACE;
}

/* Recording without checked blocks: each block has a trace header
 * (09-diag/trace.h) before it, and alignment room when asked for. */
static bool traced(void)
{
    return (fa__diag_on() & (FA_DIAG_TRACE | FA_DIAG_DEBUG | FA_DIAG_VALGRIND)) == FA_DIAG_TRACE;
}

static void *traced_alloc(size_t size, size_t align, bool zero, struct fa__trace_hdr **hp)
{
    if (align < FA_MIN_ALIGN)
        align = FA_MIN_ALIGN;
    size_t room = align > FA_MIN_ALIGN ? align : 0, total;
    if (__builtin_add_overflow(size, FA_TRACE_HDR + room, &total) || total > FA_MAX_REQUEST) {
        errno = ENOMEM;
        return NULL;
    }
    void *b = plain_alloc(total, 0, false);
    if (b == NULL)
        return NULL;
    uintptr_t user = ((uintptr_t)b + FA_TRACE_HDR + align - 1) & ~(uintptr_t)(align - 1);
    struct fa__trace_hdr *h = (struct fa__trace_hdr *)(user - FA_TRACE_HDR);
    h->off = (uint32_t)((uintptr_t)h - (uintptr_t)b);
    if (zero)
        memset((void *)user, 0, size);
    *hp = h;
    return (void *)user;
}

/* The trace header of the block p, or NULL when p is not the start of a
 * traced block. */
static struct fa__trace_hdr *traced_hdr(const void *p)
{
    uintptr_t a = (uintptr_t)p, base;
    size_t usable;
    if (a % FA_MIN_ALIGN != 0 || !block_of(a - FA_TRACE_HDR, &base, &usable))
        return NULL;
    struct fa__trace_hdr *h = (struct fa__trace_hdr *)(a - FA_TRACE_HDR);
    return base + h->off == (uintptr_t)h ? h : NULL;
}

/* The underlying block of p, a traced block; a bad pointer stops the
 * program as it does outside the modes. */
static struct fa__trace_hdr *traced_hdr_or_die(void *p, const char *who)
{
    struct fa__trace_hdr *h = traced_hdr(p);
    if (h == NULL) {
        plain_usable(p, who); /* stops the program on a bad pointer */
        fa__fatal("fastalloc: %s(): %p is not a block fastalloc returned", who, p);
    }
    return h;
}

static size_t traced_usable(void *p, const char *who)
{
    struct fa__trace_hdr *h = traced_hdr_or_die(p, who);
    void *base = (char *)h - h->off;
    return plain_usable(base, who) - ((uintptr_t)p - (uintptr_t)base);
}

static void *mode_alloc(size_t size, size_t align, bool zero)
{
    return checked() ? checked_alloc(size, align, zero) : plain_alloc(size, align, zero);
}

static unsigned trace_op(size_t align, bool zero)
{
    return zero ? FA_TR_CALLOC : align > FA_MIN_ALIGN ? FA_TR_ALIGNED : FA_TR_MALLOC;
}

void *fa__dbg_alloc(size_t size, size_t align, bool zero)
{
    fa__decay_maybe();
    if (traced()) {
        struct fa__trace_hdr *h;
        void *p = traced_alloc(size, align, zero, &h);
        if (p != NULL)
            fa__trace_alloc_hdr(trace_op(align, zero), h, size, align);
        hook_alloc(p, size);
        return p;
    }
    void *p = mode_alloc(size, align, zero);
    hook_alloc(p, size);
    if (tracing())
        fa__trace_alloc(trace_op(align, zero), p, size, align);
    return p;
}

void fa__dbg_free(void *p)
{
    if (p == NULL)
        return;
    if (traced()) {
        /* As outside the modes, a free trusts its pointer (the block's own
         * checks stop a bad large one). */
        struct fa__trace_hdr *h = (struct fa__trace_hdr *)((char *)p - FA_TRACE_HDR);
        if (FA_UNLIKELY(fa__diag_on() & FA_DIAG_HOOKS))
            hook_free(p, traced_usable(p, "free"));
        fa__trace_free_hdr(h);
        fa__tc_free_slow((char *)h - h->off);
        return;
    }
    if (checked()) {
        struct dbg_hdr *h = check_ptr(p, "free");
        if (h != NULL) {
            hook_free(p, h->size);
            if (tracing())
                fa__trace_free(p);
        }
        checked_free(p);
        return;
    }
    hook_free(p, plain_usable(p, "free"));
    if (tracing())
        fa__trace_free(p);
    fa__tc_free_slow(p);
}

void *fa__dbg_realloc(void *p, size_t size)
{
    if (p == NULL)
        return fa__dbg_alloc(size, 0, false);
    if (size == 0) {
        fa__dbg_free(p);
        return NULL;
    }
    fa__decay_maybe();
    if (traced()) {
        struct fa__trace_hdr *oh = traced_hdr_or_die(p, "realloc"), *nh;
        size_t old = traced_usable(p, "realloc");
        void *n = traced_alloc(size, 0, false, &nh);
        if (n == NULL)
            return NULL; /* p stays valid */
        memcpy(n, p, old < size ? old : size);
        hook_alloc(n, size);
        hook_free(p, old);
        fa__trace_realloc_hdr(oh, nh, size);
        fa__tc_free_slow((char *)oh - oh->off);
        return n;
    }
    size_t old;
    if (checked()) {
        struct dbg_hdr *h = check_ptr(p, "realloc");
        if (h == NULL) {
            errno = EINVAL;
            return NULL;
        }
        canary_ok(h, "realloc");
        old = h->size;
    } else {
        old = plain_usable(p, "realloc");
    }
    void *n = mode_alloc(size, 0, false);
    if (n == NULL)
        return NULL; /* p stays valid */
    memcpy(n, p, old < size ? old : size);
    /* Hooks see a move as an allocation and a free; a trace, as a realloc
     * that keeps the block's id. */
    hook_alloc(n, size);
    hook_free(p, old);
    if (tracing())
        fa__trace_realloc(p, n, size);
    if (checked())
        checked_free(p);
    else
        fa__tc_free_slow(p);
    return n;
}

size_t fa__dbg_usable(void *p)
{
    if (p == NULL)
        return 0;
    if (traced())
        return traced_usable(p, "malloc_usable_size");
    return checked() ? checked_usable(p) : plain_usable(p, "malloc_usable_size");
}

int fa__dbg_owns(const void *p)
{
    if (traced())
        return traced_hdr(p) != NULL;
    return checked_owns(p);
}

void fa__dbg_lock_for_fork(void)
{
    fa__lock(&dbg_lock);
}

void fa__dbg_unlock_for_fork(void)
{
    fa__unlock(&dbg_lock);
}

/* ---- the leak report ---- */

struct site {
    void *at[FRAMES];
    uint16_t n;
    size_t blocks, bytes;
};

static bool same_site(const struct site *s, const struct dbg_hdr *h)
{
    return s->n == h->nalloc && memcmp(s->at, h->alloc_at, h->nalloc * sizeof(void *)) == 0;
}

static uint64_t site_hash(const struct dbg_hdr *h)
{
    uint64_t x = h->nalloc;
    for (unsigned i = 0; i < h->nalloc; i++)
        x = (x ^ (uintptr_t)h->alloc_at[i]) * 0x9E3779B97F4A7C15ULL;
    return x ^ (x >> 29);
}

/* The live blocks, grouped by the place that allocated them, largest
 * first.  The groups are built under the lock in memory from the OS (the
 * heap is what is being reported on), and printed after it: symbolizing
 * takes the loader's lock, which a thread in dlopen may hold while it
 * allocates. */
static void leak_report(void)
{
    fa__lock(&dbg_lock);
    size_t blocks = 0, bytes = 0;
    for (struct dbg_hdr *h = live_head.next; h != &live_head; h = h->next) {
        blocks++;
        bytes += h->size;
    }
    if (blocks == 0) {
        fa__unlock(&dbg_lock);
        return;
    }
    size_t cap = 16;
    while (cap < 2 * blocks)
        cap *= 2;
    size_t map_bytes = cap * sizeof(struct site);
    struct site *t = fa__os_map(map_bytes, 0);
    if (t == NULL) {
        fa__unlock(&dbg_lock);
        fa__diag("fastalloc: debug: leak report: %zu blocks (%zu bytes) live at exit; no memory to "
                 "group them",
                 blocks, bytes);
        return;
    }
    size_t nsites = 0;
    for (struct dbg_hdr *h = live_head.next; h != &live_head; h = h->next) {
        size_t i = site_hash(h) & (cap - 1);
        while (t[i].blocks != 0 && !same_site(&t[i], h))
            i = (i + 1) & (cap - 1);
        if (t[i].blocks == 0) {
            memcpy(t[i].at, h->alloc_at, sizeof t[i].at);
            t[i].n = h->nalloc;
            nsites++;
        }
        t[i].blocks++;
        t[i].bytes += h->size;
    }
    fa__unlock(&dbg_lock);
    /* Compact, then sort by bytes, largest first (an insertion sort on the
     * largest few: qsort may allocate). */
    size_t k = 0;
    for (size_t i = 0; i < cap; i++)
        if (t[i].blocks != 0)
            t[k++] = t[i];
    enum { SHOWN = 32 };
    size_t shown = nsites < SHOWN ? nsites : SHOWN;
    for (size_t i = 0; i < shown; i++) {
        size_t best = i;
        for (size_t j = i + 1; j < k; j++)
            if (t[j].bytes > t[best].bytes)
                best = j;
        struct site tmp = t[i];
        t[i] = t[best];
        t[best] = tmp;
    }
    fa__diag("fastalloc: debug: leak report: %zu blocks (%zu bytes) live at exit, from %zu places", blocks,
             bytes, nsites);
    for (size_t i = 0; i < shown; i++) {
        fa__diag("fastalloc:   %zu bytes in %zu block%s", t[i].bytes, t[i].blocks, t[i].blocks == 1 ? "" : "s");
        print_trace("allocated at:", t[i].at, t[i].n);
    }
    if (nsites > shown)
        fa__diag("fastalloc:   ... and %zu more places", nsites - shown);
    fa__os_unmap(t, map_bytes);
}

__attribute__((destructor)) static void at_exit(void)
{
    /* Under valgrind alone, memcheck's leak check reports instead. */
    if (fa__diag_on() & FA_DIAG_DEBUG)
        leak_report();
}
