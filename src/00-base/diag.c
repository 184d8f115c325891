#define _GNU_SOURCE /* strerrordesc_np */
#include "00-base/diag.h"
#include "00-base/seam.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int fa__diag_mode;

static void vdiag(const char *fmt, va_list ap)
{
    char buf[256];
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof buf - 2)
        n = sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
}

void fa__diag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdiag(fmt, ap);
    va_end(ap);
}

void fa__fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdiag(fmt, ap);
    va_end(ap);
    abort();
}

const char *fa__errno_words(int e)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
    /* The untranslated text, read from a table, with no lock. */
    const char *w = strerrordesc_np(e);
    if (w != NULL)
        return w;
#endif
    switch (e) {
    case ENOENT:
        return "No such file or directory";
    case EACCES:
        return "Permission denied";
    case ENOSPC:
        return "No space left on device";
    default:
        return "an error";
    }
}

/* 00-base/seam.h: set only by tests. */
void (*fa__seam_hook)(enum fa__seam where, void *what);
