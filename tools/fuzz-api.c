/* The fa_ API under libFuzzer (tools/fuzz-api.sh): the input is a program
 * of allocator calls on 64 slots, run against the library compiled with it,
 * with ASan and UBSan.  After each call the slot's block is checked:
 * aligned as asked, fa_owns, fa_malloc_usable_size at least the size asked,
 * calloc's bytes zero; and before each free or realloc, the pattern written
 * when it was made (from its slot and a counter) is read back whole, and
 * realloc must keep the old bytes.  Each run frees what it left, and every
 * 64 runs fa_trim gives the memory back.
 *
 * An op is 4 bytes: the op and slot in the first, a size from the next two
 * (up to 64 KiB, or scaled by the last byte's high bits up to 4 or 16 MiB),
 * and an alignment exponent in the last.  Patterns cover a block's first
 * 8 KiB and its last 4 KiB: the fuzzer's speed goes to calls, not to bytes. */
#include "fastalloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 64

static struct {
    unsigned char *p;
    size_t size;
    uint8_t seed;
} slot[SLOTS];
static uint8_t counter;

static void fail(const char *what, unsigned i, size_t size)
{
    fprintf(stderr, "fuzz-api: %s (slot %u, %zu bytes)\n", what, i, size);
    abort();
}

#define HEAD 8192
#define TAIL 4096

/* The next byte at or after k that the patterns cover, in a block of n. */
static size_t covered(size_t k, size_t n)
{
    return k < HEAD || n < TAIL || k >= n - TAIL ? k : n - TAIL;
}

static void fill(unsigned i)
{
    uint8_t s = slot[i].seed;
    size_t n = slot[i].size;
    for (size_t k = covered(0, n); k < n; k = covered(k + 1, n))
        slot[i].p[k] = (uint8_t)(s + k * 7);
}

/* The covered bytes among the first n still hold the pattern. */
static void check(unsigned i, size_t n)
{
    uint8_t s = slot[i].seed;
    size_t size = slot[i].size;
    for (size_t k = covered(0, size); k < n; k = covered(k + 1, size))
        if (slot[i].p[k] != (uint8_t)(s + k * 7))
            fail("a block's bytes changed", i, slot[i].size);
}

static void check_new(unsigned i, size_t align, int zero)
{
    unsigned char *p = slot[i].p;
    size_t size = slot[i].size;
    if (((uintptr_t)p & (align - 1)) != 0)
        fail("misaligned block", i, size);
    if (!fa_owns(p))
        fail("fa_owns denies a block", i, size);
    if (fa_malloc_usable_size(p) < size)
        fail("usable size below the size asked", i, size);
    if (zero)
        for (size_t k = covered(0, size); k < size; k = covered(k + 1, size))
            if (p[k] != 0)
                fail("calloc's block is not zero", i, size);
}

static void release(unsigned i)
{
    if (slot[i].p == NULL)
        return;
    check(i, slot[i].size);
    if (slot[i].size % 3 == 0)
        fa_free_sized(slot[i].p, slot[i].size);
    else
        fa_free(slot[i].p);
    slot[i].p = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    static unsigned runs;
    for (size_t at = 0; at + 4 <= len; at += 4) {
        unsigned op = data[at] & 7, i = (data[at] >> 3) & (SLOTS - 1);
        size_t size = (size_t)data[at + 1] | (size_t)data[at + 2] << 8;
        if (data[at + 3] & 0x80)
            size <<= (data[at + 3] & 0x40) ? 8 : 6; /* up to 16 MiB, or 4 MiB */
        size_t align = (size_t)1 << (data[at + 3] & 15); /* 1 .. 32 KiB */
        int zero = 0;
        switch (op) {
        case 0: /* malloc */
        case 1:
            release(i);
            slot[i].p = fa_malloc(size);
            break;
        case 2: /* calloc, as n blocks of 16 where it divides */
            release(i);
            slot[i].p = size % 16 == 0 ? fa_calloc(size / 16, 16) : fa_calloc(1, size);
            zero = 1;
            break;
        case 3: /* aligned */
            release(i);
            if (align < sizeof(void *))
                align = sizeof(void *);
            if (data[at + 3] & 0x20) {
                void *q = NULL;
                if (fa_posix_memalign(&q, align, size) != 0)
                    q = NULL;
                slot[i].p = q;
            } else {
                slot[i].p = fa_aligned_alloc(align, size);
            }
            break;
        case 4: /* realloc: the old bytes stay */
            if (slot[i].p != NULL) {
                check(i, slot[i].size);
                unsigned char *q = fa_realloc(slot[i].p, size);
                if (q == NULL && size != 0)
                    fail("realloc failed", i, size);
                size_t kept = size < slot[i].size ? size : slot[i].size;
                slot[i].p = q;
                if (q != NULL) {
                    check(i, kept);
                    slot[i].size = size;
                    check_new(i, 16, 0);
                    fill(i);
                }
                continue;
            }
            slot[i].p = fa_realloc(NULL, size);
            break;
        case 5: /* free */
        case 6:
            release(i);
            continue;
        case 7: /* a usable size, and writing all of it */
            if (slot[i].p != NULL) {
                size_t u = fa_malloc_usable_size(slot[i].p);
                memset(slot[i].p, 0, u);
                slot[i].size = u;
                slot[i].seed = counter++;
                fill(i);
            }
            continue;
        }
        if (slot[i].p == NULL) {
            if (size < ((size_t)1 << 30))
                fail("an allocation failed", i, size);
            continue;
        }
        slot[i].size = size;
        slot[i].seed = counter++;
        check_new(i, op == 3 ? align : 16, zero);
        fill(i);
    }
    for (unsigned i = 0; i < SLOTS; i++)
        release(i);
    if (++runs % 64 == 0)
        fa_trim();
    return 0;
}
