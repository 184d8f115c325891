#!/usr/bin/env python3
"""fastalloc benchmark driver (Python 3 standard library only).

Runs every workload of the WORKLOADS table under every allocator -- fastalloc
(<build>/libfastalloc.so), glibc (no preload) and, when installed, jemalloc,
tcmalloc and mimalloc -- by LD_PRELOAD, alternating the allocators round by
round (A B C D A B C D ...).  Prints one progress line per run to stderr, the
result tables to stdout, and writes <out>/report.md and <out>/results.json.

Exit status: 0 when every run passed; 1 when any run failed (a validation
error, a crash, a timeout, a preload that did not take); 2 on a usage or setup
error.  `make bench QUICK=1` (CI) relies on that.

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

FULL_ROUNDS = 5
QUICK_ROUNDS = 3


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
             runwrap's measurement of the whole process.
    table    workloads with the same table are printed together.
    """

    name: str
    binary: str
    args: tuple[str, ...]
    params: dict = field(default_factory=dict)
    quick: dict = field(default_factory=dict)
    metric: str = "ns_per_pair"
    unit: str = "ns/pair"
    higher_is_better: bool = False
    table: str = "malloc_micro"
    title: str = ""
    timeout_s: float = 120.0

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


def micro(mode: str, sizes: str, threads: int, live: int = 64) -> Workload:
    """A malloc_micro configuration (see malloc_micro.c)."""
    size_name = "mixed" if "-" in sizes or "," in sizes else sizes
    mode_name = mode if mode == "reuse" else f"window{live}"
    args = ["--mode", mode, "--sizes", sizes, "--threads", str(threads), "--ops", "{ops}"]
    if mode == "window":
        args[2:2] = ["--live", str(live)]
    size_text = "sizes 16..1024 (step 16, shuffled)" if size_name == "mixed" else f"{sizes} B"
    mode_text = ("malloc+free at once" if mode == "reuse"
                 else f"{live} live blocks, free oldest + malloc new")
    return Workload(
        name=f"micro-{mode_name}-{size_name}-{threads}t",
        binary="malloc_micro",
        args=tuple(args),
        params={"ops": "30M"},   # malloc+free pairs per thread
        quick={"ops": "2M"},
        title=f"{mode_text}, {size_text}, {threads} thread{'s' if threads > 1 else ''}",
    )


# The suite.  Add entries here (and programs to bench/CMakeLists.txt).
WORKLOADS: list[Workload] = [
    micro(mode, sizes, threads)
    for mode in ("reuse", "window")
    for sizes in ("16-1024", "64")
    for threads in (1, 2)
]


# --------------------------------------------------------------------------
# Allocators
# --------------------------------------------------------------------------

@dataclass
class Allocator:
    name: str
    lib: str | None            # path to LD_PRELOAD; None for glibc
    package: str | None = None  # Debian package that provides it
    expect: str | None = None   # what malloc_micro must report as "allocator"
    version: str = ""


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


class Runner:
    def __init__(self, runwrap: Path | None, tmpdir: str):
        self.runwrap = runwrap
        self.tmpdir = tmpdir

    def command_line(self, alloc: Allocator, argv: list[str]) -> str:
        """A shell command that reproduces one run by hand."""
        pre = f"LD_PRELOAD={shlex.quote(alloc.lib)} " if alloc.lib else ""
        return pre + " ".join(shlex.quote(a) for a in argv)

    def run(self, w: Workload, alloc: Allocator, argv: list[str], rnd: int, timeout: float) -> RunResult:
        res = RunResult(w.name, alloc.name, rnd, ok=False)
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        rufile = os.path.join(self.tmpdir, "rusage")
        if os.path.exists(rufile):
            os.unlink(rufile)
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
        if data.get("valid") is False:
            res.error = "program reported valid=false"
            return res
        if alloc.expect and "allocator" in data and data["allocator"] != alloc.expect:
            res.error = (f"wrong allocator: malloc was served by {data['allocator']}, "
                         f"expected {alloc.expect} (preload ineffective?)")
            return res
        value = data.get(w.metric, measured.get(w.metric))
        try:
            res.value = float(value)
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
# Statistics and output
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


