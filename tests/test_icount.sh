#!/bin/sh
# The fast paths' instruction counts that README.md quotes (and
# docs/SECURITY.md and docs/POOL.md after it), held as bounds (ctest's
# test_icount_CASE).
#   tests/test_icount.sh CASE BUILD COMPILER_ID COMPILER_VERSION
# CASE is malloc64 or malloc1000 (a malloc+free pair of that many bytes,
# the default library), secure64 or secure1000 (the same, hardened
# library), or pool (fa_pool_get + fa_pool_put of 64 bytes).  The count is
# tools/icount.sh's "inside": instructions executed in the allocator per
# pair, with callgrind, the difference of two runs so that start-up cancels.
# It is exact and the same from run to run (no timing, no load, no address
# in it), so the bound can be tight.
#
# The figures are README.md's table (section "Build"): the row that names
# this test, the column of this compiler (clang's fast paths are longer
# than gcc's), each the count measured when it was set, to a tenth.  The
# test fails a count more than one instruction over its figure: a call
# added to a fast path (call, ret and the work around them, 2 or more)
# always fails; one instruction more on every pair fails or sits at the
# edge; code moved elsewhere, which shifts the fraction that slow paths
# add now and then (one nop in malloc moved malloc1000 by 0.75, not 1),
# does not.  An absolute margin, not a share: a call costs the same on a
# path of 19 instructions as on one of 110.  A count that falls leaves the
# figure standing; lower it when the fall is meant to last.  Exit status
# 77 (a skip) without valgrind.
set -eu
[ $# -eq 4 ] || { echo "usage: $0 CASE BUILD COMPILER_ID COMPILER_VERSION" >&2; exit 2; }
case=$1 build=$2 cc_id=$3 cc_version=$4
top=$(cd "$(dirname "$0")/.." && pwd)
name=test_icount_$case

case $cc_id in
GNU) column=3 ;;
Clang) column=4 ;;
*)
    echo "SKIP: $name: README.md has figures for gcc and clang, not for $cc_id"
    exit 77
    ;;
esac
figure=$(awk -F'|' -v t="\`$name\`" -v c="$column" 'index($5, t) { gsub(/ /, "", $c); print $c }' "$top/README.md")
case $figure in
'' | *[!0-9.]*)
    echo "$name: no figure for this test in README.md's table of instructions (got '$figure')"
    exit 1
    ;;
esac
bound=$(awk -v f="$figure" 'BEGIN { print f + 1 }')

if ! command -v valgrind >/dev/null 2>&1; then
    echo "SKIP: $name: valgrind is not installed (apt-get install valgrind)"
    exit 77
fi

# The library's options change its paths: the counts are those of the
# defaults.
for v in $(env | sed -n 's/^\(FASTALLOC_[A-Za-z0-9_]*\)=.*/\1/p'); do
    unset "$v"
done

case $case in
malloc64) got=$(sh "$top/tools/icount.sh" "$build/libfastalloc.so" 64) ;;
malloc1000) got=$(sh "$top/tools/icount.sh" "$build/libfastalloc.so" 1000) ;;
secure64) got=$(sh "$top/tools/icount.sh" "$build/libfastalloc-secure.so" 64) ;;
secure1000) got=$(sh "$top/tools/icount.sh" "$build/libfastalloc-secure.so" 1000) ;;
pool) got=$(sh "$top/tools/icount.sh" --pool "$build/libfastalloc.so") ;;
*)
    echo "$name: unknown case" >&2
    exit 2
    ;;
esac
inside=$(echo "$got" | sed -n 's/^inside=\([0-9.]*\) .*/\1/p')
[ -n "$inside" ] || { echo "$name: tools/icount.sh printed no count: $got"; exit 1; }

if awk -v n="$inside" -v b="$bound" 'BEGIN { exit !(n > b) }'; then
    echo "$name: FAILED: $inside instructions a pair; README.md says $figure, the bound is $bound" \
        "($cc_id $cc_version)"
    echo "A fast path got longer: find the change (tools/icount.sh, callgrind_annotate)."
    echo "If it is meant, raise the figure in README.md's table, and where"
    echo "docs/SECURITY.md and docs/POOL.md quote it; a compiler other than"
    echo "Debian 12's may compile the fast paths differently."
    exit 1
fi
echo "$name: $inside instructions a pair; README.md says $figure, the bound is $bound ($cc_id $cc_version)"
