#!/usr/bin/env python3
"""fastalloc benchmark driver (Python 3 standard library only).

Runs every workload of the WORKLOADS table under every allocator -- fastalloc
(<build>/libfastalloc.so), glibc (no preload) and, when installed, jemalloc,
tcmalloc and mimalloc -- by LD_PRELOAD, alternating the allocators round by
round (A B C D A B C D ...).  Prints one progress line per run to stderr, the
result tables to stdout, and writes <out>/report.md, <out>/results.json and
SVG plots (gnuplot) beside them.

Exit status: 0 when every run passed; 1 when any run failed (a validation
error, a crash, a timeout, a preload that did not take); 2 on a usage or setup
error.  `make bench QUICK=1` (CI) relies on that.  Performance targets that
are missed (fa_pool's ratios, its RSS bounds) are reported, not failures.

    python3 bench/run.py [--build build] [--quick] [--only PATTERN[,..]]
                         [--allocators NAME[,..]] [--lib NAME=PATH] ...

See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import glob
import json
import math
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent

FULL_ROUNDS = 3
QUICK_ROUNDS = 2


# --------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    """One benchmark configuration: a program, its arguments, what to read.

    binary   program name in <build>/bench/ (built by bench/CMakeLists.txt), or
             an absolute path, or a command found on PATH.
    args     its arguments; "{key}" is replaced by params[key].
    params   values for a full run; quick: overrides for --quick (fewer
             operations).  --set KEY=VALUE overrides both.
    metric   the key to read from the program's output: the last stdout line
             that is a JSON object (or key=value pairs).  "wall_s",
             "utime_s", "stime_s" and "maxrss_kib" may instead come from
             runwrap's measurement of the whole process.  scale multiplies it
             (ops/s -> M ops/s).
    table    workloads with the same table are printed together.
    kind     "alloc": run under every allocator, rounds times (the default);
             "once": run once, without a preload (no allocator involved);
             "callgrind": run once per allocator under callgrind (exact
             instruction counts, see icount.c).
    only     run under these allocators only (e.g. fastalloc's own APIs).
    label    the name of the row instead of the allocator's (e.g. "fa_pool").
    compare_to  the workload whose rows give this row's references (glibc's
             median and the best peer's), e.g. fa_pool against malloc.
    extras   more columns: (output key, header, format) -- the median of that
             key over the rounds; format "kib" (shown in MiB), "mib", "num".
    threads, plot  x value and plot family for the thread-scaling plots.
    rounds   rounds for this workload (full, quick); 0 = the run's default.
    full     part of a default full run (else only with --only).
    """

    name: str
    binary: str
    args: tuple[str, ...]
    params: dict = field(default_factory=dict)
    quick: dict = field(default_factory=dict)
    metric: str = "ns_per_pair"
    unit: str = "ns/pair"
    higher_is_better: bool = False
    scale: float = 1.0
    table: str = "malloc_micro"
    title: str = ""
    timeout_s: float = 120.0
    kind: str = "alloc"
    only: tuple[str, ...] = ()
    label: str = ""
    compare_to: str = ""
    extras: tuple = ()
    threads: int = 0
    plot: str = ""
    rounds: tuple[int, int] = (0, 0)
    full: bool = True

    def argv(self, overrides: dict, quick: bool) -> list[str]:
        values = dict(self.params)
        if quick:
            values.update(self.quick)
        values.update(overrides)
        out = []
        for a in self.args:  # plain replacement: other braces stay as they are
            for k, v in values.items():
                a = a.replace("{" + k + "}", str(v))
            out.append(a)
        return out

    def runs_under(self, alloc: "Allocator") -> bool:
        return not self.only or alloc.name in self.only


def micro(mode: str, sizes: str, threads: int, live: int = 64, *, table="malloc_micro",
          prefix="micro", ops="10M", quick_ops="1M", per_s=False, plot="", full=True) -> Workload:
    """A malloc_micro configuration (see malloc_micro.c)."""
    size_name = "mixed" if "-" in sizes or "," in sizes else sizes
    mode_name = mode if mode == "reuse" else f"window{live}"
    args = ["--mode", mode, "--sizes", sizes, "--threads", str(threads), "--ops", "{ops}"]
    if mode == "window":
        args[2:2] = ["--live", str(live)]
    size_text = "sizes 16..1024 (step 16, shuffled)" if size_name == "mixed" else f"{sizes} B"
    mode_text = ("malloc+free at once" if mode == "reuse"
                 else f"{live} live blocks, free oldest + malloc new")
    name = (f"{prefix}-{mode_name}-{size_name}-{threads}t" if prefix == "micro"
            else f"{prefix}-{mode_name}-{threads}t")
    extra = dict(metric="ops_per_s", unit="M ops/s", higher_is_better=True, scale=1e-6) if per_s else {}
    return Workload(
        name=name, binary="malloc_micro", args=tuple(args),
        params={"ops": ops},   # malloc+free pairs per thread
        quick={"ops": quick_ops},
        title=f"{mode_text}, {size_text}, {threads} thread{'s' if threads > 1 else ''}",
        table=table, threads=threads, plot=plot, full=full, **extra)


SHUFFLE_THREADS = (1, 2, 4, 8, 16)


def objpool_shuffle(threads: int, api: str) -> Workload:
    pool = api == "pool"
    base = f"objpool-shuffle-{threads}t"
    return Workload(
        name=f"objpool-shuffle-pool-{threads}t" if pool else base,
        binary="objpool",
        args=("--mode", "shuffle", "--api", api, "--threads", str(threads),
              "--objects", "{objects}", "--rounds", "{rounds}"),
        params={"objects": "100k", "rounds": 5}, quick={"objects": "10k", "rounds": 2},
        metric="alloc_free_ms", unit="ms", table="objpool-shuffle",
        title=(f"{threads} thread(s) x 100k x 64 B: allocate, shuffle, free; "
               f"{'fa_pool_get/put' if pool else 'malloc/free'}; allocate+free phases timed"),
        extras=(("ns_per_pair", "ns/pair/thread", "num"), ("alloc_ms", "allocate ms", "num"),
                ("free_ms", "free ms", "num")),
        only=("fastalloc",) if pool else (), label="fa_pool" if pool else "",
        compare_to=base if pool else "", threads=threads, plot="objpool-shuffle",
        timeout_s=300)


def objpool_rss(api: str) -> Workload:
    pool = api == "pool"
    return Workload(
        name="objpool-rss-pool" if pool else "objpool-rss",
        binary="objpool",
        args=("--mode", "rss", "--api", api, "--threads", "16", "--objects", "{objects}"),
        params={"objects": "100k"}, quick={"objects": "100k"},
        metric="live1_mib", unit="MiB", table="objpool-rss",
        title="16 threads x 100k x 64 B live, freed, again: VmRSS at each step",
        extras=(("live2_kib", "2nd live", "kib"), ("freed2_kib", "2nd freed", "kib"),
                ("exit_kib", "threads exited", "kib"))
        + ((("trim_kib", "after fa_pool_trim", "kib"),) if pool else ()),
        only=("fastalloc",) if pool else (), label="fa_pool" if pool else "",
        compare_to="objpool-rss" if pool else "")


# 38 small sizes (16, 42, ..., 978 B) and two large ones.
MIXED_LARGE = ",".join([str(16 + 26 * i) for i in range(38)] + ["300000", "900000"])

# The suite.  Add entries here (and programs to bench/CMakeLists.txt).
WORKLOADS: list[Workload] = [
    # -- malloc_micro: the first harness's micro-benchmark (64 B with 2 and
    #    32 threads is the threads-64b table below)
    *[micro(mode, sizes, threads, full=not (sizes == "64" and threads == 2))
      for mode in ("reuse", "window") for sizes in ("16-1024", "64") for threads in (1, 2)],

    # -- malloc_micro with 1 block in 20 large (300 KiB or 900 KiB): their
    #    frees keep the page heap's dirty memory above its purge floor, so
    #    this is where the purging policy shows (DESIGN.md, "Memory that
    #    comes back").
    Workload("micro-window256-mixedlarge-4t", "malloc_micro",
             ("--mode", "window", "--live", "256", "--sizes", MIXED_LARGE, "--threads", "4",
              "--ops", "{ops}"),
             params={"ops": "400k"}, quick={"ops": "40k"}, table="malloc_micro", threads=4,
             title="256 live blocks per thread, free oldest + malloc new, 38 sizes 16..978 B "
                   "and 300 KiB, 900 KiB (1 block in 20), 4 threads"),

    # -- 1. strings (seed 000)
    Workload("strings-1024", "strings",
             ("--buffers", "{buffers}", "--size", "1024", "--rounds", "{rounds}"),
             params={"buffers": 10000, "rounds": 200}, quick={"buffers": 10000, "rounds": 3},
             metric="ns_per_buffer", unit="ns/buffer", table="strings",
             title="10,000 buffers of 1,024 B, malloc+memset, all live, then freed; -O2 loop"),
    Workload("strings-1024-O0", "strings_O0",
             ("--buffers", "{buffers}", "--size", "1024", "--rounds", "{rounds}"),
             params={"buffers": 10000, "rounds": 200}, quick={"buffers": 10000, "rounds": 3},
             metric="ns_per_buffer", unit="ns/buffer", table="strings",
             title="the same loop compiled at -O0 (allocators stay -O2 in their libraries)"),
    Workload("strings-1024-sized", "strings",
             ("--buffers", "{buffers}", "--size", "1024", "--rounds", "{rounds}", "--free", "sized"),
             params={"buffers": 10000, "rounds": 200}, quick={"buffers": 10000, "rounds": 3},
             metric="ns_per_buffer", unit="ns/buffer", table="strings",
             title="-O2 loop, freed with fa_free_sized(p, 1024)",
             only=("fastalloc",), label="fa_free_sized", compare_to="strings-1024"),

    # -- 2. objpool-shuffle (seed 001): malloc, then fa_pool, per thread count
    *[w for t in SHUFFLE_THREADS for w in (objpool_shuffle(t, "malloc"), objpool_shuffle(t, "pool"))],

    # -- 3. objpool-rss (seed 001)
    objpool_rss("malloc"), objpool_rss("pool"),

    # -- 4. threads-64b (seed 003)
    *[micro(mode, "64", threads, table="threads-64b", prefix="threads64", per_s=True,
            ops=ops, quick_ops=qops, plot=f"threads-64b-{mode}")
      for mode in ("reuse", "window")
      for threads, ops, qops in ((2, "10M", "1M"), (32, "500k", "50k"))],

    # -- 5. producer-consumer (remote frees)
    *[Workload(f"prodcons-{p}+{p}", "prodcons",
               ("--pairs", str(p), "--ops", "{ops}", "--min", "16", "--max", "512"),
               params={"ops": ops}, quick={"ops": "50k"},
               metric="ops_per_s", unit="M ops/s", higher_is_better=True, scale=1e-6,
               table="producer-consumer", threads=2 * p,
               title=f"{p} producer(s) -> SPSC ring -> {p} consumer(s), 16..512 B, consumer frees")
      for p, ops in ((1, "3M"), (4, "1M"))],

    # -- 6. larson-style server
    *[Workload(f"larson-{t}t", "larson",
               ("--threads", str(t), "--slots", "1000", "--ops", "{ops}", "--gen-ops", "{gen}",
                "--min", "10", "--max", "1000"),
               params={"ops": ops, "gen": "20k"}, quick={"ops": "40k", "gen": "10k"},
               metric="ops_per_s", unit="M ops/s", higher_is_better=True, scale=1e-6,
               table="larson", threads=t,
               title=f"{t} lineages x 1,000 slots of 10..1,000 B; a new thread every 20k ops")
      for t, ops in ((2, "4M"), (8, "1M"))],

    # -- 9. rss-after-peak
    Workload("rss-after-peak", "rsspeak",
             ("--threads", "4", "--peak-mib", "{peak}", "--min", "16", "--max", "1024",
              "--idle-s", "{idle}", "--interval-ms", "100"),
             params={"peak": 1024, "idle": 5}, quick={"peak": 128, "idle": 1.5},
             metric="rss_end_mib", unit="MiB", table="rss-after-peak",
             title="4 threads: 1 GiB of 16..1024 B blocks, freed, threads exit, idle 5 s",
             extras=(("free_s", "free phase s", "num"), ("rss_peak_kib", "at peak", "kib"),
                     ("rss_freed_kib", "freed", "kib"), ("rss_1s_kib", "1 s after", "kib")),
             rounds=(0, 1), timeout_s=300),

    # -- 10. many-threads
    Workload("many-threads", "manythreads",
             ("--threads", "256", "--live-kib", "1024", "--min", "16", "--max", "512",
              "--repeat", "{repeat}", "--sample-ms", "10"),
             params={"repeat": 4}, quick={"repeat": 1},
             metric="ops_per_s", unit="M ops/s", higher_is_better=True, scale=1e-6,
             table="many-threads", extras=(("rss_max_sampled_kib", "max VmRSS", "kib"),),
             title="256 threads, each 1 MiB live in 16..512 B blocks, freed, 4 times", timeout_s=300),

    # -- 7. encode-fixed64 (seed 004): no allocator involved, run once
    Workload("encode-fixed64", "coding_bench", ("--n", "{n}", "--n-text", "{nt}"),
             params={"n": "100M", "nt": "100M"}, quick={"n": "1M", "nt": "1M"},
             metric="encode_fixed64_ns", unit="ns/call", table="encode-fixed64", kind="once",
             title="fa__encode/decode_fixed64 vs sprintf(\"%llu\")/strtoull, 10^8 calls each",
             timeout_s=300),

    # -- 8. fast-path instructions (callgrind, exact)
    Workload("icount-64-reuse", "icount", ("--mode", "reuse", "--size", "64", "--n", "{n}", "--warm", "{warm}"),
             params={"n": "200k", "warm": "20k"}, quick={"n": "20k", "warm": "4k"}, metric="inside", unit="instr/pair", table="instructions",
             kind="callgrind", title="64 B malloc+free at once"),
    Workload("icount-64-window64", "icount",
             ("--mode", "window", "--live", "64", "--size", "64", "--n", "{n}", "--warm", "{warm}"),
             params={"n": "200k", "warm": "20k"}, quick={"n": "20k", "warm": "4k"}, metric="inside", unit="instr/pair", table="instructions",
             kind="callgrind", title="64 B, window of 64 live blocks"),
    Workload("icount-1k-reuse", "icount", ("--mode", "reuse", "--size", "1024", "--n", "{n}", "--warm", "{warm}"),
             params={"n": "200k", "warm": "20k"}, quick={"n": "20k", "warm": "4k"}, metric="inside", unit="instr/pair", table="instructions",
             kind="callgrind", title="1 KiB malloc+free at once"),
    Workload("icount-pool-64", "icount", ("--mode", "pool", "--size", "64", "--n", "{n}", "--warm", "{warm}"),
             params={"n": "200k", "warm": "20k"}, quick={"n": "20k", "warm": "4k"}, metric="inside", unit="instr/pair", table="instructions",
             kind="callgrind", only=("fastalloc",), label="fa_pool",
             title="fa_pool_get + fa_pool_put, 64 B"),
]

# Targets the issue sets for fa_pool (reported, not enforced).
POOL_TARGET_VS_GLIBC = 0.5
POOL_TARGET_VS_BEST = 0.7
POOL_RSS_SLACK = 0.03        # live RSS <= (objects + pointer arrays) * 1.03
POOL_RSS_FLAT = 0.01         # second round: at most 1% above the first
POOL_RSS_TRIM = 0.10         # after fa_pool_trim: under 10% of the peak

# Programs built by bench/CMakeLists.txt that have no .c file of their name.
EXTRA_TARGETS = {"strings_O0"}


# --------------------------------------------------------------------------
# Allocators
# --------------------------------------------------------------------------

@dataclass
class Allocator:
    name: str
    lib: str | None            # path to LD_PRELOAD; None for glibc
    package: str | None = None  # Debian package that provides it
    expect: str | None = None   # what the programs must report as "allocator"
    version: str = ""


GLIBC = Allocator("glibc", None, "libc6", "glibc")

# name, shared object to look for, Debian package
PEERS = [
    ("jemalloc", "libjemalloc.so.2", "libjemalloc2"),
    ("tcmalloc", "libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
    ("mimalloc", "libmimalloc.so.2", "libmimalloc2.0"),
]


def elf_machine(path: str) -> tuple[int, int] | None:
    """(ELF class, e_machine) of a file, or None if it is not ELF."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    order = "little" if head[5] == 1 else "big"
    return head[4], int.from_bytes(head[18:20], order)


def find_library(soname: str, want_machine) -> str | None:
    """Multiarch-aware search: our own triplet first, then any lib dir."""
    dirs = []
    triplet = sysconfig.get_config_var("MULTIARCH")
    if triplet:
        dirs += [f"/usr/lib/{triplet}", f"/lib/{triplet}"]
    dirs += sorted(glob.glob("/usr/lib/*-linux-gnu*")) + sorted(glob.glob("/lib/*-linux-gnu*"))
    dirs += ["/usr/lib64", "/lib64", "/usr/lib", "/lib", "/usr/local/lib"]
    seen = set()
    for d in dirs:
        path = os.path.join(d, soname)
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(path):
            continue
        seen.add(real)
        if want_machine is None or elf_machine(path) == want_machine:
            return path
    return None


def package_version(package: str) -> str:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def git_revision() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def discover_allocators(build: Path, extra: list[tuple[str, str]], want_machine):
    """Returns (available allocators in run order, skipped [(name, why)])."""
    found, skipped = [], []
    found.append(Allocator("fastalloc", str(build / "libfastalloc.so"), None, "fastalloc", git_revision()))
    found.append(Allocator("glibc", None, "libc6", "glibc", package_version("libc6")))
    for name, soname, package in PEERS:
        path = find_library(soname, want_machine)
        if path is None:
            skipped.append((name, f"{soname} not found; apt-get install -y {package}"))
        else:
            found.append(Allocator(name, path, package, name, package_version(package)))
    for name, path in extra:
        found.append(Allocator(name, str(Path(path).resolve()), None, None, "custom"))
    return found, skipped


# --------------------------------------------------------------------------
# Running one program
# --------------------------------------------------------------------------

@dataclass
class RunResult:
    workload: str
    allocator: str
    round: int
    ok: bool
    value: float | None = None
    maxrss_kib: int | None = None
    wall_s: float | None = None
    error: str = ""
    output: dict = field(default_factory=dict)
    stderr_tail: str = ""


def parse_output(text: str) -> dict:
    """The last stdout line that is a JSON object, else key=value pairs."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                return obj
    if lines:
        out = {}
        for tok in lines[-1].split():
            if "=" in tok:
                k, v = tok.split("=", 1)
                try:
                    out[k] = float(v)
                except ValueError:
                    out[k] = v
        return out
    return {}


def describe_status(exit_code: int, sig: int) -> str:
    if sig:
        try:
            return f"killed by signal {sig} ({signal.Signals(sig).name})"
        except ValueError:
            return f"killed by signal {sig}"
    if exit_code == 3:
        return "exit 3 (validation failed)"
    if exit_code == 127:
        return "exit 127 (could not execute)"
    return f"exit {exit_code}"


def parse_callgrind(path: str, function: str) -> tuple[int, int]:
    """(total Ir, self Ir of `function`) from a callgrind output file.

    Cost lines belong to the current fn= as self cost, except the line right
    after a calls= line, which is the inclusive cost of that call.  Names are
    compressed: "fn=(12) name" the first time, "fn=(12)" after."""
    names: dict[str, str] = {}
    total, self_cost = None, 0
    current, after_calls = "", False
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
                continue
            if line.startswith("fn="):
                spec = line[3:].strip()
                if spec.startswith("("):
                    ident, _, name = spec.partition(")")
                    name = name.strip()
                    if name:
                        names[ident] = name
                    current = names.get(ident, "")
                else:
                    current = spec
                after_calls = False
                continue
            if line.startswith("calls="):
                after_calls = True
                continue
            if line[:1].isdigit() or line[:1] in "+-*":
                if after_calls:
                    after_calls = False
                    continue
                if current == function:
                    parts = line.split()
                    if len(parts) >= 2:
                        self_cost += int(parts[1])
                continue
            if line.startswith(("cfn=", "cfi=", "cfl=", "cob=")):
                spec = line.split("=", 1)[1].strip()
                if line.startswith("cfn=") and spec.startswith("("):
                    ident, _, name = spec.partition(")")
                    if name.strip():
                        names[ident] = name.strip()
    if total is None:
        raise ValueError("no totals line")
    return total, self_cost


class Runner:
    def __init__(self, runwrap: Path | None, tmpdir: str, valgrind: str | None):
        self.runwrap = runwrap
        self.tmpdir = tmpdir
        self.valgrind = valgrind

    def wrap(self, w: Workload, argv: list[str]) -> list[str]:
        if w.kind == "callgrind":
            return [self.valgrind or "valgrind", "--tool=callgrind",
                    f"--callgrind-out-file={os.path.join(self.tmpdir, 'callgrind.out')}",
                    "--collect-atstart=no", "--toggle-collect=measure"] + argv
        return argv

    def command_line(self, w: Workload, alloc: Allocator, argv: list[str]) -> str:
        """A shell command that reproduces one run by hand."""
        argv = self.wrap(w, argv)
        if w.kind == "callgrind":
            argv = [a if not a.startswith("--callgrind-out-file=") else "--callgrind-out-file=/tmp/cg.out"
                    for a in argv]
        pre = f"LD_PRELOAD={shlex.quote(alloc.lib)} " if alloc.lib else ""
        return pre + " ".join(shlex.quote(a) for a in argv)

    def run(self, w: Workload, alloc: Allocator, argv: list[str], rnd: int, timeout: float) -> RunResult:
        res = RunResult(w.name, alloc.name, rnd, ok=False)
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        argv = self.wrap(w, argv)
        rufile = os.path.join(self.tmpdir, "rusage")
        for stale in (rufile, os.path.join(self.tmpdir, "callgrind.out")):
            if os.path.exists(stale):
                os.unlink(stale)
        if self.runwrap:
            pre = ["-e", f"LD_PRELOAD={alloc.lib}"] if alloc.lib else []
            cmd = [str(self.runwrap)] + pre + [rufile] + argv
        else:
            # Fallback: ru_maxrss then includes this Python process's peak.
            cmd = argv
            if alloc.lib:
                env["LD_PRELOAD"] = alloc.lib
        with tempfile.TemporaryFile(dir=self.tmpdir) as out, tempfile.TemporaryFile(dir=self.tmpdir) as err:
            t0 = time.monotonic()
            try:
                p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                     env=env, start_new_session=True)
            except OSError as e:
                res.error = f"cannot start: {e}"
                return res
            timed_out = False
            try:
                status, ru = self._wait(p, timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                self._kill(p)
                status, ru = self._wait(p, None)
            except KeyboardInterrupt:
                # The program runs in its own session: Ctrl-C did not reach it.
                self._kill(p)
                self._wait(p, None)
                p.returncode = -9
                raise
            wall = time.monotonic() - t0
            p.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4
            out.seek(0)
            err.seek(0)
            stdout = out.read().decode("utf-8", "replace")
            stderr = err.read().decode("utf-8", "replace")
        if w.kind == "callgrind":  # valgrind's banner is noise: keep the program's lines
            stderr = "\n".join(l for l in stderr.splitlines() if not l.startswith("=="))
        res.stderr_tail = "\n".join(stderr.strip().splitlines()[-8:])
        if timed_out:
            res.error = f"timed out after {timeout:.0f} s"
            return res

        exit_code = os.waitstatus_to_exitcode(status)
        sig = 0
        measured = {"wall_s": wall, "maxrss_kib": ru.ru_maxrss,
                    "utime_s": ru.ru_utime, "stime_s": ru.ru_stime}
        if exit_code < 0:
            sig, exit_code = -exit_code, -1
        if self.runwrap:
            if exit_code != 0:
                res.error = f"runwrap failed ({describe_status(exit_code, sig)})"
                return res
            try:
                with open(rufile) as f:
                    measured = parse_output(f.read())
            except OSError as e:
                res.error = f"runwrap wrote no result: {e}"
                return res
            exit_code, sig = int(measured.get("exit", -1)), int(measured.get("signal", 0))
        res.maxrss_kib = int(measured.get("maxrss_kib", 0)) or None
        res.wall_s = float(measured.get("wall_s", wall))

        if exit_code != 0 or sig:
            res.error = describe_status(exit_code, sig)
            return res
        if "cannot be preloaded" in stderr:
            res.error = "LD_PRELOAD did not take (ld.so: cannot be preloaded)"
            return res
        data = parse_output(stdout)
        res.output = data
        if data.get("valid") is not True:
            if data.get("valid") is False:
                res.error = "program reported valid=false"
            elif any(l.lstrip().startswith("{") for l in stdout.splitlines()):
                bad = next(l for l in reversed(stdout.splitlines()) if l.lstrip().startswith("{"))
                res.error = f"result line is not valid JSON: {bad.strip()[:160]}"
            else:
                res.error = "no result line with \"valid\": true in the program's output"
            return res
        if alloc.expect and "allocator" in data and data["allocator"] != alloc.expect:
            res.error = (f"wrong allocator: malloc was served by {data['allocator']}, "
                         f"expected {alloc.expect} (preload ineffective?)")
            return res
        if w.kind == "callgrind":
            try:
                total, own = parse_callgrind(os.path.join(self.tmpdir, "callgrind.out"), "measure")
            except (OSError, ValueError) as e:
                res.error = f"cannot read callgrind's output: {e}"
                return res
            n = float(data.get("n", 0)) or 1.0
            data["per_loop"] = total / n
            data["inside"] = (total - own) / n
        value = data.get(w.metric, measured.get(w.metric))
        try:
            res.value = float(value) * w.scale
        except (TypeError, ValueError):
            res.error = f"no '{w.metric}' in the program's output"
            return res
        if not math.isfinite(res.value):
            res.error = f"'{w.metric}' is not a finite number: {value}"
            return res
        res.ok = True
        return res

    @staticmethod
    def _wait(p, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG if deadline else 0)
            if pid == p.pid:
                return status, ru
            if deadline and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(p.args, timeout)
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    @staticmethod
    def _kill(p):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass


# --------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------

def fmt_num(v: float | None) -> str:
    if v is None:
        return "-"
    a = abs(v)
    if a >= 99.95:
        return f"{v:.0f}"
    if a >= 9.995:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_mib(mib: float | None) -> str:
    if mib is None or mib < 0:
        return "-"
    return f"{mib:.2f} MiB" if mib < 10 else f"{mib:.1f} MiB"


def fmt_rss(kib: float | None) -> str:
    return "-" if not kib or kib < 0 else fmt_mib(kib / 1024)


def fmt_ratio(r: float | None) -> str:
    if r is None:
        return "-"
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.3f}x"


def fmt_extra(v, kind: str) -> str:
    if v is None:
        return "-"
    if kind == "kib":
        return fmt_rss(v)
    if kind == "mib":
        return fmt_mib(v)
    return fmt_num(v)


def median_of(values):
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def row_name(w: Workload, alloc_name: str) -> str:
    return w.label or alloc_name


def summarize(w: Workload, allocs: list[Allocator], runs: list[RunResult],
              refs: list[dict] | None = None) -> list[dict]:
    """One row per allocator for one workload.  refs: the rows of the
    workload named by w.compare_to (its glibc and best peer are then the
    references)."""
    rows = []
    for a in allocs:
        if not w.runs_under(a):
            continue
        rs = [r for r in runs if r.workload == w.name and r.allocator == a.name]
        if not rs:
            continue
        good = [r for r in rs if r.ok]
        bad = [r for r in rs if not r.ok]
        vals = [r.value for r in good]
        rss = [r.maxrss_kib for r in good if r.maxrss_kib]
        row = {"workload": w.name, "allocator": a.name, "name": row_name(w, a.name),
               "runs": len(rs), "failed": len(bad),
               "errors": sorted({r.error for r in bad}), "values": vals,
               "median": statistics.median(vals) if vals and not bad else None,
               "min": min(vals) if vals else None, "max": max(vals) if vals else None,
               "maxrss_kib": max(rss) if rss else None,
               "extras": {}}
        for key, _, _ in w.extras:
            xs = [r.output.get(key) for r in good]
            xs = [float(x) for x in xs if isinstance(x, (int, float)) and x >= 0]
            row["extras"][key] = median_of(xs)
        # the run whose value is the median (for the plots of time series)
        if good:
            mid = sorted(good, key=lambda r: r.value)[(len(good) - 1) // 2]
            row["median_output"] = mid.output
        row["spread_pct"] = (100.0 * (row["max"] - row["min"]) / row["median"]
                             if row["median"] else None)
        rows.append(row)

    def ratio(v, ref):  # below 1 means better than ref, whichever way the metric goes
        if v is None or ref is None or v == 0 or ref == 0:
            return None
        return ref / v if w.higher_is_better else v / ref

    pick = max if w.higher_is_better else min
    reference = refs if refs is not None else rows
    glibc = next((r["median"] for r in reference if r["allocator"] == "glibc"), None)
    for r in rows:
        r["vs_glibc"] = ratio(r["median"], glibc)
        r["vs_best"], r["best"] = None, None
        if r["median"] is None:
            continue
        if refs is not None:  # another API of fastalloc: against the other allocators' malloc
            others = [o for o in refs if o["allocator"] != r["allocator"] and o["median"] is not None]
        else:
            others = [o for o in rows if o is not r and o["median"] is not None]
        if others:
            best = pick(others, key=lambda o: o["median"])
            r["vs_best"], r["best"] = ratio(r["median"], best["median"]), best["name"]
    return rows


# --------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------

def text_table(header: list[str], body: list[list[str]], seps: set[int], left=(0, 1)) -> str:
    """Columns in `left` left-aligned, the rest right-aligned.  Short rows (a
    failure note) print their last cell as is, outside the columns."""
    widths = [len(h) for h in header]
    for row in body:
        cells = row if len(row) == len(header) else row[:-1]
        for i, c in enumerate(cells):
            widths[i] = max(widths[i], len(c))
    left = set(left)

    def line(cells):
        if len(cells) < len(header):
            return "  ".join(c.ljust(widths[i]) for i, c in enumerate(cells[:-1])) + "  " + cells[-1]
        return "  ".join(c.ljust(wd) if i in left else c.rjust(wd)
                         for i, (c, wd) in enumerate(zip(cells, widths))).rstrip()
    out = [line(header), "  ".join("-" * wd for wd in widths)]
    for i, cells in enumerate(body):
        if i in seps:
            out.append("")
        out.append(line(cells))
    return "\n".join(out)


def md_table(header: list[str], body: list[list[str]], left=(0, 1)) -> str:
    def esc(c):
        return c.replace("|", "\\|")
    align = ["---" if i in left else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in cells + [""] * (len(header) - len(cells))) + " |"
              for cells in body]
    return "\n".join(lines)


@dataclass
class Table:
    name: str
    header: list[str]
    body: list[list[str]]
    seps: set = field(default_factory=set)
    left: tuple = (0, 1)
    notes: list[str] = field(default_factory=list)     # printed under the table
    subtables: list = field(default_factory=list)      # [(header, body, left)] under the notes
    bullets: list[str] = field(default_factory=list)   # a list under the subtables
    plots: list[str] = field(default_factory=list)     # SVG files, for the report


def alloc_table(tname: str, ws: list[Workload], rows_by: dict) -> Table:
    units = sorted({w.unit for w in ws})
    extras = []
    for w in ws:
        for key, head, kind in w.extras:
            if head not in [h for _, h, _ in extras]:
                extras.append((key, head, kind))
    better = "higher is better" if all(w.higher_is_better for w in ws) else \
        "lower is better" if not any(w.higher_is_better for w in ws) else ""
    header = ["workload", "allocator", f"median {units[0]}" if len(units) == 1 else "median",
              "min-max", "spread", "peak RSS"] + [h for _, h, _ in extras] + ["vs glibc", "vs best other"]
    body, seps = [], set()
    for w in ws:
        rows = rows_by.get(w.name, [])
        if not rows:
            continue
        if body:
            seps.add(len(body))
        for i, r in enumerate(rows):
            name = w.name if i == 0 else ""
            if r["failed"]:
                body.append([name, r["name"], f"FAILED {r['failed']}/{r['runs']} runs: {'; '.join(r['errors'])}"])
                continue
            cells = [name, r["name"], fmt_num(r["median"]), f"{fmt_num(r['min'])}-{fmt_num(r['max'])}",
                     f"{r['spread_pct']:.0f}%" if r["spread_pct"] is not None else "-",
                     fmt_rss(r["maxrss_kib"])]
            for key, head, kind in extras:
                cells.append(fmt_extra(r["extras"].get(key), kind) if key in r["extras"] else "")
            cells.append(fmt_ratio(r["vs_glibc"]))
            cells.append(f"{fmt_ratio(r['vs_best'])} ({r['best']})" if r["vs_best"] is not None else "-")
            body.append(cells)
    t = Table(tname, header, body, seps)
    if better:
        t.notes.append(f"{units[0] if len(units) == 1 else 'values'}: {better}; ratios are oriented so "
                       "that below 1.00x is better")
    return t


def coding_table(w: Workload, runs: list[RunResult]) -> Table:
    rs = [r for r in runs if r.workload == w.name]
    header = ["function", "ns/call", "vs the text route", "seconds for the calls"]
    t = Table("encode-fixed64", header, [], left=(0,))
    if not rs:
        return t
    r = rs[-1]
    if not r.ok:
        t.body.append(["encode-fixed64", f"FAILED: {r.error}"])
        return t
    d = r.output
    n, nt = d.get("n", 0), d.get("n_text", 0)
    t.body = [
        ["fa__encode_fixed64", fmt_num(d["encode_fixed64_ns"]),
         f"{fmt_ratio(d['encode_vs_sprintf'])} of sprintf", f"{d['encode_s']:.3f} s / {n:.0e}"],
        ["fa__decode_fixed64", fmt_num(d["decode_fixed64_ns"]),
         f"{fmt_ratio(d['decode_vs_strtoull'])} of strtoull", f"{d['decode_s']:.3f} s / {n:.0e}"],
        ['sprintf("%llu")', fmt_num(d["sprintf_ns"]), "", f"{d['sprintf_s']:.3f} s / {nt:.0e}"],
        ["strtoull", fmt_num(d["strtoull_ns"]), "", f"{d['strtoull_s']:.3f} s / {nt:.0e}"],
    ]
    t.notes.append("Run once, without a preload (no allocator involved); values of 1 to 20 digits. "
                   "That each function compiles to a single mov at -O2 (gcc and clang) is checked by "
                   "tests/test_coding.c.")
    return t


def icount_table(ws: list[Workload], allocs: list[Allocator], rows_by: dict) -> Table:
    t = Table("fast-path instructions", ["allocator"] + [w.name.replace("icount-", "") for w in ws],
              [], left=(0,))
    names = []
    for a in allocs:
        for w in ws:
            for r in rows_by.get(w.name, []):
                if r["allocator"] == a.name and r["name"] not in names:
                    names.append(r["name"])
    for name in names:
        cells = [name]
        for w in ws:
            r = next((r for r in rows_by.get(w.name, []) if r["name"] == name), None)
            if r is None:
                cells.append("")
            elif r["failed"]:
                cells.append("FAILED")
            else:
                out = r.get("median_output", {})
                cells.append(f"{out.get('inside', 0):.2f} ({out.get('per_loop', 0):.2f})")
        t.body.append(cells)
    t.notes.append("Instructions executed inside the allocator per malloc+free pair (fa_pool: "
                   "get+put); in brackets, the whole loop iteration (loop, calls, PLT). Callgrind "
                   "counts in the steady state, after an uncounted warm-up: exact and repeatable, "
                   "they do not drift with the machine's load. "
                   + "; ".join(f"{w.name.replace('icount-', '')}: {w.title}" for w in ws) + ".")
    return t


def rss_checks(rows_by: dict) -> tuple[list[str], list[str]]:
    """objpool-rss: growth of every allocator; fa_pool's three bounds.
    Returns (lines for the report and terminal, short summary lines)."""
    lines, summary = [], []
    for wname in ("objpool-rss", "objpool-rss-pool"):
        for r in rows_by.get(wname, []):
            out = r.get("median_output")
            if r["failed"] or not out:
                continue
            live1, live2 = out["live1_kib"], out["live2_kib"]
            growth = live2 - live1
            mark = "ok" if growth <= POOL_RSS_FLAT * live1 else "GROWS"
            lines.append(f"{r['name']}: live {fmt_rss(live1)}, freed {fmt_rss(out['freed1_kib'])}, "
                         f"live again {fmt_rss(live2)} (growth {growth / 1024:+.2f} MiB, {mark}), "
                         f"freed {fmt_rss(out['freed2_kib'])}, threads exited {fmt_rss(out['exit_kib'])}"
                         + (f", after fa_pool_trim {fmt_rss(out['trim_kib'])}" if out.get("trim_kib", -1) >= 0 else ""))
            if wname == "objpool-rss-pool":
                payload = out["objects"] * out["threads"] * out["size"]
                limit_b = (payload + out["ptr_array_bytes"]) * (1 + POOL_RSS_SLACK)
                live_b = live1 * 1024
                c1 = live_b <= limit_b
                c2 = growth <= POOL_RSS_FLAT * live1
                c3 = 0 <= out.get("trim_kib", -1) < POOL_RSS_TRIM * live1
                checks = [
                    f"fa_pool, all {out['objects'] * out['threads'] / 1e6:.1f} M objects live: VmRSS "
                    f"{live_b / 1e6:.1f} MB <= {limit_b / 1e6:.1f} MB ((objects {payload / 1e6:.1f} MB + "
                    f"pointer arrays {out['ptr_array_bytes'] / 1e6:.1f} MB) + {POOL_RSS_SLACK:.0%}): "
                    f"{'PASS' if c1 else 'FAIL'}",
                    f"fa_pool, second round: {growth / 1024:+.2f} MiB ({100 * growth / live1:+.2f}%, "
                    f"at most +{POOL_RSS_FLAT:.0%}): {'PASS' if c2 else 'FAIL'}",
                    f"fa_pool, after the threads exited and fa_pool_trim: {fmt_rss(out.get('trim_kib'))} "
                    f"= {100 * out.get('trim_kib', 0) / live1:.1f}% of the peak (under "
                    f"{POOL_RSS_TRIM:.0%}): {'PASS' if c3 else 'FAIL'}",
                ]
                lines += checks
                summary += checks
    return lines, summary


def pool_targets(rows_by: dict) -> tuple[list[list[str]], list[str]]:
    """fa_pool against glibc and the best malloc peer, per thread count."""
    body, summary = [], []
    for t in SHUFFLE_THREADS:
        r = next(iter(rows_by.get(f"objpool-shuffle-pool-{t}t", [])), None)
        if r is None or r["median"] is None:
            continue
        g, b = r["vs_glibc"], r["vs_best"]
        ok_g = g is not None and g <= POOL_TARGET_VS_GLIBC
        ok_b = b is not None and b <= POOL_TARGET_VS_BEST
        body.append([f"{t}", fmt_num(r["median"]), fmt_ratio(g), "PASS" if ok_g else "FAIL",
                     f"{fmt_ratio(b)} ({r['best']})", "PASS" if ok_b else "FAIL"])
        summary.append(f"fa_pool objpool-shuffle {t}t: {fmt_ratio(g)} of glibc "
                       f"({'PASS' if ok_g else 'FAIL'} <= {POOL_TARGET_VS_GLIBC:.2f}x), {fmt_ratio(b)} of "
                       f"the best malloc ({r['best']}; {'PASS' if ok_b else 'FAIL'} <= "
                       f"{POOL_TARGET_VS_BEST:.2f}x)")
    return body, summary


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summary_lines(workloads: list[Workload], rows_by: dict) -> list[str]:
    fa = [r for w in workloads if w.kind == "alloc" and not w.label
          for r in rows_by.get(w.name, []) if r["allocator"] == "fastalloc"]
    lines = []
    if not fa:
        return lines
    g = geomean([r["vs_glibc"] for r in fa])
    b = geomean([r["vs_best"] for r in fa])
    n = sum(1 for r in fa if r["median"] is not None)
    if g is not None:
        lines.append(f"fastalloc vs glibc, geometric mean over {n} workloads: {g:.2f}x")
    if b is not None:
        lines.append(f"fastalloc vs the best other allocator of each workload, geometric mean: {b:.2f}x")
    behind = [f"{r['workload']} {fmt_ratio(r['vs_best'])} of {r['best']}"
              for r in fa if r["vs_best"] is not None and r["vs_best"] > 1.0]
    if behind:
        lines.append(f"fastalloc is not the best in {len(behind)} of {n}: " + "; ".join(behind))
    return lines


# --------------------------------------------------------------------------
# Plots (gnuplot, SVG)
# --------------------------------------------------------------------------

def gp_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def run_gnuplot(gnuplot: str, out_dir: Path, stem: str, script: str) -> str | None:
    """Writes <stem>.gp and runs it; returns the SVG's name or None."""
    gp = out_dir / f"{stem}.gp"
    svg = out_dir / f"{stem}.svg"
    gp.write_text(script)
    try:
        r = subprocess.run([gnuplot, gp.name], cwd=out_dir, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"run.py: gnuplot failed on {gp}: {e}", file=sys.stderr)
        return None
    if r.returncode != 0 or not svg.exists():
        print(f"run.py: gnuplot failed on {gp}: {r.stderr.strip()[-400:]}", file=sys.stderr)
        return None
    return svg.name


# One colour per allocator in every plot; fastalloc's APIs in purples.
COLORS = {"fastalloc": "#6a3d9a", "fa_pool": "#b07cd8", "fa_free_sized": "#d4b9e8",
          "glibc": "#555555", "jemalloc": "#33a02c", "tcmalloc": "#ff7f00", "mimalloc": "#1f78b4"}
OTHER_COLORS = ["#e31a1c", "#a6761d", "#17becf", "#e7298a"]


def color(name: str) -> str:
    if name not in COLORS:
        COLORS[name] = OTHER_COLORS[len([c for c in COLORS if c not in
                                         ("fastalloc", "fa_pool", "fa_free_sized", "glibc",
                                          "jemalloc", "tcmalloc", "mimalloc")]) % len(OTHER_COLORS)]
    return COLORS[name]


SVG_HEAD = ('set terminal svg size {w},{h} dynamic noenhanced font "sans,12" background "white"\n'
            'set output "{stem}.svg"\nset grid\nset key outside right top\n')


def plot_threads(gnuplot, out_dir, stem, title, ylabel, ws, rows_by, logy=False):
    """x = threads, one line per row name."""
    series: dict[str, list[tuple[int, float]]] = {}
    for w in ws:
        for r in rows_by.get(w.name, []):
            if r["median"] is not None:
                series.setdefault(r["name"], []).append((w.threads, r["median"]))
    if not series:
        return None
    blocks, plots = [], []
    for i, (name, pts) in enumerate(series.items()):
        blocks.append(f"$D{i} << EOD\n" + "\n".join(f"{x} {y}" for x, y in sorted(pts)) + "\nEOD\n")
        dash = " dt 2" if name == "fa_pool" else ""
        plots.append(f"$D{i} using 1:2 with linespoints lw 2 pt 7{dash} lc rgb {gp_quote(color(name))} "
                     f"title {gp_quote(name)}")
    xs = sorted({w.threads for w in ws})
    script = SVG_HEAD.format(w=900, h=480, stem=stem) + "".join(blocks)
    script += (f"set title {gp_quote(title)}\nset xlabel \"threads\"\nset ylabel {gp_quote(ylabel)}\n"
               "set logscale x 2\n" + ("set logscale y\n" if logy else "set yrange [0:*]\n")
               + f"set xtics ({', '.join(str(x) for x in xs)})\n"
               + f"set xrange [{xs[0] / 1.3}:{xs[-1] * 1.3}]\n"
               + "plot " + ", \\\n     ".join(plots) + "\n")
    return run_gnuplot(gnuplot, out_dir, stem, script)


def plot_ratios(gnuplot, out_dir, workloads, rows_by, alloc_names):
    """Clustered bars: each workload's ratio to glibc (below 1 = better).
    Rows of fastalloc's other APIs (fa_pool, fa_free_sized) join the cluster
    of the workload they compare to."""
    ws = [w for w in workloads if w.kind == "alloc" and rows_by.get(w.name)]
    labels = list(dict.fromkeys(w.label for w in ws if w.label))
    cols = [n for n in alloc_names if n == "fastalloc"] + labels + \
        [n for n in alloc_names if n not in ("fastalloc", "glibc")]
    clusters: dict[str, dict[str, float]] = {}
    for w in ws:
        key = w.compare_to or w.name
        for r in rows_by[w.name]:
            if r["vs_glibc"]:
                clusters.setdefault(key, {})[r["name"]] = r["vs_glibc"]
    lines = [name + " " + " ".join(f"{vals[c]:.4f}" if vals.get(c) else "NaN" for c in cols)
             for name, vals in clusters.items() if vals]
    if not lines:
        return None
    vals = [v for c in clusters.values() for v in c.values()]
    lo = 10 ** math.floor(math.log10(min(vals) * 0.9))
    hi = 10 ** math.ceil(math.log10(max(max(vals) * 1.1, 1.5)))
    tics = [t * 10 ** e for e in range(-4, 4) for t in (1, 3) if lo <= t * 10 ** e <= hi]
    script = SVG_HEAD.format(w=max(900, 60 * len(lines) + 260), h=560, stem="ratios")
    script += "$R << EOD\n" + "\n".join(lines) + "\nEOD\n"
    script += ('set title "median / glibc\'s median per workload (time, RSS, or inverted throughput: '
               'below 1 is better)"\n'
               "set style data histograms\nset style histogram clustered gap 1\n"
               "set style fill solid 0.85 border -1\nset boxwidth 0.9\n"
               f"set logscale y 10\nset yrange [{lo}:{hi}]\n"
               "set ytics (" + ", ".join(f'"{t:g}" {t:g}' for t in tics) + ")\n"
               "set xtics rotate by 45 right scale 0 font \",10\"\nset ylabel \"x glibc (log scale)\"\n"
               "set grid ytics\nset grid noxtics\nset key outside right top\nset bmargin 9\n"
               "set arrow from graph 0, first 1 to graph 1, first 1 nohead lw 1.5 lc rgb \"black\"\n"
               "plot " + ", ".join(f"$R using {i + 2}:xtic(1) lc rgb {gp_quote(color(c))} title {gp_quote(c)}"
                                   for i, c in enumerate(cols))
               + "\n")
    return run_gnuplot(gnuplot, out_dir, "ratios", script)


def plot_series(gnuplot, out_dir, stem, title, w: Workload, rows_by, xlabel, mark_free=False):
    blocks, plots = [], []
    for i, r in enumerate(rows_by.get(w.name, [])):
        out = r.get("median_output") or {}
        pts = out.get("series") or []
        if not pts:
            continue
        off = out.get("free_s", 0) if mark_free else 0
        blocks.append(f"$S{i} << EOD\n" + "\n".join(f"{t - off:.4f} {m:.3f}" for t, m in pts) + "\nEOD\n")
        plots.append(f"$S{i} using 1:2 with lines lw 2 lc rgb {gp_quote(color(r['name']))} "
                     f"title {gp_quote(r['name'])}")
    if not plots:
        return None
    script = SVG_HEAD.format(w=900, h=480, stem=stem) + "".join(blocks)
    script += (f"set title {gp_quote(title)}\nset xlabel {gp_quote(xlabel)}\nset ylabel \"VmRSS (MiB)\"\n"
               "set yrange [0:*]\n")
    if mark_free:
        script += "set arrow from 0, graph 0 to 0, graph 1 nohead dt 2\n"
    script += "plot " + ", \\\n     ".join(plots) + "\n"
    return run_gnuplot(gnuplot, out_dir, stem, script)


def make_plots(out_dir: Path, workloads, rows_by, alloc_names) -> tuple[dict, str]:
    """{table name: [svg, ...]}, and a note when there are no plots."""
    gnuplot = shutil.which("gnuplot")
    for old in list(out_dir.glob("*.svg")) + list(out_dir.glob("*.gp")):
        old.unlink()
    if gnuplot is None:
        return {}, "gnuplot not found (apt-get install -y gnuplot-nox): no plots"
    plots: dict[str, list[str]] = {}

    def add(table, svg):
        if svg:
            plots.setdefault(table, []).append(svg)

    by_plot: dict[str, list[Workload]] = {}
    for w in workloads:
        if w.plot:
            by_plot.setdefault(w.plot, []).append(w)
    if "objpool-shuffle" in by_plot:
        add("objpool-shuffle", plot_threads(
            gnuplot, out_dir, "objpool-shuffle",
            "objpool-shuffle: allocate+free time, 64 B objects",
            "ms (lower is better)", by_plot["objpool-shuffle"], rows_by, logy=True))
    for mode in ("reuse", "window"):
        if f"threads-64b-{mode}" in by_plot:
            add("threads-64b", plot_threads(
                gnuplot, out_dir, f"threads-64b-{mode}",
                f"threads-64b ({'malloc+free at once' if mode == 'reuse' else 'window of 64 live'})",
                "M ops/s (higher is better)", by_plot[f"threads-64b-{mode}"], rows_by))
    add("ratios", plot_ratios(gnuplot, out_dir, workloads, rows_by, alloc_names))
    for w in workloads:
        if w.name == "rss-after-peak":
            add("rss-after-peak", plot_series(gnuplot, out_dir, "rss-after-peak",
                                              "rss-after-peak: VmRSS from the frees on (0 = last free)",
                                              w, rows_by, "seconds after the last free", mark_free=True))
        if w.name == "many-threads":
            add("many-threads", plot_series(gnuplot, out_dir, "many-threads",
                                            "many-threads: VmRSS while 256 threads churn",
                                            w, rows_by, "seconds"))
    return plots, ""


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------

TABLE_INTRO = {
    "malloc_micro": "The first harness's micro-benchmark: one thread or two, each on its own blocks.",
    "strings": "Seed 000: 10,000 buffers of 1,024 B, zero-filled, all live, then all freed; per buffer "
               "(malloc + memset + free). The seed's unit, seconds for 1,000 rounds, is ns/buffer x 0.01. "
               "The -O0 row is the same loop compiled at -O0; the allocators stay -O2 in their own "
               "libraries, so only the loop gets slower (the seed's pool, compiled into the program, "
               "lost its whole advantage at -O0). fa_free_sized: fastalloc's sized free, against the "
               "-O2 row's glibc and best other allocator.",
    "objpool-shuffle": "Seed 001: T threads each allocate 100,000 objects of 64 B, Fisher-Yates shuffle "
                       "the pointers, free them in that order; the threads go through the phases "
                       "together (barriers) and only the allocate and free phases are timed (first "
                       "thread's start to last thread's end, summed over the rounds); the shuffle and "
                       "the checks between the phases are not. The seed ran 50 rounds; this suite runs "
                       "5 (full) to fit its time budget. 8 and 16 threads oversubscribe this machine's "
                       "{cpus} CPUs: those rows measure behaviour under preemption (lock holders "
                       "descheduled), not parallel scaling. fa_pool rows: fastalloc's object pool "
                       "(fa_pool_get/fa_pool_put), against glibc and the best other allocator's malloc.",
    "objpool-rss": "Seed 001: 16 threads x 100,000 x 64 B (102.4 MB of objects, 12.8 MB of pointer "
                   "arrays, mmap'd by the benchmark), VmRSS read by the main thread while the workers "
                   "hold their objects. median = VmRSS with everything live (first round).",
    "threads-64b": "Seed 003: threads each allocating and freeing 64 B blocks, at once (reuse) or "
                   "with a window of 64 live blocks. 32 threads on {cpus} CPUs: oversubscribed. The "
                   "seed's claim: 32 threads, system malloc ~2 M ops/s, a lock-free pool > 50 M ops/s.",
    "producer-consumer": "Every block is freed by another thread than the one that allocated it: "
                         "P producers allocate 16..512 B, fill it, pass it through an SPSC ring; P "
                         "consumers check it and free it. peak RSS = ru_maxrss of the process.",
    "larson": "Larson-style server: each lineage keeps 1,000 live objects of 10..1,000 B, replaces a "
              "random one per operation, and hands its array to a new thread every 20,000 operations "
              "(the old thread exits).",
    "rss-after-peak": "4 threads build a 1 GiB peak of 16..1024 B blocks, free it all and exit; the "
                      "process then stays idle (no allocator call) and VmRSS is sampled every 100 ms. "
                      "median = VmRSS 5 s after the last free (lower is better).",
    "many-threads": "256 threads at once, each allocating 1 MiB in 16..512 B blocks, freeing it, 4 "
                    "times. peak RSS = ru_maxrss; max VmRSS = highest 10 ms sample.",
}


def write_report(path: Path, meta: dict, allocs, skipped, tables: list[Table], summary, failures,
                 quick, plot_note):
    cpus = meta["host"]["cpus"]
    lines = ["# fastalloc benchmark report", ""]
    lines.append(f"- date: {meta['date']}")
    lines.append(f"- fastalloc: {meta['revision']} ({meta['build']})")
    h = meta["host"]
    lines.append(f"- host: {h['cpu']}, {h['cpus']} CPUs, Linux {h['kernel']} {h['machine']}")
    lines.append(f"- load average at start / end: {meta['load_start']} / {meta['load_end']}")
    lines.append(f"- mode: {'quick (smoke run: tiny counts, numbers not meaningful)' if quick else 'full'}, "
                 f"{meta['rounds']} rounds per workload and allocator, allocators alternating each round; "
                 f"{meta['elapsed_s']:.0f} s in all")
    lines += ["", "## Allocators", "", "| allocator | library | version |", "|---|---|---|"]
    for a in allocs:
        lines.append(f"| {a.name} | {a.lib or '(none: glibc malloc)'} | {a.version or '-'} |")
    for name, why in skipped:
        lines.append(f"| {name} | skipped: {why} | - |")
    lines += ["", "Columns: median of the rounds, min-max over the rounds, spread = (max-min)/median, "
              "peak RSS = highest ru_maxrss of the rounds (whole process), vs glibc = the row's median "
              "against glibc's, vs best other = against the best median among the other allocators "
              "(named). Ratios are oriented so that below 1.00x is better, also for throughput. "
              "See bench/README.md.", ""]
    if summary:
        lines += ["## Summary", ""] + [f"- {s}" for s in summary] + [""]
    if plot_note:
        lines += [f"Plots: {plot_note}.", ""]
    for t in tables:
        lines += [f"## {t.name}", ""]
        intro = TABLE_INTRO.get(t.name)
        if intro:
            lines += [intro.format(cpus=cpus), ""]
        if t.body:
            lines += [md_table(t.header, t.body, t.left), ""]
        for n in t.notes:
            lines += [n, ""]
        for header, body, left in t.subtables:
            lines += [md_table(header, body, left), ""]
        if t.bullets:
            lines += [f"- {b}" for b in t.bullets] + [""]
        for svg in t.plots:
            lines += [f"![{t.name}]({svg})", ""]
    if failures:
        lines += ["## Failures", ""]
        for (wname, aname, error), (rounds_failed, cmd, tail) in failures.items():
            lines.append(f"- {wname} / {aname}, round {','.join(map(str, rounds_failed))}: {error}")
            lines.append(f"  - reproduce: `{cmd}`")
            if tail:
                lines.append("  - stderr: `" + tail.replace("`", "'").replace("\n", " / ") + "`")
        lines.append("")
    path.write_text("\n".join(lines))


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------

def host_info() -> dict:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"kernel": platform.release(), "machine": platform.machine(), "cpu": cpu,
            "cpus": os.cpu_count(), "python": platform.python_version()}


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def group_failures(failures):
    """{(workload, allocator, error): ([rounds], reproducer, stderr tail)}"""
    grouped = {}
    for r, cmd in failures:
        entry = grouped.setdefault((r.workload, r.allocator, r.error), ([], cmd, r.stderr_tail))
        entry[0].append(r.round)
    return grouped


