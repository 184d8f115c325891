#!/bin/sh
# The fuzz targets: their build, the replay of the inputs kept in the tree
# (ctest's test_fuzz_replay_*), and the fuzzing runs of tools/fuzz-trace.sh
# and tools/fuzz-api.sh.
#   tools/fuzz-replay.sh TARGET BUILD              replay tests/fuzz/<dir>/
#   tools/fuzz-replay.sh --build TARGET BUILD      build; print the binary
#   tools/fuzz-replay.sh --fuzz SECS TARGET BUILD [FLAG...]
#                                                  fuzz for SECS seconds
#   tools/fuzz-replay.sh --sets                    list the api targets' sets
# TARGET is trace (tools/fastalloc-trace.c), or one of the fa_ API's option
# sets (tools/fuzz-api.c, the table below): api and api-secure (the
# default and the hardened sources, with no option), api:debug,
# api-secure:zero and the others, each the api or api-secure target run
# with its FASTALLOC_ variables; all of them read tests/fuzz/api/, whose
# inputs have one format.  A set's files go under BUILD/fuzz/SET/ (a colon
# is a dash there): its fuzzing corpus, its artifacts, the files its
# options write; a binary under BUILD/fuzz/BINARY/, built again only when a
# source, the compile command or this script changed (ctest, the sets and
# the fuzz scripts share it).  The binaries are clang's, with libFuzzer,
# ASan and UBSan, whatever BUILD's own compiler and sanitizers: the same
# test in every kind of build.
#
# Replay: every input of corpus/ and crashes/ once, in one process (the
# library's state carries from one input to the next, as when fuzzing);
# then each crash input 70 times in a row in a process of its own:
# crash-3d9ca2b3... broke the hardened build only at its fifth run in a row
# (a free block left poisoned by the run before), and 70 runs cross the
# target's fa_trim of every 64th.  A set whose options write a file (the
# trace, the profile, the statistics) must have written it.
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

# The fa_ API's option sets: the set, its binary, its variables (@ is the
# set's folder).  A binary is api or api-secure (ASan and UBSan).
sets() {
    cat <<'EOF'
api                api                -
api:debug          api                FASTALLOC_DEBUG=1
api:profile        api                FASTALLOC_PROFILE=@/profile
api:trace          api                FASTALLOC_TRACE=@/trace
api:stats          api                FASTALLOC_STATS=1
api:stats-json     api                FASTALLOC_STATS=json:@/stats.json
api:tcache0        api                FASTALLOC_THREAD_CACHE_BYTES=0
api:purge0         api                FASTALLOC_PURGE_DELAY_MS=0
api:hugepages      api                FASTALLOC_HUGEPAGES=1
api:limit          api                FASTALLOC_LIMIT=48M
api-secure         api-secure         -
api-secure:zero    api-secure         FASTALLOC_SECURE_ZERO=1
api-secure:tails   api-secure         FASTALLOC_SECURE_TAILS=1
api-secure:shuffle api-secure         FASTALLOC_SECURE_SHUFFLE=1
api-secure:all     api-secure         FASTALLOC_SECURE_ZERO=1 FASTALLOC_SECURE_TAILS=1 FASTALLOC_SECURE_SHUFFLE=1
EOF
}
if [ "${1:-}" = --sets ]; then
    sets | awk '{ print $1 }'
    exit 0
fi

