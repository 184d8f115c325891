#!/bin/sh
# The fa_ API under libFuzzer, with ASan and UBSan (tools/fuzz-api.c): the
# library's sources and the target compiled together by clang; each input is
# a program of allocator calls whose blocks are checked after every call.
#   tools/fuzz-api.sh [BUILD] [SECONDS [secure]]
# BUILD (default build) is only where the run's files go: a first argument
# of digits alone is SECONDS, so write a build folder named so as ./NAME.
# "secure" builds the hardened variant (FA_SECURE) instead.  It starts from
# a copy of the inputs kept in tests/fuzz/api/: hand-written programs (small
# blocks, large blocks, aligned ones, a realloc chain) and every crash input
# found.  The copy, BUILD/fuzz/api[-secure]/corpus/, keeps what libFuzzer
# finds between runs; a crash's input goes to BUILD/fuzz/api[-secure]/
# artifacts/, and the script says how to keep it (tools/fuzz-replay.sh
# --fuzz).
set -eu
build=build
case ${1:-} in
'' | *[!0-9]*)
    [ $# -gt 0 ] && build=$1 && shift
    ;;
esac
secs=${1:-120}
target=api
[ "${2:-}" = secure ] && target=api-secure
top=$(cd "$(dirname "$0")/.." && pwd)
exec sh "$top/tools/fuzz-replay.sh" --fuzz "$secs" "$target" "$build" -rss_limit_mb=4096 -max_len=4096
