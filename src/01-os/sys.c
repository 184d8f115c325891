#include "01-os/sys.h"
#include "01-os/clock.h"

#include <pthread.h>
#include <sys/auxv.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

void fa__os_random(void *buf, size_t n)
{
    unsigned char *out = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(out + got, n - got, GRND_NONBLOCK);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (got == n)
        return;
    /* No entropy pool yet: AT_RANDOM's 16 bytes, stretched with the clock
     * and an address (ASLR) through a 64-bit mixer.  Weaker, but never a
     * constant key. */
    const unsigned char *r = (const unsigned char *)getauxval(AT_RANDOM);
    uint64_t x = fa__os_now_ns() ^ (uint64_t)(uintptr_t)&x;
    for (size_t i = 0; i < n; i++) {
        if (r != NULL)
            x ^= (uint64_t)r[i % 16] << (8 * (i % 8));
        x += 0x9e3779b97f4a7c15u;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
        out[i] = (unsigned char)(z ^ (z >> 31));
    }
}

size_t fa__os_page_size(void)
{
    static size_t page;
    size_t p = __atomic_load_n(&page, __ATOMIC_RELAXED);
    if (p == 0) {
        long s = sysconf(_SC_PAGESIZE);
        p = s > 0 ? (size_t)s : 4096;
        __atomic_store_n(&page, p, __ATOMIC_RELAXED);
    }
    return p;
}

unsigned fa__os_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

static __thread int my_tid __attribute__((tls_model("initial-exec")));

int fa__os_thread_id(void)
{
    if (my_tid == 0)
        my_tid = (int)syscall(SYS_gettid);
    return my_tid;
}

void fa__os_fork_child(void)
{
    my_tid = 0;
}

int fa__os_pid(void)
{
    return (int)getpid();
}

bool fa__os_thread_start(void *(*fn)(void *), size_t stack_bytes)
{
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, stack_bytes);
    bool ok = pthread_create(&t, &attr, fn, NULL) == 0;
    pthread_attr_destroy(&attr);
    return ok;
}

void fa__os_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
    pthread_atfork(prepare, parent, child);
}
