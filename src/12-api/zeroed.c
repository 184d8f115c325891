/* Copies of the fast paths of fastpath.h for the hardened build's options,
 * so that the common paths carry nothing for them: malloc and free with
 * `secure_zero` (the zeroing of freed blocks and its checks at hand-out
 * compiled in), with `secure_tails` (blocks that carry tails), or both;
 * and a free whose tails need a second look (02-records/tail.h). */
#include "12-api/fastpath.h"

/* One function for each set of options, so that each keeps only the
 * registers its own path needs; the dispatch is a tail call. */
static FA_NOINLINE void *malloc_zeroed(size_t size)
{
    return fa__malloc_body(size, true, false);
}

static FA_NOINLINE void *malloc_tails(size_t size)
{
    return fa__malloc_body(size, false, true);
}

static FA_NOINLINE void *malloc_both(size_t size)
{
    return fa__malloc_body(size, true, true);
}

void *fa__api_malloc_rare(size_t size)
{
    if (!FA_FL_ZEROED)
        return malloc_tails(size);
    return FA_TAILS_ON ? malloc_both(size) : malloc_zeroed(size);
}

static FA_NOINLINE void free_zeroed(void *p)
{
    fa__free_body(p, true, false, false, false, 0);
}

static FA_NOINLINE void free_tails(void *p)
{
    fa__free_body(p, false, true, true, false, 0);
}

static FA_NOINLINE void free_both(void *p)
{
    fa__free_body(p, true, true, true, false, 0);
}

void fa__api_free_rare(void *p)
{
    if (!FA_FL_ZEROED)
        free_tails(p);
    else if (FA_TAILS_ON)
        free_both(p);
    else
        free_zeroed(p);
}

void fa__api_free_tails(void *p)
{
#if FA_SECURE
    struct fa__span *s = fa__pm_span((uintptr_t)p);
    if (FA_UNLIKELY(!fa__span_block_start(s, (uintptr_t)p)))
        fa__tc_free_bad(p, s);
    fa__tail_check_free(p, fa__classes[s->cls].size, (uintptr_t)p - s->start, fa__tls_cache);
    if (FA_FL_ZEROED)
        fa__free_body(p, true, true, false, false, 0);
    else
        fa__free_body(p, false, true, false, false, 0);
#else
    (void)p;
#endif
}
