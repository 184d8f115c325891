/* The global bound on what the thread caches keep (thread_cache_max), and
 * each cache's claim on it.  A cache's all-free spans stay within its
 * claim; claims move in steps (FA_TC_CLAIM_STEP), with one atomic add on a
 * shared counter. */
#include "08-tcache/internal.h"
#include "00-base/options.h"

/* Written at claims and at thread starts and exits: a line of their own. */
static size_t claimed FA_ALIGNED_CL; /* sum of live caches' max_bytes */
static unsigned live_caches;

void fa__tc_live_add(int delta)
{
    __atomic_add_fetch(&live_caches, (unsigned)delta, __ATOMIC_RELAXED);
}

unsigned fa__tc_live_threads(void)
{
    return __atomic_load_n(&live_caches, __ATOMIC_RELAXED);
}

/* A cache's fair share of the global bound among the threads alive now. */
static size_t fair_share(void)
{
    unsigned n = __atomic_load_n(&live_caches, __ATOMIC_RELAXED);
    return fa__opt.thread_cache_max / (n ? n : 1);
}

size_t fa__tc_share(void)
{
    size_t fair = fair_share();
    return fair < fa__opt.thread_cache_bytes ? fair : fa__opt.thread_cache_bytes;
}

/* What one cache may hold in large blocks: four times its own cap, and
 * what its spans leave of its fair share of the global bound, so that
 * spans and large blocks of all caches together stay within
 * thread_cache_max.  A large block that misses the cache takes the page
 * heap's one lock: under a 2 MiB cap, threads that churn blocks of a few
 * hundred KiB contended on it at every allocation (docs/HISTORY.md).
 * Large blocks make no claim on the global counter: an atomic add on one
 * shared line at every large free and allocation cost more than the page
 * heap saved. */
size_t fa__tc_large_share(const struct fa__tcache *tc)
{
    size_t fair = fair_share(), own = fa__opt.thread_cache_bytes * 4;
    if (own / 4 != fa__opt.thread_cache_bytes)
        own = SIZE_MAX;
    fair = fair > tc->max_bytes ? fair - tc->max_bytes : 0;
    return fair < own ? fair : own;
}

bool fa__tc_claim(struct fa__tcache *tc, size_t bytes)
{
    if (__atomic_add_fetch(&claimed, bytes, __ATOMIC_RELAXED) > fa__opt.thread_cache_max) {
        __atomic_sub_fetch(&claimed, bytes, __ATOMIC_RELAXED);
        return false;
    }
    tc->max_bytes += bytes;
    return true;
}

void fa__tc_unclaim(struct fa__tcache *tc, size_t bytes)
{
    tc->max_bytes -= bytes;
    __atomic_sub_fetch(&claimed, bytes, __ATOMIC_RELAXED);
}

size_t fa__tc_claims(void)
{
    return __atomic_load_n(&claimed, __ATOMIC_RELAXED);
}
