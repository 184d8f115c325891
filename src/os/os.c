#include "os/os.h"

#include <errno.h>
#include <sys/mman.h>

size_t fa__os_map_calls;

static void *map_raw(size_t size)
{
    __atomic_fetch_add(&fa__os_map_calls, 1, __ATOMIC_RELAXED);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void *fa__os_map(size_t size, size_t align)
{
    int saved = errno; /* a refused mmap must not leak its errno to the caller */
    if (align <= 4096) {
        void *p = map_raw(size);
        errno = saved;
        return p;
    }
    /* Over-map, then cut the unaligned head and the tail away. */
    size_t total = size + align;
    if (total < size) {
        errno = saved;
        return NULL;
    }
    char *p = map_raw(total);
    if (p == NULL) {
        errno = saved;
        return NULL;
    }
    uintptr_t a = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
    size_t head = a - (uintptr_t)p;
    size_t tail = total - head - size;
    if (head)
        munmap(p, head);
    if (tail)
        munmap((char *)a + size, tail);
    errno = saved;
    return (void *)a;
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
