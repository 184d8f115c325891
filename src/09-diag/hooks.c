/* The hooks (fa_set_hooks): the program's functions called on every
 * allocation and free, or on a sample of them, in every diagnostic mode.
 * Calls backtrace.c for the call's site (debug_int.h gives the order). */
#include "09-diag/debug_int.h"
#include "fastalloc.h"
#include "00-base/diag.h"
#include "01-os/sys.h"
#include "00-base/lock.h"
#include "01-os/os.h"

#include <errno.h>

/* The hooks in force: one of two copies, so that a thread calling through
 * the old one is not torn by a change (changes are rare: a profiler sets
 * its hooks once). */
static fa_hooks hook_copy[2];
static const fa_hooks *hooks_now;
static fa__lock_t hooks_lock = FA_LOCK_INIT;

/* Set while this thread runs a hook: its own calls are not hooked. */
static __thread int in_hook __attribute__((tls_model("initial-exec")));
/* Sampling: bytes until this thread's next sample, and its random state. */
static __thread long long sample_left __attribute__((tls_model("initial-exec")));
static __thread uint64_t sample_rng __attribute__((tls_model("initial-exec")));

/* Sampled blocks, whose frees on_free sees: an open-addressing set of
 * addresses (0 empty, 1 deleted) in memory from the OS, under a lock. */
static fa__lock_t sampled_lock = FA_LOCK_INIT;
static uintptr_t *sampled;
static size_t sampled_cap, sampled_used; /* used counts deleted slots too */

static size_t slot_of(uintptr_t p, size_t cap)
{
    return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ULL >> 7) & (cap - 1);
}

/* Caller holds sampled_lock. */
static void sampled_put(uintptr_t p)
{
    if (2 * (sampled_used + 1) > sampled_cap) {
        size_t cap = sampled_cap ? 2 * sampled_cap : 4096;
        uintptr_t *t = fa__os_map(cap * sizeof *t, 0);
        if (t == NULL)
            return; /* this block's free goes unseen */
        size_t used = 0;
        for (size_t i = 0; i < sampled_cap; i++) {
            if (sampled[i] > 1) {
                size_t k = slot_of(sampled[i], cap);
                while (t[k] != 0)
                    k = (k + 1) & (cap - 1);
                t[k] = sampled[i];
                used++;
            }
        }
        if (sampled != NULL)
            fa__os_unmap(sampled, sampled_cap * sizeof *sampled);
        sampled = t;
        sampled_cap = cap;
        sampled_used = used;
    }
    size_t k = slot_of(p, sampled_cap);
    while (sampled[k] > 1)
        k = (k + 1) & (sampled_cap - 1);
    if (sampled[k] == 0)
        sampled_used++;
    sampled[k] = p;
}

static bool sampled_take(uintptr_t p)
{
    bool found = false;
    fa__lock(&sampled_lock);
    if (sampled_cap != 0) {
        for (size_t k = slot_of(p, sampled_cap); sampled[k] != 0; k = (k + 1) & (sampled_cap - 1)) {
            if (sampled[k] == p) {
                sampled[k] = 1;
                found = true;
                break;
            }
        }
    }
    fa__unlock(&sampled_lock);
    return found;
}

/* The next sample point: uniform in [1, 2 * mean], so one block per mean
 * bytes on average, with no period for a program's pattern to beat with. */
static long long next_sample(size_t mean)
{
    if (sample_rng == 0)
        sample_rng = ((uint64_t)(uintptr_t)&sample_rng ^ (uint64_t)fa__os_thread_id()) | 1;
    sample_rng ^= sample_rng << 13;
    sample_rng ^= sample_rng >> 7;
    sample_rng ^= sample_rng << 17;
    return 1 + (long long)(sample_rng % (2 * (uint64_t)mean));
}

int fa__dbg_set_hooks(const fa_hooks *h)
{
    if (h != NULL && h->on_alloc == NULL && h->on_free == NULL)
        return EINVAL;
    fa__lock(&hooks_lock);
    if (h != NULL) {
        fa_hooks *next = hooks_now == &hook_copy[0] ? &hook_copy[1] : &hook_copy[0];
        *next = *h;
        __atomic_store_n(&hooks_now, next, __ATOMIC_RELEASE);
        __atomic_fetch_or(&fa__diag_mode, FA_DIAG_HOOKS, __ATOMIC_RELEASE);
    } else {
        __atomic_fetch_and(&fa__diag_mode, ~FA_DIAG_HOOKS, __ATOMIC_RELEASE);
        __atomic_store_n(&hooks_now, NULL, __ATOMIC_RELEASE);
    }
    fa__unlock(&hooks_lock);
    return 0;
}

/* The first frame outside the allocator: the call's site. */
static void *call_site(void)
{
    void *at[FA_DBG_FRAMES];
    return fa__dbg_capture(at) > 0 ? at[0] : NULL;
}

void fa__dbg_hook_alloc(void *p, size_t size)
{
    const fa_hooks *h = __atomic_load_n(&hooks_now, __ATOMIC_ACQUIRE);
    if (h == NULL || h->on_alloc == NULL || in_hook || p == NULL)
        return;
    if (h->sample_bytes != 0) {
        if (sample_left == 0)
            sample_left = next_sample(h->sample_bytes);
        if ((sample_left -= (long long)size) > 0)
            return;
        sample_left = next_sample(h->sample_bytes);
        fa__lock(&sampled_lock);
        sampled_put((uintptr_t)p);
        fa__unlock(&sampled_lock);
    }
    in_hook = 1;
    h->on_alloc(p, size, call_site());
    in_hook = 0;
}

void fa__dbg_hook_free(void *p, size_t size)
{
    const fa_hooks *h = __atomic_load_n(&hooks_now, __ATOMIC_ACQUIRE);
    if (h == NULL || h->on_free == NULL || in_hook || p == NULL)
        return;
    if (h->sample_bytes != 0 && !sampled_take((uintptr_t)p))
        return;
    in_hook = 1;
    h->on_free(p, size);
    in_hook = 0;
}
