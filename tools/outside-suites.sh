#!/bin/sh
# The outside suites #41 is judged by, rebuilt from a checkout of
# mimalloc-bench (https://github.com/daanx/mimalloc-bench; nothing of it is
# in this tree):
#   tools/outside-suites.sh security MB DIR NAME=LIB...
#       its security tests (bench/security: each .c file at 8 B, 4 KiB and
#       256 KiB, as its CMakeLists.txt builds them, and the five C++ ones:
#       116 programs), run under each library (LIB a path, or "glibc",
#       and after it any VAR=VALUE to set, comma-separated:
#       tails=build/libfastalloc-secure.so,FASTALLOC_SECURE_TAILS=1);
#       a program that does not print NOT_CAUGHT caught the error (a timeout
#       of 1 s counts as caught, as mimalloc-bench's bench.sh counts it).
#       Prints a line per library: caught in all and by kind.
#   tools/outside-suites.sh bench MB DIR ROUNDS [--before LIB] NAME=LIB...
#       the benchmarks of its bench/ that need nothing downloaded (19 rows:
#       those of bench.sh, at PROCS threads, 2 unless set), each library in
#       turn within a round (A B A B); each row's time is bench.sh's (the
#       wall clock, or for larson, rptest, xmalloc-test and glibc-thread the
#       relative time it derives from their own output) and peak RSS is
#       /usr/bin/time's.  Prints medians per row and the geometric means of
#       each library over the first.  --before LIB adds LIB (the build
#       before a change: main's) as a column named "before", and a table
#       of the first library over it, per row: now/before for time and
#       peak RSS, with the spread of each (max/min of its rounds).
# MB is the mimalloc-bench checkout, DIR a scratch directory (built once).
set -eu
mode=${1:?usage: tools/outside-suites.sh security|bench MB DIR [ROUNDS] NAME=LIB...}
mb=$(cd "${2:?mimalloc-bench checkout}" && pwd)
dir=${3:?scratch directory}
shift 3
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

preload() { # NAME=LIB[,VAR=VALUE...] -> the env assignments (none for glibc)
    spec=${1#*=}
    lib=${spec%%,*}
    [ "$lib" = glibc ] || printf 'LD_PRELOAD=%s ' "$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")"
    [ "$spec" = "$lib" ] || echo "${spec#*,}" | tr ',' ' '
}

if [ "$mode" = security ]; then
    bin="$dir/security"
    if [ ! -d "$bin" ]; then
        mkdir -p "$bin.tmp"
        # The options of its CMakeLists.txt: nothing inlined, so that the
        # errors reach the allocator as written.
        flags="-w -fno-inline -fno-builtin-inline -fno-inline-small-functions -fno-ipa-pure-const"
        for f in "$mb"/bench/security/*.c; do
            n=$(basename "$f" .c)
            cc $flags -DALLOCATION_SIZE=8 "$f" -o "$bin.tmp/${n}_small"
            cc $flags -DALLOCATION_SIZE=4096 "$f" -o "$bin.tmp/${n}_medium"
            cc $flags -DALLOCATION_SIZE='256*1024' "$f" -o "$bin.tmp/${n}_large"
        done
        for f in "$mb"/bench/security/*.cc; do
            c++ -w -std=c++17 -fsized-deallocation -DALLOCATION_SIZE=4096 "$f" -o "$bin.tmp/$(basename "$f" .cc)"
        done
        mv "$bin.tmp" "$bin"
    fi
    for spec in "$@"; do
        name=${spec%%=*}
        env=$(preload "$spec")
        out="$dir/security-$name.txt"
        : >"$out"
        for b in "$bin"/*; do
            r=$( (timeout 1 env $env "$b" 2>/dev/null || :) | grep -c NOT_CAUGHT || :)
            # timeout's status is lost above; a hang prints nothing, which counts as caught
            [ "$r" = 0 ] && echo "+ $(basename "$b")" >>"$out" || echo "- $(basename "$b")" >>"$out"
        done
        awk -v name="$name" '{
            ok = $1 == "+"; t = $2; c = "property"
            if (t ~ /^double_free/) c = "double"
            else if (t ~ /^invalid|^delete_type/) c = "invalid"
            else if (t ~ /^write_after_free/) c = "uaf"
            else if (t ~ /flow|zero_size/) c = "overflow"
            n[c]++; k[c] += ok; all += ok; total++
        } END {
            printf "%-12s %3d of %d | double %d/%d invalid %d/%d uaf %d/%d overflow %d/%d property %d/%d\n",
                name, all, total, k["double"], n["double"], k["invalid"], n["invalid"], k["uaf"], n["uaf"],
                k["overflow"], n["overflow"], k["property"], n["property"]
        }' "$out"
    done
    exit 0
fi

[ "$mode" = bench ] || { echo "tools/outside-suites.sh: security or bench, not $mode" >&2; exit 2; }
rounds=${1:?rounds}
shift
before=
if [ "${1:-}" = --before ]; then
    before=${2:?--before LIB}
    shift 2
    set -- "$@" "before=$before"
fi
build="$dir/bench-build"
if [ ! -x "$build/glibc-thread" ]; then
    # Its CMakeLists.txt less what must be downloaded (shbench's sources)
    # and the security tests (above).
    mkdir -p "$dir/bench-src"
    cp -r "$mb"/bench/. "$dir/bench-src/"
    python3 - "$dir/bench-src/CMakeLists.txt" <<'EOF'
import re, sys
p = sys.argv[1]
s = open(p).read()
s = re.sub(r'if\(NOT APPLE\)\s*add_executable\(sh6bench.*?endif\(\)', '', s, flags=re.S)
s = s.replace('add_subdirectory(security)', '')
open(p, 'w').write(s)
EOF
    cmake -S "$dir/bench-src" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
    make -C "$build" -j2 >/dev/null
fi
P=${PROCS:-2}
res="$dir/bench.txt"
: >"$res"
cd "$build"
while IFS='|' read -r name cmd; do
    [ -n "$name" ] || continue
    for r in $(seq "$rounds"); do
        for spec in "$@"; do
            env=$(preload "$spec")
            /usr/bin/time -o "$dir/time.txt" -f "%e %M" env $env sh -c "$cmd" >"$dir/stdout.txt" 2>/dev/null
            read -r secs rss <"$dir/time.txt"
            o="$dir/stdout.txt"
            case $name in
            larson*) secs=$(sed -n 's/.* time: \([0-9.]*\).*/\1/p' "$o") ;;
            rptest*) secs=$(sed -n 's/.*\.\.\.\([0-9]*\) memory ops.*/\1/p' "$o" | awk '{print 2000000 / $1}') ;;
            xmalloc*) secs=$(sed -n 's/rtime: \([0-9.]*\).*/\1/p' "$o") ;;
            glibc-thread) secs=$(sed -n 's/^\([0-9.]*\).*/\1/p' "$o" | head -1 | awk '{print 1e9 / $1}') ;;
            esac
            echo "$name ${spec%%=*} $r $secs $rss" | tee -a "$res"
        done
    done
