/* The size-class table and its lookups, checked against the rules in
 * src/sizeclass.h.  Links the static archive, where the fa__ internals are
 * visible. */
#include "check.h"
#include "util.h"

#include <fastalloc.h>
#include <stdint.h>
#include <stdio.h>

#include "02-records/sizeclass.h"

static size_t csize(unsigned c)
{
    return fa__classes[c].size;
}

int main(void)
{
    /* Initialise the allocator the ordinary way. */
    fa_free(fa_malloc(1));

    /* ---- the classes: 16..128 by 16, 8 per doubling to 1 KiB, then 4 up
     * to 32 KiB (256 KiB in the hardened build, which this does not link) */
    CHECK(FA_MAX_SMALL == (size_t)32 << 10);
    CHECK(FA_NUM_CLASSES == 53);
    for (unsigned c = 1; c <= 8; c++)
        CHECKF(csize(c) == 16 * c, "class %u is %zu", c, csize(c));
    unsigned c = 9;
    for (size_t base = 128; base < FA_MAX_SMALL; base *= 2) {
        size_t per = base < 1024 ? 8 : 4;
        for (size_t k = 1; k <= per; k++, c++)
            CHECKF(csize(c) == base + k * base / per, "class %u is %zu, want %zu", c, csize(c),
                   base + k * base / per);
    }
    CHECK(c == FA_NUM_CLASSES);
    CHECK(csize(FA_NUM_CLASSES - 1) == FA_MAX_SMALL);
    for (c = 2; c < FA_NUM_CLASSES; c++) {
        CHECKF(csize(c) > csize(c - 1), "classes %u, %u not increasing", c - 1, c);
        /* 16-byte alignment of every block of 16 bytes or more. */
        CHECKF(csize(c) % 16 == 0, "class %u (%zu) not a multiple of 16", c, csize(c));
        /* The 128-byte lookup table needs classes above 1 KiB to be
         * multiples of 128. */
        if (csize(c) > FA_SMALL_TABLE_MAX)
            CHECK(csize(c) % 128 == 0);
    }

    /* ---- spans and batches */
    for (c = 1; c < FA_NUM_CLASSES; c++) {
        const struct fa__class_info *ci = &fa__classes[c];
        size_t span = (size_t)ci->pages * FA_PAGE_SIZE;
        CHECK(ci->pages >= 1);
        CHECK(ci->objs >= 1);
        CHECKF(span >= (size_t)ci->objs * ci->size, "class %u: %u objs of %u in %u pages", c,
               ci->objs, ci->size, ci->pages);
        /* objs is as many as fit */
        CHECK(span - (size_t)ci->objs * ci->size < ci->size);
        CHECKF((span - (size_t)ci->objs * ci->size) * 8 <= span, "class %u: tail waste %zu of %zu", c,
               span - (size_t)ci->objs * ci->size, span);
        CHECK(ci->max_list >= 32);
    }

    /* ---- size -> class: covers, is the smallest, bounded waste */
    unsigned prev = 1;
    for (size_t size = 0; size <= FA_MAX_SMALL; size++) {
        unsigned k = fa__size_to_class(size);
        if (!(k >= 1 && k < FA_NUM_CLASSES))
            CHECKF(0, "size %zu -> class %u", size, k);
        if (csize(k) < size)
            CHECKF(0, "size %zu -> class %u of %zu", size, k, csize(k));
        if (k > 1 && csize(k - 1) >= size)
            CHECKF(0, "size %zu -> class %u (%zu) but class %u (%zu) fits", size, k, csize(k), k - 1,
                   csize(k - 1));
        if (size > 128 && size <= 1024 && (csize(k) - size) * 8 > size)
            CHECKF(0, "size %zu -> %zu wastes more than 12.5%%", size, csize(k));
        if (size > 1024 && (csize(k) - size) * 4 > size)
            CHECKF(0, "size %zu -> %zu wastes more than 25%%", size, csize(k));
        if (k < prev)
            CHECKF(0, "size %zu -> class %u after class %u", size, k, prev);
        prev = k;
    }
    CHECK(fa__size_to_class(0) == 1);
    CHECK(fa__size_to_class(16) == 1);
    CHECK(fa__size_to_class(17) == 2);
    CHECK(fa__size_to_class(FA_MAX_SMALL) == FA_NUM_CLASSES - 1);

    /* ---- what malloc hands out agrees with the table */
    for (size_t size = 0; size <= FA_MAX_SMALL; size += (size < 4096 ? 1 : 4093)) {
        void *p = fa_malloc(size);
        CHECK(p != NULL);
        CHECKF(fa_malloc_usable_size(p) == csize(fa__size_to_class(size)), "size %zu", size);
        fa_free(p);
    }

    /* ---- aligned classes: a multiple of the alignment, large enough, the
     * smallest such; 0 when there is none or align/size are out of range. */
    for (size_t align = 1; align <= FA_PAGE_SIZE; align *= 2) {
        for (size_t size = 0; size <= FA_MAX_SMALL; size += (size < 20000 ? 1 : 997)) {
            unsigned k = fa__class_for_aligned(size, align);
            unsigned want = 0;
            for (unsigned j = 1; j < FA_NUM_CLASSES; j++) {
                if (csize(j) >= size && csize(j) % align == 0) {
                    want = j;
                    break;
                }
            }
            if (k != want)
                CHECKF(0, "class_for_aligned(%zu, %zu) = %u, want %u", size, align, k, want);
            if (k != 0 && (csize(k) % align != 0 || csize(k) < size))
                CHECKF(0, "class_for_aligned(%zu, %zu) = %u (%zu)", size, align, k, csize(k));
        }
        CHECK(fa__class_for_aligned(FA_MAX_SMALL + 1, align) == 0);
    }
    CHECK(fa__class_for_aligned(1, FA_PAGE_SIZE * 2) == 0);
    CHECK(fa__class_for_aligned(100, (size_t)1 << 20) == 0);
    CHECK(fa__class_for_aligned(FA_MAX_SMALL, FA_PAGE_SIZE) == FA_NUM_CLASSES - 1);
    return check_done("test_sizeclass");
}
