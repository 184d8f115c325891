/* The allocator's lock: a spinlock that yields the CPU when it does not get
 * the lock quickly.  Critical sections are short; a futex would add a
 * syscall to the uncontended unlock path for nothing. */
#ifndef FA_BASE_LOCK_H
#define FA_BASE_LOCK_H

#include "00-base/config.h"

static inline void fa__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

typedef struct {
    volatile int v;
} fa__lock_t;

#define FA_LOCK_INIT {0}

void fa__lock_slow(fa__lock_t *l) FA_HIDDEN;

FA_INLINE void fa__lock(fa__lock_t *l)
{
    if (FA_LIKELY(__atomic_exchange_n(&l->v, 1, __ATOMIC_ACQUIRE) == 0))
        return;
    fa__lock_slow(l);
}

/* true with the lock taken; false at once if someone holds it. */
FA_INLINE bool fa__trylock(fa__lock_t *l)
{
    return __atomic_load_n(&l->v, __ATOMIC_RELAXED) == 0 && __atomic_exchange_n(&l->v, 1, __ATOMIC_ACQUIRE) == 0;
}

FA_INLINE void fa__unlock(fa__lock_t *l)
{
    __atomic_store_n(&l->v, 0, __ATOMIC_RELEASE);
}

#endif
