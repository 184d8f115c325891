#!/bin/sh
# The trace reader of fastalloc-trace under libFuzzer (clang's -fsanitize=
# fuzzer, with ASan and UBSan): any bytes as a trace must be read or
# refused with an error, never crash, hang or read past the input.
#   tools/fuzz-trace.sh [BUILD [SECONDS]]
# The corpus starts from a trace of `ls /`, recorded with BUILD's library.
set -eu
build=${1:-build}
secs=${2:-60}
top=$(cd "$(dirname "$0")/.." && pwd)
lib=$(cd "$build" && pwd)/libfastalloc.so
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -DFA_TRACE_FUZZ \
    -I"$top/src" "$top/tools/fastalloc-trace.c" -o "$dir/fuzz" -lpthread
mkdir "$dir/corpus"
FASTALLOC_TRACE="$dir/corpus/ls.trace" LD_PRELOAD="$lib" ls / >/dev/null
test -s "$dir/corpus/ls.trace"
"$dir/fuzz" -max_total_time="$secs" -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 "$dir/corpus"