done <<EOF
cfrac|./cfrac 17545186520507317056371138836327483792789528
espresso|./espresso $dir/bench-src/espresso/largest.espresso
barnes|./barnes < $dir/bench-src/barnes/input
larsonN|./larson 5 8 1000 5000 100 4141 $P
larsonN-sized|./larson-sized 5 8 1000 5000 100 4141 $P
mstressN|./mstress $P 50 25
rptestN|./rptest $P 0 1 2 500 1000 100 8 16000
xmalloc-testN|./xmalloc-test -w $P -t 5 -s 64
cache-scratch1|./cache-scratch 1 1000 1 2000000 $P
cache-scratchN|./cache-scratch $P 1000 1 2000000 $P
cache-thrash1|./cache-thrash 1 1000 1 2000000 $P
cache-thrashN|./cache-thrash $P 1000 1 2000000 $P
glibc-simple|./glibc-simple
glibc-thread|./glibc-thread $P
alloc-test1|./alloc-test 1
alloc-testN|./alloc-test $P
malloc-large|./malloc-large
mleak10|./mleak 5
mleak100|./mleak 50
EOF
python3 - "$res" "$before" <<'EOF'
import collections, math, statistics, sys
rows, libs = collections.OrderedDict(), []
for line in open(sys.argv[1]):
    name, lib, _, secs, rss = line.split()
    if lib not in libs:
        libs.append(lib)
    rows.setdefault(name, collections.defaultdict(list))[lib].append((float(secs), float(rss)))
med = lambda v, i: statistics.median(x[i] for x in v)
print("%-16s" % "row" + "".join("%12s %9s" % (l, "MiB") for l in libs))
ratios = collections.defaultdict(lambda: ([], []))
for name, by in rows.items():
    print("%-16s" % name + "".join("%12.3f %9.1f" % (med(by[l], 0), med(by[l], 1) / 1024) for l in libs))
    for l in libs[1:]:
        ratios[l][0].append(med(by[l], 0) / med(by[libs[0]], 0))
        ratios[l][1].append(med(by[l], 1) / med(by[libs[0]], 1))
geo = lambda v: math.exp(sum(map(math.log, v)) / len(v))
for l, (t, m) in ratios.items():
    print("%s over %s, geometric mean of %d rows: time %.3fx, peak RSS %.3fx (largest time %.2fx)"
          % (l, libs[0], len(t), geo(t), geo(m), max(t)))
if sys.argv[2] and "before" in libs:
    now = libs[0]
    spread = lambda v, i: max(x[i] for x in v) / min(x[i] for x in v) if min(x[i] for x in v) > 0 else float("nan")
    print()
    print("%-16s %12s %9s %12s %9s" % ("row", "time now/before", "spread", "RSS now/before", "spread"))
    tr, mr = [], []
    for name, by in rows.items():
        t = med(by[now], 0) / med(by["before"], 0)
        m = med(by[now], 1) / med(by["before"], 1)
        tr.append(t)
        mr.append(m)
        print("%-16s %15.3f %9.2f %14.3f %9.2f" % (name, t, max(spread(by[now], 0), spread(by["before"], 0)),
                                                   m, max(spread(by[now], 1), spread(by["before"], 1))))
    print("%s over before, geometric mean of %d rows: time %.3fx, peak RSS %.3fx" % (now, len(tr), geo(tr), geo(mr)))
EOF
