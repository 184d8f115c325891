"""Running the programs: one run under LD_PRELOAD (through runwrap, or under
callgrind), reading its output and checking it, and the whole suite with the
allocators alternating round by round."""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .allocators import Allocator
from .memory import STATS_VAR, read_at_peak, stats_value
from .programs import Programs, is_ours
from .stats import fmt_clock, fmt_count, fmt_num, fmt_rss
from .verify import check_report
from .workloads import Plan, Workload, row_name


@dataclass
class RunResult:
    workload: str
    allocator: str
    round: int
    ok: bool
    value: float | None = None
    maxrss_kib: int | None = None
    minflt: int | None = None   # minor page faults of the whole process (ru_minflt)
    wall_s: float | None = None
    error: str = ""
    output: dict = field(default_factory=dict)
    stderr_tail: str = ""
    # fastalloc's runs: where its resident bytes were at their peak (the
    # memory table; memory.py), and how many processes wrote statistics.
    at_peak: dict | None = None
    stats_files: int | None = None


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


class RunFailed(Exception):
    """Why a run failed: the first check it did not pass (RunResult.error)."""


def check_verdict(w: Workload, argv: list[str], data: dict, stdout: str, alloc: Allocator) -> None:
    """The program must report what it checked, in counts that match the
    work it was asked to do (verify.py), and that malloc was served by the
    allocator we preloaded (a preload that did not take would measure glibc
    under another name).  argv: the program's arguments."""
    if not data and is_ours(w.binary):
        if any(l.lstrip().startswith("{") for l in stdout.splitlines()):
            bad = next(l for l in reversed(stdout.splitlines()) if l.lstrip().startswith("{"))
            raise RunFailed(f"result line is not valid JSON: {bad.strip()[:160]}")
        raise RunFailed("no result line in the program's output")
    problems = check_report(w.binary, is_ours(w.binary), argv, data)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RunFailed(f"check report: {problems[0]}{more}")
    if alloc.expect and "allocator" in data and data["allocator"] != alloc.expect:
        raise RunFailed(f"wrong allocator: malloc was served by {data['allocator']}, "
                        f"expected {alloc.expect} (preload ineffective?)")


@dataclass
class Finished:
    """A program that has ended (or was killed at its timeout)."""
    status: int                 # wait4 status
    rusage: object              # wait4 rusage
    wall: float
    stdout: str
    stderr: str
    timed_out: bool


