#!/bin/sh
# A variant run of a test program, then a read-back of what the variant
# made, so that a variant that records nothing, or something no reader
# takes, fails instead of passing as the plain run would:
#
#   variant_check.sh trace FILE TOOL PROGRAM [ARGS...]
#       PROGRAM runs with FASTALLOC_TRACE=FILE; then `TOOL stat FILE`
#       (fastalloc-trace) must read the trace whole and count the threads
#       and frees a run of test_stress makes: at least MIN_THREADS threads
#       (17: two rounds of 8 and main) and cross-thread frees.
#   variant_check.sh profile FILE TOOL PROGRAM [ARGS...]
#       PROGRAM runs with FASTALLOC_PROFILE=FILE (the interval comes from
#       the environment) and FA_TEST_LIVE_AT_EXIT=1, which has test_stress
#       keep a 3 MiB block live at exit; then the file must be a heap_v2
#       profile whose header counts its own sample lines, and
#       `TOOL --text PROGRAM FILE` (google-pprof) must read it and count at
#       least those 3 MiB live.  Without google-pprof: exit 77.
#
# Which library serves the run is the program's own check (expect_build.c,
# before main).
set -u
kind=$1 file=$2 tool=$3
shift 3
rm -f "$file"
case $kind in
trace) FASTALLOC_TRACE=$file "$@" || { echo "variant_check: $* failed"; exit 1; } ;;
profile)
    command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool is not installed (Debian: google-perftools)"; exit 77; }
    FASTALLOC_PROFILE=$file FA_TEST_LIVE_AT_EXIT=1 "$@" || { echo "variant_check: $* failed"; exit 1; } ;;
*) echo "usage: variant_check.sh trace|profile FILE TOOL PROGRAM [ARGS...]"; exit 2 ;;
esac
[ -s "$file" ] || { echo "variant_check: $kind file $file was not written"; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
case $kind in
trace)
    "$tool" stat "$file" >"$out" 2>&1 || { cat "$out"; echo "variant_check: $tool stat refused the trace"; exit 1; }
    threads=$(sed -n 's/^threads *\([0-9]*\).*/\1/p' "$out")
    cross=$(sed -n 's/^frees *\([0-9]*\) cross-thread.*/\1/p' "$out")
    mallocs=$(sed -n 's/^ops *malloc \([0-9]*\),.*/\1/p' "$out")
    if [ "${threads:-0}" -lt "${MIN_THREADS:-17}" ] || [ "${cross:-0}" -eq 0 ] || [ "${mallocs:-0}" -eq 0 ]; then
        cat "$out"
        echo "variant_check: the trace holds ${threads:-0} threads, ${mallocs:-0} mallocs, ${cross:-0} cross-thread frees"
        exit 1
    fi
    echo "variant_check: trace read back: $threads threads, $mallocs mallocs, $cross cross-thread frees" ;;
profile)
    head=$(head -1 "$file")
    n=$(echo "$head" | sed -n 's/^heap profile: *\([0-9]*\):.*@ heap_v2\/[0-9]*$/\1/p')
    lines=$(grep -c ' @ 0x' "$file")
    if [ -z "$n" ] || [ "$n" -ne "$lines" ]; then
        echo "variant_check: header '$head' and $lines sample lines disagree"
        exit 1
    fi
    "$tool" --text "$1" "$file" >"$out" 2>&1 || { cat "$out"; echo "variant_check: $tool refused the profile"; exit 1; }
    total=$(sed -n 's/^Total: *\([0-9.]*\) MB.*/\1/p' "$out")
    if [ -z "$total" ] || ! awk -v t="$total" 'BEGIN { exit !(t >= 3.0) }'; then
        cat "$out"
        echo "variant_check: $tool counts ${total:-no} MB live at exit, not the 3 MiB block kept live"
        exit 1
    fi
    echo "variant_check: profile read back: $n samples; $(grep '^Total:' "$out")" ;;
esac
exit 0
