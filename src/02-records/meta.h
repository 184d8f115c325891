/* Internal metadata allocator: spans and thread caches come from here, never
 * from malloc, so the allocator cannot recurse into itself. */
#ifndef FA_RECORDS_META_H
#define FA_RECORDS_META_H

#include "00-base/lock.h"

/* Zeroed, cache-line aligned memory that is never returned.  Callers keep
 * their own free lists of the objects they stop using. */
void *fa__meta_alloc(size_t size) FA_HIDDEN;

/* Bytes of metadata mapped so far. */
size_t fa__meta_bytes(void) FA_HIDDEN;
/* Bytes of it handed out: written, so resident (the rest of a chunk is
 * not touched until handed out). */
size_t fa__meta_used(void) FA_HIDDEN;

extern fa__lock_t fa__meta_lock FA_HIDDEN;

#endif
