/* Size classes: the sizes that small blocks are rounded up to. */
#ifndef FA_RECORDS_SIZECLASS_H
#define FA_RECORDS_SIZECLASS_H

#include "00-base/config.h"

/* Class 0 is reserved: it marks "not a small block" in the page map and in
 * the lookup tables before initialisation, so that both fall into a slow path
 * by themselves.  Classes 1..FA_NUM_CLASSES-1 are, in order: 16 to 128 in
 * steps of 16, eight classes per doubling up to 1 KiB, then four per
 * doubling up to FA_MAX_SMALL, 32 KiB (256 KiB in the hardened build;
 * 00-base/config.h) (#39: four, where eight were, cut the peak RSS of
 * programs that use many classes above 1 KiB by 4 to 12%, at no time
 * measured: docs/HISTORY.md).  There is no
 * 8-byte class: every block is 16-byte aligned, so that free can refuse a
 * pointer that is not with one test (12-api/fastpath.h), and every block has a
 * second word for its free mark (02-records/freelist.h). */
#define FA_NUM_CLASSES (33 + 4 * (FA_MAX_SMALL_SHIFT - 10))
/* From this size up, four classes per doubling instead of eight. */
#define FA_CLASS_COARSE 1024u

/* O(1) size -> class.  Sizes up to FA_SMALL_TABLE_MAX index the first table
 * byte by byte; larger ones the second in 128-byte steps (every class above
 * 1 KiB is a multiple of 128).  A byte per size (1 KiB, where 8-byte steps
 * took 129 bytes) saves malloc's fast path the round-up and the shift: two
 * of the instructions that free's checks cost (SECURITY.md). */
#define FA_SMALL_TABLE_MAX 1024
/* Both tables are read without a lock, by threads whose first malloc runs
 * while another thread fills them at start-up: a byte not yet written is 0,
 * which sends the call to the slow path, where start-up waits; one already
 * written names a class whose heads[] the thread cannot have yet, which
 * does the same.  The bytes are read and written as relaxed atomics, the
 * same single moves, so that ThreadSanitizer knows the race is meant. */
extern uint8_t fa__class_small[FA_SMALL_TABLE_MAX + 1] FA_HIDDEN;
extern uint8_t fa__class_large[FA_MAX_SMALL / 128 + 1] FA_HIDDEN;

#define FA_CARVE_MIN_BLOCKS 32u
#define FA_CARVE_MIN_BYTES 4096u

struct fa__class_info {
    uint32_t size;     /* bytes of each block */
    uint32_t pages;    /* pages in one span of this class */
    uint32_t objs;     /* blocks in one span */
    /* The shortest freelist the thread cache takes back while the span
     * still has blocks to cut, and the fewest blocks it cuts at once: 32,
     * or fewer where 32 would pass FA_CARVE_MIN_BYTES (08-tcache/own.c). */
    uint32_t carve_min;
    uint32_t max_list; /* slack in fa__tc_seen_free's bound on heads[] (sizeclass.c) */
    /* 2^42 / size, rounded up: an offset into a span (below 2^22) divided
     * by size is (offset * recip) >> 42, exactly (the error stays below
     * 2^22 / 2^42, less than 1 / size). */
    uint64_t recip;
};
extern struct fa__class_info fa__classes[FA_NUM_CLASSES] FA_HIDDEN;

void fa__sizeclass_init(void) FA_HIDDEN;

/* Only valid once initialised and for size <= FA_MAX_SMALL. */
FA_INLINE unsigned fa__size_to_class(size_t size)
{
    if (FA_LIKELY(size <= FA_SMALL_TABLE_MAX))
        return __atomic_load_n(&fa__class_small[size], __ATOMIC_RELAXED);
    return __atomic_load_n(&fa__class_large[(size + 127) >> 7], __ATOMIC_RELAXED);
}

/* Smallest class whose blocks are at least size bytes and, given that spans
 * start on page boundaries, all aligned to align (a power of two no larger
 * than FA_PAGE_SIZE).  0 when there is none. */
unsigned fa__class_for_aligned(size_t size, size_t align) FA_HIDDEN;

#endif
