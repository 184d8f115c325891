#!/bin/sh
# Exact instructions per malloc+free pair, measured with callgrind.
#   tools/icount.sh [preload-lib|glibc] [size] [window]
#   tools/icount.sh --pool [libfastalloc.so]     fa_pool_get + fa_pool_put
# Prints two figures:
#   inside   instructions executed inside malloc and free (and whatever they
#            call), per pair: the allocator's own cost;
#   per-loop everything per loop iteration: the caller's loop, the calls, the
#            PLT jumps and the allocator.
# Each is the difference between a run of 1.1 M and one of 0.1 M pairs divided
# by 1 M, so start-up and first-touch slow paths cancel out.
set -eu
if [ "${1:-}" = --pool ]; then
    lib=${2:-build/libfastalloc.so}
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    top=$(cd "$(dirname "$0")/.." && pwd)
    cc -O2 -I"$top/include" -o "$dir/poolloop" "$top/tools/poolloop.c" -L"$(dirname "$lib")" -lfastalloc \
        -Wl,-rpath,"$(cd "$(dirname "$lib")" && pwd)"
    prun() {
        valgrind --tool=callgrind --callgrind-out-file="$dir/cg" "$@" >/dev/null 2>"$dir/log" || { cat "$dir/log" >&2; exit 1; }
        grep -E '^(summary|totals):' "$dir/cg" | head -1 | awk '{print $2}'
    }
    t="--toggle-collect=fa_pool_get --toggle-collect=fa_pool_put"
    a=$(prun $t "$dir/poolloop" 100000); b=$(prun $t "$dir/poolloop" 1100000)
    c=$(prun "$dir/poolloop" 100000); d=$(prun "$dir/poolloop" 1100000)
    awk -v a="$a" -v b="$b" -v c="$c" -v d="$d" \
        'BEGIN { printf "inside=%.2f per-loop=%.2f\n", (b - a) / 1e6, (d - c) / 1e6 }'
    exit 0
fi
lib=${1:-build/libfastalloc.so}
size=${2:-64}
window=${3:-0}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cc -O2 -fno-builtin -o "$dir/pairloop" "$(dirname "$0")/pairloop.c"
[ "$lib" = glibc ] && pre="" || pre="$lib"
run() { # $1 = pairs, $2.. = extra callgrind options
    n=$1; shift
    env ${pre:+LD_PRELOAD=$pre} valgrind --tool=callgrind --callgrind-out-file="$dir/cg" "$@" \
        "$dir/pairloop" "$n" "$size" "$window" >/dev/null 2>"$dir/log" || { cat "$dir/log" >&2; exit 1; }
    grep -E '^(summary|totals):' "$dir/cg" | head -1 | awk '{print $2}'
}
diff1m() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b - a) / 1000000 }'; }
t="--toggle-collect=malloc --toggle-collect=free"
inside=$(diff1m "$(run 100000 $t)" "$(run 1100000 $t)")
loop=$(diff1m "$(run 100000)" "$(run 1100000)")
echo "inside=$inside per-loop=$loop"