def fmt_rss(kib: int | None) -> str:
    if not kib:
        return "-"
    mib = kib / 1024
    return f"{mib:.2f} MiB" if mib < 10 else f"{mib:.1f} MiB"


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def summarize(w: Workload, allocs: list[Allocator], runs: list[RunResult]) -> list[dict]:
    """One row per allocator for one workload."""
    rows = []
    for a in allocs:
        rs = [r for r in runs if r.workload == w.name and r.allocator == a.name]
        good = [r for r in rs if r.ok]
        bad = [r for r in rs if not r.ok]
        vals = [r.value for r in good]
        rss = [r.maxrss_kib for r in good if r.maxrss_kib]
        row = {"workload": w.name, "allocator": a.name, "runs": len(rs), "failed": len(bad),
               "errors": sorted({r.error for r in bad}), "values": vals,
               "median": statistics.median(vals) if vals and not bad else None,
               "min": min(vals) if vals else None, "max": max(vals) if vals else None,
               "maxrss_kib": max(rss) if rss else None}
        row["spread_pct"] = (100.0 * (row["max"] - row["min"]) / row["median"]
                             if row["median"] else None)
        rows.append(row)

    def ratio(v, ref):  # below 1 means better than ref, whichever way the metric goes
        if v is None or ref is None or v == 0 or ref == 0:
            return None
        return ref / v if w.higher_is_better else v / ref

    by = {r["allocator"]: r for r in rows}
    glibc = by.get("glibc", {}).get("median")
    for r in rows:
        r["vs_glibc"] = ratio(r["median"], glibc)
        r["vs_best_peer"], r["best_peer"] = None, None
        if r["allocator"] == "fastalloc" and r["median"] is not None:
            others = [o for o in rows if o is not r and o["median"] is not None]
            if others:
                pick = max if w.higher_is_better else min
                best = pick(others, key=lambda o: o["median"])
                r["vs_best_peer"], r["best_peer"] = ratio(r["median"], best["median"]), best["allocator"]
    return rows


COLUMNS = ["workload", "allocator", "median", "min-max", "spread", "peak RSS", "vs glibc", "vs best peer"]


def row_cells(w: Workload, r: dict, first: bool) -> list[str]:
    """The cells of one row; a failed row is [workload, allocator, note]."""
    name = w.name if first else ""
    if r["failed"]:
        return [name, r["allocator"], f"FAILED {r['failed']}/{r['runs']} runs: {'; '.join(r['errors'])}"]
    if r["median"] is None:
        return [name, r["allocator"], "not run"]
    best = (f"{fmt_ratio(r['vs_best_peer'])} ({r['best_peer']})"
            if r["vs_best_peer"] is not None else "")
    return [name, r["allocator"], fmt_num(r["median"]),
            f"{fmt_num(r['min'])}-{fmt_num(r['max'])}",
            f"{r['spread_pct']:.0f}%" if r["spread_pct"] is not None else "-",
            fmt_rss(r["maxrss_kib"]), fmt_ratio(r["vs_glibc"]), best]


def text_table(header: list[str], body: list[list[str]], seps: set[int]) -> str:
    """Columns 0-1 left-aligned, the rest right-aligned.  Short rows (a
    failure note) print their last cell as is, outside the columns."""
    widths = [len(h) for h in header]
    for row in body:
        cells = row if len(row) == len(header) else row[:-1]
        for i, c in enumerate(cells):
            widths[i] = max(widths[i], len(c))
    left = {0, 1}

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


def md_table(header: list[str], body: list[list[str]]) -> str:
    def esc(c):
        return c.replace("|", "\\|")
    align = ["---" if i < 2 else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in cells + [""] * (len(header) - len(cells))) + " |"
              for cells in body]
    return "\n".join(lines)


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def build_tables(workloads, allocs, runs):
    """[(table name, unit, header, body rows, separator indexes, summary rows)]"""
    tables, all_rows = [], []
    for tname in dict.fromkeys(w.table for w in workloads):
        ws = [w for w in workloads if w.table == tname]
        units = sorted({w.unit for w in ws})
        header = list(COLUMNS)
        header[2] = f"median {units[0]}" if len(units) == 1 else "median"
        body, seps = [], set()
        for w in ws:
            rows = summarize(w, allocs, runs)
            all_rows += rows
            if body:
                seps.add(len(body))
            for i, r in enumerate(rows):
                body.append(row_cells(w, r, i == 0))
        tables.append((tname, header, body, seps))
    return tables, all_rows


