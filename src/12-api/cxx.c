/* C++'s operator new and delete in all their forms, exported under their
 * mangled names (the Itanium C++ ABI of gcc and clang on Linux) beside
 * malloc, so that a C++ program's new comes here with no call through
 * libstdc++'s operator.  Written in C: the library stays a C library and
 * links no C++ runtime.
 *
 * new is malloc's fast path.  When it fails, the program's new_handler is
 * called and the allocation tried again; with no handler, std::bad_alloc
 * is thrown.  Both go through libstdc++'s own functions, referred to
 * weakly: a process that calls operator new has loaded them.  Without
 * them (a C++ runtime other than libstdc++), a failed new stops the
 * program with one line.  The nothrow forms return NULL where new would
 * throw; they do not call the new_handler, whose exception could not be
 * caught here.  delete is free, sized or not (the span comes from the page
 * map all the same, as for fa_free_sized).  A sized delete's size is
 * checked: the hardened build's against the bytes the block was asked
 * for, the default build's against the class of a block of the calling
 * thread's own spans (no other costs it nothing more), so that a delete of
 * an array as one object, or of the wrong type, stops the program. */
#include "fastalloc.h"
#include "12-api/fastpath.h"
#include "12-api/override.h"
#include "00-base/diag.h"

#ifdef FA_OVERRIDE

/* libstdc++: std::get_new_handler() and std::__throw_bad_alloc(). */
typedef void (*new_handler_fn)(void);
extern new_handler_fn _ZSt15get_new_handlerv(void) __attribute__((weak));
extern _Noreturn void _ZSt17__throw_bad_allocv(void) __attribute__((weak));

static void *alloc(size_t size, size_t align)
{
    return align == 0 ? fa_malloc(size) : fa_memalign(align, size);
}

/* new of size bytes (aligned to align, or 0) failed. */
static FA_NOINLINE void *new_failed(size_t size, size_t align)
{
    /* An alignment that is no power of two is the program's error, which
     * no handler can mend. */
    while (align == 0 || (align & (align - 1)) == 0) {
        new_handler_fn h = _ZSt15get_new_handlerv != NULL ? _ZSt15get_new_handlerv() : NULL;
        if (h == NULL)
            break;
        h(); /* frees memory, or throws, or ends the program */
        void *p = alloc(size, align);
        if (p != NULL)
            return p;
    }
    if (_ZSt17__throw_bad_allocv != NULL)
        _ZSt17__throw_bad_allocv();
    fa__fatal("fastalloc: operator new(%zu): out of memory, and no C++ runtime to throw std::bad_alloc",
              size);
}

static void *fa__cxx_new(size_t size)
{
    void *p = fa__do_malloc(size);
    if (FA_UNLIKELY(p == NULL))
        return new_failed(size, 0);
    return p;
}

static void *fa__cxx_new_nothrow(size_t size, const void *tag)
{
    (void)tag;
    return fa__do_malloc(size);
}

static void *fa__cxx_new_aligned(size_t size, size_t align)
{
    void *p = fa_memalign(align, size);
    if (FA_UNLIKELY(p == NULL))
        return new_failed(size, align);
    return p;
}

static void *fa__cxx_new_aligned_nothrow(size_t size, size_t align, const void *tag)
{
    (void)tag;
    return fa_memalign(align, size);
}

static void fa__cxx_delete(void *p)
{
    fa__do_free(p);
}

/* A sized delete in the hardened build: size must be what p was asked for
 * (a large block's record, or the tail's with `secure_tails`: 16 for
 * fewer than 16), or without tails a request of p's size class (of at
 * most its bytes, for an aligned block, whose class is the alignment's). */
static void check_sized(void *p, size_t size, bool aligned)
{
#if FA_SECURE
    if (p == NULL)
        return;
    size_t held = fa_malloc_usable_size(p);
    bool ok = size <= held &&
              (held <= 16 || size == held ||
               (!FA_TAILS_ON && size <= FA_MAX_SMALL &&
                (aligned || fa__classes[fa__size_to_class(size)].size == held)));
    if (FA_UNLIKELY(!ok))
        fa__fatal("fastalloc: operator delete(%p, %zu): the block was asked for %s%zu bytes (a "
                  "delete of the wrong type, or of an array as one object)",
                  p, size, FA_TAILS_ON || held > FA_MAX_SMALL ? "" : "up to ", held);
#else
    (void)p;
    (void)size;
    (void)aligned;
#endif
}

