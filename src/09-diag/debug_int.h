/* What the files behind the diagnostic modes' entry points share among
 * themselves: debug.h is what the rest of the allocator calls, this header
 * is for src/09-diag/ alone.
 *
 * The files, in the order of their calls: each calls only files above it
 * in this list, so that no two of them call each other.
 *   backtrace.c  the calling stack, captured and printed
 *   blocks.c     the underlying blocks: taking one (small from the
 *                thread's cache, large from the page heap), and finding the
 *                one that holds an address
 *   checked.c    checked blocks (debug mode, memcheck): header, canary,
 *                fills, the quarantine, the live list, the error reports;
 *                calls backtrace.c, blocks.c
 *   leaks.c      the leak report at exit; calls checked.c, backtrace.c
 *   hooks.c      the hooks and their sampling; calls backtrace.c
 *   traced.c     traced blocks (a trace without checks); calls blocks.c
 *   textout.c    text to a file descriptor through a buffer, with no
 *                allocation and no stdio
 *   profile.c    the sampled heap profile: sampled blocks, their table,
 *                the dump; calls backtrace.c, textout.c
 *   debug.c      the entry points every mode takes, and start-up; calls
 *                all of the above, and the trace recorder (trace.c)
 * memcheck.h, valgrind's client requests, is macros and calls none of
 * them. */
#ifndef FA_DIAG_DEBUG_INT_H
#define FA_DIAG_DEBUG_INT_H

#include "00-base/config.h"
#include "09-diag/debug.h"

/* The frames a backtrace keeps. */
#define FA_DBG_FRAMES 6

/* ---- backtrace.c ---- */

/* The calling stack, the allocator's frames left out, into
 * out[FA_DBG_FRAMES]; returns the number of frames (0 when this thread is
 * already capturing one: an allocation the unwinder makes then gets no
 * trace).  The thread id is fa__os_thread_id() (01-os/sys.h). */
uint16_t fa__dbg_capture(void **out) FA_HIDDEN;
/* The same, up to max frames. */
unsigned fa__dbg_capture_n(void **out, unsigned max) FA_HIDDEN;
/* One line per frame, "what" on the first. */
void fa__dbg_print_trace(const char *what, void *const *frames, unsigned n) FA_HIDDEN;

/* ---- blocks.c ---- */

/* An underlying block of size bytes at the default alignment, for a checked
 * block: small from the thread's cache, large from the page heap. */
void *fa__dbg_block_alloc(size_t size) FA_HIDDEN;
/* A plain block (hooks alone, and the underlying block of a traced one),
 * as the api layer would give it. */
void *fa__dbg_plain_alloc(size_t size, size_t align, bool zero) FA_HIDDEN;
/* The usable bytes of a plain block; a bad pointer stops the program as it
 * does outside the modes (who: the call, for the message). */
size_t fa__dbg_plain_usable(void *p, const char *who) FA_HIDDEN;
/* The block the page map says holds p: its base and usable bytes, or false
 * when p is in no live block of fastalloc's. */
bool fa__dbg_block_of(uintptr_t p, uintptr_t *base, size_t *usable) FA_HIDDEN;

/* ---- checked.c ---- */

/* The header before each checked block's bytes (checked.c lays it out). */
struct fa__dbg_hdr {
    uintptr_t magic;                 /* MAGIC_LIVE or MAGIC_FREED (checked.c), xor this header's address */
    size_t size;                     /* bytes the program asked for */
    struct fa__dbg_hdr *next, *prev; /* the live list; then the quarantine (next only) */
    uint32_t off;                    /* from the block's base to this header */
    int32_t tid;                     /* the thread that allocated it, then that freed it */
    uint16_t nalloc, nfree;          /* frames recorded */
    uint32_t unused;
    void *alloc_at[FA_DBG_FRAMES];
    void *free_at[FA_DBG_FRAMES];
};

/* The header of the block the program's pointer p names, after every check
 * a pointer passed to op ("free", "realloc", ...) must pass; NULL (after
 * the report, when going on) when it fails one. */
