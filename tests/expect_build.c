/* Linked into each suite that runs against both libraries (tests/
 * CMakeLists.txt, fa_test's SECURE): before main, the test checks that the
 * library serving it is the one it was built for, so that a hardened run
 * that silently got the default library (or the reverse) fails instead of
 * passing for the wrong build.  FA_TEST_EXPECT_SECURE says which. */
#include "which_build.h"

#include <stdlib.h>

__attribute__((constructor)) static void expect_build(void)
{
    struct which_build w;
    which_build_read(&w);
    int want = FA_TEST_EXPECT_SECURE ? 1 : 0;
    if (w.tailed != want) {
        fprintf(stderr, "expect_build: this test was built for the %s library, but a 100-byte block's usable "
                "size says the %s one serves it (fa_malloc from %s)\n",
                want ? "hardened" : "default", w.tailed == 1 ? "hardened" : w.tailed == 0 ? "default" : "(no memory)",
                w.object);
        _exit(1);
    }
}
