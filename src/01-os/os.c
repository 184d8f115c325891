#include "01-os/os.h"
#include "00-base/probe.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

size_t fa__os_map_calls;

static void *map_raw(void *hint, size_t size, int prot, int flags)
{
    __atomic_fetch_add(&fa__os_map_calls, 1, __ATOMIC_RELAXED);
    void *p = mmap(hint, size, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | flags, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Over-map, then cut the unaligned head and the tail away. */
static void *map_aligned(size_t size, size_t align, int prot)
{
    if (align <= 4096)
        return map_raw(NULL, size, prot, 0);
    size_t total = size + align;
    if (total < size)
        return NULL;
    char *p = map_raw(NULL, total, prot, 0);
    if (p == NULL)
        return NULL;
    uintptr_t a = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
    size_t head = a - (uintptr_t)p;
    size_t tail = total - head - size;
    if (head)
        munmap(p, head);
    if (tail)
        munmap((char *)a + size, tail);
    return (void *)a;
}

void *fa__os_map(size_t size, size_t align)
{
    int saved = errno; /* a refused mmap must not leak its errno to the caller */
    void *p = map_aligned(size, align, PROT_READ | PROT_WRITE);
    errno = saved;
    FA_PROBE2(os_map, p, size);
    return p;
}

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0 /* older headers: the address is a hint, checked below */
#endif

void *fa__os_reserve(void *at, size_t size, size_t align)
{
    int saved = errno;
    void *p;
    if (at == NULL) {
        p = map_aligned(size, align, PROT_NONE);
    } else {
        /* Kernels before 4.17 take MAP_FIXED_NOREPLACE as a hint and may
         * place the mapping elsewhere; only the address asked for will do. */
        p = map_raw(at, size, PROT_NONE, MAP_FIXED_NOREPLACE);
        if (p != NULL && p != at) {
            munmap(p, size);
            p = NULL;
        }
    }
    errno = saved;
    return p;
}

bool fa__os_commit(void *p, size_t size)
{
    int saved = errno;
    bool ok = mprotect(p, size, PROT_READ | PROT_WRITE) == 0;
    errno = saved;
    return ok;
}

/* Linux 6.13 and later mark guard pages in the page tables (madvise's
 * guard regions): no split of the mapping, and the mmap lock taken for
 * reading, where mprotect takes it for writing and splits the mapping in
 * three, which stalls every thread that faults or maps meanwhile (the
 * cost is in docs/HISTORY.md, #26).  Older kernels answer EINVAL
 * and get mprotect, the same for every guard of the process. */
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#define MADV_GUARD_REMOVE 103
#endif
static int guard_marks = -1; /* unknown, then 1 or 0 for the process */

bool fa__os_guard(void *p, size_t size)
{
    int saved = errno;
    int marks = __atomic_load_n(&guard_marks, __ATOMIC_RELAXED);
    bool ok;
    if (marks != 0 && madvise(p, size, MADV_GUARD_INSTALL) == 0) {
        ok = true;
        if (marks < 0)
            __atomic_store_n(&guard_marks, 1, __ATOMIC_RELAXED);
    } else {
        if (marks < 0)
            __atomic_store_n(&guard_marks, 0, __ATOMIC_RELAXED);
        ok = mprotect(p, size, PROT_NONE) == 0;
    }
    errno = saved;
    return ok;
}

bool fa__os_unguard(void *p, size_t size)
{
    if (__atomic_load_n(&guard_marks, __ATOMIC_RELAXED) <= 0)
        return fa__os_commit(p, size);
    int saved = errno;
    bool ok = madvise(p, size, MADV_GUARD_REMOVE) == 0;
    errno = saved;
    return ok;
}

void fa__os_unmap(void *p, size_t size)
{
    int saved = errno;
    munmap(p, size);
    errno = saved;
}

void fa__os_release(void *p, size_t size, bool lazy)
{
    int saved = errno;
#ifdef MADV_FREE
    if (lazy && madvise(p, size, MADV_FREE) == 0) {
        errno = saved;
        return;
    }
#else
    (void)lazy;
#endif
    madvise(p, size, MADV_DONTNEED);
    errno = saved;
}

/* MADV_POPULATE_WRITE (Linux 5.14) is missing from older headers; an older
 * kernel answers EINVAL, and the pages fault in one by one as before. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

void fa__os_populate(void *p, size_t size)
{
    int saved = errno;
    madvise(p, size, MADV_POPULATE_WRITE);
    errno = saved;
}

void fa__os_hugepage(void *p, size_t size)
{
    int saved = errno;
#ifdef MADV_HUGEPAGE
    madvise(p, size, MADV_HUGEPAGE);
#else
    (void)p;
    (void)size;
#endif
    errno = saved;
}

size_t fa__os_resident(const void *p, size_t size)
{
    /* The kernel's pages are 4 KiB or more; one byte of the vector each.
     * In steps, so that the vector stays on the stack. */
    enum { STEP = 256 };
    unsigned char vec[STEP];
    long k = sysconf(_SC_PAGESIZE);
    size_t os_page = k > 0 ? (size_t)k : 4096, bytes = 0;
    for (size_t off = 0; off < size; off += STEP * os_page) {
        size_t len = size - off < STEP * os_page ? size - off : STEP * os_page;
        if (mincore((char *)p + off, len, vec) != 0)
            return 0;
        for (size_t i = 0; i < (len + os_page - 1) / os_page; i++)
            bytes += (vec[i] & 1) * os_page;
    }
    return bytes;
}
