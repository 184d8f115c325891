#!/bin/sh
# Real programs under LD_PRELOAD=libfastalloc.so: python3, sqlite3, git,
# gcc (on a generated file and on a file of this project), perl and xz each
# run a deterministic workload once with the system allocator and once with
# fastalloc, and the outputs, stdout and stderr (and, for gcc, the object
# files; for xz, the compressed bytes) must be identical.  stderr needs no
# normalising: every program here writes nothing to it in either run, so
# anything there under fastalloc (its own diagnostics, a warning from the
# program) is a difference, but for what an option asked fastalloc to print
# there (below).  A missing program is a failure, not a skip.
#
# usage: run_programs.sh [--full] [--redis N] [--stress EXE SECONDS]
#                        LIBRARY[,VAR=VALUE...]...
#
# Each library is tried in turn against the same runs without it, made
# once.  VAR=VALUE pairs after a library are set for its fastalloc runs
# alone (not for the runs without it): the same library can be given more
# than once with other options (tests/run_matrix.sh, CI's option matrix).
# A value holds no space, comma or glob character; "{}" in it stands for a
# path of the script's own for each run ($tmp/out/NAME), so that
# FASTALLOC_TRACE={}.trace or FASTALLOC_PROFILE={}.%p.heap give every
# program files of its own, which are checked and then removed: at least
# one must be written and not empty; the largest trace must read back
# (fastalloc-trace stat; the reader is FA_TRACE_READER, else the one beside
# the library); each heap profile must begin as google-pprof's format does.
# What an option makes fastalloc print on stderr is taken out before the
# comparison, and nothing else is:
#   FASTALLOC_STATS=1: each process's statistics table at exit (its lines
#     are known by their shape); the allocations are counted from them.
#   FASTALLOC_DEBUG=1: each process's leak report at exit ("fastalloc:
#     debug: leak report:" and the lines "fastalloc:   " under it).  Most
#     of these programs leave blocks live at exit, so reports are expected
#     and counted, not judged; any other report of debug mode (a double
#     free, a canary or a freed block written) keeps its first line, which
#     then differs, and aborts the program besides.
# A variable fastalloc does not know, or a value it does not take, makes it
# print a warning on stderr: a misspelled option fails instead of running
# the defaults under its name.
#
# --full is CI's size (.ci/run, for the default and the hardened library):
# sqlite3 builds and queries 500,000 indexed rows instead of 20,000, gcc
# compiles 1,500 generated functions instead of 300 (python3's workload,
# git's, perl's and xz's, and gcc's file of this project, are the same at
# both sizes: the option matrix runs them under every option, and CI's 45
# minutes hold no more), and two more programs run: python3's own regression tests (json, dict, list, set, unicode, re,
# gc, threading, collections), whose verdicts must agree, and redis-server
# on a Unix socket under redis-benchmark (20,000 requests of each command),
# whose dataset digests must agree.  --redis N runs redis with N requests of
# each command at either size.  --stress EXE SECONDS runs the long stress
# test (tests/stress.c) for SECONDS under each library and its options; it
# checks its own blocks and must find the library it was given (--expect).
#
# Each fastalloc run writes its statistics (FASTALLOC_STATS, one file per
# process, unless the library's options set FASTALLOC_STATS themselves:
# "=1" is counted from stderr, any other value is not counted), and the
# allocations each program made are counted from them and held to within 2x
# of what was measured (below, "expected"): a preload that did not take,
# statistics not written or not parsable, or counts gone wrong all fail.
# Each program runs under a time limit (FA_PROGRAM_LIMIT seconds, 600 by
# default), so that a hang fails the run instead of stalling CI.  The last
# line counts the checks: "programs: N passed, N failed, 0 skipped".
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
usage() {
    echo "usage: run_programs.sh [--full] [--redis N] [--stress EXE SECONDS] LIBRARY[,VAR=VALUE...]..." >&2
    exit 2
}
full=0
redis_n=0
stress_exe=""
stress_secs=0
while [ $# -gt 0 ]; do
    case $1 in
    --full) full=1; shift ;;
    --redis) [ $# -ge 2 ] || usage; redis_n=$2; shift 2 ;;
    --stress) [ $# -ge 3 ] || usage; stress_exe=$2 stress_secs=$3; shift 3 ;;
    -*) usage ;;
    *) break ;;
    esac
