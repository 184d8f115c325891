/* Calls malloc+free of one size N times.  Run under callgrind at two values
 * of N: the difference in instructions divided by the difference in N is the
 * exact cost of one pair, with start-up and the loop's own setup cancelled. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    size_t size = argc > 2 ? (size_t)atol(argv[2]) : 64;
    int window = argc > 3 ? atoi(argv[3]) : 0;
    void *ring[256] = {0};
    if (window > 256)
        window = 256;
    /* volatile so the compiler cannot pair malloc with free and drop both */
    void *volatile sink;
    for (long i = 0; i < n; i++) {
        if (window > 0) {
            long k = i % window;
            free(ring[k]);
            ring[k] = malloc(size);
            sink = ring[k];
        } else {
            void *p = malloc(size);
            sink = p;
            free(sink);
        }
    }
    (void)sink;
    return 0;
}
