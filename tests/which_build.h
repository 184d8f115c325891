/* Which fastalloc library serves this process: the default one or the
 * hardened one (docs/SECURITY.md).  A test that means to run on one of
 * them (stress_secure preloads libfastalloc-secure.so) asks here instead of
 * trusting its environment.  Two signs, read at run time, which must agree:
 *
 *   - the file that defines the fa_malloc the program calls, found with
 *     dlsym and dladdr: a preload comes before the library the program is
 *     linked against, and a preload that did not take leaves the linked
 *     one (libfastalloc-secure.so* or libfastalloc.so*);
 *   - what that code does: the link word of a freed block.  The default
 *     build keeps the next free block's plain address there (a block of
 *     the same span) or NULL; the hardened build keeps it XORed with a
 *     random key (SECURITY.md, "Encoded links"), whose bit 40 is set, so
 *     that the word is neither NULL nor within 4 GiB of the block, but
 *     once in 2^31 runs.  A library that carries the hardened build's
 *     name but was compiled without FA_SECURE fails here.  (Until #41 the
 *     sign was a 100-byte block's usable size, exact in the hardened
 *     build; with its tails now an option, that is the option's sign.)
 *
 * Needs dlsym and dladdr (in libc since glibc 2.34; link CMAKE_DL_LIBS
 * before that). */
#ifndef FA_TEST_WHICH_BUILD_H
#define FA_TEST_WHICH_BUILD_H

#include "common.h"

#include <dlfcn.h>
#include <fastalloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct which_build {
    char object[1024]; /* the file whose fa_malloc runs; "(none)" if not found */
    bool named_secure;  /* its name is libfastalloc-secure.so* */
    bool named_default; /* its name is libfastalloc.so* */
    int tailed;         /* 1: a freed 100-byte block's link is encoded (the
                           hardened build), 0: plain, -1: no memory */
};

/* The first word of the freed block p: the allocator's own, read on
 * purpose.  An AddressSanitizer build poisons a freed block (all of it, for
 * a large block the heap profile sampled), so the read is not its to see;
 * under valgrind nothing reads freed memory (expect_build.c). */
__attribute__((unused, noinline, no_sanitize("address"))) static uintptr_t which_build_peek(const void *p)
{
    return *(const volatile uintptr_t *)p;
}

/* Where the link word of a freed block p lies.  A process that records a
 * trace (FASTALLOC_TRACE; not in debug mode, whose processes expect_build.c
 * leaves alone) puts a header of 16 bytes in front of every block, the two
 * in a plain block of the library's (09-diag/traced.c, struct
 * fa__trace_hdr): the link is that block's first word, where the header
 * was, and p's own first word holds what the caller left there. */
__attribute__((unused)) static const void *which_build_link_of(const void *p)
{
    const char *trace = getenv("FASTALLOC_TRACE");
    return trace != NULL && trace[0] != '\0' ? (const char *)p - 16 : p;
}

/* Fill *w.  Allocates and frees two 100-byte blocks, and reads the link
 * word of the second after its free. */
__attribute__((unused)) static void which_build_read(struct which_build *w)
{
    memset(w, 0, sizeof *w);
    snprintf(w->object, sizeof w->object, "(none)");
    /* RTLD_DEFAULT finds the definition the program's own calls bind to:
     * the first in the global search order. */
    void *f = dlsym(RTLD_DEFAULT, "fa_malloc");
    Dl_info info;
    if (f != NULL && dladdr(f, &info) != 0 && info.dli_fname != NULL) {
        snprintf(w->object, sizeof w->object, "%s", info.dli_fname);
        const char *base = strrchr(w->object, '/');
        base = base != NULL ? base + 1 : w->object;
        w->named_secure = strncmp(base, "libfastalloc-secure.so", 22) == 0;
        w->named_default = strncmp(base, "libfastalloc.so", 15) == 0;
    }
    w->tailed = -1;
    void *p = fa_malloc(opaque(100)), *q = fa_malloc(opaque(100));
    if (p == NULL || q == NULL) {
        fa_free(p);
        fa_free(q);
        return;
    }
    fa_free(p);
    fa_free(q);
    const void *at = which_build_link_of(q);
    uintptr_t link = which_build_peek(at);
    w->tailed = link != 0 && (link ^ (uintptr_t)at) >= ((uintptr_t)1 << 32);
}

/* "secure" or "default" when both signs say it, else NULL. */
__attribute__((unused)) static const char *which_build_name(const struct which_build *w)
{
    if (w->named_secure && w->tailed == 1)
        return "secure";
    if (w->named_default && w->tailed == 0)
        return "default";
    return NULL;
}

/* Both signs in words, for a failure message. */
__attribute__((unused)) static void which_build_describe(const struct which_build *w, char *buf, size_t cap)
{
    snprintf(buf, cap, "fa_malloc comes from %s, and a block asked for 100 bytes %s", w->object,
             w->tailed == 1 ? "keeps an encoded link once freed (the hardened build)"
             : w->tailed == 0 ? "keeps a plain link once freed (the default build)"
                              : "found no memory (no sign of the build)");
}

#endif
