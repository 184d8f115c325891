/* Size classes.  The table is built once at start-up from a rule rather than
 * written out, so that the invariants (coverage, bounded waste, alignment)
 * follow from the rule and the tests can check them. */
#include "02-records/sizeclass.h"
#include "00-base/diag.h"

uint8_t fa__class_small[FA_SMALL_TABLE_MAX + 1];
uint8_t fa__class_large[FA_MAX_SMALL / 128 + 1];
struct fa__class_info fa__classes[FA_NUM_CLASSES];

/* max_list is left from the thread caches of block lists that spans
 * replaced (#12); it only widens the bound past which fa__tc_seen_free
 * (08-tcache/seen.c) calls heads[] corrupt. */
#define LIST_MIN 32u
#define LIST_MAX 256u
#define LIST_BYTES (1u << 20)
#define SPAN_MIN_BYTES ((size_t)32 << 10)
#define SPAN_MIN_BLOCKS 8u
/* Spans hold at most this many bytes' worth of blocks when 8 would pass
 * it; a constant of its own, not FA_MAX_SMALL, so that where the classes
 * end does not change the spans of those below. */
#define SPAN_MAX_BYTES ((size_t)256 << 10)

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }
static uint32_t max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }

static void fill_class(unsigned c, uint32_t size)
{
    struct fa__class_info *ci = &fa__classes[c];
    ci->size = size;
    /* Spans of at least 32 KiB (or 8 blocks), but no more than 256 KiB
     * worth of blocks: big enough that a program churning a few megabytes
     * does not hand spans back and forth with the page heap every few
     * blocks, and that span records stay few.  Only what is cut from a
     * span is touched (08-tcache/own.c), so a class a thread uses for a few
     * blocks holds a page or two of its span in memory, not 32 KiB.  Spans
     * of one page held less, but slowed the benchmarks of 1 KiB strings
     * and of shuffled objects of mixed sizes (#24, docs/HISTORY.md). */
    uint32_t want = min_u32(SPAN_MIN_BLOCKS, max_u32(1, (uint32_t)(SPAN_MAX_BYTES / size)));
    size_t bytes = (size_t)size * want;
    if (bytes < SPAN_MIN_BYTES)
        bytes = SPAN_MIN_BYTES;
    uint32_t pages = (uint32_t)((bytes + FA_PAGE_SIZE - 1) / FA_PAGE_SIZE);
    if (pages == 0)
        pages = 1;
    /* Grow the span until the unusable tail is at most 1/8 of it. */
    while ((pages * FA_PAGE_SIZE) % size > (pages * FA_PAGE_SIZE) / 8)
        pages++;
    ci->pages = pages;
    ci->objs = (uint32_t)((pages * FA_PAGE_SIZE) / size);
    if (ci->objs > UINT16_MAX) /* a span counts its blocks in 16 bits */
        fa__fatal("fastalloc: internal error: class of %u bytes has %u blocks a span", size, ci->objs);
    ci->carve_min = max_u32(1, min_u32(FA_CARVE_MIN_BLOCKS, FA_CARVE_MIN_BYTES / size));
    ci->max_list = max_u32(LIST_MIN, min_u32(LIST_MAX, LIST_BYTES / size));
    ci->recip = ((uint64_t)1 << 42) / size + 1;
}

void fa__sizeclass_init(void)
{
    unsigned c = 1;
    for (uint32_t s = 16; s <= 128; s += 16)
        fill_class(c++, s);
    for (uint32_t base = 128; base < FA_MAX_SMALL; base *= 2) {
        uint32_t step = base / (base < FA_CLASS_COARSE ? 8 : 4);
        for (uint32_t s = base + step; s <= base * 2; s += step)
            fill_class(c++, s);
    }
    if (c != FA_NUM_CLASSES)
        fa__fatal("fastalloc: internal error: %u size classes, expected %u", c,
                  (unsigned)FA_NUM_CLASSES);

    unsigned k = 1;
    for (size_t size = 0; size <= FA_SMALL_TABLE_MAX; size++) {
        while (fa__classes[k].size < size)
            k++;
        __atomic_store_n(&fa__class_small[size], (uint8_t)k, __ATOMIC_RELAXED); /* sizeclass.h */
    }
    /* The hardened build's malloc(0) finds no list of class 0 and leaves for
     * the slow path, which hands out a block of no bytes (06-large/empty.h). */
    if (FA_SECURE)
        __atomic_store_n(&fa__class_small[0], 0, __ATOMIC_RELAXED);
    k = 1;
    for (size_t i = 0; i <= FA_MAX_SMALL / 128; i++) {
        size_t size = i * 128;
        while (fa__classes[k].size < size)
            k++;
        __atomic_store_n(&fa__class_large[i], (uint8_t)k, __ATOMIC_RELAXED);
    }
}

unsigned fa__class_for_aligned(size_t size, size_t align)
{
    if (size > FA_MAX_SMALL || align > FA_PAGE_SIZE)
        return 0;
    if (size < align)
        size = align;
    for (unsigned c = fa__size_to_class(size); c < FA_NUM_CLASSES; c++)
        if ((fa__classes[c].size & (align - 1)) == 0)
            return c;
    return 0;
}