[ $# -ge 2 ] || { echo "usage: $0 [--build | --fuzz SECS] trace|SET BUILD [FLAG...] (SETs: $0 --sets)" >&2; exit 2; }
target=$1
top=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$2"
build=$(cd "$2" && pwd)
shift 2
flags="$*"
setdir=$(echo "$target" | tr : -)
out=$build/fuzz/$setdir
art=$out/artifacts/
name=test_fuzz_replay_$(echo "$target" | tr ':-' '__')
[ "$mode" = fuzz ] && name=fuzz-$setdir

binary=trace
vars=""
if [ "$target" != trace ]; then
    line=$(sets | awk -v t="$target" '$1 == t { $1 = ""; print substr($0, 2) }')
    [ -n "$line" ] || { echo "$0: unknown target $target (trace, or a set: $0 --sets)" >&2; exit 2; }
    binary=${line%% *}
    vars=${line#* }
    [ "$vars" = - ] && vars=""
    vars=$(echo "$vars" | sed "s|@|$out|g")
fi
bdir=$build/fuzz/$binary
bin=$bdir/fuzz

# The compile command, as the positional parameters.
case $binary in
trace)
    kept=$top/tests/fuzz/trace
    set -- clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -DFA_TRACE_FUZZ \
        -I"$top/src" "$top/tools/fastalloc-trace.c" -lpthread
    ;;
*)
    kept=$top/tests/fuzz/api
    set -- clang -g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
    [ "$binary" != api ] && set -- "$@" -DFA_SECURE=1
    set -- "$@" -ftls-model=initial-exec -I"$top/include" -I"$top/src"
    for f in "$top"/src/*/*.c; do
        set -- "$@" "$f"
    done
    set -- "$@" "$top/tools/fuzz-api.c" -lpthread -ldl -lgcc_s
    ;;
esac

# Without clang or libFuzzer's runtime (Debian: libclang-rt-N-dev) nothing
# here can run: for ctest a visible skip, not a failure of the library.
mkdir -p "$out" "$art" "$bdir"
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
# The sets of one binary run side by side under ctest: one builds, the
# others wait for it (flock, where there is one).
build_binary() {
    if [ ! -x "$bin" ] || [ "$(cat "$bdir/command" 2>/dev/null)" != "$*" ] ||
        [ -n "$(find "$top/src" "$top/include" "$top/tools/fastalloc-trace.c" "$top/tools/fuzz-api.c" \
            "$top/tools/fuzz-replay.sh" -newer "$bin" 2>/dev/null | head -1)" ]; then
        echo "building $bin" >&2
        # A new name first, then a rename: an interrupted build leaves no
        # binary that looks finished.
        "$@" -o "$bin.new" >&2
        mv -f "$bin.new" "$bin"
        printf '%s' "$*" >"$bdir/command"
    fi
}
if command -v flock >/dev/null 2>&1; then
    exec 9>"$bdir/lock"
    flock 9
    build_binary "$@"
    flock -u 9
else
    build_binary "$@"
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
    [ -n "$vars" ] && echo "$name: its options: $vars"
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

# The files the set's options name are this run's: written afresh, and
# then there must be one.
outputs=$(echo "$vars" | tr ' ' '\n' | sed -n "s|^FASTALLOC_[A-Z_]*=\(json:\)\{0,1\}\($out/.*\)|\2|p")
# shellcheck disable=SC2086
[ -z "$outputs" ] || rm -f $outputs
written() {
    for f in $outputs; do
        [ -s "$f" ] || { echo "$name: FAILED: $f was not written ($vars)"; exit 1; }
    done
}

if [ "$mode" = fuzz ]; then
    # The tree's inputs are copied: what libFuzzer adds goes to the copy.
    work=$out/corpus
    mkdir -p "$work"
    find "$kept" -type f -exec cp {} "$work/" \;
    echo "$name: $secs s from $work ($(find "$work" -type f | wc -l) inputs), artifacts in $art${vars:+, options $vars}"
    # shellcheck disable=SC2086
    env $vars "$bin" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$art" $flags "$work" ||
        failed "a crash, a leak or a time-out"
    written
    # A trace of minutes of fuzzing is large, and nobody reads it.
    # shellcheck disable=SC2086
    [ -z "$outputs" ] || rm -f $outputs
    exit 0
fi

dirs=""
for d in "$kept/corpus" "$kept/crashes"; do
    [ -n "$(find "$d" -type f 2>/dev/null | head -1)" ] && dirs="$dirs $d"
done
[ -n "$dirs" ] || { echo "$name: no inputs under $kept" >&2; exit 1; }
# shellcheck disable=SC2086
echo "$name: $(find $dirs -type f | wc -l) inputs once, in one process:$dirs${vars:+; options $vars}"
# shellcheck disable=SC2086
env $vars "$bin" -runs=0 -rss_limit_mb=4096 -artifact_prefix="$art" $dirs || failed "the corpus and crash inputs"
written
# One process a crash input: libFuzzer keeps no artifact of an input given
# as a file, so the file's name is what the failure shows.
find "$kept/crashes" -type f 2>/dev/null | sort | while read -r f; do
    echo "$name: $f, 70 times in a row"
    # shellcheck disable=SC2086
    env $vars "$bin" -runs=70 -rss_limit_mb=4096 -artifact_prefix="$art" "$f" </dev/null || failed "$f, run again"
done
echo "$name: passed"
