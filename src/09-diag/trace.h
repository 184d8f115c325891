/* Allocation traces (FASTALLOC_TRACE=path): every malloc-family call,
 * recorded to a compact binary file (src/09-diag/format.h) that
 * tools/fastalloc-trace reads, inspects and replays.  Recording is a
 * diagnostic mode (00-base/diag.h): every call comes through the debug
 * layer's entry points, which call the functions below. */
#ifndef FA_TRACE_TRACE_H
#define FA_TRACE_TRACE_H

#include "00-base/config.h"

/* At start-up, after the options: open the file and write its header
 * when FASTALLOC_TRACE is set, and switch the mode on. */
void fa__trace_init(void) FA_HIDDEN;

/* A block p of size bytes was allocated (op: FA_TR_MALLOC, FA_TR_CALLOC or
 * FA_TR_ALIGNED, with align); p is about to be freed; the block old became
 * p, of size bytes (a realloc, moved or not).  Free and realloc are
 * recorded before the old block goes back, so that no other thread can be
 * handed its address first. */
void fa__trace_alloc(unsigned op, void *p, size_t size, size_t align) FA_HIDDEN;
void fa__trace_free(void *p) FA_HIDDEN;
void fa__trace_realloc(void *old, void *p, size_t size) FA_HIDDEN;

/* Recording alone (no checked blocks: debug mode, memcheck), a block
 * carries its object id in a header just before it (09-diag/traced.c lays it
 * out): a free finds the id there instead of in an address map, which
 * cost recording a cache miss and a lock at each end of a block's life.
 * off: from the underlying block's start to the header. */
struct fa__trace_hdr {
    uint64_t id;
    uint32_t step;
    uint32_t off;
};
#define FA_TRACE_HDR ((size_t)sizeof(struct fa__trace_hdr))

/* The same three events for blocks with that header. */
void fa__trace_alloc_hdr(unsigned op, struct fa__trace_hdr *h, size_t size, size_t align) FA_HIDDEN;
void fa__trace_free_hdr(const struct fa__trace_hdr *h) FA_HIDDEN;
void fa__trace_realloc_hdr(const struct fa__trace_hdr *old, struct fa__trace_hdr *h, size_t size) FA_HIDDEN;

/* For fork: the child writes a file of its own (path.PID). */
void fa__trace_fork_prepare(void) FA_HIDDEN;
void fa__trace_fork_parent(void) FA_HIDDEN;
void fa__trace_fork_child(void) FA_HIDDEN;

#endif