done
case $redis_n$stress_secs in *[!0-9]*) usage ;; esac
[ $full -eq 1 ] && [ "$redis_n" -eq 0 ] && redis_n=20000
[ $# -ge 1 ] || usage
if [ -n "$stress_exe" ]; then
    case $stress_exe in /*) ;; *) stress_exe=$(pwd)/$stress_exe ;; esac
    [ -x "$stress_exe" ] || { echo "FAIL: $stress_exe (the stress test) is not there"; exit 1; }
fi

# The specs, checked before anything runs: a library that exists, then
# NAME=VALUE pairs whose values word splitting and globbing leave whole.
# Kept space-separated, the library's path absolute (before any cd).
specs=""
set -f
for spec in "$@"; do
    lib=${spec%%,*}
    rest=""
    case $spec in *,*) rest=${spec#*,} ;; esac
    case $lib in /*) ;; *) lib=$(pwd)/$lib ;; esac
    if [ ! -f "$lib" ]; then
        echo "FAIL: $lib does not exist"
        exit 1
    fi
    for a in $(echo "$rest" | tr ',' ' '); do
        name=${a%%=*}
        case $a in *=*) ;; *) name="" ;; esac
        case $name in ''|*[!A-Z0-9_]*) echo "run_programs: $spec: '$a' is not NAME=VALUE" >&2; exit 2 ;; esac
        case ${a#*=} in *[!A-Za-z0-9_.:%/{}+@-]*) echo "run_programs: $spec: the value of $name holds a character the script cannot pass" >&2; exit 2 ;; esac
        case $a in
        FASTALLOC_TRACE=*)
            reader=${FA_TRACE_READER:-$(dirname "$lib")/fastalloc-trace}
            [ -x "$reader" ] || { echo "FAIL: $spec: no trace reader at $reader (FA_TRACE_READER) to read its traces"; exit 1; }
            ;;
        esac
    done
    specs="$specs $lib,$rest"
done
set +f

progs="python3 sqlite3 git gcc perl xz sha256sum cmp"
[ "$redis_n" -gt 0 ] && progs="$progs redis-server redis-cli redis-benchmark"
for prog in $progs; do
    if ! command -v "$prog" >/dev/null 2>&1; then
        echo "FAIL: $prog is not installed (the test needs $progs)"
        exit 1
    fi
done
[ -f "$root/src/09-diag/trace.c" ] || { echo "FAIL: $root/src/09-diag/trace.c (gcc's file of this project) is not there"; exit 1; }

limit=${FA_PROGRAM_LIMIT:-600}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fa-programs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
failed=0
npass=0
nfail=0
times=""
mkdir "$tmp/stats" "$tmp/out"

# pass MESSAGE / fail MESSAGE: one check's verdict, printed and counted.
pass() {
    echo "ok: $*"
    npass=$((npass + 1))
}
fail() {
    echo "FAIL: $*"
    nfail=$((nfail + 1))
    failed=1
}

# expected NAME: the allocations that NAME's processes made when measured
# under fastalloc on Debian 12 (quick size, then --full size where they
# differ).  A count outside half to twice this fails.  The small program
# that gcc builds makes a few dozen allocations, a count that stdio's
# buffers and realloc's moves sway by more than that: it has none (0), and
# its runs are held to their output alone; so has the stress test, whose
# count is its seconds' worth.
expected() {
    case $1.$full in
        python3.*) echo 9640000 ;;        # the same workload at both sizes
        pytests.1) echo 22800000 ;;      # one process makes 22 M; its children the rest
        sqlite3.0) echo 151000 ;;
        sqlite3.1) echo 3680000 ;;
        git.*) echo 110000 ;;
        gcc-compile.0) echo 2680000 ;;
        gcc-compile.1) echo 14600000 ;;
        gcc-project.*) echo 262000 ;;    # the file of this project, at both sizes
        perl.*) echo 1366000 ;;
        xz.*) echo 1500 ;;               # most of them the shell's and cmp's, wc's, sha256sum's
        # redis-benchmark's requests, 12 commands of N each: about 113
        # allocations for each N, and 22,000 to start and stop the server.
        redis.*) echo $((22000 + 113 * redis_n)) ;;
        *) echo 0 ;;
    esac
}

# subst VALUE NAME: VALUE with each "{}" replaced by NAME's own path.
subst() {
    v=$1 out=""
    while :; do
        case $v in
        *"{}"*) out=$out${v%%"{}"*}$tmp/out/$2; v=${v#*"{}"} ;;
        *) out=$out$v; break ;;
        esac
    done
    echo "$out"
}

# fa_env NAME: the variables of NAME's run under fastalloc, one a line:
# the library's options, and the script's own statistics file unless the
# options name FASTALLOC_STATS.
fa_env() {
    for a in $envs; do
        subst "$a" "$1"
    done
    if [ "$statmode" = json ]; then
        echo "FASTALLOC_STATS=json:$tmp/stats/$1.%p.json"
    fi
}

# outputs NAME: the files that the options' "{}" paths name for NAME's run
# were written and read back (the header says how); onote says what they
# held.  Exits 1, after a failure, when they were not.  Removes them.
outputs() {
    onote=""
    ok=0
    for a in $envs; do
        case $a in *"{}"*) ;; *) continue ;; esac
        var=${a%%=*}
        path=$(subst "${a#*=}" "$1")
        # %p (a process id) is any; a trace's exec'd and forked processes
        # write PATH.PID beside the top one's PATH.
        pat=$(echo "$path" | sed 's/%p/*/g')
        [ "$var" = FASTALLOC_TRACE ] && pat="$pat*"
        n=0
        for f in $pat; do
            [ -s "$f" ] && n=$((n + 1))
        done
        if [ $n -eq 0 ]; then
            fail "$1: $var=$(basename "$path"): nothing written"
            ok=1
            continue
        fi
        case $var in
        FASTALLOC_TRACE)
            # The largest trace is the program's own, not that of timeout
            # or of a shell that started it.
            # shellcheck disable=SC2086,SC2012
            big=$(ls -S $pat | head -1)
            if "$reader" stat "$big" >"$tmp/trace.stat" 2>&1; then
                onote="$onote; $n traces, the largest read back ($(sed -n 's/^records *\([0-9]*\).*/\1/p' "$tmp/trace.stat") records)"
            else
                fail "$1: fastalloc-trace stat cannot read $(basename "$big"), the largest of its $n traces:"
                sed 's/^/  | /' "$tmp/trace.stat" | tail -5
                ok=1
            fi
            ;;
        FASTALLOC_PROFILE)
            bad=""
            for f in $pat; do
                if [ -s "$f" ] && ! head -1 "$f" | grep -q '^heap profile: '; then
                    bad=$f
                fi
            done
            if [ -n "$bad" ]; then
                fail "$1: $(basename "$bad") is not a heap profile: $(head -c 80 "$bad" | head -1)"
                ok=1
            else
                onote="$onote; $n heap profiles"
            fi
            ;;
        *) onote="$onote; $var: $n files" ;;
        esac
    done
    rm -rf "$tmp/out" && mkdir "$tmp/out"
    return $ok
}