def summary_lines(all_rows) -> list[str]:
    fa = [r for r in all_rows if r["allocator"] == "fastalloc"]
    if not fa:
        return []
    lines = []
    g = geomean([r["vs_glibc"] for r in fa])
    b = geomean([r["vs_best_peer"] for r in fa])
    n = sum(1 for r in fa if r["median"] is not None)
    if g is not None:
        lines.append(f"fastalloc vs glibc, geometric mean over {n} workloads: {g:.2f}x")
    if b is not None:
        lines.append(f"fastalloc vs the best other allocator of each workload, geometric mean: {b:.2f}x")
    return lines


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


def write_report(path: Path, meta: dict, allocs, skipped, tables, summary, failures, quick):
    lines = ["# fastalloc benchmark report", ""]
    lines.append(f"- date: {meta['date']}")
    lines.append(f"- fastalloc: {meta['revision']} ({meta['build']})")
    h = meta["host"]
    lines.append(f"- host: {h['cpu']}, {h['cpus']} CPUs, Linux {h['kernel']} {h['machine']}")
    lines.append(f"- load average at start / end: {meta['load_start']} / {meta['load_end']}")
    lines.append(f"- mode: {'quick' if quick else 'full'}, {meta['rounds']} rounds per workload and "
                 f"allocator, allocators alternating each round; {meta['elapsed_s']:.0f} s in all")
    lines += ["", "## Allocators", "", "| allocator | library | version |", "|---|---|---|"]
    for a in allocs:
        lines.append(f"| {a.name} | {a.lib or '(none: glibc malloc)'} | {a.version or '-'} |")
    for name, why in skipped:
        lines.append(f"| {name} | skipped: {why} | - |")
    lines += ["", "Columns: median of the rounds (lower is better for ns/pair), min-max over the "
              "rounds, spread = (max-min)/median, peak RSS = highest ru_maxrss of the rounds, "
              "vs glibc = median / glibc's median, vs best peer (fastalloc's row) = fastalloc's "
              "median / the best median of the other allocators. Ratios below 1.00x mean better "
              "than the reference. See bench/README.md.", ""]
    for tname, header, body, _ in tables:
        lines += [f"## {tname}", "", md_table(header, body), ""]
    if summary:
        lines += ["## Summary", ""] + [f"- {s}" for s in summary] + [""]
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
    """A build folder configured before bench/CMakeLists.txt existed has no
    bench targets: configure it again and build them.  Returns why the
    benchmarks cannot be built there, or None."""
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
    from shutil import which
    return which(name)


def select_workloads(patterns: list[str]) -> list[Workload]:
    if not patterns:
        return list(WORKLOADS)
    chosen = []
    for pat in patterns:
        hits = [w for w in WORKLOADS if fnmatch.fnmatchcase(w.name, pat) or w.table == pat]
        if not hits:
            raise SystemExit(f"run.py: --only {pat!r} matches no workload (see --list)")
        chosen += [w for w in hits if w not in chosen]
    return [w for w in WORKLOADS if w in chosen]


