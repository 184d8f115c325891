/* AddressSanitizer builds (make SANITIZE=1): free and cached memory is
 * poisoned, so that a program's read or write of a block it freed is
 * reported there and then.  Elsewhere these expand to nothing, and the fast
 * paths are the same instructions.
 *
 * Who poisons what: a free poisons a small block but its first word (the
 * link, which the free-list seam reads and writes: 02-records/freelist.h; the
 * seam unpoisons the free mark, the second word, to write it, and reads a
 * poisoned mark as a free block's); the
 * page heap poisons a span when it goes free, and the thread cache a large
 * block it keeps; whatever hands memory out unpoisons it (malloc's paths,
 * the page heap for a span it hands out or grows). */
#ifndef FA_BASE_ASAN_H
#define FA_BASE_ASAN_H

#include "00-base/config.h"

#if defined(__SANITIZE_ADDRESS__)
#define FA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FA_ASAN 1
#endif
#endif

#ifdef FA_ASAN
void __asan_poison_memory_region(void const volatile *addr, size_t size);
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
void __asan_get_shadow_mapping(size_t *shadow_scale, size_t *shadow_offset);
int __asan_address_is_poisoned(void const volatile *addr);
#define FA_POISON(p, n) __asan_poison_memory_region((p), (n))
#define FA_UNPOISON(p, n) __asan_unpoison_memory_region((p), (n))
#define FA_POISONED(p) __asan_address_is_poisoned(p)
#else
#define FA_POISON(p, n) ((void)0)
#define FA_UNPOISON(p, n) ((void)0)
#define FA_POISONED(p) 0
#endif

/* The part of the shadow of [p, p + n) that whole OS pages hold: a range
 * [*lo, *hi) that the page heap gives back to the OS when it purges
 * [p, p + n), so that poisoned memory it purged costs no resident shadow.
 * Empty outside an AddressSanitizer build. */
FA_INLINE void fa__asan_shadow_pages(uintptr_t p, size_t n, uintptr_t *lo, uintptr_t *hi)
{
    *lo = *hi = 0;
#ifdef FA_ASAN
    size_t scale, offset;
    __asan_get_shadow_mapping(&scale, &offset);
    const uintptr_t page = 4096;
    uintptr_t a = (p >> scale) + offset, e = ((p + n) >> scale) + offset;
    a = (a + page - 1) & ~(page - 1);
    e &= ~(page - 1);
    if (a < e) {
        *lo = a;
        *hi = e;
    }
#else
    (void)p;
    (void)n;
#endif
}

#endif
