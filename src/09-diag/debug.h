/* Debug mode (FASTALLOC_DEBUG=1, chosen at start-up).  Every block carries a
 * header before it and a canary after it, is filled when allocated and when
 * freed, waits in a quarantine after free, and records where it was
 * allocated and freed.  Bad frees and overwrites are reported in one line,
 * with backtraces, then abort (or go on, FASTALLOC_DEBUG_CONTINUE=1); live
 * blocks are reported at exit, grouped by where they were allocated.
 *
 * Outside debug mode none of this runs.  In it (and in the other
 * diagnostic modes: memcheck, hooks, traces), a thread's cache is hidden
 * from the fast paths (08-tcache/life.c), so its every malloc and free leaves
 * them through the one branch that already exists, and the api layer sends
 * it here.  The files behind these entry points, in the order of their
 * calls, are listed in 09-diag/debug_int.h. */
#ifndef FA_DEBUG_DEBUG_H
#define FA_DEBUG_DEBUG_H

#include "00-base/config.h"

/* At start-up, after the options: turn debug mode on when asked, and
 * valgrind's mode when running under it (fa__diag_mode). */
void fa__dbg_init(void) FA_HIDDEN;

/* The entry points of every diagnostic mode: checked blocks in debug mode
 * and under memcheck, plain blocks with hooks alone; the hooks, when set,
 * in every mode.  A block of size bytes aligned to align (0: the default),
 * zeroed when zero is set; NULL with errno = ENOMEM. */
void *fa__dbg_alloc(size_t size, size_t align, bool zero) FA_HIDDEN;
/* free(p), for any p the program passes, NULL included. */
void fa__dbg_free(void *p) FA_HIDDEN;
/* realloc(p, size): the block always moves, so that a stale pointer to the
 * old one meets the quarantine. */
void *fa__dbg_realloc(void *p, size_t size) FA_HIDDEN;
/* The size the program asked for (the canary follows it). */
size_t fa__dbg_usable(void *p) FA_HIDDEN;
/* 1 when p is a live block that debug mode returned. */
int fa__dbg_owns(const void *p) FA_HIDDEN;

/* Set the hooks (NULL: none): 0, or EINVAL.  While they are set, every
 * call comes here (fa__diag_mode), and the entry points above call them. */
struct fa_hooks;
int fa__dbg_set_hooks(const struct fa_hooks *hooks) FA_HIDDEN;

/* For the object pool's debug mode (13-pool/debug.c), which reports in the
 * same form: after the report's first line, the calling stack, then abort
 * unless FASTALLOC_DEBUG_CONTINUE is set.  The thread id the lines give is
 * fa__os_thread_id() (01-os/sys.h). */
void fa__dbg_report_end(void) FA_HIDDEN;

/* fa_profile_dump: the sampled heap profile (FASTALLOC_PROFILE) to path,
 * or, when path is NULL, to the profile's path with ".N" added (N = 1, 2,
 * ... as dumps are made); 0, an errno value from writing the file, or
 * EINVAL when the profile is off (profile.c). */
int fa__prof_dump(const char *path) FA_HIDDEN;

/* The heap profile's part of the slow paths while it is the only mode on
 * (00-base/diag.h): the thread caches stay in view, and the profile counts
 * the blocks each refill hands them (profile.c).
 * malloc's slow path, before the refill: the sampled block, when this
 * call is the sample (a large block of its own, its stack kept); NULL
 * when it is not.  The same for a large block. */
void *fa__prof_take(size_t size) FA_HIDDEN;
void *fa__prof_take_large(size_t size, size_t align, bool zero) FA_HIDDEN;
/* After the refill of class cls: count the blocks now on the calling
 * thread's heads[cls]; where the sampling distance runs out, the list is
 * cut, and the class's next allocation that misses is the sample. */
void fa__prof_meter(unsigned cls) FA_HIDDEN;
/* A free off the fast path (every free of a sampled block is one): the
 * profile forgets p if it is a sample. */
void fa__prof_free(void *p) FA_HIDDEN;
/* Whether p is a sampled block (its realloc goes to fa__dbg_realloc). */
bool fa__prof_is_sample(const void *p) FA_HIDDEN;

/* For fork: the lock of the live list and the quarantine, and the
 * profile's. */
void fa__dbg_lock_for_fork(void) FA_HIDDEN;
void fa__dbg_unlock_for_fork(void) FA_HIDDEN;

#endif
