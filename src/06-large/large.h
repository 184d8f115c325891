/* Large blocks: requests above FA_MAX_SMALL are spans of their own, taken
 * from the page heap whole.  A large block starts at its span's first page,
 * which is how a free recognises one.
 *
 * A thread keeps the large blocks it freed lately (struct fa__large_cache,
 * one in each thread cache) for its next large allocations: the block comes
 * back warm in its core's cache, with no page-heap lock.  Everything about
 * large blocks is here; the thread cache passes its keeper, and its share,
 * to the two entries, fa__large_alloc and fa__large_free. */
#ifndef FA_LARGE_LARGE_H
#define FA_LARGE_LARGE_H

#include "00-base/config.h"

struct fa__span;

/* A keeper holds at most this many blocks, of at most FA_LARGE_KEEP_MAX
 * bytes each. */
#define FA_LARGE_KEEP_SLOTS 8
#define FA_LARGE_KEEP_MAX ((size_t)1 << 20)

struct fa__large_cache {
    struct fa__span *slot[FA_LARGE_KEEP_SLOTS]; /* oldest first */
    unsigned n;
    size_t bytes; /* in the slots, whole pages; read by other threads */
    bool used;    /* taken from since the last fa__large_cache_trim */
};

/* A block of at least size bytes aligned to align (0 or a power of two),
 * zeroed when zero is set: one the keeper lc holds (when lc is not NULL),
 * else one from the page heap.  NULL with errno = ENOMEM. */
void *fa__large_alloc(struct fa__large_cache *lc, size_t size, size_t align, bool zero) FA_HIDDEN;

/* The span of the large block at p; stops the program, naming the caller
 * `who`, when p is not the start of one. */
struct fa__span *fa__large_span_of(void *p, const char *who) FA_HIDDEN;

/* Whether a keeper would hold the block s at all (it is small enough). */
bool fa__large_keepable(const struct fa__span *s) FA_HIDDEN;

/* Free the large block s (from fa__large_span_of): lc, when not NULL,
 * keeps it if its blocks stay within cap bytes (older blocks make room
 * first), else the page heap has it back. */
void fa__large_free(struct fa__large_cache *lc, struct fa__span *s, size_t cap) FA_HIDDEN;

/* Free the large block s, whose contents realloc just moved: no keeper
 * holds it, and, for a block of more than 256 KiB, its pages go back to
 * the OS at once (a shorter one goes to the page heap dirty, large.c,
 * MOVED_KEEP_MAX).  A program whose
 * blocks grow by realloc (a vector, a string builder) would otherwise hold
 * each old block's pages, dirty, in a keeper or the page heap, where the
 * next, larger block rarely fits: the old blocks of a growing heap were a
 * third of a realloc benchmark's peak RSS (#24). */
void fa__large_free_moved(struct fa__span *s) FA_HIDDEN;

/* Give the keeper's blocks back to the page heap: all of them when idle is
 * set and none was taken since the last trim, then the oldest while it
 * holds more than cap bytes. */
void fa__large_cache_trim(struct fa__large_cache *lc, size_t cap, bool idle) FA_HIDDEN;

/* The hardened build's shared keeper of guarded blocks (large.c): give
 * the page heap those held since the last call, or all of them; nothing in
 * the default build.  The decay tick and a forced purge call it. */
void fa__large_shared_trim(bool all) FA_HIDDEN;
/* For fork: take and drop the shared keeper's lock. */
void fa__large_lock_for_fork(void) FA_HIDDEN;
void fa__large_unlock_for_fork(void) FA_HIDDEN;

/* The usable size of the large block at p, or 0 (with one line) when p is
 * not one. */
size_t fa__large_usable(void *p) FA_HIDDEN;

/* Make the large block s hold size bytes (above FA_MAX_SMALL) without
 * moving it: a shrink by less than a quarter keeps its pages, a larger one
 * gives the tail back, a growth takes free pages that follow (in the
 * hardened build, the guard page moves to the new end).  Returns false
 * when it would have to move. */
bool fa__large_resize(struct fa__span *s, size_t size) FA_HIDDEN;

/* Bytes the block of span s can hold. */
size_t fa__large_size(const struct fa__span *s) FA_HIDDEN;
/* Bytes of it the program may use: fa__large_size, or in the hardened
 * build the bytes asked for, which a canary follows. */
size_t fa__large_held(const struct fa__span *s) FA_HIDDEN;

#endif
