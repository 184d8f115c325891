/* Blocks of no bytes (empty.h). */
#include "06-large/empty.h"
#include "00-base/lock.h"
#include "01-os/os.h"

#if FA_SECURE
/* The range: [base, end); base is 0 before the first malloc(0) and 1 when
 * none could be reserved.  end is stored before base, base with release:
 * a thread that sees a base sees its end. */
static uintptr_t base, end;
/* Offset of the next block, bumped by each malloc(0) (off the fast paths). */
static size_t next;
static fa__lock_t reserve_lock = FA_LOCK_INIT;

static uintptr_t reserve(void)
{
    fa__lock(&reserve_lock);
    uintptr_t b = __atomic_load_n(&base, __ATOMIC_RELAXED);
    /* Less where the address space is bounded (ulimit -v): down to 64 KiB,
     * 4,096 addresses before they repeat. */
    for (size_t size = (size_t)1 << 32; b == 0 && size >= ((size_t)1 << 16); size /= 16) {
        void *p = fa__os_reserve(NULL, size, FA_PAGE_SIZE);
        if (p != NULL) {
            __atomic_store_n(&end, (uintptr_t)p + size, __ATOMIC_RELAXED);
            b = (uintptr_t)p;
        }
    }
    if (b == 0)
        b = 1;
    __atomic_store_n(&base, b, __ATOMIC_RELEASE);
    fa__unlock(&reserve_lock);
    return b;
}

void *fa__empty_alloc(void)
{
    uintptr_t b = __atomic_load_n(&base, __ATOMIC_ACQUIRE);
    if (FA_UNLIKELY(b == 0))
        b = reserve();
    if (FA_UNLIKELY(b == 1))
        return NULL;
    size_t range = __atomic_load_n(&end, __ATOMIC_RELAXED) - b;
    size_t off = __atomic_fetch_add(&next, FA_MIN_ALIGN, __ATOMIC_RELAXED) & (range - 1);
    return (void *)(b + off);
}

bool fa__empty_has(const void *p)
{
    /* base is 0 or 1 while there is no range (end may be stored already). */
    /* Blocks of no bytes start 16-byte aligned: another address of the
     * range is none (fa_owns of p + 1 said yes, #52). */
    uintptr_t b = __atomic_load_n(&base, __ATOMIC_ACQUIRE);
    return b > 1 && (uintptr_t)p % FA_MIN_ALIGN == 0 && (uintptr_t)p - b < __atomic_load_n(&end, __ATOMIC_RELAXED) - b;
}
#endif
