#!/bin/sh
# The fa_ API under libFuzzer, with ASan and UBSan (tools/fuzz-api.c): the
# library's sources and the target compiled together by clang; each input is
# a program of allocator calls whose results are held to glibc's rules and
# whose blocks are checked after every call.
#   tools/fuzz-api.sh [BUILD] [SECONDS [SET | secure | all]]
# BUILD (default build) is only where the run's files go: a first argument
# of digits alone is SECONDS, so write a build folder named so as ./NAME.
# SET is one of the option sets of tools/fuzz-replay.sh --sets (api,
# api:debug, api-secure:zero, ...): the default library with no option
# unless named; "secure" is api-secure, the hardened build (FA_SECURE);
# "all" runs every set for SECONDS each, one after the other, and stops at
# the first failure.  It starts from a copy of the inputs kept in
# tests/fuzz/api/: every set's corpus, and every crash input found.  The
# copy, BUILD/fuzz/SET/corpus/ (a colon is a dash there), keeps what
# libFuzzer finds between runs; a crash's input goes to BUILD/fuzz/SET/
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
set_=${2:-api}
[ "$set_" = secure ] && set_=api-secure
top=$(cd "$(dirname "$0")/.." && pwd)
fuzz() {
    sh "$top/tools/fuzz-replay.sh" --fuzz "$secs" "$1" "$build" -rss_limit_mb=4096 -max_len=4096 -len_control=10
}
if [ "$set_" = all ]; then
    for s in $(sh "$top/tools/fuzz-replay.sh" --sets); do
        fuzz "$s"
    done
    exit 0
fi
fuzz "$set_"
