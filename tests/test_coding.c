/*
 * src/00-base/coding.h: fixed-width little-endian encoding.
 *
 *  1. Byte order against explicit expected bytes, at every alignment, and
 *     that exactly 4 / 8 bytes are written.
 *  2. Round trips of edge values (0, 1, 0xff.., powers of two and their
 *     neighbours, all-ones) and of a million pseudo-random values.
 *  3. `test_coding codegen [CC...]`, in a process of its own: the code the
 *     compiler makes of it.  On x86-64, a small translation unit that wraps
 *     the four functions is compiled with `-O2 -S` by every C compiler found
 *     (the ones named on the command line, which CMake makes the build's
 *     own, then $CC, cc, gcc, clang), and each function body must be exactly
 *     one mov (a store for the encoders, a load for the decoders) and the
 *     return: no shifts, no byte moves.  The unit includes coding.h by its
 *     absolute path, derived from this file's __FILE__ (CMake compiles with
 *     absolute paths), or from -DFA_CODING_H_PATH="...".  Elsewhere than on
 *     x86-64, or with no compiler at all, it exits 77: ctest lists it as
 *     skipped, not passed.
 *
 * Register it with:  fa_test(test_coding STATIC)   (STATIC: sees src/)
 * and a second entry that runs `test_coding codegen ${CMAKE_C_COMPILER}`
 * with SKIP_RETURN_CODE 77.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "check.h"
#include "00-base/coding.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng_state = 0x0123456789abcdefull; /* rng_next (common.h) */

/* ---- 1. byte order ---- */

/* An encoding of n bytes at off into buf, which held 0x5a everywhere: the
 * n bytes are want, and no other byte changed. */
static void check_encoded(const char *buf, size_t size, int off, const unsigned char *want, int n, const char *what)
{
    CHECKF(memcmp(buf + off, want, (size_t)n) == 0, "%s at offset %d: wrong bytes", what, off);
    for (int i = 0; i < (int)size; i++)
        if (i < off || i >= off + n)
            CHECKF(buf[i] == 0x5a, "%s at offset %d wrote byte %d", what, off, i);
}

static void test_byte_order(void)
{
    static const unsigned char want64[8] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
    static const unsigned char want32[4] = {0xd4, 0xc3, 0xb2, 0xa1};
    for (int off = 0; off < 8; off++) {
        char buf[32];
        memset(buf, 0x5a, sizeof buf);
        fa__encode_fixed64(buf + off, 0x0102030405060708ull);
        check_encoded(buf, sizeof buf, off, want64, 8, "encode_fixed64");
        memset(buf, 0x5a, sizeof buf);
        fa__encode_fixed32(buf + off, 0xa1b2c3d4u);
        check_encoded(buf, sizeof buf, off, want32, 4, "encode_fixed32");

        /* decoding explicit bytes */
        memcpy(buf + off, "\x88\x77\x66\x55\x44\x33\x22\x11", 8);
        CHECKF(fa__decode_fixed64(buf + off) == 0x1122334455667788ull, "decode_fixed64 at offset %d", off);
        CHECKF(fa__decode_fixed32(buf + off) == 0x55667788u, "decode_fixed32 at offset %d", off);
        memcpy(buf + off, "\xff\x00\x00\x00\x00\x00\x00\x80", 8);
        CHECKF(fa__decode_fixed64(buf + off) == 0x80000000000000ffull, "decode_fixed64 high bit");
        CHECKF(fa__decode_fixed32(buf + off) == 0xffu, "decode_fixed32 low byte");
    }
    /* one byte set at a time */
    for (int b = 0; b < 8; b++) {
        char buf[8];
        fa__encode_fixed64(buf, (uint64_t)0xab << (8 * b));
        for (int i = 0; i < 8; i++)
            CHECKF((unsigned char)buf[i] == (i == b ? 0xab : 0), "encode_fixed64(0xab << %d): byte %d", 8 * b, i);
    }
}

/* ---- 2. round trips ---- */

static void round_trip64(uint64_t v)
{
    char buf[24];
    for (int off = 0; off < 16; off += 5) {
        fa__encode_fixed64(buf + off, v);
        uint64_t got = fa__decode_fixed64(buf + off);
        CHECKF(got == v, "fixed64 round trip of %#llx at offset %d gave %#llx", (unsigned long long)v,
               off, (unsigned long long)got);
    }
}

