#!/bin/sh
# Real programs under LD_PRELOAD=libfastalloc.so: python3, sqlite3, git and
# gcc each run a deterministic workload once with the system allocator and
# once with fastalloc, and the outputs, stdout and stderr (and, for gcc, the
# object files) must be identical.  stderr needs no normalising: every
# program here writes nothing to it in either run, so anything there under
# fastalloc (its own diagnostics, a warning from the program) is a
# difference.  A missing program is a failure, not a skip.
#
# usage: run_programs.sh [--full] LIBRARY...
#
# Each library is tried in turn against the same runs without it, made
# once.
# --full is CI's size (.ci/run, for the default and the hardened library):
# sqlite3 builds and queries 500,000 indexed rows instead of 20,000, gcc
# compiles 1,500 generated functions instead of 300, and two more programs
# run: python3's own regression tests (json, dict, list, set, unicode, re,
# gc, threading, collections), whose verdicts must agree, and redis-server on
# a Unix socket under redis-benchmark, whose dataset digests must agree.
# Each fastalloc run writes its statistics (FASTALLOC_STATS, one file per
# process), and the allocations each program made are counted from them and
# held to within 2x of what was measured (below, "expected"): a preload that
# did not take, statistics not written or not parsable, or counts gone wrong
# all fail.  Each program runs under a time limit (FA_PROGRAM_LIMIT seconds,
# 600 by default), so that a hang fails the run instead of stalling CI.  The
# last line counts the checks: "programs: N passed, N failed, 0 skipped".
set -eu

full=0
if [ "${1:-}" = --full ]; then
    full=1
    shift
