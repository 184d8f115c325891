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
#define SPAN_MIN_BYTES FA_PAGE_SIZE
#define SPAN_MIN_BLOCKS 2u

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }
static uint32_t max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }

static void fill_class(unsigned c, uint32_t size)
{
    struct fa__class_info *ci = &fa__classes[c];
    ci->size = size;
    /* Spans of one page, or two blocks where a block is more than half a
     * page.  Each class a thread uses holds at least one span, so the span
     * is the unit of what a class holds idle: a program of one thread that
     * uses 56 classes with a few blocks live in each held 32 KiB spans,
     * mostly free, where the blocks it used needed a page or two
     * (docs/HISTORY.md, #24).  A span of small blocks still holds many (512
     * of 16 B, 64 of 128 B), so the page heap sees a span go and come back
     * once per hundreds of allocations; a span of two large blocks goes back
     * to the page heap as soon as both are free, where any class can take
     * its pages. */
    uint32_t want = min_u32(SPAN_MIN_BLOCKS, max_u32(1, (uint32_t)(FA_MAX_SMALL / size)));
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
    ci->max_list = max_u32(LIST_MIN, min_u32(LIST_MAX, LIST_BYTES / size));
    ci->recip = ((uint64_t)1 << 42) / size + 1;
}

void fa__sizeclass_init(void)
{
    unsigned c = 1;
    for (uint32_t s = 16; s <= 128; s += 16)
        fill_class(c++, s);
    for (uint32_t base = 128; base < FA_MAX_SMALL; base *= 2)
        for (uint32_t s = base + base / 8; s <= base * 2; s += base / 8)
            fill_class(c++, s);
    if (c != FA_NUM_CLASSES)
        fa__fatal("fastalloc: internal error: %u size classes, expected %u", c,
                  (unsigned)FA_NUM_CLASSES);

    unsigned k = 1;
    for (size_t size = 0; size <= FA_SMALL_TABLE_MAX; size++) {
        while (fa__classes[k].size < size)
            k++;
        __atomic_store_n(&fa__class_small[size], (uint8_t)k, __ATOMIC_RELAXED); /* sizeclass.h */
    }
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