static void round_trip32(uint32_t v)
{
    char buf[16];
    for (int off = 0; off < 12; off += 3) {
        fa__encode_fixed32(buf + off, v);
        uint32_t got = fa__decode_fixed32(buf + off);
        CHECKF(got == v, "fixed32 round trip of %#x at offset %d gave %#x", v, off, got);
    }
}

static void test_round_trips(void)
{
    static const uint64_t edges[] = {0, 1, 2, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000, 0xffffff,
                                     0x7fffffff, 0x80000000, 0xffffffff, 0x100000000ull,
                                     0xffffffffffull, 0x7fffffffffffffffull, 0x8000000000000000ull,
                                     0xfffffffffffffffeull, 0xffffffffffffffffull,
                                     0x5555555555555555ull, 0xaaaaaaaaaaaaaaaaull, 0x0102030405060708ull};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        round_trip64(edges[i]);
        round_trip32((uint32_t)edges[i]);
    }
    for (int s = 0; s < 64; s++) {
        uint64_t p = (uint64_t)1 << s;
        round_trip64(p);
        round_trip64(p - 1);
        round_trip64(p + 1);
        round_trip64(~p);
        if (s < 32) {
            round_trip32((uint32_t)p);
            round_trip32((uint32_t)p - 1);
            round_trip32(~(uint32_t)p);
        }
    }
    /* a million random values: one check for the lot (check.h counts checks) */
    char buf[16], buf32[16];
    int bad = 0;
    uint64_t first_bad = 0;
    for (int i = 0; i < 1000000; i++) {
        uint64_t v = rng_next(&rng_state);
        int off = i & 7;
        fa__encode_fixed64(buf + off, v);
        fa__encode_fixed32(buf32 + 7 - off, (uint32_t)(v >> 17));
        if (fa__decode_fixed64(buf + off) != v && !bad++)
            first_bad = v;
        if (fa__decode_fixed32(buf32 + 7 - off) != (uint32_t)(v >> 17) && !bad++)
            first_bad = v;
    }
    CHECKF(bad == 0, "%d random round trips failed, the first with %#llx", bad,
           (unsigned long long)first_bad);
}

/* ---- 3. one instruction each, at -O2 ---- */

#if defined(__x86_64__)

static const char *const funcs[] = {"fa_t_enc32", "fa_t_enc64", "fa_t_dec32", "fa_t_dec64"};

/* The instructions of one function in AT&T assembly text, without
 * directives, labels, comments and CET markers; at most `max`. */
static int function_body(const char *asm_text, const char *name, char out[][96], int max)
{
    char label[64];
    snprintf(label, sizeof label, "\n%s:", name);
    const char *p = strstr(asm_text, label);
    if (p == NULL)
        return -1;
    p = strchr(p + 1, '\n');
    int n = 0;
    while (p != NULL && *p) {
        p++;
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char line[256];
        if (len >= sizeof line)
            len = sizeof line - 1;
        memcpy(line, p, len);
        line[len] = '\0';
        char *c = strchr(line, '#');
        if (c != NULL)
            *c = '\0';
        char *s = line;
        while (*s == ' ' || *s == '\t')
            s++;
        size_t l = strlen(s);
        while (l > 0 && (s[l - 1] == ' ' || s[l - 1] == '\t' || s[l - 1] == '\r'))
            s[--l] = '\0';
        p = end;
        if (l == 0 || s[0] == '.' || s[l - 1] == ':' || strncmp(s, "endbr", 5) == 0)
            continue;
        if (n < max) {
            size_t k = l < 95 ? l : 95;
            memcpy(out[n], s, k);
            out[n][k] = '\0';
        }
        n++;
        if (strncmp(s, "ret", 3) == 0)
            break;
    }
    return n;
}

static int is_ret(const char *s)
{
    return strncmp(s, "ret", 3) == 0;
}