def cmake_cache_value(build: Path, key: str) -> str | None:
    try:
        with open(build / "CMakeCache.txt") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def ensure_built(build: Path, targets: list[str]) -> str | None:
    """A build folder configured before bench/CMakeLists.txt had these
    programs has no targets for them: configure it again and build them.
    Returns why the benchmarks cannot be built there, or None."""
    missing = [t for t in targets if not (build / "bench" / t).exists()]
    if not missing:
        return None
    if not (build / "CMakeCache.txt").exists():
        return f"{build} is not a configured build folder (run make)"
    if cmake_cache_value(build, "FA_SANITIZE"):
        return f"{build} is a sanitizer build, which does not build the benchmarks"
    print(f"run.py: {', '.join(missing)} missing in {build}/bench; configuring and building them",
          file=sys.stderr)
    r = subprocess.run(["cmake", "-S", str(REPO), "-B", str(build)], stdout=subprocess.DEVNULL)
    if r.returncode == 0:
        r = subprocess.run(["cmake", "--build", str(build), "-j", str(os.cpu_count() or 2),
                            "--target", *missing], stdout=subprocess.DEVNULL)
    return None if r.returncode == 0 else "building the benchmarks failed"


def resolve_binary(build: Path, name: str) -> str | None:
    if os.path.isabs(name):
        return name if os.access(name, os.X_OK) else None
    local = build / "bench" / name
    if local.exists():
        return str(local)
    return shutil.which(name)


