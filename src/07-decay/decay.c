#include "07-decay/decay.h"
#include "01-os/clock.h"
#include "01-os/sys.h"
#include "00-base/options.h"
#include "05-central/central.h"
#include "04-pageheap/pageheap.h"
#include "06-large/large.h"
#include "03-purge/purge.h"


/* Read by every thread's slow paths, a free's among them: a line of its
 * own, apart from the counters that claims and ticks write. */
unsigned fa__scavenge_epoch FA_ALIGNED_CL;
static uint64_t next_tick_ms;
static int background_state; /* 0 none, 1 starting or running */

static void tick(void)
{
    fa__central_drain();
    fa__large_shared_trim(false);
    if (__atomic_load_n(&fa__opt.purge_delay_ms, __ATOMIC_RELAXED) >= 0)
        fa__ph_purge(false);
    fa__decay_scavenge_soon();
}

void fa__decay_scavenge_soon(void)
{
    __atomic_add_fetch(&fa__scavenge_epoch, 1, __ATOMIC_RELAXED);
}

static void *background_main(void *arg)
{
    (void)arg;
    for (;;) {
        uint64_t iv = fa__purge_tick_interval_ms();
        fa__os_sleep_ms(iv);
        tick();
    }
    return NULL;
}

static void start_background(void)
{
    if (__atomic_exchange_n(&background_state, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    if (!fa__os_thread_start(background_main, 64 << 10))
        __atomic_store_n(&background_state, 0, __ATOMIC_RELEASE);
}

void fa__decay_after_fork_child(void)
{
    background_state = 0;
}

void fa__decay_maybe(void)
{
    if (__atomic_load_n(&fa__opt.background, __ATOMIC_RELAXED)) {
        if (FA_UNLIKELY(__atomic_load_n(&background_state, __ATOMIC_RELAXED) == 0))
            start_background();
        return;
    }
    uint64_t now = fa__now_ms();
    uint64_t due = __atomic_load_n(&next_tick_ms, __ATOMIC_RELAXED);
    if (now < due)
        return;
    /* One thread runs the tick; the others go on. */
    if (!__atomic_compare_exchange_n(&next_tick_ms, &due, now + fa__purge_tick_interval_ms(), false,
                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return;
    tick();
}