/* One compiler: returns 0 when it is not installed. */
static int check_compiler(const char *cc, const char *dir, const char *tu)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "command -v '%s' >/dev/null 2>&1", cc);
    if (system(cmd) != 0)
        return 0;
    snprintf(cmd, sizeof cmd,
             "'%s' -O2 -S -fno-asynchronous-unwind-tables -o '%s/out.s' '%s' 2>'%s/err.txt'", cc, dir,
             tu, dir);
    int rc = system(cmd);
    CHECKF(rc == 0, "%s -O2 -S %s failed (see %s/err.txt)", cc, tu, dir);
    char path[512];
    snprintf(path, sizeof path, "%s/out.s", dir);
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "no assembly from %s", cc);
    static char text[1 << 16];
    size_t len = fread(text + 1, 1, sizeof text - 2, f);
    fclose(f);
    text[0] = '\n';
    text[len + 1] = '\0';
    for (int i = 0; i < 4; i++) {
        char body[8][96];
        int n = function_body(text, funcs[i], body, 8);
        CHECKF(n >= 0, "%s: function %s not found in the assembly", cc, funcs[i]);
        int enc = funcs[i][5] == 'e';
        /* exactly: mov <reg>, (<mem>) / mov (<mem>), <reg>, then ret */
        CHECKF(n == 2 && is_ret(body[1]),
               "%s -O2: %s is %d instructions, want one mov and ret (first: '%s')", cc, funcs[i],
               n, n > 0 ? body[0] : "");
        /* the mnemonic: movl for the 32-bit functions, movq for the 64-bit ones */
        const char *ins = body[0];
        const char *want = funcs[i][8] == '3' ? "movl" : "movq";
        CHECKF(strncmp(ins, want, 4) == 0 && (ins[4] == ' ' || ins[4] == '\t'),
               "%s -O2: %s does '%s', want one %s", cc, funcs[i], ins, want);
        const char *paren = strchr(ins, '('), *comma = strrchr(ins, ',');
        CHECKF(paren != NULL && comma != NULL && (enc ? paren > comma : paren < comma),
               "%s -O2: %s does '%s', want a %s", cc, funcs[i], ins,
               enc ? "store to memory" : "load from memory");
    }
    printf("test_coding: %s -O2 compiles each encoder to one store and each decoder to one load\n", cc);
    return 1;
}

/* Returns how many compilers it checked. */
static int test_codegen(int ncc, char **named)
{
#ifdef FA_CODING_H_PATH
    const char *header = FA_CODING_H_PATH;
#else
    /* .../tests/test_coding.c -> .../tests/../src/00-base/coding.h */
    static char header[1024];
    const char *file = __FILE__;
    const char *slash = strrchr(file, '/');
    CHECKF(file[0] == '/' && slash != NULL,
           "__FILE__ (%s) is not an absolute path: build with CMake or -DFA_CODING_H_PATH=...", file);
    snprintf(header, sizeof header, "%.*s/../src/00-base/coding.h", (int)(slash - file), file);
#endif
    CHECKF(access(header, R_OK) == 0, "cannot read %s", header);

    char dir[] = "/tmp/fa_test_coding.XXXXXX";
    CHECKF(mkdtemp(dir) != NULL, "mkdtemp failed");
    char tu[600];
    snprintf(tu, sizeof tu, "%s/tu.c", dir);
    FILE *f = fopen(tu, "w");
    CHECK(f != NULL);
    fprintf(f,
            "#include \"%s\"\n"
            "void fa_t_enc32(char *d, uint32_t v) { fa__encode_fixed32(d, v); }\n"
            "void fa_t_enc64(char *d, uint64_t v) { fa__encode_fixed64(d, v); }\n"
            "uint32_t fa_t_dec32(const char *s) { return fa__decode_fixed32(s); }\n"
            "uint64_t fa_t_dec64(const char *s) { return fa__decode_fixed64(s); }\n",
            header);
    fclose(f);

    const char *fixed[] = {getenv("CC"), "cc", "gcc", "clang"};
    const int nfixed = (int)(sizeof fixed / sizeof fixed[0]);
    int checked = 0;
    for (int i = 0; i < ncc + nfixed; i++) {
        const char *cc = i < ncc ? named[i] : fixed[i - ncc];
        if (cc == NULL || cc[0] == '\0' || strpbrk(cc, "' ") != NULL)
            continue;
        checked += check_compiler(cc, dir, tu);
    }
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) {
        /* a temporary folder left behind */
    }
    if (checked == 0)
        printf("SKIP: no C compiler found (the build's, CC, cc, gcc, clang): code generation not checked\n");
    return checked;
}

#else

