/* What the thread cache's files share, file by file, from the bottom.  A
 * file calls only the files above it in this list, never one below:
 *  - claim.c: the global bound on what all caches keep, and each cache's
 *    share of it;
 *  - own.c: the spans a thread owns: taking and giving them up, keeping
 *    the all-free ones within the claim, the current span of each class;
 *  - remote.c: the outbox, where frees of other threads' blocks wait to go
 *    out in batches;
 *  - seen.c: whether a block that carries the free mark is really free (a
 *    double free), looked for on the lists the thread may read;
 *  - life.c: a cache's life: created on a thread's first allocation,
 *    hidden while a diagnostic mode is on, left dormant or given up at the
 *    thread's exit, recycled; the registry of live caches and the counts;
 *  - slow.c: the slow paths of malloc and free, and scavenging. */
#ifndef FA_TCACHE_INTERNAL_H
#define FA_TCACHE_INTERNAL_H

#include "08-tcache/tcache.h"

/* ---- claim.c ---- */

/* Claims on the global bound move in steps of this many bytes, so that a
 * span that empties and fills again (a loop that frees its last block and
 * allocates again) does not touch the shared counter each time. */
#define FA_TC_CLAIM_STEP ((size_t)64 << 10)

/* A cache was created (+1) or its thread exited (-1). */
void fa__tc_live_add(int delta) FA_HIDDEN;
/* What one cache may keep in spans: its own cap, and its share of the
 * global bound among the threads alive now. */
size_t fa__tc_share(void) FA_HIDDEN;
/* What one cache may keep in large blocks. */
size_t fa__tc_large_share(const struct fa__tcache *tc) FA_HIDDEN;
/* Claim bytes on the global bound; false if that would pass it. */
bool fa__tc_claim(struct fa__tcache *tc, size_t bytes) FA_HIDDEN;
void fa__tc_unclaim(struct fa__tcache *tc, size_t bytes) FA_HIDDEN;
/* The sum of the live caches' claims. */
size_t fa__tc_claims(void) FA_HIDDEN;

/* ---- own.c ---- */

/* Blocks gathered at most from short freelists (slow.c); seen.c bounds
 * heads[] with it. */
#define FA_TC_GATHER 32u
/* A walk over at least FA_TC_SLACK_WALK spans that gathers fewer than
 * FA_TC_SLACK_BELOW blocks takes a new span too (slow.c). */
#define FA_TC_SLACK_BELOW 8u
#define FA_TC_SLACK_WALK 8u

/* tc took a detached span of cls at a free; every so many such spans, it
 * collects the remote frees of all its spans of cls but the current one,
 * and keeps or retires those then all free (own.c). */
void fa__tc_took(struct fa__tcache *tc, unsigned cls) FA_HIDDEN;

/* Whether tc marks its spans of cls FA_SPAN_SHARED (own.c): it does while
 * the spans of the class it detached went to other threads.  Counted by
 * fa__tc_count_detach: tc detached a span of cls, or took back one it had
 * detached (retaken). */
bool fa__tc_shares(struct fa__tcache *tc, unsigned cls) FA_HIDDEN;
void fa__tc_count_detach(struct fa__tcache *tc, unsigned cls, bool retaken) FA_HIDDEN;
/* A list that threads allocating the class pushed came back to s, which
 * tc owns: s is shared if tc shares the class. */
void fa__tc_peer_freed(struct fa__tcache *tc, struct fa__span *s) FA_HIDDEN;
/* fa__span_collect on s, which tc owns, and fa__tc_peer_freed if such a
 * list came back. */
unsigned fa__tc_collect(struct fa__tcache *tc, struct fa__span *s) FA_HIDDEN;

/* Make s, which nobody owns and nobody else can take now, tc's. */
void fa__tc_own(struct fa__tcache *tc, struct fa__span *s) FA_HIDDEN;
/* Every block of s, which tc owns, is free: keep it if the cache's share
 * allows, else it goes to the page heap. */
void fa__tc_keep(struct fa__tcache *tc, struct fa__span *s) FA_HIDDEN;
/* s is no longer counted as kept (an allocation takes from it). */
void fa__tc_unkeep(struct fa__tcache *tc, struct fa__span *s) FA_HIDDEN;
/* s, owned by tc and all free, goes to the page heap. */
void fa__tc_retire(struct fa__tcache *tc, struct fa__span *s) FA_HIDDEN;
/* Give up an owned span that may still have blocks in use. */
void fa__tc_disown(struct fa__tcache *tc, struct fa__span *s) FA_HIDDEN;
/* Retire kept spans until the cache keeps at most limit bytes. */
void fa__tc_shed_kept(struct fa__tcache *tc, size_t limit) FA_HIDDEN;
/* A spare span of tc's made a span of cls that tc owns, all free, nothing
 * cut; NULL when there is none. */
