#!/bin/sh
# The option matrix (#52): every option that changes what the allocator
# does, one set at a time, under the real programs of tests/run_programs.sh
# at their quick size (python3, sqlite3, git, gcc on a generated file and on
# src/09-diag/trace.c, perl, xz), redis under a short redis-benchmark, and
# the long stress test for a few seconds; each program's output is compared
# with its run on glibc, made once for all the sets.
#
# usage: run_matrix.sh [BUILD]     (BUILD: the build folder; build by default)
#
# The sets (a library, then the variables set for its runs):
#   default         the default library, nothing set, statistics off too
#                   (the other sets keep them on, in a file, to count the
#                   allocations: this one is the library as most run it)
#   hardened        the hardened library, nothing set, statistics off
#   secure_zero, secure_tails, secure_shuffle
#                   the hardened library with each of its options
#   debug           debug mode (checked blocks, the quarantine, a leak
#                   report at exit, which run_programs.sh takes out of
#                   stderr and counts; any other report fails), in each
#                   library (the hardened one's large blocks broke under it)
#   profile, trace  a heap profile or a trace for every process, each
#                   checked (a trace read back by fastalloc-trace)
#   stats           FASTALLOC_STATS=1: the table on stderr at exit, taken
#                   out of stderr and counted from
#   thread_cache_bytes=0, purge_delay_ms=0, hugepages=1
#                   no thread cache; free pages purged at once; huge pages
#   limit           FASTALLOC_LIMIT=1G: above what any of these programs
#                   holds (the stress test's live bytes are capped at 512
#                   MiB; its peak in use is about 470), so that a correct
#                   program must run as it does without the limit, while
#                   every page the heap takes is held to it
#
# Lengths, to fit CI's 45 minutes (the matrix is one step of them): the
# quick size of run_programs.sh (a few seconds a program but under debug
# mode, which costs python3's 9.6 M allocations about 40 s and is the
# longest set), redis with 2,000 requests of each command (about 1 s), and
# the stress test for 4 s a set, 52 s in all (the gcc build's own stress
# test runs 2 minutes, and the hardened library's 60 s and 30 s, in make
# test).  On a 2-core machine shared with other work the whole matrix took
# 5.3 minutes at a load of 2 (with 5 s of stress a set), 6.5 at a load of 5
# to 7 (4.2 minutes of CPU), the debug set 1.5 to 2.4 of them and every
# other set 15 to 35 s (the first one's time holds the runs on glibc).  The closing line counts the checks:
# "programs: N passed, N failed, 0 skipped".
set -eu

# A hang fails its program after 5 minutes, not the 10 of a program at
# CI's size: each set holds ten programs.
FA_PROGRAM_LIMIT=${FA_PROGRAM_LIMIT:-300}
export FA_PROGRAM_LIMIT
b=${1:-build}
d=$b/libfastalloc.so
s=$b/libfastalloc-secure.so
exec sh "$(dirname "$0")/run_programs.sh" --redis 2000 --stress "$b/tests/stress" 4 \
    "$d,FASTALLOC_STATS=0" \
    "$s,FASTALLOC_STATS=0" \
    "$s,FASTALLOC_SECURE_ZERO=1" \
    "$s,FASTALLOC_SECURE_TAILS=1" \
    "$s,FASTALLOC_SECURE_SHUFFLE=1" \
    "$d,FASTALLOC_DEBUG=1" \
    "$s,FASTALLOC_DEBUG=1" \
    "$d,FASTALLOC_PROFILE={}.%p.heap" \
    "$d,FASTALLOC_TRACE={}.trace" \
    "$d,FASTALLOC_STATS=1" \
    "$d,FASTALLOC_THREAD_CACHE_BYTES=0" \
    "$d,FASTALLOC_PURGE_DELAY_MS=0" \
    "$d,FASTALLOC_HUGEPAGES=1" \
    "$d,FASTALLOC_LIMIT=1G"
