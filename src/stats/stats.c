#include "stats/stats.h"
#include "base/options.h"
#include "core/central.h"
#include "core/meta.h"
#include "core/pageheap.h"
#include "core/tcache.h"

#include <string.h>

void fa__stats_collect(fa_stats_t *out)
{
    memset(out, 0, sizeof *out);
    struct fa__ph_stats st;
    fa__ph_get_stats(&st);
    out->mapped = st.mapped_bytes;
    out->in_spans = st.small_bytes;
    out->large = st.large_bytes;
    out->free = st.free_bytes;
    out->dirty = st.dirty_bytes;
    out->purged_total = st.purged_bytes;
    out->purges = st.purges;
    out->thread_caches = fa__tc_cached_bytes();
    out->thread_caches_claimed = fa__tc_claimed_bytes();
    out->thread_caches_bound = fa__opt.thread_cache_max;
    out->threads = fa__tc_live_threads();
    out->central = fa__central_free_bytes();
    out->metadata = fa__meta_bytes();
    out->limit = fa__opt.limit;
    out->purge_delay_ms = fa__opt.purge_delay_ms;
}
