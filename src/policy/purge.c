/* The purge policy today:
 *  - at a free: dirty memory may grow to 1/8 of the memory in use, and at
 *    least 16 MiB; past that it is purged down to half that cap, so a
 *    program whose use falls from a peak gives memory back during its
 *    frees, with no timer and no later call.  Purging in bursts lets freed
 *    spans coalesce first: fewer, larger madvise calls.
 *  - at a thread's exit: the same cap with no floor;
 *  - with time: a span dirty for the purge delay is purged by the next
 *    look, which the page heap makes at most every delay/4 ms and the
 *    decay tick every delay/2 ms (10 ms to 5 s);
 *  - a delay of 0 purges every free at once, -1 never. */
#include "policy/purge.h"
#include "base/clock.h"
#include "base/options.h"

/* Dirty free memory kept without purging, however little is in use: a
 * program that frees and reallocates a few megabytes should not pay for
 * page faults each time. */
#define DIRTY_FLOOR ((size_t)16 << 20)
/* Above the floor, dirty memory may be at most 1/8 of what is in use. */
#define DIRTY_RATIO_SHIFT 3

static long delay_ms(void)
{
    return __atomic_load_n(&fa__opt.purge_delay_ms, __ATOMIC_RELAXED);
}

static size_t shed_target(size_t in_use, size_t dirty, size_t floor)
{
    size_t cap = in_use >> DIRTY_RATIO_SHIFT;
    if (cap < floor)
        cap = floor;
    return dirty > cap ? cap / 2 : FA_PURGE_NONE;
}

size_t fa__purge_after_free(size_t in_use, size_t dirty)
{
    long d = delay_ms();
    if (d == 0)
        return 0;
    if (d < 0)
        return FA_PURGE_NONE;
    return shed_target(in_use, dirty, DIRTY_FLOOR);
}

size_t fa__purge_at_exit(size_t in_use, size_t dirty)
{
    if (delay_ms() < 0)
        return FA_PURGE_NONE;
    return shed_target(in_use, dirty, 0);
}

bool fa__purge_look_due(uint64_t last_ms, uint64_t *now_ms)
{
    long d = delay_ms();
    if (d <= 0)
        return false;
    *now_ms = fa__now_ms();
    return *now_ms - last_ms >= (uint64_t)d / 4 + 1;
}

bool fa__purge_span_aged(uint64_t now_ms, uint32_t free_since)
{
    long d = delay_ms();
    /* Unsigned difference: exact across the 32-bit wrap for 49 days. */
    return d >= 0 && (uint32_t)((uint32_t)now_ms - free_since) >= (uint64_t)d;
}

uint64_t fa__purge_tick_interval_ms(void)
{
    long d = delay_ms();
    uint64_t iv = d > 0 ? (uint64_t)d / 2 : 500;
    if (iv < 10)
        iv = 10;
    if (iv > 5000)
        iv = 5000;
    return iv;
}
