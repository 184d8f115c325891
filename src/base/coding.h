/*
 * Fixed-width integer encoding for fastalloc's binary formats (the planned
 * allocation-trace records): 32- and 64-bit unsigned integers stored
 * little-endian, at any address, whatever the byte order of the machine.
 *
 * The functions spell the format out one byte at a time with shifts, and use
 * no memcpy, no type punning and no byte-order #ifdef.  That is well defined
 * at any alignment on any target, and compilers see through it: gcc >= 8 and
 * clang >= 10 merge the eight byte stores of fa__encode_fixed64 into one
 * 64-bit store, and the eight loads of fa__decode_fixed64 into one 64-bit
 * load, on little-endian targets (a load/store plus a byte swap on big-endian
 * ones).  tests/test_coding.c checks the byte order and that this still
 * compiles to a single load or store at -O2.
 *
 * Header only, no dependencies beyond <stdint.h>.
 */
#ifndef FA_CODING_H
#define FA_CODING_H

#include <stdint.h>

/* Writes v to dst[0..3], least significant byte first. */
static inline void fa__encode_fixed32(char *dst, uint32_t v)
{
    unsigned char *out = (unsigned char *)dst;
    out[0] = (unsigned char)(v & 0xffu);
    out[1] = (unsigned char)((v >> 8) & 0xffu);
    out[2] = (unsigned char)((v >> 16) & 0xffu);
    out[3] = (unsigned char)((v >> 24) & 0xffu);
}

/* Writes v to dst[0..7], least significant byte first. */
static inline void fa__encode_fixed64(char *dst, uint64_t v)
{
    unsigned char *out = (unsigned char *)dst;
    out[0] = (unsigned char)(v & 0xffu);
    out[1] = (unsigned char)((v >> 8) & 0xffu);
    out[2] = (unsigned char)((v >> 16) & 0xffu);
    out[3] = (unsigned char)((v >> 24) & 0xffu);
    out[4] = (unsigned char)((v >> 32) & 0xffu);
    out[5] = (unsigned char)((v >> 40) & 0xffu);
    out[6] = (unsigned char)((v >> 48) & 0xffu);
    out[7] = (unsigned char)((v >> 56) & 0xffu);
}

/* Reads the value fa__encode_fixed32 wrote at src. */
static inline uint32_t fa__decode_fixed32(const char *src)
{
    const unsigned char *in = (const unsigned char *)src;
    return (uint32_t)in[0] | ((uint32_t)in[1] << 8) | ((uint32_t)in[2] << 16) |
           ((uint32_t)in[3] << 24);
}

/* Reads the value fa__encode_fixed64 wrote at src. */
static inline uint64_t fa__decode_fixed64(const char *src)
{
    const unsigned char *in = (const unsigned char *)src;
    return (uint64_t)in[0] | ((uint64_t)in[1] << 8) | ((uint64_t)in[2] << 16) |
           ((uint64_t)in[3] << 24) | ((uint64_t)in[4] << 32) | ((uint64_t)in[5] << 40) |
           ((uint64_t)in[6] << 48) | ((uint64_t)in[7] << 56);
}

#endif /* FA_CODING_H */