struct fa__span *fa__tc_spare_take(struct fa__tcache *tc, unsigned cls) FA_HIDDEN;
/* Retire the spare spans no allocation took since the scavenge before old. */
void fa__tc_spare_age(struct fa__tcache *tc, unsigned old) FA_HIDDEN;
/* s, which nothing free is left in, is detached (true), unless a remote
 * free came meanwhile (false: tc keeps it). */
bool fa__tc_detach(struct fa__tcache *tc, struct fa__span *s) FA_HIDDEN;
/* Make s the current span of cls, or stop it being current (heads[cls]
 * empty). */
void fa__tc_set_cur(struct fa__tcache *tc, unsigned cls, struct fa__span *s) FA_HIDDEN;
void fa__tc_clear_cur(struct fa__tcache *tc, unsigned cls) FA_HIDDEN;
/* The blocks still on heads[cls] go back to their spans' freelists. */
void fa__tc_return_heads(struct fa__tcache *tc, unsigned cls) FA_HIDDEN;
/* Fill heads[cls] from s, which tc owns, and return its first block; NULL
 * when s has nothing free. */
void *fa__tc_take_free(struct fa__tcache *tc, struct fa__span *s, unsigned cls) FA_HIDDEN;
/* s's freelist, len blocks, is taken or given up: count the owner's own
 * frees on it. */
void fa__tc_fold(struct fa__tcache *tc, struct fa__span *s, uint32_t len) FA_HIDDEN;
/* Count the thread's frees still on its spans' lists, and leave the lists
 * in place (counted from now on). */
void fa__tc_fold_all(struct fa__tcache *tc) FA_HIDDEN;

/* ---- remote.c ---- */

/* The list head..tail of n blocks of s, which the calling thread does not
 * own, goes on s's xfree (or, s listed, on its freelist under the class
 * lock); when s is detached, s becomes tc's if tc allocates the class
 * (has a current span of it), else the central cache lists it.  An
 * exiting thread passes NULL. */
void fa__tc_push_remote(struct fa__tcache *tc, struct fa__span *s, void *head, void *tail,
                        uint32_t n) FA_HIDDEN;
/* p, a block of s (of class cls, from the page map: s's first line is
 * its owner's, written at every free there) that another thread owns or
 * nobody does, goes out through tc's outbox. */
void fa__tc_out_put(struct fa__tcache *tc, struct fa__span *s, unsigned cls, void *p) FA_HIDDEN;
/* Send every batch. */
void fa__tc_out_flush_all(struct fa__tcache *tc) FA_HIDDEN;

/* ---- seen.c ---- */

/* Whether p, a block of s that carries s's free mark, is free: found on a
 * list the calling thread may read (tc, its real cache, or NULL). */
bool fa__tc_seen_free(struct fa__tcache *tc, struct fa__span *s, const void *p) FA_HIDDEN;
_Noreturn FA_COLD void fa__tc_double_free(const void *p, const struct fa__span *s) FA_HIDDEN;

/* ---- life.c ---- */

/* The calling thread's real cache, hidden by a diagnostic mode or not;
 * NULL when it has none.  fa__tc_mine creates it on first use (NULL when
 * the thread is exiting or there is no memory for it). */
struct fa__tcache *fa__tc_current(void) FA_HIDDEN;
struct fa__tcache *fa__tc_mine(void) FA_HIDDEN;
/* The calling thread's cache while a diagnostic mode hides it; else NULL. */
extern __thread struct fa__tcache *fa__tc_hidden __attribute__((tls_model("initial-exec"))) FA_HIDDEN;
/* Give up the spans of the dormant caches: all, or those that went dormant
 * before the current scavenge epoch. */
void fa__tc_flush_dormant(bool old_only) FA_HIDDEN;
/* Counts of threads that exited, and of allocations and frees made with
 * no cache: added to with atomics. */
extern struct fa__tc_counts fa__tc_retired FA_HIDDEN;

FA_INLINE void fa__tc_count_global(uint64_t *c, uint64_t n)
{
    __atomic_fetch_add(c, n, __ATOMIC_RELAXED);
}

#endif
