#include "01-os/clock.h"

#include <time.h>

/* Added to the OS clock: only tests ever set it. */
static uint64_t skew_ms;

uint64_t fa__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 +
           __atomic_load_n(&skew_ms, __ATOMIC_RELAXED);
}

void fa__clock_advance_ms(uint64_t ms)
{
    __atomic_add_fetch(&skew_ms, ms, __ATOMIC_RELAXED);
}

uint64_t fa__os_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void fa__os_sleep_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}
