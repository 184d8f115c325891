/*
 * fastalloc: a thread-caching general-purpose memory allocator.
 *
 * The library exports the standard malloc family (malloc, free, ...) unless it
 * was built with -DFA_OVERRIDE=OFF.  The fa_-prefixed functions below are
 * always exported and behave exactly like their standard counterparts, so a
 * program can call fastalloc explicitly next to another allocator.
 */
#ifndef FASTALLOC_H
#define FASTALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FA_VERSION_MAJOR 0
#define FA_VERSION_MINOR 1
#define FA_VERSION_PATCH 0

#if defined(__GNUC__)
#define FA_API __attribute__((visibility("default")))
#define FA_MALLOC_ATTR __attribute__((malloc, warn_unused_result))
#define FA_ALLOC_SIZE(i) __attribute__((alloc_size(i)))
#define FA_ALLOC_SIZE2(i, j) __attribute__((alloc_size(i, j)))
#else
#define FA_API
#define FA_MALLOC_ATTR
#define FA_ALLOC_SIZE(i)
#define FA_ALLOC_SIZE2(i, j)
#endif

/* The malloc family.  Semantics follow glibc: malloc(0) returns a unique
 * pointer, blocks of 16 bytes or more are 16-byte aligned, impossible sizes
 * give NULL with errno = ENOMEM, realloc(p, 0) frees p and returns NULL. */
FA_API void *fa_malloc(size_t size) FA_MALLOC_ATTR FA_ALLOC_SIZE(1);
FA_API void fa_free(void *ptr);
FA_API void *fa_calloc(size_t n, size_t size) FA_MALLOC_ATTR FA_ALLOC_SIZE2(1, 2);
FA_API void *fa_realloc(void *ptr, size_t size) FA_ALLOC_SIZE(2);
FA_API void *fa_reallocarray(void *ptr, size_t n, size_t size) FA_ALLOC_SIZE2(2, 3);

/* Aligned allocation.  posix_memalign returns EINVAL unless alignment is a
 * power of two multiple of sizeof(void *); aligned_alloc returns NULL with
 * errno = EINVAL unless alignment is a power of two; memalign rounds a
 * non-power-of-two alignment up, as glibc does. */
FA_API int fa_posix_memalign(void **out, size_t alignment, size_t size);
FA_API void *fa_aligned_alloc(size_t alignment, size_t size) FA_MALLOC_ATTR FA_ALLOC_SIZE(2);
FA_API void *fa_memalign(size_t alignment, size_t size) FA_MALLOC_ATTR FA_ALLOC_SIZE(2);
FA_API void *fa_valloc(size_t size) FA_MALLOC_ATTR FA_ALLOC_SIZE(1);
FA_API void *fa_pvalloc(size_t size) FA_MALLOC_ATTR;

/* Bytes usable at ptr: exact, so writing up to this many bytes is safe. */
FA_API size_t fa_malloc_usable_size(void *ptr);

/* Sized deallocation (C23 free_sized / free_aligned_sized).  size must lie
 * between the size that was requested and fa_malloc_usable_size(ptr); the
 * small-size path then skips the page-map lookup. */
FA_API void fa_free_sized(void *ptr, size_t size);
FA_API void fa_free_aligned_sized(void *ptr, size_t alignment, size_t size);

/* 1 when ptr is the start of a block inside memory that this allocator
 * manages (a block handed out, or one cached free), else 0.  Takes no lock;
 * meant for tests, assertions and mixed-allocator programs. */
FA_API int fa_owns(const void *ptr);

#ifdef __cplusplus
}
#endif

#endif /* FASTALLOC_H */
