/* The public entry points.  malloc and free are written so that their
 * common case (a small block, the thread cache has one / has room) compiles
 * to straight-line code with no call, no lock and no atomic read-modify-write:
 * one TLS load, one or two table loads and a list push or pop.  Everything
 * else leaves through a single unlikely branch into a slow path, which is
 * also where debug modes, hooks and tracing will attach. */
#include "fastalloc.h"
#include "internal.h"
#include "pageheap.h"
#include "pagemap.h"
#include "sizeclass.h"
#include "tcache.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

void fa__free_other(void *p) FA_HIDDEN;

/* ---------------------------------------------------------------- large */

static FA_NOINLINE void *alloc_large(size_t size, size_t align, bool zero)
{
    fa__ensure_init();
    if (FA_UNLIKELY(size > FA_MAX_REQUEST)) {
        errno = ENOMEM;
        return NULL;
    }
    size_t npages = (size + FA_PAGE_SIZE - 1) >> FA_PAGE_SHIFT;
    if (npages == 0)
        npages = 1;
    size_t align_pages = align > FA_PAGE_SIZE ? align >> FA_PAGE_SHIFT : 1;
    struct fa__span *s = fa__ph_alloc(npages, align_pages, FA_SPAN_LARGE, 0);
    if (FA_UNLIKELY(s == NULL)) {
        errno = ENOMEM;
        return NULL;
    }
    if (zero && !s->zeroed)
        memset((void *)s->start, 0, npages * FA_PAGE_SIZE);
    s->zeroed = 0;
    return (void *)s->start;
}

/* The span of the large block that starts at p, or NULL (with a diagnostic
 * naming the caller) when p is not one. */
static struct fa__span *large_span_of(void *p, const char *who)
{
    struct fa__span *s = fa__pm_span((uintptr_t)p);
    if (s != NULL && s->npages != 0 && (uintptr_t)p >= s->start &&
        (uintptr_t)p < s->start + s->npages * FA_PAGE_SIZE) {
        if (s->state == FA_SPAN_LARGE && s->start == (uintptr_t)p)
            return s;
        if (s->state == FA_SPAN_FREE || s->state == FA_SPAN_PURGING)
            fa__fatal("fastalloc: %s(): double free or stale pointer %p", who, p);
        fa__fatal("fastalloc: %s(): pointer %p is inside a block, not at its start", who, p);
    }
    fa__fatal("fastalloc: %s(): invalid pointer %p (not allocated by fastalloc)", who, p);
}

void fa__free_other(void *p)
{
    if (p == NULL)
        return;
    fa__ph_free(large_span_of(p, "free"));
}

/* ---------------------------------------------------------------- fast paths */

static inline __attribute__((always_inline)) void *do_malloc(size_t size)
{
    unsigned cls;
    if (FA_LIKELY(size <= FA_SMALL_TABLE_MAX))
        cls = fa__class_small[(size + 7) >> 3];
    else if (FA_LIKELY(size <= FA_MAX_SMALL))
        cls = fa__class_large[(size + 127) >> 7];
    else
        return alloc_large(size, 0, false);
    struct fa__tcache *tc = fa__tls_cache;
    void *p = tc->heads[cls];
    if (FA_UNLIKELY(p == NULL))
        return fa__tc_alloc_slow(size);
    tc->heads[cls] = *(void **)p;
    tc->avail[cls]++;
    return p;
}

static inline __attribute__((always_inline)) void free_to_class(void *p, size_t cls)
{
    struct fa__tcache *tc = fa__tls_cache;
    if (FA_UNLIKELY(--tc->avail[cls] < 0)) {
        /* The slow path reads the class again: passing it would cost the
         * fast path a register move. */
        fa__tc_free_slow(p);
        return;
    }
    void **head = fa__tc_head(tc, cls);
    *(void **)p = *head;
    *head = p;
}

static inline __attribute__((always_inline)) void do_free(void *p)
{
    uintptr_t a = (uintptr_t)p;
    struct fa__pm_leaf *leaf = fa__pm_leaf_of(a);
    if (FA_UNLIKELY(leaf == NULL)) {
        fa__free_other(p);
        return;
    }
    free_to_class(p, leaf->cls[fa__pm_index(a)]);
}

void *fa_malloc(size_t size)
{
    return do_malloc(size);
}

