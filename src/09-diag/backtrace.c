/* Backtraces for the diagnostic modes: the calling stack with the
 * allocator's own frames left out, and a stack
 * printed one frame a line.  Debug mode records where each block was
 * allocated and freed, its reports print them, and the hooks take the
 * call's site from here.  Calls nothing else in 09-diag (debug_int.h gives
 * the order). */
#define _GNU_SOURCE
#include "09-diag/debug_int.h"
#include "00-base/diag.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>
#include <unwind.h>

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
struct trace {
    void **out;
    unsigned n, max;
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
    return t->n == t->max ? _URC_END_OF_STACK : _URC_NO_REASON;
}

uint16_t fa__dbg_capture(void **out)
{
    return (uint16_t)fa__dbg_capture_n(out, FA_DBG_FRAMES);
}

unsigned fa__dbg_capture_n(void **out, unsigned max)
{
    if (in_trace)
        return 0;
    in_trace = 1;
    if (!__atomic_load_n(&self_found, __ATOMIC_ACQUIRE)) {
        dl_iterate_phdr(find_self, (void *)(uintptr_t)&fa__dbg_capture);
        __atomic_store_n(&self_found, 1, __ATOMIC_RELEASE);
    }
    struct trace t = {out, 0, max};
    _Unwind_Backtrace(trace_step, &t);
    in_trace = 0;
    return t.n;
}

void fa__dbg_print_trace(const char *what, void *const *frames, unsigned n)
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