class Runner:
    """Runs one program at a time; tmpdir holds its output, runwrap's report
    and callgrind's counts."""

    def __init__(self, runwrap: Path | None, tmpdir: str, valgrind: str | None):
        self.runwrap = runwrap
        self.tmpdir = tmpdir
        self.valgrind = valgrind
        self.rusage_file = os.path.join(tmpdir, "rusage")
        self.callgrind_file = os.path.join(tmpdir, "callgrind.out")

    def wrap(self, w: Workload, argv: list[str]) -> list[str]:
        if w.kind == "callgrind":
            return [self.valgrind or "valgrind", "--tool=callgrind",
                    f"--callgrind-out-file={self.callgrind_file}",
                    "--collect-atstart=no", "--toggle-collect=measure"] + argv
        return argv

    def command_line(self, w: Workload, alloc: Allocator, argv: list[str]) -> str:
        """A shell command that reproduces one run by hand."""
        argv = self.wrap(w, argv)
        if w.kind == "callgrind":
            argv = [a if not a.startswith("--callgrind-out-file=") else "--callgrind-out-file=/tmp/cg.out"
                    for a in argv]
        pre = f"LD_PRELOAD={shlex.quote(alloc.lib)} " if alloc.lib else ""
        pre = "".join(f"{shlex.quote(kv)} " for kv in alloc.env) + pre
        if self._stats_wanted(w, alloc):  # as the run had it: its peak sampling is on
            pre = f"{STATS_VAR}={shlex.quote(stats_value('/tmp') or '')} " + pre
        return pre + " ".join(shlex.quote(a) for a in argv)

    def run(self, w: Workload, alloc: Allocator, argv: list[str], rnd: int, timeout: float) -> RunResult:
        res = RunResult(w.name, alloc.name, rnd, ok=False)
        missing = [p for p in w.needs if shutil.which(p) is None]
        if missing:  # a real program that is not installed: the row fails, saying why
            res.error = (f"not run: {', '.join(missing)} not found on PATH "
                         f"(apt-get install -y {' '.join(missing)})")
            return res
        stats_dir = self._stats_dir(w, alloc)
        try:
            self._run(res, w, alloc, argv, timeout, stats_dir)
            res.ok = True
        except RunFailed as e:
            res.error = str(e)
        finally:
            if stats_dir:  # what the run left, failed or not, is read, then removed
                res.at_peak, res.stats_files = read_at_peak(stats_dir)
                shutil.rmtree(stats_dir, ignore_errors=True)
        return res

    @staticmethod
    def _stats_wanted(w: Workload, alloc: Allocator) -> bool:
        """fastalloc's runs write their statistics (FASTALLOC_STATS) for the
        memory table; not its hardened build, not a --lib build, and not
        the instruction counts."""
        return w.kind == "alloc" and alloc.name == "fastalloc"

    def _stats_dir(self, w: Workload, alloc: Allocator) -> str | None:
        """A fresh folder for the statistics of one run, or None."""
        return tempfile.mkdtemp(prefix="stats-", dir=self.tmpdir) if self._stats_wanted(w, alloc) else None

    def _run(self, res: RunResult, w: Workload, alloc: Allocator, argv: list[str], timeout: float,
             stats_dir: str | None):
        """Fills res step by step and raises RunFailed at the first check that
        fails; what was filled in until then stays (results.json shows it)."""
        done = self._execute(*self._command(w, alloc, argv, stats_dir), timeout)
        stderr = done.stderr
        if w.kind == "callgrind":  # valgrind's banner is noise: keep the program's lines
            stderr = "\n".join(l for l in stderr.splitlines() if not l.startswith("=="))
        res.stderr_tail = "\n".join(stderr.strip().splitlines()[-8:])
        if done.timed_out:
            raise RunFailed(f"timed out after {timeout:.0f} s")
        measured, exit_code, sig = self._measurements(done)
        res.maxrss_kib = int(measured.get("maxrss_kib", 0)) or None
        # A process always takes some faults (its exec, its loader): a missing
        # count, from a runwrap built before it reported them, is None, not 0.
        res.minflt = int(measured.get("minflt", 0)) or None
        res.wall_s = float(measured.get("wall_s", done.wall))
        if exit_code != 0 or sig:
            raise RunFailed(describe_status(exit_code, sig))
        if "cannot be preloaded" in stderr:
            raise RunFailed("LD_PRELOAD did not take (ld.so: cannot be preloaded)")
        res.output = data = parse_output(done.stdout)
        check_verdict(w, argv[1:], data, done.stdout, alloc)
        if w.kind == "callgrind":
            self._count_instructions(data)
        value = data.get(w.metric, measured.get(w.metric))
        try:
            res.value = float(value) * w.scale
        except (TypeError, ValueError):
            raise RunFailed(f"no '{w.metric}' in the program's output") from None
        if not math.isfinite(res.value):
            raise RunFailed(f"'{w.metric}' is not a finite number: {value}")

    def _command(self, w: Workload, alloc: Allocator, argv: list[str],
                 stats_dir: str | None = None) -> tuple[list[str], dict]:
        """The command line and environment of one run.  The preload is set
        for the program only: runwrap takes it as an option.  With a
        stats_dir, FASTALLOC_STATS too (in place of any value of the
        caller's; the other FASTALLOC_* variables pass through as they are)."""
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        settings = [f"LD_PRELOAD={alloc.lib}"] if alloc.lib else []
        settings += list(alloc.env)
        stats = stats_value(stats_dir) if stats_dir else None
        if stats:
            settings.append(f"{STATS_VAR}={stats}")
        argv = self.wrap(w, argv)
        for stale in (self.rusage_file, self.callgrind_file):
            if os.path.exists(stale):
                os.unlink(stale)
        if self.runwrap:
            pre = [x for kv in settings for x in ("-e", kv)]
            return [str(self.runwrap)] + pre + [self.rusage_file] + argv, env
        # Fallback: ru_maxrss then includes this Python process's peak.
        env.update(kv.split("=", 1) for kv in settings)
        return argv, env

    def _execute(self, cmd: list[str], env: dict, timeout: float) -> Finished:
        with tempfile.TemporaryFile(dir=self.tmpdir) as out, tempfile.TemporaryFile(dir=self.tmpdir) as err:
            t0 = time.monotonic()
            try:
                p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                     env=env, start_new_session=True)
            except OSError as e:
                raise RunFailed(f"cannot start: {e}") from None
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
            return Finished(status, ru, wall, out.read().decode("utf-8", "replace"),
                            err.read().decode("utf-8", "replace"), timed_out)

    def _measurements(self, done: Finished) -> tuple[dict, int, int]:
        """(what was measured of the process, the program's exit code, the
        signal that killed it or 0).  Through runwrap these are runwrap's
        report on the program, not on runwrap itself."""
        exit_code = os.waitstatus_to_exitcode(done.status)
        sig = 0
        ru = done.rusage
        measured = {"wall_s": done.wall, "maxrss_kib": ru.ru_maxrss,
                    "utime_s": ru.ru_utime, "stime_s": ru.ru_stime,
                    "minflt": ru.ru_minflt, "majflt": ru.ru_majflt}
        if exit_code < 0:
            sig, exit_code = -exit_code, -1
        if not self.runwrap:
            return measured, exit_code, sig
        if exit_code != 0:
            raise RunFailed(f"runwrap failed ({describe_status(exit_code, sig)})")
        try:
            with open(self.rusage_file) as f:
                measured = parse_output(f.read())
        except OSError as e:
            raise RunFailed(f"runwrap wrote no result: {e}") from None
        return measured, int(measured.get("exit", -1)), int(measured.get("signal", 0))

    def _count_instructions(self, data: dict) -> None:
        """Adds per_loop (instructions per loop iteration) and inside (those
        not in measure() itself: the allocator's) to the program's output."""
        try:
            total, own = parse_callgrind(self.callgrind_file, "measure")
        except (OSError, ValueError) as e:
            raise RunFailed(f"cannot read callgrind's output: {e}") from None
        n = float(data.get("n", 0)) or 1.0
        data["per_loop"] = total / n
        data["inside"] = (total - own) / n

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