struct fa__dbg_hdr *fa__dbg_check_ptr(void *p, const char *op) FA_HIDDEN;
/* Whether h's canary is intact; reports it when not (op: who found it). */
bool fa__dbg_canary_ok(struct fa__dbg_hdr *h, const char *op) FA_HIDDEN;
/* malloc, free, malloc_usable_size and fa_owns for checked blocks. */
void *fa__dbg_checked_alloc(size_t size, size_t align, bool zero) FA_HIDDEN;
void fa__dbg_checked_free(void *p) FA_HIDDEN;
size_t fa__dbg_checked_usable(void *p) FA_HIDDEN;
int fa__dbg_checked_owns(const void *p) FA_HIDDEN;
/* The live list: its lock (which also guards the quarantine), and its
 * head, a header that is no block's; the list is circular through it. */
void fa__dbg_live_lock(void) FA_HIDDEN;
void fa__dbg_live_unlock(void) FA_HIDDEN;
const struct fa__dbg_hdr *fa__dbg_live_head(void) FA_HIDDEN;

/* ---- hooks.c ---- (fa__dbg_set_hooks is in debug.h) */

/* The hooks' calls for a block p of size bytes allocated, or about to be
 * freed: nothing when no hook is set, p is NULL, this thread is inside a
 * hook, or sampling passes the block over. */
void fa__dbg_hook_alloc(void *p, size_t size) FA_HIDDEN;
void fa__dbg_hook_free(void *p, size_t size) FA_HIDDEN;

/* ---- traced.c ---- */

struct fa__trace_hdr;
/* A traced block: the trace header (09-diag/trace.h) before it, its
 * address in *hp, alignment room when asked for; NULL with errno = ENOMEM. */
void *fa__dbg_traced_alloc(size_t size, size_t align, bool zero, struct fa__trace_hdr **hp) FA_HIDDEN;
/* The trace header of the block p, or NULL when p is not the start of a
 * traced block. */
struct fa__trace_hdr *fa__dbg_traced_hdr(const void *p) FA_HIDDEN;
/* The same, for a pointer that must be one: a bad pointer stops the
 * program as it does outside the modes. */
struct fa__trace_hdr *fa__dbg_traced_hdr_or_die(void *p, const char *who) FA_HIDDEN;
size_t fa__dbg_traced_usable(void *p, const char *who) FA_HIDDEN;

/* ---- textout.c ---- a writer the heap profile's dump uses: start it on
 * an open fd, write, flush; err is the first write's errno, 0 if none. */
struct fa__textout {
    int fd, err;
    size_t len;
    char buf[16384];
};
void fa__out_start(struct fa__textout *o, int fd) FA_HIDDEN;
void fa__out(struct fa__textout *o, const char *s, size_t n) FA_HIDDEN;
void fa__out_str(struct fa__textout *o, const char *s) FA_HIDDEN;
void fa__out_dec(struct fa__textout *o, uint64_t v) FA_HIDDEN;
void fa__out_hex(struct fa__textout *o, uint64_t v) FA_HIDDEN;
/* Copy what fd reads to the end into the output. */
void fa__out_file(struct fa__textout *o, int fd) FA_HIDDEN;
void fa__out_flush(struct fa__textout *o) FA_HIDDEN;

/* ---- profile.c ---- (what the api layer calls is in debug.h) */

/* At start-up, with the diagnostic modes already on (modes): start the
 * profile when FASTALLOC_PROFILE asks for it and no mode with blocks of
 * its own is on; true when it started (the caller sets FA_DIAG_PROFILE). */
bool fa__prof_init(int modes) FA_HIDDEN;
/* While a mode of FA_DIAG_EVERY hides the caches: count an allocation of
 * size bytes, and when it is the sample, return it (a large block of its
 * own, its stack kept); NULL when it is not (or no memory). */
void *fa__prof_alloc(size_t size, size_t align, bool zero) FA_HIDDEN;
/* Write the dump the signal asked for, if it did. */
void fa__prof_poll(void) FA_HIDDEN;
void fa__prof_lock_for_fork(void) FA_HIDDEN;
void fa__prof_unlock_for_fork(void) FA_HIDDEN;

#endif
