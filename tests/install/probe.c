/* Run through the installed fastalloc-run by tests/test_install.sh: a program
 * that is not linked against fastalloc.  It prints which libfastalloc.so is
 * mapped ("lib: <path>" or "lib: none") and whether the library's fa_owns is
 * there to call; with the argument "malloc" (the library exports the malloc
 * family) it also checks that its malloc is fastalloc's.  Exit status 0 when
 * it ran under fastalloc as expected, 1 when not. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mapped.h"

int main(int argc, char **argv)
{
    int check_malloc = argc == 2 && strcmp(argv[1], "malloc") == 0;
    int mapped = print_mapped_library();
    int (*owns)(const void *) = (int (*)(const void *))dlsym(RTLD_DEFAULT, "fa_owns");
    printf("probe: fa_owns %s\n", owns != NULL ? "found" : "not found");
    if (!mapped || owns == NULL)
        return 1;
    if (check_malloc) {
        void *p = malloc(10);
        int mine = p != NULL && owns(p);
        printf("probe: malloc is %s\n", mine ? "fastalloc" : "not fastalloc");
        free(p);
        return mine ? 0 : 1;
    }
    return 0;
}
