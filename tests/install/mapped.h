/* Which libfastalloc.so this process runs on: the consumer and the probe of
 * test_install.sh print it, and the script compares it with the install. */
#ifndef FA_INSTALL_MAPPED_H
#define FA_INSTALL_MAPPED_H

#include <stdio.h>
#include <string.h>

/* Prints "lib: <path>" for the libfastalloc.so mapped in this process and
 * returns 1, or prints "lib: none" and returns 0. */
static int print_mapped_library(void)
{
    char line[4096];
    FILE *maps = fopen("/proc/self/maps", "r");
    if (maps != NULL) {
        while (fgets(line, sizeof line, maps) != NULL) {
            char *path = strchr(line, '/');
            if (path != NULL && strstr(path, "/libfastalloc.so") != NULL) {
                fclose(maps);
                printf("lib: %s", path); /* the line ends in '\n' */
                return 1;
            }
        }
        fclose(maps);
    }
    printf("lib: none\n");
    return 0;
}

#endif