fi
[ $# -ge 1 ] || { echo "usage: run_programs.sh [--full] LIBRARY..." >&2; exit 2; }
# Absolute paths, before any cd.
libs=""
for lib in "$@"; do
    case $lib in /*) ;; *) lib=$(pwd)/$lib ;; esac
    if [ ! -f "$lib" ]; then
        echo "FAIL: $lib does not exist"
        exit 1
    fi
    libs="$libs $lib"
done

progs="python3 sqlite3 git gcc cmp"
[ $full -eq 1 ] && progs="$progs redis-server redis-cli redis-benchmark"
for prog in $progs; do
    if ! command -v "$prog" >/dev/null 2>&1; then
        echo "FAIL: $prog is not installed (the test needs $progs)"
        exit 1
    fi
done

limit=${FA_PROGRAM_LIMIT:-600}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fa-programs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
failed=0
npass=0
nfail=0
mkdir "$tmp/stats"

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
# its runs are held to their output alone.
expected() {
    case $1.$full in
        python3.*) echo 9640000 ;;        # the same workload at both sizes
        pytests.1) echo 22800000 ;;      # one process makes 22 M; its children the rest
        sqlite3.0) echo 151000 ;;
        sqlite3.1) echo 3680000 ;;
        git.*) echo 110000 ;;
        gcc-compile.0) echo 2680000 ;;
        gcc-compile.1) echo 14600000 ;;
        redis.1) echo 2290000 ;;
        *) echo 0 ;;
    esac
}

# allocs NAME: the allocations fastalloc served to NAME's processes, from
# the statistics each wrote at exit.  Prints the count and exits 0 when it
# is within half to twice expected(NAME); otherwise prints why and exits 1:
# no statistics file, one that does not parse or lacks "allocs", or a count
# out of range.
allocs() {
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
print(n)
PY
}

# run NAME MODE CMD...: MODE is plain or fa; output to $tmp/NAME.MODE.out.
# A plain run is made once, for the first library.
run() {
    name=$1 mode=$2
    shift 2
    if [ "$mode" = plain ] && [ -e "$tmp/$name.plain.done" ]; then
        return 0
    fi
    # timeout exits 124 when the limit ends the program.
    if [ "$mode" = fa ]; then
        FASTALLOC_STATS="json:$tmp/stats/$name.%p.json" LD_PRELOAD="$lib" timeout -k 10 "$limit" "$@" \
            >"$tmp/$name.$mode.out" 2>"$tmp/$name.$mode.err" || {
            fail "$name under fastalloc exited with status $? (124: over the ${limit} s limit)"
            sed 's/^/  | /' "$tmp/$name.$mode.err" | tail -20
            return 1
        }
    else
        timeout -k 10 "$limit" "$@" >"$tmp/$name.$mode.out" 2>"$tmp/$name.$mode.err" || {
            fail "$name (without fastalloc) exited with status $? (124: over the ${limit} s limit)"
            sed 's/^/  | /' "$tmp/$name.$mode.err" | tail -20
            return 1
        }
        : >"$tmp/$name.plain.done"
    fi
}

# same_err NAME: the two runs' stderr agree (else sets failed and returns 1)
same_err() {
    if ! cmp -s "$tmp/$1.plain.err" "$tmp/$1.fa.err"; then
        fail "$1 stderr differs under fastalloc:"
        diff "$tmp/$1.plain.err" "$tmp/$1.fa.err" | head -20 | sed 's/^/  | /'
        return 1
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
        if [ "$(expected "$1")" -eq 0 ]; then
            pass "$1 ($(wc -l <"$tmp/$1.plain.out") lines identical, stderr identical)"
        elif n=$(allocs "$1" 2>"$tmp/allocs.err"); then
            pass "$1 ($(wc -l <"$tmp/$1.plain.out") lines identical, stderr identical; $n allocations)"
        else
            fail "$1: $(cat "$tmp/allocs.err")"
        fi
    fi
}

# check_lib: every program under $lib, against its plain run (made once,
# for the first library).
check_lib() {
rm -rf "$tmp/stats"/* "$tmp/fa.db" "$tmp/fa.git" "$tmp/fa.git.home"
echo "== $lib"
start=$(date +%s)
# ---------------------------------------------------------------- preload works
if LD_PRELOAD="$lib" cat /proc/self/maps | grep -qF "$(basename "$lib")"; then
    pass "LD_PRELOAD maps $(basename "$lib")"
else
    fail "LD_PRELOAD=$lib does not load it"
    echo "programs: $npass passed, $nfail failed, 0 skipped"
    exit 1
fi

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
if LD_PRELOAD="$lib" PYTHONMALLOC=malloc python3 -c '
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
    sed 's/^/  | /' "$tmp/ctypes.err"
fi

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
    same_err gcc-compile || :  # noted in $failed; the checks below still run
    if ! cmp -s plain.o fa.o; then
        fail "gcc -O2 produced a different object file under fastalloc"
    elif n=$(allocs gcc-compile 2>"$tmp/allocs.err"); then
        pass "gcc -O2 object files are byte-identical; $n allocations"
    else
        fail "gcc-compile: $(cat "$tmp/allocs.err")"
    fi
    if run gcc-link plain gcc plain.o -o plain.exe && run gcc-link fa gcc fa.o -o fa.exe; then
        same_err gcc-link || :
        run gcc-prog plain ./plain.exe && run gcc-prog fa ./fa.exe && same gcc-prog
        # the fastalloc-built program also runs under fastalloc
        run gcc-prog2 plain ./fa.exe && run gcc-prog2 fa ./fa.exe && same gcc-prog2
    fi
fi
cd /

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
        elif n=$(allocs pytests 2>"$tmp/allocs.err"); then
            pass "python3's regression tests ($pytests): $(tr '\n' ' ' <"$tmp/pytests.fa.v")under both; $n allocations"
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
# fastalloc's, which the server's memory map must show.
redis_run() {
    mode=$1
    sock=$tmp/redis.$mode.sock
    if [ "$mode" = fa ]; then
        FASTALLOC_STATS="json:$tmp/stats/redis.%p.json" LD_PRELOAD="$lib" redis-server --port 0 \
            --unixsocket "$sock" --save '' --appendonly no --enable-debug-command yes \
            >"$tmp/redis.$mode.log" 2>&1 &
    else
        redis-server --port 0 --unixsocket "$sock" --save '' --appendonly no --enable-debug-command yes \
            >"$tmp/redis.$mode.log" 2>&1 &
    fi
    pid=$!
    # Wait for the socket while the server lives: only a hang reaches the
    # deadline (60 s), not a slow start on a loaded machine.
    i=0
    while [ ! -S "$sock" ] && kill -0 $pid 2>/dev/null && [ $i -lt 600 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    if [ ! -S "$sock" ]; then
        fail "redis-server ($mode) did not open its socket"
        sed 's/^/  | /' "$tmp/redis.$mode.log" | tail -20
        kill $pid 2>/dev/null || :
        wait $pid 2>/dev/null || :
        return 1
    fi
    if [ "$mode" = fa ] && ! grep -qF "$(basename "$lib")" "/proc/$pid/maps"; then
        fail "redis-server does not map $(basename "$lib") under the preload"
    fi
    timeout -k 10 "$limit" redis-benchmark -s "$sock" -n 20000 -c 8 -d 300 -q \
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
    if [ $rc -ne 0 ]; then
        fail "redis-server ($mode) exited with status $rc"
        sed 's/^/  | /' "$tmp/redis.$mode.log" | tail -20
    fi
}
if [ $full -eq 1 ]; then
    [ -e "$tmp/redis.plain.out" ] || redis_run plain || :
    redis_run fa || :
    if ! cmp -s "$tmp/redis.plain.out" "$tmp/redis.fa.out"; then
        fail "redis's dataset differs under fastalloc:"
        diff "$tmp/redis.plain.out" "$tmp/redis.fa.out" | sed 's/^/  | /'
    elif [ "$(sed -n 1p "$tmp/redis.fa.out")" -lt 5 ]; then
        fail "redis holds $(sed -n 1p "$tmp/redis.fa.out") keys after the benchmark"
    elif n=$(allocs redis 2>"$tmp/allocs.err"); then
        pass "redis-server under redis-benchmark ($(grep -c 'requests per second' "$tmp/redis.fa.bench") commands, 20,000 requests each): dataset digests agree; $n allocations"
    else
        fail "redis: $(cat "$tmp/allocs.err")"
    fi
fi

echo "($lib: $(($(date +%s) - start)) s, with the runs without it where they were made)"
}

for lib in $libs; do
    check_lib
done

if [ $failed -ne 0 ]; then
    echo "run_programs: FAILED"
else
    echo "run_programs: all programs agree with and without fastalloc"
fi
echo "programs: $npass passed, $nfail failed, 0 skipped"
exit $failed