def select_workloads(patterns: list[str]) -> list[Workload]:
    if not patterns:
        return [w for w in WORKLOADS if w.full]
    chosen = []
    for pat in patterns:
        if pat == "all":
            hits = list(WORKLOADS)
        else:
            hits = [w for w in WORKLOADS if fnmatch.fnmatchcase(w.name, pat) or w.table == pat]
        if not hits:
            raise SystemExit(f"run.py: --only {pat!r} matches no workload (see --list)")
        chosen += [w for w in hits if w not in chosen]
    # a row that is compared to another workload needs that one too
    refs = {w.compare_to for w in chosen if w.compare_to}
    chosen += [w for w in WORKLOADS if w.name in refs and w not in chosen]
    return [w for w in WORKLOADS if w in chosen]


def split_list(values: list[str] | None) -> list[str]:
    return [x.strip() for v in values or [] for x in v.split(",") if x.strip()]


def fmt_clock(s: float) -> str:
    return f"{int(s) // 60}:{int(s) % 60:02d}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Benchmark fastalloc against glibc, jemalloc, tcmalloc "
                                 "and mimalloc by LD_PRELOAD.")
    ap.add_argument("--build", default=str(REPO / "build"),
                    help="build folder holding libfastalloc.so and bench/ (default: %(default)s)")
    ap.add_argument("--quick", action="store_true",
                    help=f"far fewer operations and {QUICK_ROUNDS} rounds (smoke test, CI)")
    ap.add_argument("--rounds", type=int, help=f"rounds per workload and allocator "
                    f"(default {FULL_ROUNDS}, {QUICK_ROUNDS} with --quick)")
    ap.add_argument("--only", action="append", metavar="PATTERN[,..]",
                    help="run only these workloads: names, shell patterns (micro-window*), table "
                    "names, or 'all' (also the configurations a default run leaves out)")
    ap.add_argument("--allocators", action="append", metavar="NAME[,..]",
                    help="run only these allocators, in this order (fastalloc, glibc, jemalloc, "
                    "tcmalloc, mimalloc, or a --lib name)")
    ap.add_argument("--lib", action="append", default=[], metavar="NAME=PATH",
                    help="also measure the allocator at PATH under NAME (e.g. an older fastalloc build)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a workload parameter, e.g. --set ops=5M")
    ap.add_argument("--timeout", type=float, help="seconds before a run is killed (default per workload)")
    ap.add_argument("--out", default=str(BENCH_DIR / "results"),
                    help="folder for report.md, results.json and the plots (default: %(default)s)")
    ap.add_argument("--list", action="store_true", help="list the workloads and allocators, run nothing")
    args = ap.parse_args(argv)

    build = Path(args.build).resolve()
    quick = args.quick
    default_rounds = args.rounds or (QUICK_ROUNDS if quick else FULL_ROUNDS)
    if default_rounds < 1:
        ap.error("--rounds must be at least 1")
    overrides = {}
    for kv in args.set:
        if "=" not in kv:
            ap.error(f"--set wants KEY=VALUE, got {kv!r}")
        k, v = kv.split("=", 1)
        overrides[k] = v
    extra = []
    for kv in args.lib:
        if "=" not in kv:
            ap.error(f"--lib wants NAME=PATH, got {kv!r}")
        name, path = kv.split("=", 1)
        if not os.path.isfile(path):
            ap.error(f"--lib {name}: no such file {path}")
        extra.append((name, path))

    try:
        workloads = select_workloads(split_list(args.only))
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    own_machine = elf_machine(sys.executable)
    allocs, skipped = discover_allocators(build, extra, own_machine)
    names = [a.name for a in allocs]
    if len(set(names)) != len(names):
        print("run.py: two allocators share a name; pick another --lib NAME", file=sys.stderr)
        return 2
    wanted = split_list(args.allocators)
    if wanted:
        known = set(names) | {n for n, _ in skipped}
        for n in wanted:
            if n not in known:
                print(f"run.py: unknown allocator {n!r} (known: {', '.join(sorted(known))})", file=sys.stderr)
                return 2
            for sn, why in skipped:
                if sn == n:
                    print(f"run.py: {n} was asked for but is not installed: {why}", file=sys.stderr)
                    return 2
        allocs = [next(a for a in allocs if a.name == n) for n in dict.fromkeys(wanted)]
        skipped = []

    def rounds_of(w: Workload) -> int:
        if w.kind != "alloc":
            return 1
        r = w.rounds[1 if quick else 0]
        return r if r and not args.rounds else default_rounds

    def allocs_of(w: Workload) -> list[Allocator]:
        return [GLIBC] if w.kind == "once" else [a for a in allocs if w.runs_under(a)]

    if args.list:
        for w in workloads:
            who = "once, no preload" if w.kind == "once" else (
                f"{w.kind}, " if w.kind != "alloc" else "") + (", ".join(w.only) if w.only else "all")
            print(f"{w.name:28} {w.binary} {' '.join(w.argv(overrides, quick))}   # {w.title} [{who}]")
        print()
        for a in allocs:
            print(f"{a.name:12} {a.lib or '(no preload)'}")
        for n, why in skipped:
            print(f"{n:12} skipped: {why}")
        return 0

    for a in allocs:
        if a.lib and not os.path.isfile(a.lib):
            print(f"run.py: {a.name}: {a.lib} not found; build it first (make)", file=sys.stderr)
            return 2
    valgrind = shutil.which("valgrind")
    why_no_callgrind = "" if valgrind else \
        "valgrind not found (apt-get install -y valgrind): instruction counts skipped"
    if not valgrind:
        workloads = [w for w in workloads if w.kind != "callgrind"]
    # Programs of ours: built by bench/CMakeLists.txt (others: absolute or on PATH).
    ours = sorted({w.binary for w in workloads
                   if (BENCH_DIR / f"{w.binary}.c").exists() or w.binary in EXTRA_TARGETS} | {"runwrap"})
    why = ensure_built(build, ours)
    if why:
        print(f"run.py: {why}", file=sys.stderr)
        return 2
    binaries = {}
    for w in workloads:
        path = resolve_binary(build, w.binary)
        if path is None:
            print(f"run.py: program {w.binary} not found (in {build}/bench or on PATH)", file=sys.stderr)
            return 2
        binaries[w.name] = path
    runwrap = build / "bench" / "runwrap"
    if not runwrap.exists():
        print(f"run.py: {runwrap} missing: peak RSS will include this Python process's own",
              file=sys.stderr)
        runwrap = None

    for n, why in skipped:
        print(f"skip {n}: {why}", file=sys.stderr)
    if why_no_callgrind:
        print(f"skip fast-path instructions: {why_no_callgrind}", file=sys.stderr)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    total = sum(rounds_of(w) * len(allocs_of(w)) for w in workloads)
    print(f"run.py: {len(workloads)} workloads x {len(allocs)} allocators "
          f"({', '.join(a.name for a in allocs)}), {default_rounds} rounds = {total} runs"
          f"{' (quick)' if quick else ''}", file=sys.stderr)
    meta = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "revision": git_revision(), "build": str(build), "host": host_info(),
            "load_start": loadavg(), "rounds": default_rounds, "quick": quick}
    t_start = time.monotonic()
    runs: list[RunResult] = []
    failures = []
    step = 0
    with tempfile.TemporaryDirectory(prefix="fa-bench-") as tmp:
        runner = Runner(runwrap, tmp, valgrind)
        try:
            # A workload that compares to another (fa_pool against malloc)
            # runs in the same alternation as that one: A B C D E P A B ...
            names_run = {w.name for w in workloads}
            groups = [[w] + [d for d in workloads if d.compare_to == w.name]
                      for w in workloads if not (w.compare_to and w.compare_to in names_run)]
            for group in groups:
                given_up = set()
                nr = max(rounds_of(w) for w in group)
                for rnd in range(1, nr + 1):
                    for w in group:
                        if rnd > rounds_of(w):
                            continue
                        argv_w = [binaries[w.name]] + w.argv(overrides, quick)
                        timeout = args.timeout or w.timeout_s
                        for a in allocs_of(w):
                            step += 1
                            clock = fmt_clock(time.monotonic() - t_start)
                            who = "-" if w.kind == "once" else row_name(w, a.name)
                            prefix = (f"[{step:{len(str(total))}}/{total} {clock}] {w.name} "
                                      f"round {rnd}/{rounds_of(w)} {who:<13}")
                            if (w.name, a.name) in given_up:
                                print(f"{prefix} skipped (timed out before)", file=sys.stderr)
                                continue
                            r = runner.run(w, a, argv_w, rnd, timeout)
                            runs.append(r)
                            if r.ok:
                                print(f"{prefix} {fmt_num(r.value):>7} {w.unit}  rss {fmt_rss(r.maxrss_kib)}",
                                      file=sys.stderr)
                            else:
                                cmd = runner.command_line(w, a, argv_w)
                                failures.append((r, cmd))
                                print(f"{prefix} FAILED: {r.error}", file=sys.stderr)
                                for line in r.stderr_tail.splitlines():
                                    print(f"    | {line}", file=sys.stderr)
                                print(f"    reproduce: {cmd}", file=sys.stderr)
                                if r.error.startswith("timed out"):
                                    given_up.add((w.name, a.name))
        except KeyboardInterrupt:
            print("\nrun.py: interrupted; no report written", file=sys.stderr)
            return 130
    meta["elapsed_s"] = time.monotonic() - t_start
    meta["load_end"] = loadavg()

    # Rows, in the order of the table; references first (compare_to).
    rows_by: dict[str, list[dict]] = {}
    for w in sorted(workloads, key=lambda w: bool(w.compare_to)):
        if w.kind == "once":
            continue
        refs = rows_by.get(w.compare_to) if w.compare_to else None
        rows_by[w.name] = summarize(w, allocs, runs, refs if w.compare_to else None)

    tables: list[Table] = []
    for tname in dict.fromkeys(w.table for w in workloads):
        ws = [w for w in workloads if w.table == tname]
        if ws[0].kind == "once":
            tables.append(coding_table(ws[0], runs))
        elif ws[0].kind == "callgrind":
            tables.append(icount_table(ws, allocs, rows_by))
        else:
            tables.append(alloc_table(tname, ws, rows_by))
    if why_no_callgrind:
        tables.append(Table("fast-path instructions", [], [], notes=[why_no_callgrind]))

    summary = summary_lines(workloads, rows_by)
    pool_body, pool_summary = pool_targets(rows_by)
    rss_lines, rss_summary = rss_checks(rows_by)
    summary += pool_summary + rss_summary
    for t in tables:
        if t.name == "objpool-shuffle" and pool_body:
            t.notes.append("fa_pool against the targets of the issue (fa_pool's time at most "
                           f"{POOL_TARGET_VS_GLIBC:.2f}x glibc's and {POOL_TARGET_VS_BEST:.2f}x the best "
                           "malloc's, at every thread count):")
            t.subtables.append((["threads", "fa_pool ms", "vs glibc", f"<= {POOL_TARGET_VS_GLIBC:.2f}x",
                                 "vs best malloc", f"<= {POOL_TARGET_VS_BEST:.2f}x"], pool_body, (0,)))
        if t.name == "objpool-rss" and rss_lines:
            t.bullets += rss_lines

    plots, plot_note = make_plots(out_dir, workloads, rows_by, [a.name for a in allocs])
    for t in tables:
        t.plots = plots.get(t.name, [])
    if plots.get("ratios"):
        tables.append(Table("ratios to glibc", [], [], plots=plots["ratios"],
                            notes=["Every workload's median against glibc's (fastalloc, its fa_pool and "
                                   "fa_free_sized rows, and the peers); below 1 is better."]))

    for t in tables:
        print(f"== {t.name}")
        if t.body:
            print(text_table(t.header, t.body, t.seps, t.left))
        for n in t.notes:
            print(n)
        for header, body, left in t.subtables:
            print(text_table(header, body, set(), left))
        for b in t.bullets:
            print(f"  {b}")
        print()
    for s in summary:
        print(s)
    for n, why in skipped:
        print(f"skipped {n}: {why}")
    if plot_note:
        print(plot_note)
    grouped = group_failures(failures)
    if failures:
        print(f"\n{len(failures)} run(s) FAILED:")
        for (wname, aname, error), (rounds_failed, cmd, _) in grouped.items():
            print(f"  {wname} / {aname}, round {','.join(map(str, rounds_failed))}: {error}\n"
                  f"    reproduce: {cmd}")

    report = out_dir / "report.md"
    write_report(report, meta, allocs, skipped, tables, summary, grouped, quick, plot_note)
    raw = {"meta": meta,
           "allocators": [vars(a) for a in allocs],
           "skipped": [{"name": n, "why": why} for n, why in skipped],
           "workloads": [{"name": w.name, "binary": w.binary, "args": w.argv(overrides, quick),
                          "kind": w.kind, "metric": w.metric, "unit": w.unit,
                          "higher_is_better": w.higher_is_better, "table": w.table, "title": w.title}
                         for w in workloads],
           "summary": [{k: v for k, v in r.items() if k != "median_output"}
                       for rows in rows_by.values() for r in rows],
           "runs": [vars(r) for r in runs]}
    (out_dir / "results.json").write_text(json.dumps(raw, indent=1) + "\n")
    print(f"\nwrote {report}, {out_dir / 'results.json'}"
          f"{' and ' + str(sum(len(v) for v in plots.values())) + ' plots' if plots else ''} "
          f"({fmt_clock(meta['elapsed_s'])})", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
