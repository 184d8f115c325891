/* Run under LD_PRELOAD=libfastalloc.so (or not), this program says whether
 * its malloc is fastalloc's.  It is not linked against fastalloc: it finds
 * fa_owns at run time.  Usage: preload_probe fastalloc|libc -- the expected
 * answer; the exit status is 0 when the answer matches.  Under fastalloc it
 * also checks what the library's initialised data holds resident: every
 * process pays it (#24: 32 KiB while the stand-in thread caches were
 * initialised data, not zeroed). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The library's initialised data (.data and what follows it in the same
 * file-backed mapping), resident: one 4 KiB page since #24, 32 KiB before.
 * A sanitizer build's library carries the sanitizer's own written data
 * (UBSan's type descriptors and source locations): no bound there. */
#if FA_TEST_SANITIZED
#define DATA_KIB_MAX 0x7fffffff
#else
#define DATA_KIB_MAX 8
#endif

/* Rss of libfastalloc's writable file-backed mappings, in KiB; -1 when the
 * library is not mapped. */
static long data_rss_kib(void)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (f == NULL)
        return -1;
    char line[512];
    bool ours = false, seen = false;
    long total = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3) {
            ours = strstr(line, "libfastalloc") != NULL && perms[1] == 'w';
            seen = seen || ours;
        } else if (ours && strncmp(line, "Rss:", 4) == 0) {
            total += strtol(line + 4, NULL, 10);
        }
    }
    fclose(f);
    return seen ? total : -1;
}

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
    if (strcmp(answer, "fastalloc") == 0) {
        long kib = data_rss_kib();
        printf("libfastalloc's written data: %ld KiB resident (at most %d)\n", kib, DATA_KIB_MAX);
        if (kib < 0 || kib > DATA_KIB_MAX)
            answer = "fastalloc, with too much data";
    }
    free(q);
    free(s);
    free(p);
    return strcmp(answer, argv[1]) == 0 ? 0 : 1;
}