# run NAME MODE CMD...: MODE is plain or fa; output to $tmp/NAME.MODE.out
# and .err.  A plain run is made once, for the first library; a fastalloc
# run's files are checked (outputs) and its seconds kept in ftime.
run() {
    name=$1 mode=$2
    shift 2
    if [ "$mode" = plain ] && [ -e "$tmp/$name.plain.done" ]; then
        return 0
    fi
    # timeout exits 124 when the limit ends the program.
    if [ "$mode" = fa ]; then
        t0=$(date +%s)
        # shellcheck disable=SC2046
        env $(fa_env "$name") LD_PRELOAD="$lib" timeout -k 10 "$limit" "$@" \
            >"$tmp/$name.$mode.out" 2>"$tmp/$name.$mode.err" || {
            fail "$name under fastalloc exited with status $? (124: over the ${limit} s limit)"
            show_err "$name"
            rm -rf "$tmp/out" && mkdir "$tmp/out"
            return 1
        }
        ftime=$(($(date +%s) - t0))
        outputs "$name" || return 1
    else
        timeout -k 10 "$limit" "$@" >"$tmp/$name.$mode.out" 2>"$tmp/$name.$mode.err" || {
            fail "$name (without fastalloc) exited with status $? (124: over the ${limit} s limit)"
            sed 's/^/  | /' "$tmp/$name.$mode.err" | tail -20
            return 1
        }
        : >"$tmp/$name.plain.done"
    fi
}

# clean_err NAME: NAME's stderr under fastalloc, less what its options
# asked fastalloc to print there, into $tmp/NAME.fa.errc; and into
# $tmp/NAME.printed, "TABLES ALLOCATIONS LEAK-REPORTS" taken out.  The
# statistics table's lines are matched by their shape, not by where they
# stand: the processes of a pipeline exit together, and their lines (each
# one write) may interleave.  (A fa_pool's rows in the table are not
# matched: none of these programs makes a pool.)
clean_err() {
    awk -v stats="$([ "$statmode" = text ] && echo 1 || echo 0)" -v debug="$debug" -v counts="$tmp/$1.printed" '
        stats && /^fastalloc statistics$/ { tables++; next }
        stats && /^  blocks     [0-9]+ allocated, / { allocs += $2; next }
        stats && /^  (bytes      |heap       |page heap  |caches     |metadata   |at peak    )/ { next }
        stats && /^ +class +in use +allocs +spans +fast path$/ { next }
        stats && /^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+%$/ { next }
        debug && /^fastalloc: debug: leak report: / { leaks++; next }
        debug && /^fastalloc:   / { next }
        { print }
        END { printf "%d %.0f %d\n", tables, allocs, leaks > counts }
    ' "$tmp/$1.fa.err" >"$tmp/$1.fa.errc"
}

# show_err NAME: the end of NAME's stderr under fastalloc, after a failure:
# what the options did not print there (clean_err), where there is any.
show_err() {
    clean_err "$1"
    f=$tmp/$1.fa.errc
    [ -s "$f" ] || f=$tmp/$1.fa.err
    sed 's/^/  | /' "$f" | tail -20
}

# same_err NAME: the two runs' stderr agree, once clean_err has taken out
# what the options printed (else sets failed and returns 1); dnote counts
# the leak reports taken out.
same_err() {
    clean_err "$1"
    dnote=""
    if [ "$debug" -eq 1 ]; then
        dnote="; $(cut -d' ' -f3 "$tmp/$1.printed") leak reports at exit"
    fi
    if ! cmp -s "$tmp/$1.plain.err" "$tmp/$1.fa.errc"; then
        fail "$1 stderr differs under fastalloc:"
        diff "$tmp/$1.plain.err" "$tmp/$1.fa.errc" | head -20 | sed 's/^/  | /'
        return 1
    fi
}

# allocs NAME: the allocations fastalloc served to NAME's processes, from
# the statistics each wrote at exit: JSON files (the script's own), or the
# tables on stderr (FASTALLOC_STATS=1, counted by clean_err).  Prints "N
# allocations" and exits 0 when the count is within half to twice
# expected(NAME); otherwise prints why and exits 1: no statistics written,
# a file that does not parse or lacks "allocs", or a count out of range.
# The tables on stderr are held to twice at most: a process that closes its
# stderr before it exits (coreutils' programs, xz) prints none, and its
# allocations go uncounted.  With the statistics off, prints that they
# were not counted.
allocs() {
    case $statmode in
    off) echo "allocations not counted (the options set FASTALLOC_STATS)" ;;
    text)
        python3 - "$tmp/$1.printed" "$(expected "$1")" <<'PY'
import sys
tables, n, _ = (int(x) for x in open(sys.argv[1]).read().split())
want = int(sys.argv[2])
if tables == 0:
    sys.exit("no statistics table (FASTALLOC_STATS=1) on stderr")
if n > want * 2:
    sys.exit("%d allocations in %d tables on stderr, expected %d (at most twice that)" % (n, tables, want))
print("%d allocations in %d tables on stderr" % (n, tables))
PY
        ;;
    json)
        python3 - "$tmp/stats" "$1" "$(expected "$1")" <<'PY'
import glob, json, os, sys
files = glob.glob(os.path.join(sys.argv[1], sys.argv[2] + ".*.json"))
want = int(sys.argv[3])
if not files:
    sys.exit("no statistics file (FASTALLOC_STATS=json:...%p) was written")
