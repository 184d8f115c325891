/* A program built against an installed fastalloc, by tests/test_install.sh:
 * through pkg-config, and through the CMake package (shared and static).  It
 * allocates, checks that fastalloc made the blocks, and prints which
 * libfastalloc.so it runs on, so that the script can check that it is the
 * installed one (or, linked statically, none).
 *
 * usage: consumer malloc|fa_malloc
 *   malloc:    the library exports the malloc family (FA_OVERRIDE=ON), so
 *              plain malloc must return fastalloc's blocks;
 *   fa_malloc: it does not (FA_OVERRIDE=OFF, sanitizer builds), so only the
 *              fa_ names are fastalloc's. */
#include <fastalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mapped.h"

int main(int argc, char **argv)
{
    int plain;
    if (argc == 2 && strcmp(argv[1], "malloc") == 0) {
        plain = 1;
    } else if (argc == 2 && strcmp(argv[1], "fa_malloc") == 0) {
        plain = 0;
    } else {
        fprintf(stderr, "usage: %s malloc|fa_malloc\n", argv[0]);
        return 2;
    }

    /* A small block and a large one: both layers of the allocator. */
    char *small = plain ? malloc(100) : fa_malloc(100);
    char *large = plain ? malloc(1 << 20) : fa_malloc(1 << 20);
    if (small == NULL || large == NULL) {
        fprintf(stderr, "consumer: allocation failed\n");
        return 1;
    }
    memset(small, 1, 100);
    memset(large, 2, 1 << 20);

    fa_stats_t st;
    fa_stats(&st);
    int ok = fa_owns(small) && fa_owns(large) && st.mapped >= (1 << 20);
    printf("consumer: %s: fa_owns %d %d, mapped %zu bytes\n", plain ? "malloc" : "fa_malloc",
           fa_owns(small), fa_owns(large), st.mapped);

    if (plain) {
        free(large);
        free(small);
    } else {
        fa_free(large);
        fa_free(small);
    }
    print_mapped_library();
    if (!ok) {
        printf("consumer: FAIL: the blocks are not fastalloc's\n");
        return 1;
    }
    printf("consumer: ok\n");
    return 0;
}
