/* Start-up, and holding every lock across fork(). */
#include "11-init/init.h"
#include "00-base/diag.h"
#include "00-base/lock.h"
#include "00-base/options.h"
#include "01-os/sys.h"
#include "05-central/central.h"
#include "02-records/freelist.h"
#include "02-records/meta.h"
#include "04-pageheap/pageheap.h"
#include "06-large/large.h"
#include "02-records/sizeclass.h"
#include "08-tcache/tcache.h"
#include "09-diag/debug.h"
#include "09-diag/trace.h"
#include "07-decay/decay.h"


int fa__initialized;

static fa__lock_t init_lock = FA_LOCK_INIT;
static int atfork_registered;
static void (*upper_prepare)(void);
static void (*upper_release)(int child);

void fa__init_fork_hooks(void (*prepare)(void), void (*release)(int child))
{
    __atomic_store_n(&upper_release, release, __ATOMIC_RELEASE);
    __atomic_store_n(&upper_prepare, prepare, __ATOMIC_RELEASE);
}

/* Fork: hold every lock across fork() so the child gets consistent
 * structures, whatever the other threads of the parent were doing.  The
 * release hook is read once, at prepare, so a hook set while a fork is
 * under way is not released without having been prepared. */
static void (*fork_release_hook)(int child);

static void fork_prepare(void)
{
    void (*prepare)(void) = __atomic_load_n(&upper_prepare, __ATOMIC_ACQUIRE);
    fork_release_hook = prepare != NULL ? __atomic_load_n(&upper_release, __ATOMIC_ACQUIRE) : NULL;
    if (prepare != NULL)
        prepare();
    fa__trace_fork_prepare();
    fa__dbg_lock_for_fork();
    fa__tc_lock_registry();
    fa__central_lock_all();
    fa__large_lock_for_fork();
    fa__ph_lock_for_fork();
    fa__lock(&fa__meta_lock);
}

static void fork_unlock_heap(void)
{
    fa__unlock(&fa__meta_lock);
    fa__ph_unlock_for_fork();
    fa__large_unlock_for_fork();
    fa__central_unlock_all();
    fa__tc_unlock_registry();
    fa__dbg_unlock_for_fork();
}

static void fork_parent(void)
{
    fork_unlock_heap();
    fa__trace_fork_parent();
    if (fork_release_hook != NULL)
        fork_release_hook(0);
}

static void fork_child(void)
{
    fa__os_fork_child();
    fa__ph_after_fork_child();
    fork_unlock_heap();
    fa__trace_fork_child();
    if (fork_release_hook != NULL)
        fork_release_hook(1);
    fa__decay_after_fork_child();
}

void fa__global_init(void)
{
    fa__lock(&init_lock);
    if (!fa__initialized) {
        fa__options_from_env();
        if (fa__opt.secure && !FA_SECURE)
            fa__diag("fastalloc: FASTALLOC_SECURE=1, but this is the default library: preload "
                     "libfastalloc-secure.so (fastalloc-run does) for the hardened build");
        fa__fl_init();
        fa__sizeclass_init();
        fa__ph_init();
        fa__dbg_init();
        __atomic_store_n(&fa__initialized, 1, __ATOMIC_RELEASE);
    }
    fa__unlock(&init_lock);
    /* Registering fork handlers may allocate, so it runs after the allocator is ready. */
    if (__atomic_exchange_n(&atfork_registered, 1, __ATOMIC_ACQ_REL) == 0)
        fa__os_atfork(fork_prepare, fork_parent, fork_child);
}