n = 0
for f in files:
    try:
        with open(f) as fh:
            n += int(json.load(fh)["allocs"])
    except (ValueError, KeyError, TypeError) as e:
        sys.exit("%s does not hold an allocation count: %r" % (f, e))
if not want // 2 <= n <= want * 2:
    sys.exit("%d allocations, expected %d (half to twice that)" % (n, want))
print("%d allocations" % n)
PY
        ;;
    esac
}

# same_objects NAME WHAT: after gcc's two runs NAME in this folder, their
# stderr agree, plain.o and fa.o are byte-identical, and the allocations
# counted are as expected; WHAT says what was compiled.
same_objects() {
    same_err "$1" || :  # noted in $failed; the checks below still run
    if ! cmp -s plain.o fa.o; then
        fail "$2 produced a different object file under fastalloc"
    elif n=$(allocs "$1" 2>"$tmp/allocs.err"); then
        pass "$2: object files byte-identical; $n$dnote$onote; ${ftime} s"
    else
        fail "$1: $(cat "$tmp/allocs.err")"
    fi
}

# same NAME: the two runs' stdout agree (and are not empty), and so do their
# stderr; the allocations counted are as expected
same() {
    if [ ! -s "$tmp/$1.plain.out" ]; then
        fail "$1 printed nothing"
    elif ! cmp -s "$tmp/$1.plain.out" "$tmp/$1.fa.out"; then
        fail "$1 output differs under fastalloc:"
        diff "$tmp/$1.plain.out" "$tmp/$1.fa.out" | head -20 | sed 's/^/  | /'
    elif same_err "$1"; then
        what="$(wc -l <"$tmp/$1.plain.out") lines identical, stderr identical"
        if [ "$(expected "$1")" -eq 0 ]; then
            pass "$1 ($what$dnote$onote; ${ftime} s)"
        elif n=$(allocs "$1" 2>"$tmp/allocs.err"); then
            pass "$1 ($what; $n$dnote$onote; ${ftime} s)"
        else
            fail "$1: $(cat "$tmp/allocs.err")"
        fi
    fi
}

