#!/bin/sh
# The fuzz targets: their build, the replay of the inputs kept in the tree
# (ctest's test_fuzz_replay_*), and the fuzzing runs of tools/fuzz-trace.sh
# and tools/fuzz-api.sh.
#   tools/fuzz-replay.sh TARGET BUILD              replay tests/fuzz/<dir>/
#   tools/fuzz-replay.sh --build TARGET BUILD      build; print the binary
#   tools/fuzz-replay.sh --fuzz SECS TARGET BUILD [FLAG...]
#                                                  fuzz for SECS seconds
# TARGET is trace (tools/fastalloc-trace.c), api (tools/fuzz-api.c) or
# api-secure (the same on the hardened sources); both api targets read
# tests/fuzz/api/, whose inputs have one format.  Everything goes under
# BUILD/fuzz/TARGET/: the binary, built again only when a source, the
# compile command or this script changed (ctest and the fuzz scripts share
# it); the fuzzing corpus; the artifacts.  The binary is clang's, with
# libFuzzer, ASan and UBSan, whatever BUILD's own compiler and sanitizers:
# the same test in every kind of build.
#
# Replay: every input of corpus/ and crashes/ once, in one process (the
# library's state carries from one input to the next, as when fuzzing);
# then each crash input 70 times in a row in a process of its own:
# crash-3d9ca2b3... broke the hardened build only at its fifth run in a row
# (a free block left poisoned by the run before), and 70 runs cross the
# target's fa_trim of every 64th.
#
# Exit status: 77 (a skip) when clang cannot link a libFuzzer program, 1
# when an input fails; the failing input is named, and tests/fuzz/README.md
# says what to do with a new one.
set -eu
mode=replay
secs=0
case ${1:-} in
--build)
    mode=build
    shift
    ;;
--fuzz)
    mode=fuzz
    secs=${2:?}
    shift 2
    ;;
esac
[ $# -ge 2 ] || { echo "usage: $0 [--build | --fuzz SECS] trace|api|api-secure BUILD [FLAG...]" >&2; exit 2; }
target=$1
top=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$2"
build=$(cd "$2" && pwd)
shift 2
flags="$*"
out=$build/fuzz/$target
bin=$out/fuzz
art=$out/artifacts/
name=test_fuzz_replay_$(echo "$target" | tr - _)
[ "$mode" = fuzz ] && name=fuzz-$target

# The compile command, as the positional parameters.
case $target in
trace)
    kept=$top/tests/fuzz/trace
    set -- clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -DFA_TRACE_FUZZ \
        -I"$top/src" "$top/tools/fastalloc-trace.c" -lpthread
    ;;
api | api-secure)
    kept=$top/tests/fuzz/api
    set -- clang -g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
    [ "$target" = api-secure ] && set -- "$@" -DFA_SECURE=1
    set -- "$@" -ftls-model=initial-exec -I"$top/include" -I"$top/src"
    for f in "$top"/src/*/*.c; do
        set -- "$@" "$f"
    done
    set -- "$@" "$top/tools/fuzz-api.c" -lpthread -ldl -lgcc_s
    ;;
*)
    echo "$0: unknown target $target (trace, api or api-secure)" >&2
    exit 2
    ;;
esac

# Without clang or libFuzzer's runtime (Debian: libclang-rt-N-dev) nothing
# here can run: for ctest a visible skip, not a failure of the library.
mkdir -p "$out" "$art"
probe=$out/probe
if ! command -v clang >/dev/null 2>&1 ||
    ! printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)\n{ (void)d; (void)n; return 0; }\n' |
    clang -fsanitize=fuzzer,address,undefined -x c - -o "$probe" >"$out/probe.log" 2>&1; then
    skip="SKIP: "
    [ "$mode" = replay ] || skip=""
    echo "$skip$name: clang with libFuzzer's runtime is not installed (Debian: clang, libclang-rt-N-dev)"
    sed 's/^/  /' "$out/probe.log" 2>/dev/null | head -5
    exit 77
fi
rm -f "$probe"

# Build again when the command differs or a file it may read is newer:
# every header under src/ and include/ counts, and both targets' sources.
if [ ! -x "$bin" ] || [ "$(cat "$out/command" 2>/dev/null)" != "$*" ] ||
    [ -n "$(find "$top/src" "$top/include" "$top/tools/fastalloc-trace.c" "$top/tools/fuzz-api.c" \
        "$top/tools/fuzz-replay.sh" -newer "$bin" 2>/dev/null | head -1)" ]; then
    echo "building $bin" >&2
    # A new name first, then a rename: an interrupted build leaves no
    # binary that looks finished.
    "$@" -o "$bin.new" >&2
    mv -f "$bin.new" "$bin"
    printf '%s' "$*" >"$out/command"
fi
if [ "$mode" = build ]; then
    echo "$bin"
    exit 0
fi

: >"$out/start"
# A non-zero status from the fuzzer is a failure whatever its value:
# libFuzzer's own is 77 by default, which ctest would call a skip.
failed() {
    echo "$name: FAILED ($1)"
    find "$art" -type f -newer "$out/start" 2>/dev/null | while read -r a; do
        echo "the input that failed: $a ($(wc -c <"$a") bytes); in base64, for base64 -d:"
        [ "$(wc -c <"$a")" -gt 16384 ] || base64 "$a" | sed 's/^/  /'
        if [ "$mode" = fuzz ]; then
            echo "Once the bug is fixed, keep the input where ctest replays it:" \
                "cp $a $kept/crashes/ (tests/fuzz/README.md)"
        fi
    done
    if [ "$mode" = replay ]; then
        echo "An input kept in $kept fails: it passed when it was kept, so this is a regression."
    fi
    exit 1
}

if [ "$mode" = fuzz ]; then
    # The tree's inputs are copied: what libFuzzer adds goes to the copy.
    work=$out/corpus
    mkdir -p "$work"
    find "$kept" -type f -exec cp {} "$work/" \;
    echo "$name: $secs s from $work ($(find "$work" -type f | wc -l) inputs), artifacts in $art"
    # shellcheck disable=SC2086
    "$bin" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$art" $flags "$work" ||
        failed "a crash, a leak or a time-out"
    exit 0
fi

dirs=""
for d in "$kept/corpus" "$kept/crashes"; do
    [ -n "$(find "$d" -type f 2>/dev/null | head -1)" ] && dirs="$dirs $d"
done
[ -n "$dirs" ] || { echo "$name: no inputs under $kept" >&2; exit 1; }
# shellcheck disable=SC2086
echo "$name: $(find $dirs -type f | wc -l) inputs once, in one process:$dirs"
# shellcheck disable=SC2086
"$bin" -runs=0 -rss_limit_mb=4096 -artifact_prefix="$art" $dirs || failed "the corpus and crash inputs"
# One process a crash input: libFuzzer keeps no artifact of an input given
# as a file, so the file's name is what the failure shows.
find "$kept/crashes" -type f 2>/dev/null | sort | while read -r f; do
    echo "$name: $f, 70 times in a row"
    "$bin" -runs=70 -rss_limit_mb=4096 -artifact_prefix="$art" "$f" </dev/null || failed "$f, run again"
done
echo "$name: passed"