void fa_free(void *p)
{
    do_free(p);
}

void fa_free_sized(void *p, size_t size)
{
    /* The size names the class, so the page map is not read.  Only the
     * first table is used: it is filled once initialised, and p != NULL
     * means a block was handed out, so initialisation is done. */
    if (FA_LIKELY(size <= FA_SMALL_TABLE_MAX && p != NULL)) {
        free_to_class(p, fa__class_small[(size + 7) >> 3]);
        return;
    }
    do_free(p);
}

/* ---------------------------------------------------------------- the rest */

void *fa_calloc(size_t n, size_t size)
{
    size_t total;
    if (FA_UNLIKELY(__builtin_mul_overflow(n, size, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    if (total > FA_MAX_SMALL)
        return alloc_large(total, 0, true);
    void *p = do_malloc(total);
    if (FA_LIKELY(p != NULL))
        memset(p, 0, total);
    return p;
}

size_t fa_malloc_usable_size(void *p)
{
    if (p == NULL)
        return 0;
    unsigned cls = fa__pm_class((uintptr_t)p);
    if (FA_LIKELY(cls != 0))
        return fa__classes[cls].size;
    struct fa__span *s = fa__pm_span((uintptr_t)p);
    if (s == NULL || s->state != FA_SPAN_LARGE || s->start != (uintptr_t)p) {
        fa__diag("fastalloc: malloc_usable_size(): invalid pointer %p", p);
        return 0;
    }
    return s->npages * FA_PAGE_SIZE;
}

static void *move_block(void *p, size_t old_usable, size_t size)
{
    void *n = do_malloc(size);
    if (FA_UNLIKELY(n == NULL))
        return NULL; /* errno is ENOMEM; p stays valid, as the standard asks */
    memcpy(n, p, old_usable < size ? old_usable : size);
    do_free(p);
    return n;
}

void *fa_realloc(void *p, size_t size)
{
    if (p == NULL)
        return do_malloc(size);
    if (size == 0) { /* glibc frees and returns NULL */
        do_free(p);
        return NULL;
    }
    unsigned cls = fa__pm_class((uintptr_t)p);
    if (cls != 0) {
        /* Stay in place only within the same class: a shrink into a smaller
         * class moves, so the block's size and its class always agree (which
         * sized free relies on). */
        if (size <= FA_MAX_SMALL && fa__size_to_class(size) == cls)
            return p;
        return move_block(p, fa__classes[cls].size, size);
    }
    struct fa__span *s = large_span_of(p, "realloc");
    size_t old = s->npages * FA_PAGE_SIZE;
    if (FA_UNLIKELY(size > FA_MAX_REQUEST)) {
        errno = ENOMEM;
        return NULL;
    }
    if (size > FA_MAX_SMALL) {
        size_t npages = (size + FA_PAGE_SIZE - 1) >> FA_PAGE_SHIFT;
        /* Shrinks by less than a quarter keep their pages: a block that
         * shrinks and grows again should not bounce through the page heap. */
        if (npages <= s->npages && npages >= s->npages - s->npages / 4)
            return p;
        if (fa__ph_resize(s, npages))
            return p;
    }
    return move_block(p, old, size);
}

void *fa_reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (FA_UNLIKELY(__builtin_mul_overflow(n, size, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    return fa_realloc(p, total);
}

/* align is a power of two. */
static void *alloc_aligned(size_t align, size_t size)
{
    if (align <= FA_MIN_ALIGN) {
        /* Class 8 blocks are only 8-aligned; every other class is 16. */
        if (align == FA_MIN_ALIGN && size < FA_MIN_ALIGN)
            size = FA_MIN_ALIGN;
        return do_malloc(size);
    }
    if (FA_UNLIKELY(size > FA_MAX_REQUEST)) {
        errno = ENOMEM;
        return NULL;
    }
    fa__ensure_init();
    unsigned cls = fa__class_for_aligned(size, align);
    if (cls != 0)
        return do_malloc(fa__classes[cls].size);
    return alloc_large(size, align, false);
}

static bool is_pow2(size_t x)
{
    return x != 0 && (x & (x - 1)) == 0;
}

int fa_posix_memalign(void **out, size_t align, size_t size)
{
    if (!is_pow2(align) || align % sizeof(void *) != 0)
        return EINVAL;
    int saved = errno;
    void *p = alloc_aligned(align, size);
    errno = saved;
    if (p == NULL)
        return ENOMEM;
    *out = p;
    return 0;
}

void *fa_aligned_alloc(size_t align, size_t size)
{
    if (!is_pow2(align)) {
        errno = EINVAL;
        return NULL;
    }
    return alloc_aligned(align, size);
}

void *fa_memalign(size_t align, size_t size)
{
    if (align > ((size_t)1 << (sizeof(size_t) * 8 - 2))) {
        errno = EINVAL;
        return NULL;
    }
    if (align < sizeof(void *))
        align = sizeof(void *);
    if (!is_pow2(align)) /* glibc rounds up to the next power of two */
        align = (size_t)1 << (sizeof(size_t) * 8 - (size_t)__builtin_clzl(align));
    return alloc_aligned(align, size);
}

static size_t os_page(void)
{
    static size_t page;
    if (page == 0)
        page = (size_t)sysconf(_SC_PAGESIZE);
    return page;
}

void *fa_valloc(size_t size)
{
    return alloc_aligned(os_page(), size);
}

void *fa_pvalloc(size_t size)
{
    size_t pg = os_page();
    if (size > FA_MAX_REQUEST) {
        errno = ENOMEM;
        return NULL;
    }
    size = size == 0 ? pg : (size + pg - 1) & ~(pg - 1);
    return alloc_aligned(pg, size);
}

void fa_free_aligned_sized(void *p, size_t align, size_t size)
{
    (void)align;
    (void)size;
    do_free(p);
}

int fa_owns(const void *p)
{
    if (p == NULL || !__atomic_load_n(&fa__initialized, __ATOMIC_ACQUIRE))
        return 0;
    uintptr_t a = (uintptr_t)p;
    struct fa__span *s = fa__pm_span(a);
    if (s == NULL || s->npages == 0 || a < s->start || a >= s->start + s->npages * FA_PAGE_SIZE)
        return 0;
    if (s->state == FA_SPAN_LARGE)
        return a == s->start;
    if (s->state == FA_SPAN_SMALL) {
        unsigned cls = fa__pm_class(a);
        if (cls == 0 || cls != s->cls)
            return 0;
        size_t off = a - s->start;
        return off % fa__classes[cls].size == 0 && off < (size_t)fa__classes[cls].objs * fa__classes[cls].size;
    }
    return 0;
}

/* ---------------------------------------------------------------- standard names */

#ifdef FA_OVERRIDE
#if defined(__GNUC__) && !defined(__clang__)
/* The aliases share their targets' code; gcc wants their attributes (malloc,
 * alloc_size) repeated, which adds nothing here. */
#pragma GCC diagnostic ignored "-Wmissing-attributes"
#endif
#define FA_ALIAS(name, target) __typeof__(target) name __attribute__((alias(#target), visibility("default"), used))

FA_ALIAS(malloc, fa_malloc);
FA_ALIAS(free, fa_free);
FA_ALIAS(calloc, fa_calloc);
FA_ALIAS(realloc, fa_realloc);
FA_ALIAS(reallocarray, fa_reallocarray);
FA_ALIAS(memalign, fa_memalign);
FA_ALIAS(posix_memalign, fa_posix_memalign);
FA_ALIAS(aligned_alloc, fa_aligned_alloc);
FA_ALIAS(valloc, fa_valloc);
FA_ALIAS(pvalloc, fa_pvalloc);
FA_ALIAS(malloc_usable_size, fa_malloc_usable_size);
FA_ALIAS(free_sized, fa_free_sized);
FA_ALIAS(free_aligned_sized, fa_free_aligned_sized);
/* glibc's internal names: glibc itself and some programs call these. */
FA_ALIAS(__libc_malloc, fa_malloc);
FA_ALIAS(__libc_free, fa_free);
FA_ALIAS(__libc_calloc, fa_calloc);
FA_ALIAS(__libc_realloc, fa_realloc);
FA_ALIAS(__libc_memalign, fa_memalign);
FA_ALIAS(__libc_valloc, fa_valloc);
FA_ALIAS(__libc_pvalloc, fa_pvalloc);
FA_ALIAS(__posix_memalign, fa_posix_memalign);
FA_ALIAS(cfree, fa_free);
#endif
