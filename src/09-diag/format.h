/* The allocation-trace format: what src/09-diag/trace.c writes and
 * tools/fastalloc-trace.c reads.  Integers are LEB128 varints unless a
 * field says fixed32 or fixed64 (little-endian, 00-base/coding.h).
 *
 *   header   "FATRACE" NUL                       8 bytes
 *            version                             fixed32 (FA_TRACE_VERSION)
 *            page size                           fixed32
 *            clock                               fixed32 (1: CLOCK_MONOTONIC, ns)
 *            start time                          fixed64 (ns, that clock)
 *            process id                          fixed32
 *            command line                        varint length, then its bytes
 *                                                (arguments separated by NUL)
 *   chunks   'C'                                 1 byte
 *            thread                              varint (1, 2, ...: order of first record)
 *            records                             varint (at least 1)
 *            bytes                               varint (of the records that follow)
 *            the records
 *   footer   'E'                                 1 byte
 *            records                             varint (in all chunks)
 *            checksum                            fixed64 (fa__trace_fnv of every byte
 *                                                from the header's first to the
 *                                                footer's 'E', piece by piece)
 *            "FAEND" NUL NUL NUL                 8 bytes
 *
 * A record:
 *            op                                  1 byte (FA_TR_*)
 *            object id                           varint (1, 2, ...; 0: a block the trace
 *                                                never saw allocated)
 *            step                                varint (0 for the allocation, then 1,
 *                                                2, ... for each realloc and the free)
 *            size                                varint (not for a free; calloc: n * size)
 *            alignment                           varint (FA_TR_ALIGNED only)
 *            time                                varint (ns since the thread's
 *                                                previous record, or since the start)
 *
 * Object ids stand for addresses: a replay does not depend on where the
 * recording allocator put blocks.  A realloc keeps its block's id whether
 * it moves or not.  A thread's records are in its order; the step of each
 * operation on an object orders them across threads (a replay runs step k
 * of an object after its step k - 1). */
#ifndef FA_TRACE_FORMAT_H
#define FA_TRACE_FORMAT_H

#include "00-base/coding.h"

#include <stddef.h>
#include <stdint.h>

#define FA_TRACE_MAGIC "FATRACE"     /* with its NUL: 8 bytes */
#define FA_TRACE_END "FAEND\0\0"     /* with its NUL: 8 bytes */
#define FA_TRACE_VERSION 1u
#define FA_TRACE_CLOCK_MONOTONIC 1u
#define FA_TRACE_CHUNK 'C'
#define FA_TRACE_FOOTER 'E'

enum {
    FA_TR_MALLOC = 1,
    FA_TR_CALLOC = 2,
    FA_TR_REALLOC = 3,
    FA_TR_FREE = 4,
    FA_TR_ALIGNED = 5,
};

/* The most bytes one record takes. */
#define FA_TRACE_RECORD_MAX (1 + 5 * FA_VARINT64_MAX)

/* The footer's checksum: FNV-1a's step, 64 bits, taken over 8-byte
 * little-endian words and then the last bytes one at a time, of each piece
 * the writer writes: the header's fixed part and varint, the command line,
 * and each chunk's header and records (the reader hashes the same pieces).
 * A word at a time: a byte at a time made the checksum a visible part of
 * what recording cost a program. */
#define FA_TRACE_FNV_START 0xcbf29ce484222325ULL
static inline uint64_t fa__trace_fnv(uint64_t h, const void *p, size_t n)
{
    const char *c = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        h = (h ^ fa__decode_fixed64(c + i)) * 0x100000001b3ULL;
    for (; i < n; i++)
        h = (h ^ (unsigned char)c[i]) * 0x100000001b3ULL;
    return h;
}

/* Encode a record at dst (room for FA_TRACE_RECORD_MAX); returns its bytes. */
static inline unsigned fa__trace_put_record(char *dst, unsigned op, uint64_t id, uint64_t step, uint64_t size,
                                            uint64_t align, uint64_t dt)
{
    unsigned n = 0;
    dst[n++] = (char)op;
    n += fa__encode_varint64(dst + n, id);
    n += fa__encode_varint64(dst + n, step);
    if (op != FA_TR_FREE)
        n += fa__encode_varint64(dst + n, size);
    if (op == FA_TR_ALIGNED)
        n += fa__encode_varint64(dst + n, align);
    n += fa__encode_varint64(dst + n, dt);
    return n;
}

struct fa__trace_record {
    unsigned op;
    uint64_t id, step, size, align, dt;
};

/* Decode one record from [p, limit); returns the byte after it, or NULL
 * when it is cut short or its op is unknown. */
static inline const char *fa__trace_get_record(const char *p, const char *limit, struct fa__trace_record *r)
{
    if (p >= limit)
        return NULL;
    r->op = (unsigned char)*p++;
    if (r->op < FA_TR_MALLOC || r->op > FA_TR_ALIGNED)
        return NULL;
    r->size = r->align = 0;
    if ((p = fa__decode_varint64(p, limit, &r->id)) == NULL || (p = fa__decode_varint64(p, limit, &r->step)) == NULL)
        return NULL;
    if (r->op != FA_TR_FREE && (p = fa__decode_varint64(p, limit, &r->size)) == NULL)
        return NULL;
    if (r->op == FA_TR_ALIGNED && (p = fa__decode_varint64(p, limit, &r->align)) == NULL)
        return NULL;
    return fa__decode_varint64(p, limit, &r->dt);
}

#endif
