/* Statistics: every layer's counters gathered into the public record.
 * Reads only: each layer keeps its own counters where it works. */
#ifndef FA_STATS_STATS_H
#define FA_STATS_STATS_H

#include "fastalloc.h"
#include "00-base/config.h"

void fa__stats_collect(fa_stats_t *out) FA_HIDDEN;
/* With FASTALLOC_STATS set, and the heap's resident bytes past the last
 * sample's by a margin: sample where the memory is (printed at exit as
 * "at peak").  Called from the allocation slow paths that grow the heap. */
void fa__stats_peak_sample(void) FA_HIDDEN;
/* The object pool layer, which sits above this one, gives the function
 * that fills the pools' statistics (at most max of them; returns how many
 * pools there are) when it creates its first pool. */
typedef unsigned (*fa__pool_stats_fn)(fa_pool_stats_t *out, unsigned max);
void fa__stats_set_pool_source(fa__pool_stats_fn fn) FA_HIDDEN;

/* Print s to out, as a table or JSON (FA_STATS_JSON): 0, or -1 with errno. */
int fa__stats_print(FILE *out, int flags, const fa_stats_t *s) FA_HIDDEN;

#endif
