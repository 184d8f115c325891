/* Copies of the fast paths of fastpath.h for the hardened build's rarer
 * cases, so that the common paths carry nothing for them: malloc and free
 * with the `secure_zero` option (the zeroing of freed blocks and its
 * checks at hand-out compiled in), and a free whose tails need a second
 * look (02-records/tail.h). */
#include "12-api/fastpath.h"

void *fa__api_malloc_zeroed(size_t size)
{
    return fa__malloc_body(size, true);
}

void fa__api_free_zeroed(void *p)
{
    fa__free_body(p, true, true);
}

void fa__api_free_tails(void *p)
{
#if FA_SECURE
    struct fa__span *s = fa__pm_span((uintptr_t)p);
    if (FA_UNLIKELY(!fa__span_block_start(s, (uintptr_t)p)))
        fa__tc_free_bad(p, s);
    fa__tail_check_free(p, fa__classes[s->cls].size, (uintptr_t)p - s->start, fa__tls_cache);
    if (FA_FL_ZEROED)
        fa__free_body(p, true, false);
    else
        fa__free_body(p, false, false);
#else
    (void)p;
#endif
}
