/* Text written to a file descriptor through one caller-owned buffer, with
 * no allocation and no stdio: the heap profile's dump may run inside a
 * malloc (after its signal).  Calls nothing else in 09-diag. */
#include "09-diag/debug_int.h"
#include "00-base/mem.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

void fa__out_start(struct fa__textout *o, int fd)
{
    o->fd = fd;
    o->len = 0;
    o->err = 0;
}

void fa__out_flush(struct fa__textout *o)
{
    size_t done = 0;
    while (done < o->len && o->err == 0) {
        ssize_t w = write(o->fd, o->buf + done, o->len - done);
        if (w > 0)
            done += (size_t)w;
        else if (w < 0 && errno != EINTR)
            o->err = errno;
    }
    o->len = 0;
}

void fa__out(struct fa__textout *o, const char *s, size_t n)
{
    while (n > 0) {
        if (o->len == sizeof o->buf)
            fa__out_flush(o);
        size_t k = sizeof o->buf - o->len < n ? sizeof o->buf - o->len : n;
        fa__memcpy(o->buf + o->len, s, k);
        o->len += k;
        s += k;
        n -= k;
    }
}

void fa__out_str(struct fa__textout *o, const char *s)
{
    fa__out(o, s, strlen(s));
}

void fa__out_dec(struct fa__textout *o, uint64_t v)
{
    char b[24];
    int i = sizeof b;
    do
        b[--i] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    fa__out(o, b + i, sizeof b - i);
}

void fa__out_hex(struct fa__textout *o, uint64_t v)
{
    char b[24];
    int i = sizeof b;
    do
        b[--i] = "0123456789abcdef"[v & 15];
    while ((v >>= 4) != 0);
    b[--i] = 'x';
    b[--i] = '0';
    fa__out(o, b + i, sizeof b - i);
}

void fa__out_file(struct fa__textout *o, int fd)
{
    for (;;) {
        if (o->len == sizeof o->buf)
            fa__out_flush(o);
        ssize_t r = read(fd, o->buf + o->len, sizeof o->buf - o->len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        o->len += (size_t)r;
    }
}
