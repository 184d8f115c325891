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
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FA_VERSION_MAJOR 0
#define FA_VERSION_MINOR 1
#define FA_VERSION_PATCH 0

/* Room for the size classes in fa_stats_t (fastalloc has 97). */
#define FA_STATS_MAX_CLASSES 128
/* Object pools listed in fa_stats_t. */
#define FA_STATS_MAX_POOLS 16

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

/* Bytes usable at ptr: exact, so writing up to this many bytes is safe.
 * But the allocation functions carry alloc_size, and with _FORTIFY_SOURCE=3
 * (the default of some distributions) the compiler bounds a pointer by the
 * size asked for: a memcpy or memset past it aborts, usable or not.  Widen
 * the bound first with p = fa_realloc(p, fa_malloc_usable_size(p)), which
 * returns p itself and costs no copy. */
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

/* ------------------------------------------------------------------------
 * Memory return, limits, options and statistics.
 * ------------------------------------------------------------------------ */

/* Return every free page to the OS now, the calling thread's cache and the
 * central caches included.  Returns the bytes purged.  malloc_trim(0) is the
 * same (it returns 1 when anything was released). */
FA_API size_t fa_trim(void);

/* Cap on the bytes in use or held resident (0 = none).  An allocation that
 * would pass it purges first, then fails with NULL and errno = ENOMEM. */
FA_API void fa_set_limit(size_t bytes);

/* Set or read a knob by name; 0 on success, EINVAL for an unknown name or a
 * value out of its range, EPERM for a knob fixed at start-up (debug).  The
 * names, their environment variables (read once at start-up), ranges and
 * defaults are in docs/TUNING.md. */
FA_API int fa_option_set(const char *name, long long value);
FA_API int fa_option_get(const char *name, long long *value);

/* An object pool's statistics (fa_pool_stats, and fa_stats_t.pools). */
typedef struct fa_pool_stats_t {
    const char *name;
    size_t object_size;    /* bytes per object slot */
    size_t live;           /* objects got and not yet put */
    size_t free_local;     /* free objects in threads' local pools */
    size_t free_global;    /* free objects in the global pools */
    size_t bytes_os;       /* bytes of blocks mapped now */
    size_t bytes_peak;     /* most bytes_os ever */
    unsigned long long gets, puts;
    unsigned long long trims; /* fa_pool_trim() calls, plus idle trims that released memory */
} fa_pool_stats_t;

typedef struct fa_stats_t {
    size_t mapped;        /* bytes of address space the heap has grown into (its
                             unused reserve not counted) */
    size_t in_spans;      /* in spans cut into small blocks */
    size_t large;         /* in large blocks */
    size_t free;          /* in free spans (purged or not) */
    size_t dirty;         /* in free spans not purged yet (resident) */
    size_t purged_total;  /* bytes purged so far */
    unsigned long long purges; /* madvise calls */
    size_t thread_caches; /* all-free spans and large blocks threads keep */
    size_t thread_caches_claimed; /* what they may hold together now */
    size_t thread_caches_bound;   /* thread_cache_max */
    unsigned threads;     /* threads with a cache */
    size_t central;       /* free blocks in the spans central caches list */
    size_t metadata;      /* bytes mapped for the allocator's own records */
    size_t limit;
    long purge_delay_ms;

    /* What the program did.  A block's bytes are its size class's (a large
     * block's, its pages).  Counted per thread with no atomics and summed
     * when read: a running thread's frees of its own blocks count when it
     * next allocates from their span (a few dozen calls later), the calling
     * thread's and those of threads that exited at once. */
    unsigned long long allocs, frees; /* blocks, small and large */
    unsigned long long allocated_bytes, freed_bytes;
    size_t in_use;        /* bytes in blocks allocated and not freed */
    size_t in_use_blocks;
    size_t peak_in_use;   /* the most bytes in spans cut into blocks and large
                             blocks at once: the blocks' own peak, rounded up
                             to their spans */
    size_t resident;      /* spans in use and free spans not purged: at most
                             what the heap keeps resident */
    size_t released;      /* bytes given back to the OS so far (purged_total) */
    unsigned nclasses;    /* entries of classes[] in use */
    struct fa_class_stats {
        size_t size;              /* bytes of each block */
        size_t in_use_blocks;
        size_t spans;             /* spans of this class in use */
        unsigned long long allocs;
        unsigned long long slow_allocs; /* allocations that left the fast path */
    } classes[FA_STATS_MAX_CLASSES];
    unsigned npools;      /* object pools alive (the first FA_STATS_MAX_POOLS are below) */
    fa_pool_stats_t pools[FA_STATS_MAX_POOLS];
} fa_stats_t;

