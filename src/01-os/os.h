/* The OS layer: the only place that maps and returns memory. */
#ifndef FA_OS_H
#define FA_OS_H

#include "00-base/config.h"

/* Map size bytes of zeroed read-write memory aligned to align (a power of two
 * or 0 for the OS page).  NULL when the OS refuses. */
void *fa__os_map(size_t size, size_t align) FA_HIDDEN;
void fa__os_unmap(void *p, size_t size) FA_HIDDEN;
/* Reserve size bytes of address space: no access, no pages, no commit
 * charge.  With at set, only that address will do (NULL when it is taken);
 * otherwise the range is aligned to align. */
void *fa__os_reserve(void *at, size_t size, size_t align) FA_HIDDEN;
/* Make part of a reserved range read-write (zeroed pages on first touch).
 * False when the OS refuses (the commit limit). */
bool fa__os_commit(void *p, size_t size) FA_HIDDEN;
/* Make [p, p + size) a guard: any access faults (the hardened build's
 * guard pages); fa__os_unguard undoes it, and the pages read as zero. */
bool fa__os_guard(void *p, size_t size) FA_HIDDEN;
bool fa__os_unguard(void *p, size_t size) FA_HIDDEN;
/* Give the physical pages back; the range stays mapped.  With lazy set
 * (MADV_FREE) the kernel takes them only under memory pressure and they do
 * not read as zero; otherwise (MADV_DONTNEED) they go now and read as zero. */
void fa__os_release(void *p, size_t size, bool lazy) FA_HIDDEN;
/* Fault the pages of [p, p + size) in now, writable, with one call: what
 * first touches would do page by page, for far less than their cost (one
 * kernel entry instead of a fault a page: docs/HISTORY.md, #25).  For memory that is
 * about to be written whole; nothing happens where the kernel cannot. */
void fa__os_populate(void *p, size_t size) FA_HIDDEN;
/* Ask for transparent huge pages on an aligned range. */
void fa__os_hugepage(void *p, size_t size) FA_HIDDEN;

/* Number of mmap calls made, for tests of mapping churn. */
/* Bytes of [p, p + size) resident now (mincore), p page-aligned; 0 if the
 * kernel will not say. */
size_t fa__os_resident(const void *p, size_t size) FA_HIDDEN;
extern size_t fa__os_map_calls FA_HIDDEN;

#endif
