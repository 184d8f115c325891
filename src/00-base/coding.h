/*
 * Integer encoding for fastalloc's binary formats (allocation traces):
 * 32- and 64-bit unsigned integers stored little-endian, at any address,
 * whatever the byte order of the machine; and LEB128 varints, for values
 * that are mostly small (sizes, deltas, ids).
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
 * Header only, no dependencies beyond <stddef.h> and <stdint.h>.
 */
#ifndef FA_BASE_CODING_H
#define FA_BASE_CODING_H

#include <stddef.h>
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

/* LEB128: seven bits a byte, least significant group first, the high bit
 * set on every byte but the last.  A 64-bit value takes 1 to 10 bytes; a
 * value below 128 takes one. */
#define FA_VARINT64_MAX 10

/* Writes v at dst (room for FA_VARINT64_MAX bytes); returns the bytes
 * written. */
static inline unsigned fa__encode_varint64(char *dst, uint64_t v)
{
    unsigned char *out = (unsigned char *)dst;
    unsigned n = 0;
    while (v >= 0x80) {
        out[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    return n;
}

/* Reads a varint from [p, limit) into *v; returns the byte after it, or
 * NULL when the input ends inside it, or it runs past 10 bytes, or its
 * tenth byte holds bits beyond 64 (a corrupt or hostile input: never a
 * read past limit). */
static inline const char *fa__decode_varint64(const char *p, const char *limit, uint64_t *v)
{
    uint64_t r = 0;
    for (unsigned shift = 0; shift <= 63 && p < limit; shift += 7) {
        uint64_t b = (unsigned char)*p++;
        if (shift == 63 && b > 1)
            return NULL;
        r |= (b & 0x7f) << shift;
        if (b < 0x80) {
            *v = r;
            return p;
        }
    }
    return NULL;
}

/* The bytes fa__encode_varint64 takes for v. */
static inline unsigned fa__varint64_length(uint64_t v)
{
    unsigned n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

#endif /* FA_BASE_CODING_H */