/* Hooks: called on allocations and frees, for heap profilers and tracers.
 * on_alloc gets the block, the size asked for and the address the
 * allocation was called from; on_free the block and its usable size.  A
 * hook may allocate (its own calls are not hooked).  With sample_bytes set,
 * on_alloc sees about one block per sample_bytes bytes allocated (each
 * thread draws its next sample point at random, as tcmalloc samples), and
 * on_free only those blocks.  While hooks are set, malloc and free take
 * their slow paths: the calling thread's from this call, another thread's
 * from its next trip off the fast path.  NULL removes the hooks.  0, or
 * EINVAL for a hook set with neither function. */
typedef struct fa_hooks {
    void (*on_alloc)(void *ptr, size_t size, void *caller);
    void (*on_free)(void *ptr, size_t size);
    size_t sample_bytes; /* 0: every call */
} fa_hooks;
FA_API int fa_set_hooks(const fa_hooks *hooks);

/* The sampled heap profile (FASTALLOC_PROFILE=PATH; README.md, "Heap
 * profiles"): write the live heap's samples to path now, in the text form
 * of gperftools' heap profiles (`google-pprof --text PROGRAM FILE`).  NULL
 * writes PATH.N, N counting the dumps made so far, as the profile's signal
 * does.  0, an errno value when the file cannot be written, or EINVAL when
 * the profile is off. */
FA_API int fa_profile_dump(const char *path);

/* Fill *out.  fa_stats_get is the same call; fa_stats is its first name. */
FA_API void fa_stats_get(fa_stats_t *out);
FA_API void fa_stats(fa_stats_t *out);

/* Print the statistics to out: a table for people, or with FA_STATS_JSON
 * one JSON object (tools/fastalloc-stat renders it).  0, or -1 with errno
 * when writing fails. */
#define FA_STATS_JSON 1
FA_API int fa_stats_print(FILE *out, int flags);

/* ------------------------------------------------------------------------
 * Object pool: fixed-size objects created and destroyed at high rates
 * (connections, requests, tree nodes).  Each thread gets and puts through a
 * local pool of its own, serving objects from blocks it owns; a block whose
 * objects are all free moves whole to one of several global pools.  An object's memory is constructed (ctor) once, when it enters the
 * pool, and destroyed (dtor) when it leaves it (trim, destroy): an object that
 * is put and got again comes back in the state it was put in.  The object put
 * last is the one got next.  Any thread may put an object another thread got.
 * ------------------------------------------------------------------------ */
typedef struct fa_pool fa_pool;

typedef struct fa_pool_options {
    size_t object_size;  /* required, > 0 */
    size_t object_align; /* power of two; 0 = 16 */
    void (*ctor)(void *obj, void *arg); /* optional */
    void (*dtor)(void *obj, void *arg); /* optional */
    void *arg;           /* passed to ctor and dtor */
    unsigned global_pools; /* 0 = one per 4 CPUs, at least 2, at most 16 */
    unsigned handover;   /* free objects a thread keeps in all-free blocks before it
                            hands such blocks to a global pool; 0 = one block */
    size_t block_size;   /* bytes per block (power of two >= 4096); 0 = 64 KiB */
    size_t max_objects;  /* cap on objects the pool holds, live or free; 0 = none */
    size_t max_bytes;    /* cap on bytes of blocks; 0 = none */
    int idle_trim_ms;    /* auto-trim delay; 0 = 1000 ms, -1 = never */
    int debug;           /* 1: check every put (double put, foreign pointer) */
    const char *name;    /* for statistics; copied */
} fa_pool_options;


/* NULL with errno = EINVAL for bad options, ENOMEM without memory. */
FA_API fa_pool *fa_pool_create(const fa_pool_options *opt);
/* NULL with errno = ENOMEM when the pool is at its cap or the OS refuses. */
FA_API void *fa_pool_get(fa_pool *pool);
FA_API void fa_pool_put(fa_pool *pool, void *obj);
/* Returns to the OS every block whose objects are all free (calling dtor on
 * them), after handing the caller's own blocks over; returns the bytes
 * released.  Blocks other threads hold (the one each serves from, its spare,
 * blocks with objects out) stay until they put them back or exit. */
FA_API size_t fa_pool_trim(fa_pool *pool);
/* Releases all the pool's memory, calling dtor on every free object.  Objects
 * still out are released without dtor. */
FA_API void fa_pool_destroy(fa_pool *pool);
FA_API void fa_pool_stats(fa_pool *pool, fa_pool_stats_t *out);

#ifdef __cplusplus
}
#endif

#endif /* FASTALLOC_H */
