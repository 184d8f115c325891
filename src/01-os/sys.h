/* The platform's other services: randomness, the page size, the number of
 * CPUs, process and thread ids, a thread of the allocator's own, and fork
 * handlers.  Every call the library makes to the OS for these comes
 * through here, so that a port changes this folder alone. */
#ifndef FA_OS_SYS_H
#define FA_OS_SYS_H

#include "00-base/config.h"

/* Fill buf with n random bytes: the kernel's pool when it is ready, and
 * before that (early boot) the 16 bytes the kernel gives every process,
 * mixed with the clock.  Never blocks, never fails: the hardened build
 * keys its links with these even at boot. */
void fa__os_random(void *buf, size_t n) FA_HIDDEN;

/* The OS page size (read once). */
size_t fa__os_page_size(void) FA_HIDDEN;

/* CPUs online now, at least 1. */
unsigned fa__os_cpu_count(void) FA_HIDDEN;

/* The calling thread's kernel id (cached per thread), and the process id. */
int fa__os_thread_id(void) FA_HIDDEN;
int fa__os_pid(void) FA_HIDDEN;
/* In a fork child: the thread that forked has a new id. */
void fa__os_fork_child(void) FA_HIDDEN;

/* Start a detached thread with a small stack running fn(NULL).  False when
 * the OS refuses. */
bool fa__os_thread_start(void *(*fn)(void *), size_t stack_bytes) FA_HIDDEN;

/* Handlers run around fork(): prepare in the parent before it, parent and
 * child after it. */
void fa__os_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) FA_HIDDEN;

#endif
