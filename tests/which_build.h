/* Which fastalloc library serves this process: the default one or the
 * hardened one (docs/SECURITY.md).  A test that means to run on one of
 * them (stress_secure preloads libfastalloc-secure.so) asks here instead of
 * trusting its environment.  Two signs, read at run time, which must agree:
 *
 *   - the file that defines the fa_malloc the program calls, found with
 *     dlsym and dladdr: a preload comes before the library the program is
 *     linked against, and a preload that did not take leaves the linked
 *     one (libfastalloc-secure.so* or libfastalloc.so*);
 *   - what that code does: realloc shrinking a large block by one page
 *     keeps it where it is in the default build (a shrink by less than a
 *     quarter keeps its pages), and always moves it in the hardened build
 *     (its guard page would have to move; SECURITY.md).  A library that
 *     carries the hardened build's name but was compiled without FA_SECURE
 *     fails here.
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
    int moved;          /* 1: realloc moved the large block, 0: kept it in
                           place, -1: no memory */
};

/* Fill *w.  Allocates and frees a 1 MiB block. */
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
    /* The new block is asked for while the old one is live, so a move
     * cannot land at the same address. */
    w->moved = -1;
    size_t page = 8192, size = (size_t)1 << 20;
    void *p = fa_malloc(opaque(size));
    if (p == NULL)
        return;
    uintptr_t was = (uintptr_t)p;
    void *q = fa_realloc(p, opaque(size - page));
    if (q == NULL) {
        fa_free(p);
        return;
    }
    w->moved = (uintptr_t)q != was;
    fa_free(q);
}

/* "secure" or "default" when both signs say it, else NULL. */
__attribute__((unused)) static const char *which_build_name(const struct which_build *w)
{
    if (w->named_secure && w->moved == 1)
        return "secure";
    if (w->named_default && w->moved == 0)
        return "default";
    return NULL;
}

/* Both signs in words, for a failure message. */
__attribute__((unused)) static void which_build_describe(const struct which_build *w, char *buf, size_t cap)
{
    snprintf(buf, cap, "fa_malloc comes from %s, and realloc shrinking a 1 MiB block by a page %s", w->object,
             w->moved == 1 ? "moved it (the hardened build's behaviour)"
             : w->moved == 0 ? "kept it in place (the default build's behaviour)"
                             : "found no memory (no sign of the build)");
}

#endif
