/* fastalloc's own calls beyond the standard family: trim, the limit,
 * options, ownership and statistics. */
#include "fastalloc.h"
#include "12-api/override.h"
#include "00-base/diag.h"
#include "00-base/options.h"
#include "05-central/central.h"
#include "04-pageheap/pageheap.h"
#include "06-large/empty.h"
#include "06-large/large.h"
#include "02-records/pagemap.h"
#include "02-records/sizeclass.h"
#include "08-tcache/tcache.h"
#include "09-diag/debug.h"
#include "11-init/init.h"
#include "07-decay/decay.h"
#include "10-stats/stats.h"

#include <errno.h>

size_t fa_trim(void)
{
    fa__ensure_init();
    fa__tc_flush_mine();
    fa__central_drain();
    fa__large_shared_trim(true);
    return fa__ph_purge(true);
}

void fa_set_limit(size_t bytes)
{
    fa__ensure_init();
    __atomic_store_n(&fa__opt.limit, bytes, __ATOMIC_RELAXED);
}

int fa_option_set(const char *name, long long value)
{
    fa__ensure_init();
    int err = fa__option_set(name, value);
    if (err == 0) /* a thread whose cache is over a smaller bound sheds it soon */
        fa__decay_scavenge_soon();
    return err;
}

int fa_option_get(const char *name, long long *value)
{
    fa__ensure_init();
    return fa__option_get(name, value);
}

void fa_stats_get(fa_stats_t *out)
{
    fa__ensure_init();
    fa__stats_collect(out);
}

void fa_stats(fa_stats_t *out)
{
    fa_stats_get(out);
}

int fa_stats_print(FILE *out, int flags)
{
    if (out == NULL) {
        errno = EINVAL;
        return -1;
    }
    fa_stats_t s; /* 5 KiB, with the class table */
    fa__ensure_init();
    fa__stats_collect(&s);
    return fa__stats_print(out, flags, &s);
}

int fa_set_hooks(const fa_hooks *hooks)
{
    fa__ensure_init();
    int err = fa__dbg_set_hooks(hooks);
    /* The caller's own calls are hooked from here on. */
    if (err == 0 && hooks != NULL)
        fa__tc_leave();
    return err;
}

int fa_profile_dump(const char *path)
{
    fa__ensure_init();
    return fa__prof_dump(path);
}

int fa_owns(const void *p)
{
    if (p == NULL || !__atomic_load_n(&fa__initialized, __ATOMIC_ACQUIRE))
        return 0;
    /* Checked and traced blocks start after a header of their own. */
    if (fa__diag_on() & (FA_DIAG_DEBUG | FA_DIAG_VALGRIND | FA_DIAG_TRACE))
        return fa__dbg_owns(p);
    uintptr_t a = (uintptr_t)p;
    if (fa__empty_has(p))
        return 1;
    struct fa__span *s = fa__pm_span_holding(a);
    if (s == NULL || s->npages == 0 || a < s->start || a >= s->start + s->npages * FA_PAGE_SIZE)
        return 0;
    if (s->state == FA_SPAN_LARGE)
        return a == s->start;
    if (s->state == FA_SPAN_SMALL) {
        unsigned cls = fa__pm_class(a);
        if (cls == 0 || cls != s->cls)
            return 0;
        size_t off = a - s->start;
        return off % fa__classes[cls].size == 0 && off < (size_t)fa__classes[cls].objs * fa__classes[cls].size;
    }
    return 0;
}

#ifdef FA_OVERRIDE
/* glibc's name: returns 1 when memory was given back. */
__attribute__((visibility("default"))) int malloc_trim(size_t pad)
{
    (void)pad;
    return fa_trim() > 0;
}
#endif
