/* Static probes (USDT, sys/sdt.h): a named point in the code that a tracer
 * (gdb's `break -probe-stap`, bpftrace, perf, SystemTap) can attach to.
 * Each is one `nop` in the code and a note in the ELF file
 * (.note.stapsdt) that says where it is and how to read its arguments; a
 * probe that nothing is attached to costs that `nop` alone.  They sit on
 * slow paths only: the provider is "fastalloc", and docs/DESIGN.md lists
 * each probe with its arguments.  FA_PROBES is 0 (no probes, nothing in
 * the code) when the build found no sys/sdt.h (Debian's systemtap-sdt-dev). */
#ifndef FA_BASE_PROBE_H
#define FA_BASE_PROBE_H

#ifndef FA_PROBES
#define FA_PROBES 0
#endif

#if FA_PROBES
#include <sys/sdt.h>
#define FA_PROBE0(name) STAP_PROBE(fastalloc, name)
#define FA_PROBE1(name, a) STAP_PROBE1(fastalloc, name, a)
#define FA_PROBE2(name, a, b) STAP_PROBE2(fastalloc, name, a, b)
#define FA_PROBE3(name, a, b, c) STAP_PROBE3(fastalloc, name, a, b, c)
#else
#define FA_PROBE0(name) ((void)0)
#define FA_PROBE1(name, a) ((void)(a))
#define FA_PROBE2(name, a, b) ((void)(a), (void)(b))
#define FA_PROBE3(name, a, b, c) ((void)(a), (void)(b), (void)(c))
#endif

#endif
