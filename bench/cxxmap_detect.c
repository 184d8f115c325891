/* cxxmap's C half: which allocator serves malloc, by bench_common.h's rule
 * (a C header, which C++ cannot include). */
#include "bench_common.h"

const char *cxxmap_allocator(void);

const char *cxxmap_allocator(void)
{
    return bench_detect_allocator();
}