def alternation_groups(workloads: list[Workload]) -> list[list[Workload]]:
    """A workload that compares to another (fa_pool against malloc) runs in
    the same alternation as that one: A B C D E P A B ..."""
    names_run = {w.name for w in workloads}
    return [[w] + [d for d in workloads if d.compare_to == w.name]
            for w in workloads if not (w.compare_to and w.compare_to in names_run)]


class Suite:
    """Every run of the plan, the allocators alternating round by round
    (A B C D A B C D ...) so that slow drift of the machine hits them alike.
    One progress line per run goes to stderr; a failed run also prints its
    stderr and the command that reproduces it."""

    def __init__(self, plan: Plan, programs: Programs):
        self.plan = plan
        self.programs = programs
        self.total = plan.total_runs()
        self.step = 0
        self.t_start = 0.0
        self.elapsed_s = 0.0
        self.runs: list[RunResult] = []
        self.failures: list[tuple[RunResult, str]] = []   # (run, command that reproduces it)

    def announce(self) -> None:
        plan = self.plan
        print(f"run.py: {len(plan.workloads)} workloads x {len(plan.allocs)} allocators "
              f"({', '.join(a.name for a in plan.allocs)}), {plan.default_rounds} rounds = {self.total} runs"
              f"{' (quick)' if plan.quick else ''}", file=sys.stderr)

    def run(self) -> None:
        """Every run; Ctrl-C goes through (KeyboardInterrupt), the program
        it interrupted killed."""
        self.t_start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="fa-bench-") as tmp:
            runner = Runner(self.programs.runwrap, tmp, self.programs.valgrind)
            for group in alternation_groups(self.plan.workloads):
                self._run_group(runner, group)
        self.elapsed_s = time.monotonic() - self.t_start

    def _run_group(self, runner: Runner, group: list[Workload]) -> None:
        plan = self.plan
        given_up = set()   # (workload, allocator) that timed out once: not run again
        for rnd in range(1, max(plan.rounds_of(w) for w in group) + 1):
            for w in group:
                if rnd > plan.rounds_of(w):
                    continue
                argv = [self.programs.binaries[w.name]] + plan.argv(w)
                timeout = plan.timeout or w.timeout_s
                for a in plan.allocs_of(w):
                    prefix = self._next_prefix(w, a, rnd)
                    if (w.name, a.name) in given_up:
                        print(f"{prefix} skipped (timed out before)", file=sys.stderr)
                        continue
                    r = runner.run(w, a, argv, rnd, timeout)
                    self._record(r, runner.command_line(w, a, argv), w, prefix)
                    if r.error.startswith("timed out"):
                        given_up.add((w.name, a.name))

    def _next_prefix(self, w: Workload, a: Allocator, rnd: int) -> str:
        """The start of the next run's progress line: step, clock, who."""
        self.step += 1
        clock = fmt_clock(time.monotonic() - self.t_start)
        who = "-" if w.kind == "once" else row_name(w, a.name)
        return (f"[{self.step:{len(str(self.total))}}/{self.total} {clock}] {w.name} "
                f"round {rnd}/{self.plan.rounds_of(w)} {who:<13}")

    def _record(self, r: RunResult, cmd: str, w: Workload, prefix: str) -> None:
        self.runs.append(r)
        if r.ok:
            print(f"{prefix} {fmt_num(r.value):>7} {w.unit}  rss {fmt_rss(r.maxrss_kib)}"
                  f"  faults {fmt_count(r.minflt)}", file=sys.stderr)
            return
        self.failures.append((r, cmd))
        print(f"{prefix} FAILED: {r.error}", file=sys.stderr)
        for line in r.stderr_tail.splitlines():
            print(f"    | {line}", file=sys.stderr)
        print(f"    reproduce: {cmd}", file=sys.stderr)


def group_failures(failures):
    """{(workload, allocator, error): ([rounds], reproducer, stderr tail)}"""
    grouped = {}
    for r, cmd in failures:
        entry = grouped.setdefault((r.workload, r.allocator, r.error), ([], cmd, r.stderr_tail))
        entry[0].append(r.round)
    return grouped
