/* Run under LD_PRELOAD=libfastalloc.so (or not), this program says whether
 * its malloc is fastalloc's.  It is not linked against fastalloc: it finds
 * fa_owns at run time.  Usage: preload_probe fastalloc|libc -- the expected
 * answer; the exit status is 0 when the answer matches. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "fastalloc") != 0 && strcmp(argv[1], "libc") != 0)) {
        fprintf(stderr, "usage: %s fastalloc|libc\n", argv[0]);
        return 2;
    }
    int (*owns)(const void *) = (int (*)(const void *))dlsym(RTLD_DEFAULT, "fa_owns");
    void *p = malloc(10);
    char *s = strdup("probe");
    void *q = calloc(1000, 1000); /* a large block */
    const char *answer;
    if (owns == NULL)
        answer = "libc";
    else if (owns(p) && owns(s) && owns(q))
        answer = "fastalloc";
    else
        answer = "mixed";
    printf("malloc is %s\n", answer);
    free(q);
    free(s);
    free(p);
    return strcmp(answer, argv[1]) == 0 ? 0 : 1;
}