def split_list(values: list[str] | None) -> list[str]:
    return [x.strip() for v in values or [] for x in v.split(",") if x.strip()]


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
                    help="run only these workloads: names, shell patterns (micro-window*) or table names")
    ap.add_argument("--allocators", action="append", metavar="NAME[,..]",
                    help="run only these allocators, in this order (fastalloc, glibc, jemalloc, "
                    "tcmalloc, mimalloc, or a --lib name)")
    ap.add_argument("--lib", action="append", default=[], metavar="NAME=PATH",
                    help="also measure the allocator at PATH under NAME (e.g. an older fastalloc build)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a workload parameter, e.g. --set ops=5M")
    ap.add_argument("--timeout", type=float, help="seconds before a run is killed (default per workload)")
    ap.add_argument("--out", default=str(BENCH_DIR / "results"),
                    help="folder for report.md and results.json (default: %(default)s)")
    ap.add_argument("--list", action="store_true", help="list the workloads and allocators, run nothing")
    args = ap.parse_args(argv)

    build = Path(args.build).resolve()
    quick = args.quick
    rounds = args.rounds or (QUICK_ROUNDS if quick else FULL_ROUNDS)
    if rounds < 1:
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

    if args.list:
        for w in workloads:
            print(f"{w.name:28} {w.binary} {' '.join(w.argv(overrides, quick))}   # {w.title}")
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
    # Programs of ours: built by bench/CMakeLists.txt (others: absolute or on PATH).
    ours = sorted({w.binary for w in workloads if (BENCH_DIR / f"{w.binary}.c").exists()} | {"runwrap"})
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
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    total = len(workloads) * rounds * len(allocs)
    print(f"run.py: {len(workloads)} workloads x {len(allocs)} allocators ({', '.join(names if not wanted else wanted)}) "
          f"x {rounds} rounds = {total} runs{' (quick)' if quick else ''}", file=sys.stderr)
    meta = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "revision": git_revision(), "build": str(build), "host": host_info(),
            "load_start": loadavg(), "rounds": rounds, "quick": quick}
    t_start = time.monotonic()
    runs: list[RunResult] = []
    failures = []
    step = 0
    with tempfile.TemporaryDirectory(prefix="fa-bench-") as tmp:
        runner = Runner(runwrap, tmp)
        try:
            for w in workloads:
                argv_w = [binaries[w.name]] + w.argv(overrides, quick)
                timeout = args.timeout or w.timeout_s
                given_up = set()
                for rnd in range(1, rounds + 1):
                    for a in allocs:
                        step += 1
                        prefix = f"[{step:{len(str(total))}}/{total}] {w.name} round {rnd}/{rounds} {a.name:<10}"
                        if a.name in given_up:
                            print(f"{prefix} skipped (timed out before)", file=sys.stderr)
                            continue
                        r = runner.run(w, a, argv_w, rnd, timeout)
                        runs.append(r)
                        if r.ok:
                            print(f"{prefix} {fmt_num(r.value):>7} {w.unit}  rss {fmt_rss(r.maxrss_kib)}",
                                  file=sys.stderr)
                        else:
                            cmd = runner.command_line(a, argv_w)
                            failures.append((r, cmd))
                            print(f"{prefix} FAILED: {r.error}", file=sys.stderr)
                            for line in r.stderr_tail.splitlines():
                                print(f"    | {line}", file=sys.stderr)
                            print(f"    reproduce: {cmd}", file=sys.stderr)
                            if r.error.startswith("timed out"):
                                given_up.add(a.name)
        except KeyboardInterrupt:
            print("\nrun.py: interrupted; no report written", file=sys.stderr)
            return 130
    meta["elapsed_s"] = time.monotonic() - t_start
    meta["load_end"] = loadavg()

    tables, all_rows = build_tables(workloads, allocs, runs)
    summary = summary_lines(all_rows)
    for tname, header, body, seps in tables:
        print(f"== {tname}")
        print(text_table(header, body, seps))
        print()
    for s in summary:
        print(s)
    for n, why in skipped:
        print(f"skipped {n}: {why}")
    grouped = group_failures(failures)
    if failures:
        print(f"\n{len(failures)} run(s) FAILED:")
        for (wname, aname, error), (rounds_failed, cmd, _) in grouped.items():
            print(f"  {wname} / {aname}, round {','.join(map(str, rounds_failed))}: {error}\n"
                  f"    reproduce: {cmd}")

    report = out_dir / "report.md"
    write_report(report, meta, allocs, skipped, tables, summary, grouped, quick)
    raw = {"meta": meta,
           "allocators": [vars(a) for a in allocs],
           "skipped": [{"name": n, "why": why} for n, why in skipped],
           "workloads": [{"name": w.name, "binary": w.binary, "args": w.argv(overrides, quick),
                          "metric": w.metric, "unit": w.unit, "higher_is_better": w.higher_is_better,
                          "table": w.table, "title": w.title} for w in workloads],
           "summary": all_rows,
           "runs": [vars(r) for r in runs]}
    (out_dir / "results.json").write_text(json.dumps(raw, indent=1) + "\n")
    print(f"\nwrote {report} and {out_dir / 'results.json'} ({meta['elapsed_s']:.0f} s)", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
