#include "01-os/exit.h"
#include "00-base/lock.h"

#include <pthread.h>

static fa__lock_t key_lock = FA_LOCK_INIT;
static int key_state; /* 0 none, 1 made, -1 refused */
static pthread_key_t key;
static void (*handlers[FA_EXIT_PARTS])(void *);
static uint64_t runs[FA_EXIT_PARTS];

/* What each part asked to be called with; NULL when not armed. */
static __thread void *armed[FA_EXIT_PARTS] __attribute__((tls_model("initial-exec")));

static void run_exits(void *unused)
{
    (void)unused;
    /* A part armed while an earlier one runs (say the trace, by a free the
     * pool's exit makes) is caught by the next pass, still in order. */
    for (unsigned pass = 0; pass < 4; pass++) {
        bool any = false;
        for (unsigned i = 0; i < FA_EXIT_PARTS; i++) {
            void *arg = armed[i];
            if (arg == NULL)
                continue;
            armed[i] = NULL;
            any = true;
            void (*fn)(void *) = __atomic_load_n(&handlers[i], __ATOMIC_ACQUIRE);
            __atomic_add_fetch(&runs[i], 1, __ATOMIC_RELAXED);
            fn(arg);
        }
        if (!any)
            return;
    }
}

static bool key_ready(void)
{
    int s = __atomic_load_n(&key_state, __ATOMIC_ACQUIRE);
    if (FA_LIKELY(s != 0))
        return s > 0;
    fa__lock(&key_lock);
    if (key_state == 0)
        __atomic_store_n(&key_state, pthread_key_create(&key, run_exits) == 0 ? 1 : -1,
                         __ATOMIC_RELEASE);
    fa__unlock(&key_lock);
    return key_state > 0;
}

bool fa__os_exit_arm(enum fa__exit_part part, void (*fn)(void *), void *arg)
{
    if (!key_ready())
        return false;
    if (__atomic_load_n(&handlers[part], __ATOMIC_RELAXED) != fn)
        __atomic_store_n(&handlers[part], fn, __ATOMIC_RELEASE);
    armed[part] = arg;
    /* Any non-NULL value: pthread calls run_exits at the thread's exit (or
     * once more, when this arms from inside it). */
    pthread_setspecific(key, &armed);
    return true;
}

uint64_t fa__os_exit_runs(enum fa__exit_part part)
{
    return __atomic_load_n(&runs[part], __ATOMIC_RELAXED);
}