# check_lib: every program under $lib and its options ($envs), against
# their plain runs (made once, for the first library).
check_lib() {
rm -rf "$tmp/stats"/* "$tmp/fa.db" "$tmp/fa.git" "$tmp/fa.git.home" "$tmp/out"/*
echo "== $label"
start=$(date +%s)
# ---------------------------------------------------------------- preload works
# (with the options: one that breaks a program's start shows here first)
# shellcheck disable=SC2046
if env $(fa_env maps) LD_PRELOAD="$lib" cat /proc/self/maps 2>"$tmp/maps.err" | grep -qF "$(basename "$lib")"; then
    pass "LD_PRELOAD maps $(basename "$lib")"
else
    fail "LD_PRELOAD=$lib does not load it"
    sed 's/^/  | /' "$tmp/maps.err" | tail -20
    echo "programs: $npass passed, $nfail failed, 0 skipped"
    exit 1
fi
rm -rf "$tmp/out" && mkdir "$tmp/out"

# ---------------------------------------------------------------- python3
cat >"$tmp/work.py" <<'PY'
import collections, hashlib, json, re, sys, threading

h = hashlib.sha256()

# dict churn: inserts, updates, deletes
d = {}
for i in range(300000):
    k = "key%d" % (i * 7919 % 100003)
    d[k] = d.get(k, 0) + i
    if i % 3 == 0:
        d.pop("key%d" % (i % 5000), None)
h.update(json.dumps(d, sort_keys=True).encode())

# lists of strings of many sizes, sorted and joined
lst = [str(i) * (i % 23) for i in range(150000)]
lst.sort()
h.update("".join(lst[::97]).encode())
del lst

# json round trip of a nested document
doc = {"items": [{"id": i, "name": "n" * (i % 50), "vals": list(range(i % 20)),
                  "sub": {"a": i / 7, "b": [str(i)] * (i % 5)}} for i in range(30000)]}
s = json.dumps(doc)
h.update(hashlib.md5(s.encode()).digest())
assert json.loads(s) == doc

# regex and Counter over generated text
words = " ".join("w%d" % ((i * i) % 1009) for i in range(200000))
c = collections.Counter(re.findall(r"w\d+", words))
h.update(repr(sorted(c.most_common(50))).encode())

# threads allocating and hashing at once
results = [None] * 8
def work(n):
    acc = hashlib.sha1()
    parts = []
    for i in range(30000):
        parts.append(("%d:%d;" % (n, i)) * (i % 9))
        if len(parts) > 300:
            acc.update("".join(parts).encode())
            parts = []
    acc.update("".join(parts).encode())
    results[n] = acc.hexdigest()
threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for r in results:
    h.update(r.encode())

# a bytearray that grows and shrinks (realloc)
b = bytearray()
for i in range(20000):
    b += bytes([i % 256]) * (i % 300)
    if len(b) > (1 << 20):
        del b[: len(b) // 2]
h.update(b)

print(len(d), len(c), len(b))
print(h.hexdigest())
PY
# PYTHONMALLOC=malloc: Python's objects come from malloc, not from its own
# pymalloc arenas, so that fastalloc serves them.
run python3 plain env PYTHONHASHSEED=0 PYTHONMALLOC=malloc python3 "$tmp/work.py" &&
    run python3 fa env PYTHONHASHSEED=0 PYTHONMALLOC=malloc python3 "$tmp/work.py" && same python3
# Python's malloc really is fastalloc under the preload, and with
# PYTHONMALLOC=malloc so are its small objects (a bytes object starts its
# block; pymalloc would have put these in its own arenas, which fa_owns
# does not know).
# shellcheck disable=SC2046
if env $(fa_env ctypes) LD_PRELOAD="$lib" PYTHONMALLOC=malloc python3 -c '
import ctypes
c = ctypes.CDLL(None)
c.malloc.restype = ctypes.c_void_p
c.fa_owns.argtypes = [ctypes.c_void_p]
p = c.malloc(100)
objs = [bytes(range(20 + i % 50)) for i in range(100)]
owned = sum(c.fa_owns(id(o)) for o in objs)
if c.fa_owns(p) != 1 or owned != len(objs):
    raise SystemExit("malloc(100) owned: %d; small objects owned: %d of %d" % (c.fa_owns(p), owned, len(objs)))' 2>"$tmp/ctypes.err"; then
    pass "python3's malloc and (PYTHONMALLOC=malloc) its small objects are fastalloc's"
else
    fail "python3's malloc or its small objects are not fastalloc's under LD_PRELOAD"
    sed 's/^/  | /' "$tmp/ctypes.err" | tail -20
fi
rm -rf "$tmp/out" && mkdir "$tmp/out"

# ---------------------------------------------------------------- sqlite3
cat >"$tmp/work.sql" <<'SQL'
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ROWS)
INSERT INTO t SELECT x, x % 97,
    'name-' || x || '-' || substr('abcdefghijklmnopqrstuvwxyz', 1 + x % 26, 1 + x % 13),
    (x * 7919 % 10007) / 7.0
FROM c;
CREATE INDEX t_grp ON t(grp, val);
SELECT count(*), sum(length(name)), round(avg(val), 6), min(name), max(name) FROM t;
SELECT grp, count(*), round(sum(val), 3), min(name), max(name) FROM t GROUP BY grp ORDER BY grp;
SELECT id, name, val FROM t ORDER BY val DESC, id LIMIT 20;
SELECT count(*) FROM t a JOIN t b ON b.id BETWEEN a.id + 1 AND a.id + 999 AND a.grp = b.grp WHERE a.id <= 20000;
SELECT grp, group_concat(id, ',') FROM (SELECT grp, id FROM t WHERE id % 500 = 0 ORDER BY id) GROUP BY grp ORDER BY grp;
UPDATE t SET name = upper(name) || name WHERE id % 7 = 0;
DELETE FROM t WHERE id % 3 = 0;
VACUUM;
SELECT count(*), sum(length(name)) FROM t;
SELECT substr(name, 1, 12), count(*) FROM t GROUP BY substr(name, 1, 12) ORDER BY 2 DESC, 1 LIMIT 10;
SQL
rows=20000
[ $full -eq 1 ] && rows=500000
sed -i "s/ROWS/$rows/" "$tmp/work.sql"
run sqlite3 plain sqlite3 "$tmp/plain.db" ".read $tmp/work.sql" &&
    run sqlite3 fa sqlite3 "$tmp/fa.db" ".read $tmp/work.sql" && same sqlite3

# ---------------------------------------------------------------- git
cat >"$tmp/git.sh" <<'GIT'
set -eu
repo=$1
export GIT_AUTHOR_NAME="Fast Alloc" GIT_AUTHOR_EMAIL="fa@example.com"
export GIT_COMMITTER_NAME="Fast Alloc" GIT_COMMITTER_EMAIL="fa@example.com"
export GIT_AUTHOR_DATE="2020-01-01T00:00:00 +0000" GIT_COMMITTER_DATE="2020-01-01T00:00:00 +0000"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null HOME="$repo.home"
mkdir -p "$HOME"
git -c init.defaultBranch=main init -q "$repo"
cd "$repo"
git config gc.autoDetach false
i=1
while [ $i -le 25 ]; do
    mkdir -p "dir$((i % 4))"
    seq $((i * 100)) $((i * 100 + 2000)) >"dir$((i % 4))/file$i.txt"
    j=1
    while [ $j -lt $i ]; do
        # edit older files a little, so deltas form
        sed -i "s/^$((j * 100 + i))\$/changed $i/" "dir$((j % 4))/file$j.txt"
        j=$((j + 3))
    done
    git add -A
    git commit -q -m "commit $i

Adds file$i and edits some older files."
    i=$((i + 1))
done
git log --stat
git gc --quiet
git fsck --full --no-progress
git rev-parse HEAD HEAD~10
git cat-file -p HEAD^{tree}
git diff --stat HEAD~12 HEAD
git log --oneline -- dir1 | wc -l
git show HEAD~3:dir0/file4.txt | md5sum
GIT
run git plain sh "$tmp/git.sh" "$tmp/plain.git" &&
    run git fa sh "$tmp/git.sh" "$tmp/fa.git" && same git

# ---------------------------------------------------------------- gcc
mkdir -p "$tmp/cc"
nfunc=300
[ $full -eq 1 ] && nfunc=1500
{
    echo '#include <stdio.h>'
    echo '#include <stdlib.h>'
    echo '#include <string.h>'
    echo "#define NFUNC $nfunc"
    i=0
    while [ $i -lt $nfunc ]; do
        cat <<C
static unsigned long f$i(unsigned long x)
{
    unsigned long a[16];
    for (int k = 0; k < 16; k++)
        a[k] = x * ($i + k) ^ (x >> (k % 7));
    for (int k = 1; k < 16; k++)
        a[k] += a[k - 1] * 31 + $i;
    return a[15] % 1000003;
}
C
        i=$((i + 1))
    done
    cat <<'C'
static int cmp(const void *a, const void *b)
{
    unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;
    return x < y ? -1 : x > y;
}
int main(void)
{
    unsigned long acc = 0, v[NFUNC];
    char *s = malloc(1);
    size_t len = 0;
C
    i=0
    while [ $i -lt $nfunc ]; do
        echo "    v[$i] = f$i($i + acc); acc += v[$i];"
        i=$((i + 1))
    done
    cat <<'C'
    qsort(v, NFUNC, sizeof v[0], cmp);
    for (int i = 0; i < NFUNC; i += 10) {
        char buf[32];
        int n = snprintf(buf, sizeof buf, "%lu ", v[i]);
        s = realloc(s, len + (size_t)n + 1);
        memcpy(s + len, buf, (size_t)n + 1);
        len += (size_t)n;
    }
    printf("%lu\n%s\n", acc, s);
    free(s);
    return 0;
}
C
} >"$tmp/cc/prog.c"
cd "$tmp/cc"
if run gcc-compile plain gcc -O2 -g -Wall -c prog.c -o plain.o &&
    run gcc-compile fa gcc -O2 -g -Wall -c prog.c -o fa.o; then
    same_objects gcc-compile "gcc -O2 -g on $nfunc generated functions"
    if run gcc-link plain gcc plain.o -o plain.exe && run gcc-link fa gcc fa.o -o fa.exe; then
        same_err gcc-link || :
        run gcc-prog plain ./plain.exe && run gcc-prog fa ./fa.exe && same gcc-prog
        # the fastalloc-built program also runs under fastalloc
        run gcc-prog2 plain ./fa.exe && run gcc-prog2 fa ./fa.exe && same gcc-prog2
    fi
fi
cd /

# ---------------------------------------------------------------- gcc on this project
# A file of the library itself, as its build compiles it (gnu11, -O2 -g,
# the warnings), with this tree's headers: real C of many headers, not
# generated code.
mkdir -p "$tmp/proj"
cd "$tmp/proj"
projsrc=$root/src/09-diag/trace.c
if run gcc-project plain gcc -std=gnu11 -O2 -g -Wall -Wextra -I"$root/include" -I"$root/src" -c "$projsrc" -o plain.o &&
    run gcc-project fa gcc -std=gnu11 -O2 -g -Wall -Wextra -I"$root/include" -I"$root/src" -c "$projsrc" -o fa.o; then
    same_objects gcc-project "gcc -O2 -g on src/09-diag/trace.c"
fi
cd /

# ---------------------------------------------------------------- perl
# Hashes (inserts, appends, deletes), regexes (matches, captures, a
# substitution that calls code), sorts of numbers and strings, a string
# built piece by piece, split and joined, and records of arrays and
# hashes; everything printed is in a fixed order.  The hash seed is fixed
# so that both runs make the same allocations.
cat >"$tmp/work.pl" <<'PL'
use strict;
use warnings;

my $n = shift;
my (%h, @words);
for my $i (1 .. $n) {
    my $k = "key" . ($i * 7919 % 100003);
    $h{$k} .= chr(97 + $i % 26);
    delete $h{"key" . ($i % 5000)} if $i % 3 == 0;
    push @words, "w" . (($i * $i) % 1009) if $i % 2 == 0;
}
my $sum = 0;
$sum = ($sum * 31 + unpack("%32C*", $_ . $h{$_})) % 1000000007 for sort keys %h;
printf "hash: %d keys, checksum %d\n", scalar(keys %h), $sum;

my $text = join(" ", @words);
my %count;
$count{$1}++ while $text =~ /\b(w\d*7)\b/g;
my @top = (sort { $count{$b} <=> $count{$a} || $a cmp $b } keys %count)[0 .. 9];
print "top: ", join(",", map { "$_=$count{$_}" } @top), "\n";
(my $t2 = $text) =~ s/w(\d+)/"<" . ($1 * 3) . ">"/ge;
printf "subst: %d bytes, checksum %d\n", length($t2), unpack("%32C*", $t2);

my @nums = map { ($_ * 2654435761) % 4294967296 } 1 .. $n / 2;
my @sorted = sort { $a <=> $b } @nums;
print "nums: @sorted[0 .. 4] ... @sorted[-3 .. -1]\n";
my @strs = sort map { "x" x ($_ % 40) . $_ } 1 .. $n / 4;
printf "strs: %s %s %d\n", $strs[0], $strs[-1], scalar(@strs);

my $s = "";
$s .= sprintf("%d:%s;", $_, "ab" x ($_ % 17)) for 1 .. $n / 2;
my @parts = split /;/, $s;
printf "build: %d bytes, %d parts, checksum %d\n", length($s), scalar(@parts),
    unpack("%32C*", join("|", reverse @parts));

my @recs = map { { id => $_, tags => [ map { "t$_" } 1 .. $_ % 8 ], name => "n" x ($_ % 30) } } 1 .. $n / 4;
my $tags = 0;
$tags += @{ $_->{tags} } for @recs;
@recs = grep { $_->{id} % 3 } @recs;
printf "recs: %d left, %d tags\n", scalar(@recs), $tags;
PL
run perl plain env PERL_HASH_SEED=0 PERL_PERTURB_KEYS=0 perl "$tmp/work.pl" 200000 &&
    run perl fa env PERL_HASH_SEED=0 PERL_PERTURB_KEYS=0 perl "$tmp/work.pl" 200000 && same perl

# ---------------------------------------------------------------- xz
# Compress a generated text with two threads (blocks of 512 KiB, so that
# both work; the output then depends on the block size and not on the
# machine), decompress it with two, and compare: the round trip must give
# the text back, and the compressed bytes must be those of the run without
# fastalloc.  xz makes few allocations but large ones (its dictionaries
# and match finders, tens of MiB each): the large blocks' path.
if [ ! -e "$tmp/xz.in" ]; then
    seq 1 60000 | awk '{ printf "%d %x %s\n", $1, $1 * 2654435761 % 4294967296,
        substr("the quick brown fox jumps over the lazy dog", 1 + $1 % 20, 5 + $1 % 23) }' >"$tmp/xz.in"
fi
cat >"$tmp/xz.sh" <<'XZ'
set -eu
xz -6 -T2 --block-size=512KiB -c "$1" >"$2.xz"
xz -d -T2 -c "$2.xz" >"$2.back"
cmp "$1" "$2.back"
echo "$(wc -c <"$1") bytes, $(wc -c <"$2.xz") compressed, round trip identical"
sha256sum <"$2.xz"
XZ
run xz plain sh "$tmp/xz.sh" "$tmp/xz.in" "$tmp/xz.plain" &&
    run xz fa sh "$tmp/xz.sh" "$tmp/xz.in" "$tmp/xz.fa" && same xz
rm -f "$tmp/xz.fa.xz" "$tmp/xz.fa.back"

# ---------------------------------------------------------------- python3's regression tests
# Debian's python3 (/usr/bin, with libpython3.X-testsuite) runs its own
# tests in one process (no -j: the statistics count that process).  The
# verdicts must agree: the result line and the count of tests that passed,
# failed or were skipped; timings differ, so the rest of the output is not
# compared.
if [ $full -eq 1 ]; then
    py=/usr/bin/python3
    pytests="test_json test_dict test_list test_set test_unicode test_re test_gc test_threading test_collections"
    verdict() {
        grep -E '^(== Tests result|All [0-9]+ tests OK|[0-9]+ tests? (OK|failed|skipped|altered))' "$1" || :
    }
    # shellcheck disable=SC2086
    if run pytests plain env PYTHONHASHSEED=0 PYTHONMALLOC=malloc $py -m test $pytests &&
        run pytests fa env PYTHONHASHSEED=0 PYTHONMALLOC=malloc $py -m test $pytests; then
        verdict "$tmp/pytests.plain.out" >"$tmp/pytests.plain.v"
        verdict "$tmp/pytests.fa.out" >"$tmp/pytests.fa.v"
        if ! grep -q 'Tests result: SUCCESS' "$tmp/pytests.plain.v"; then
            fail "python3's tests fail without fastalloc:"
            sed 's/^/  | /' "$tmp/pytests.plain.out" | tail -20
        elif ! cmp -s "$tmp/pytests.plain.v" "$tmp/pytests.fa.v"; then
            fail "python3's tests give another verdict under fastalloc:"
            diff "$tmp/pytests.plain.v" "$tmp/pytests.fa.v" | sed 's/^/  | /'
        elif clean_err pytests && n=$(allocs pytests 2>"$tmp/allocs.err"); then
            pass "python3's regression tests ($pytests): $(tr '\n' ' ' <"$tmp/pytests.fa.v")under both; $n$onote; ${ftime} s"
        else
            fail "pytests: $(cat "$tmp/allocs.err")"
        fi
    fi
fi

# ---------------------------------------------------------------- redis
# redis-server on a Unix socket, under redis-benchmark: a bounded run of
# its commands, then the dataset's digest (DEBUG DIGEST), which must be the
# same with and without fastalloc.  Debian's redis links jemalloc; under
# the preload its malloc, calloc, realloc, free and malloc_usable_size are
# fastalloc's, which the server's memory map must show.  The server logs
# to stdout; its stderr is compared as any program's.
redis_run() {
    mode=$1
    sock=$tmp/redis.$mode.sock
    if [ "$mode" = fa ]; then
        # shellcheck disable=SC2046
        env $(fa_env redis) LD_PRELOAD="$lib" redis-server --port 0 \
            --unixsocket "$sock" --save '' --appendonly no --enable-debug-command yes \
            >"$tmp/redis.$mode.log" 2>"$tmp/redis.$mode.err" &
    else
        redis-server --port 0 --unixsocket "$sock" --save '' --appendonly no --enable-debug-command yes \
            >"$tmp/redis.$mode.log" 2>"$tmp/redis.$mode.err" &
    fi
    pid=$!
    t0=$(date +%s)
    # Wait for the socket while the server lives: only a hang reaches the
    # deadline (60 s), not a slow start on a loaded machine.
    i=0
    while [ ! -S "$sock" ] && kill -0 $pid 2>/dev/null && [ $i -lt 600 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    if [ ! -S "$sock" ]; then
        fail "redis-server ($mode) did not open its socket"
        sed 's/^/  | /' "$tmp/redis.$mode.log" "$tmp/redis.$mode.err" | tail -20
        kill $pid 2>/dev/null || :
        wait $pid 2>/dev/null || :
        return 1
    fi
    if [ "$mode" = fa ] && ! grep -qF "$(basename "$lib")" "/proc/$pid/maps"; then
        fail "redis-server does not map $(basename "$lib") under the preload"
    fi
    timeout -k 10 "$limit" redis-benchmark -s "$sock" -n "$redis_n" -c 8 -d 300 -q \
        -t set,get,incr,lpush,rpush,lpop,rpop,sadd,hset,zadd,lrange_100,mset >"$tmp/redis.$mode.bench" 2>&1 || {
        fail "redis-benchmark ($mode) exited with status $? (124: over the ${limit} s limit)"
    }
    timeout 60 redis-cli -s "$sock" dbsize >"$tmp/redis.$mode.out"
    timeout 60 redis-cli -s "$sock" debug digest >>"$tmp/redis.$mode.out"
    timeout 60 redis-cli -s "$sock" memory doctor >/dev/null
    # SHUTDOWN closes the connection without a reply: redis-cli's status
    # says nothing; the server's own exit status, 0, says it went down
    # cleanly (a crash in the allocator at exit would show here).
    timeout 60 redis-cli -s "$sock" shutdown nosave >/dev/null 2>&1 || :
    i=0
    while kill -0 $pid 2>/dev/null && [ $i -lt 600 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    if kill -0 $pid 2>/dev/null; then
        fail "redis-server ($mode) still runs 60 s after SHUTDOWN"
        kill -9 $pid 2>/dev/null || :
    fi
    rc=0
    wait $pid || rc=$?
    ftime=$(($(date +%s) - t0))
    if [ $rc -ne 0 ]; then
        fail "redis-server ($mode) exited with status $rc"
        sed 's/^/  | /' "$tmp/redis.$mode.log" "$tmp/redis.$mode.err" | tail -20
    fi
    if [ "$mode" = fa ]; then
        outputs redis || :
    fi
}
if [ "$redis_n" -gt 0 ]; then
    [ -e "$tmp/redis.plain.out" ] || redis_run plain || :
    redis_run fa || :
    if ! cmp -s "$tmp/redis.plain.out" "$tmp/redis.fa.out"; then
        fail "redis's dataset differs under fastalloc:"
        diff "$tmp/redis.plain.out" "$tmp/redis.fa.out" | sed 's/^/  | /'
    elif [ "$(sed -n 1p "$tmp/redis.fa.out")" -lt 5 ]; then
        fail "redis holds $(sed -n 1p "$tmp/redis.fa.out") keys after the benchmark"
    elif ! same_err redis; then
        :
    elif n=$(allocs redis 2>"$tmp/allocs.err"); then
        pass "redis-server under redis-benchmark ($(grep -c 'requests per second' "$tmp/redis.fa.bench") commands, $redis_n requests each): dataset digests agree, stderr identical; $n$dnote$onote; ${ftime} s"
    else
        fail "redis: $(cat "$tmp/allocs.err")"
    fi
fi

# ---------------------------------------------------------------- the stress test
# tests/stress.c under the library and its options: it checks every block
# it makes itself, so there is no run without fastalloc to compare with;
# its stderr must be empty (but for what the options print there), and
# --expect makes it fail at once when another library serves it.  In
# debug mode --expect is left out: its sign of the build (a freed block's
# link word, tests/which_build.h) is debug mode's fill there, read as the
# hardened build's encoded link; the stress test still names the file that
# serves it.
if [ -n "$stress_exe" ]; then
    case $(basename "$lib") in
    libfastalloc-secure.so*) expect="--expect secure" ;;
    *) expect="--expect default" ;;
    esac
    [ "$debug" -eq 1 ] && expect=""
    t0=$(date +%s)
    # shellcheck disable=SC2046,SC2086
    if env $(fa_env stress) LD_PRELOAD="$lib" timeout -k 10 $((stress_secs + 300)) \
        "$stress_exe" --seconds "$stress_secs" $expect >"$tmp/stress.fa.out" 2>"$tmp/stress.fa.err"; then
        ftime=$(($(date +%s) - t0))
        : >"$tmp/stress.plain.err"
        if outputs stress && same_err stress; then
            pass "stress, $stress_secs s: $(sed -n 's/^stress: \([0-9]* operations in [0-9]* threads\).*/\1/p' "$tmp/stress.fa.out"), all checked ($(sed -n 's/^stress: \(seed [0-9]*\).*/\1/p' "$tmp/stress.fa.out"))$dnote$onote; ${ftime} s"
        fi
    else
        fail "stress under fastalloc exited with status $? ($(sed -n 's/^stress: \(seed [0-9]*\).*/\1/p' "$tmp/stress.fa.out"); 124: over its time):"
        sed 's/^/  | /' "$tmp/stress.fa.out" | tail -5
        show_err stress
        rm -rf "$tmp/out" && mkdir "$tmp/out"
    fi
fi

secs=$(($(date +%s) - start))
echo "($label: $secs s, with the runs without it where they were made)"
times="$times$secs s  $label
"
}

