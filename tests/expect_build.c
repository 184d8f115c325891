/* Linked into each suite that runs against both libraries (tests/
 * CMakeLists.txt, fa_test's SECURE): before main, the test checks that the
 * library serving it is the one it was built for, so that a hardened run
 * that silently got the default library (or the reverse) fails instead of
 * passing for the wrong build.  FA_TEST_EXPECT_SECURE says which.
 *
 * The sign is which_build.h's: a freed block's link, encoded only in the
 * hardened build (under a trace, the link of the block that holds the
 * block and its trace header: which_build_link_of).  Debug mode keeps
 * freed blocks its own way in both builds, so a process in debug mode (the
 * children test_debug starts) is not checked:
 * the test's own process, which starts them, was.  Nor is one under
 * valgrind (FA_TEST_UNDER_VALGRIND, which test_pool_memcheck sets), where
 * the library takes debug mode's paths.  A block the heap
 * profile samples is a large block whatever the build: the majority of
 * several tries decides. */
#include "which_build.h"

#include <stdlib.h>

__attribute__((constructor)) static void expect_build(void)
{
    const char *debug = getenv("FASTALLOC_DEBUG");
    if ((debug != NULL && debug[0] != '\0' && strcmp(debug, "0") != 0) || getenv("FA_TEST_UNDER_VALGRIND") != NULL)
        return;
    int want = FA_TEST_EXPECT_SECURE ? 1 : 0, votes = 0, n = 9;
    struct which_build w;
    for (int i = 0; i < n; i++) {
        which_build_read(&w);
        votes += w.tailed == 1;
    }
    int tailed = votes * 2 > n;
    if (tailed != want) {
        fprintf(stderr, "expect_build: this test was built for the %s library, but a freed block's link "
                "says the %s one serves it (%d of %d links encoded; fa_malloc from %s)\n",
                want ? "hardened" : "default", tailed ? "hardened" : "default", votes, n, w.object);
        _exit(1);
    }
}