static int test_codegen(int ncc, char **named)
{
    (void)ncc;
    (void)named;
    printf("SKIP: code generation is only checked on x86-64\n");
    return 0;
}

#endif

/* Varints: literal byte layouts at every length boundary, round trips of
 * every 2^k - 1, 2^k and 2^k + 1, and inputs the decoder must refuse. */
static void test_varints(void)
{
    static const struct {
        uint64_t v;
        unsigned n;
        unsigned char bytes[10];
    } lit[] = {
        {0, 1, {0x00}},
        {1, 1, {0x01}},
        {0x7f, 1, {0x7f}},
        {0x80, 2, {0x80, 0x01}},
        {300, 2, {0xac, 0x02}},
        {0x3fff, 2, {0xff, 0x7f}},
        {0x4000, 3, {0x80, 0x80, 0x01}},
        {0x1fffff, 3, {0xff, 0xff, 0x7f}},
        {0x200000, 4, {0x80, 0x80, 0x80, 0x01}},
        {0xfffffff, 4, {0xff, 0xff, 0xff, 0x7f}},
        {0x10000000, 5, {0x80, 0x80, 0x80, 0x80, 0x01}},
        {0xffffffffull, 5, {0xff, 0xff, 0xff, 0xff, 0x0f}},
        {0x7ffffffffull, 5, {0xff, 0xff, 0xff, 0xff, 0x7f}},
        {0x800000000ull, 6, {0x80, 0x80, 0x80, 0x80, 0x80, 0x01}},
        {0x3ffffffffffull, 6, {0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
        {0x40000000000ull, 7, {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}},
        {0x1ffffffffffffull, 7, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
        {0x2000000000000ull, 8, {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}},
        {0xffffffffffffffull, 8, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
        {0x100000000000000ull, 9, {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}},
        {0x7fffffffffffffffull, 9, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
        {0x8000000000000000ull, 10, {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}},
        {0xffffffffffffffffull, 10, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
    };
    for (size_t i = 0; i < sizeof lit / sizeof lit[0]; i++) {
        char buf[16];
        memset(buf, 0x5a, sizeof buf);
        unsigned n = fa__encode_varint64(buf, lit[i].v);
        CHECKF(n == lit[i].n && fa__varint64_length(lit[i].v) == n, "varint %#llx: %u bytes",
               (unsigned long long)lit[i].v, n);
        CHECKF(memcmp(buf, lit[i].bytes, n) == 0, "varint %#llx: wrong bytes", (unsigned long long)lit[i].v);
        CHECKF((unsigned char)buf[n] == 0x5a, "varint %#llx wrote past its end", (unsigned long long)lit[i].v);
        uint64_t got = 0;
        const char *end = fa__decode_varint64(buf, buf + n, &got);
        CHECKF(end == buf + n && got == lit[i].v, "varint %#llx read back as %#llx", (unsigned long long)lit[i].v,
               (unsigned long long)got);
        /* Cut short anywhere: refused, without reading past the end. */
        for (unsigned k = 0; k < n; k++)
            CHECKF(fa__decode_varint64(buf, buf + k, &got) == NULL, "varint %#llx cut at %u accepted",
                   (unsigned long long)lit[i].v, k);
    }
    for (unsigned k = 0; k < 64; k++) {
        uint64_t p = (uint64_t)1 << k;
        uint64_t vs[3] = {p - 1, p, p + 1};
        for (int j = 0; j < 3; j++) {
            char buf[FA_VARINT64_MAX];
            unsigned n = fa__encode_varint64(buf, vs[j]);
            uint64_t got;
            CHECK(fa__decode_varint64(buf, buf + n, &got) == buf + n && got == vs[j]);
        }
    }
    /* Eleven bytes of continuation, and a tenth byte beyond 64 bits. */
    static const unsigned char too_long[11] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
    static const unsigned char too_big[10] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    uint64_t got;
    CHECK(fa__decode_varint64((const char *)too_long, (const char *)too_long + 11, &got) == NULL);
    CHECK(fa__decode_varint64((const char *)too_big, (const char *)too_big + 10, &got) == NULL);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "codegen") == 0) {
        if (test_codegen(argc - 2, argv + 2) == 0)
            return 77;
        return check_done("test_coding codegen");
    }
    test_byte_order();
    test_round_trips();
    test_varints();
    return check_done("test_coding");
}