for spec in $specs; do
    lib=${spec%%,*}
    envs=$(echo "${spec#*,}" | tr ',' ' ')
    label=$lib${envs:+ }$envs
    reader=${FA_TRACE_READER:-$(dirname "$lib")/fastalloc-trace}
    # How the statistics are kept, and whether debug mode prints leak
    # reports: from the options.
    statmode=json
    debug=0
    for a in $envs; do
        case $a in
        FASTALLOC_STATS=1) statmode=text ;;
        FASTALLOC_STATS=*) statmode=off ;;
        FASTALLOC_DEBUG=1|FASTALLOC_DEBUG=[Oo][Nn]|FASTALLOC_DEBUG=[Yy][Ee][Ss]|FASTALLOC_DEBUG=[Tt][Rr][Uu][Ee]) debug=1 ;;
        esac
    done
    check_lib
done

if [ $failed -ne 0 ]; then
    echo "run_programs: FAILED"
else
    echo "run_programs: all programs agree with and without fastalloc"
fi
if [ "$(echo "$specs" | wc -w)" -gt 1 ]; then
    echo "run_programs: seconds for each library and its options:"
    printf '%s' "$times" | sed 's/^/  /'
fi
echo "programs: $npass passed, $nfail failed, 0 skipped"
exit $failed
