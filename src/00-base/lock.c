#include "00-base/lock.h"

#include <sched.h>

void fa__lock_slow(fa__lock_t *l)
{
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (__atomic_load_n(&l->v, __ATOMIC_RELAXED) == 0 &&
                __atomic_exchange_n(&l->v, 1, __ATOMIC_ACQUIRE) == 0)
                return;
            fa__cpu_relax();
        }
        /* The holder may be descheduled (more threads than cores): let it
         * run instead of burning our time slice. */
        sched_yield();
    }
}
