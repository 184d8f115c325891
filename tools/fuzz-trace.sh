#!/bin/sh
# The trace reader of fastalloc-trace under libFuzzer (clang's -fsanitize=
# fuzzer, with ASan and UBSan): any bytes as a trace must be read or
# refused with an error, never crash, hang or read past the input.
#   tools/fuzz-trace.sh [BUILD [SECONDS]]
# It starts from a copy of the inputs kept in tests/fuzz/trace/ (a recorded
# trace, and every crash input found) and from a trace of `ls /` recorded
# now with BUILD's library, where it is built, so that the reader's current
# format is among them.  The copy, BUILD/fuzz/trace/corpus/, keeps what
# libFuzzer finds between runs; a crash's input goes to
# BUILD/fuzz/trace/artifacts/, and the script says how to keep it
# (tools/fuzz-replay.sh --fuzz).
set -eu
build=${1:-build}
secs=${2:-60}
top=$(cd "$(dirname "$0")/.." && pwd)
if [ -f "$build/libfastalloc.so" ]; then
    mkdir -p "$build/fuzz/trace/corpus"
    trace=$(cd "$build/fuzz/trace/corpus" && pwd)/ls-now.trace
    rm -f "$trace"
    FASTALLOC_TRACE="$trace" LD_PRELOAD="$(cd "$build" && pwd)/libfastalloc.so" ls / >/dev/null
    test -s "$trace"
else
    echo "fuzz-trace: $build/libfastalloc.so is not built: no trace recorded now" >&2
fi
exec sh "$top/tools/fuzz-replay.sh" --fuzz "$secs" trace "$build" -rss_limit_mb=2048 -max_len=8192