static void fa__cxx_delete_sized(void *p, size_t size)
{
#if FA_SECURE
    check_sized(p, size, false);
    fa__do_free(p);
#else
    fa__do_free_sized(p, size);
#endif
}

#if !FA_SECURE
/* The default build's sized delete left its fast path (fastpath.h): a
 * size past the first table, or not of the block's class. */
void fa__api_delete_check(void *p, size_t size)
{
    unsigned cls = fa__pm_class((uintptr_t)p);
    if (FA_UNLIKELY(size > FA_MAX_SMALL || fa__size_to_class(size) != cls))
        fa__fatal("fastalloc: operator delete(%p, %zu): the block was asked for up to %zu bytes (a delete of "
                  "the wrong type, or of an array as one object)",
                  p, size, (size_t)fa__classes[cls].size);
    fa__do_free(p);
}
#endif

static void fa__cxx_delete_aligned(void *p, size_t align)
{
    (void)align;
    fa__do_free(p);
}

static void fa__cxx_delete_sized_aligned(void *p, size_t size, size_t align)
{
    check_sized(p, size, align > FA_MIN_ALIGN);
    fa__do_free(p);
}

static void fa__cxx_delete_nothrow(void *p, const void *tag)
{
    (void)tag;
    fa__do_free(p);
}

static void fa__cxx_delete_aligned_nothrow(void *p, size_t align, const void *tag)
{
    (void)align;
    (void)tag;
    fa__do_free(p);
}

/* new, new[] */
FA_ALIAS(_Znwm, fa__cxx_new);
FA_ALIAS(_Znam, fa__cxx_new);
/* new(nothrow), new[](nothrow) */
FA_ALIAS(_ZnwmRKSt9nothrow_t, fa__cxx_new_nothrow);
FA_ALIAS(_ZnamRKSt9nothrow_t, fa__cxx_new_nothrow);
/* new(align_val_t), new[](align_val_t), and their nothrow forms */
FA_ALIAS(_ZnwmSt11align_val_t, fa__cxx_new_aligned);
FA_ALIAS(_ZnamSt11align_val_t, fa__cxx_new_aligned);
FA_ALIAS(_ZnwmSt11align_val_tRKSt9nothrow_t, fa__cxx_new_aligned_nothrow);
FA_ALIAS(_ZnamSt11align_val_tRKSt9nothrow_t, fa__cxx_new_aligned_nothrow);
/* delete, delete[], sized, aligned, sized and aligned, nothrow */
FA_ALIAS(_ZdlPv, fa__cxx_delete);
FA_ALIAS(_ZdaPv, fa__cxx_delete);
FA_ALIAS(_ZdlPvm, fa__cxx_delete_sized);
FA_ALIAS(_ZdaPvm, fa__cxx_delete_sized);
FA_ALIAS(_ZdlPvSt11align_val_t, fa__cxx_delete_aligned);
FA_ALIAS(_ZdaPvSt11align_val_t, fa__cxx_delete_aligned);
FA_ALIAS(_ZdlPvmSt11align_val_t, fa__cxx_delete_sized_aligned);
FA_ALIAS(_ZdaPvmSt11align_val_t, fa__cxx_delete_sized_aligned);
FA_ALIAS(_ZdlPvRKSt9nothrow_t, fa__cxx_delete_nothrow);
FA_ALIAS(_ZdaPvRKSt9nothrow_t, fa__cxx_delete_nothrow);
FA_ALIAS(_ZdlPvSt11align_val_tRKSt9nothrow_t, fa__cxx_delete_aligned_nothrow);
FA_ALIAS(_ZdaPvSt11align_val_tRKSt9nothrow_t, fa__cxx_delete_aligned_nothrow);

#endif
