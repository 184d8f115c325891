#!/usr/bin/env python3
"""The verdicts of `make bench` (bench/fabench/checks.py, bench/run.py) on
made-up runs, in seconds: no program runs.

    check_bench.py [REPO]

A full run must fail (exit 1) on every FAIL line: fa_pool's targets and
RSS bounds, the hardened build's 1.10x and 1.5x, and a workload that a
failed run (a crash, a failed validation) left out of a geometric mean,
under any allocator's column; the rule's PASS must not hide a row that
crashed.  A smoke run (--quick) gives the targets no verdict and says so,
and still fails on a failed run.  Standard library only (unittest).
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import types
import unittest
from pathlib import Path
from unittest import mock

REPO = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import run  # noqa: E402  bench/run.py
from fabench import checks, report  # noqa: E402
from fabench.allocators import GLIBC, SECURE, Allocator  # noqa: E402
from fabench.runner import RunResult  # noqa: E402
from fabench.stats import summarize_all  # noqa: E402
from fabench.workloads import WORKLOADS  # noqa: E402

FASTALLOC = Allocator("fastalloc", "/nowhere/libfastalloc.so", expect="fastalloc")
HARDENED = Allocator(SECURE, "/nowhere/libfastalloc-secure.so", expect="fastalloc")
JEMALLOC = Allocator("jemalloc", "/nowhere/libjemalloc.so.2", expect="jemalloc")
ALLOCS = [FASTALLOC, GLIBC, JEMALLOC, HARDENED]
BY_NAME = {w.name: w for w in WORKLOADS}
TIMED = ["micro-reuse-mixed-1t", "micro-window64-mixed-1t"]
POOL = ["objpool-shuffle-1t", "objpool-shuffle-pool-1t"]
RSS = ["objpool-rss", "objpool-rss-pool"]

# objpool-rss-pool's output with its three bounds met (KiB): 0.8 M objects
# of 64 B and their pointer arrays live, flat, and trimmed.
RSS_OK = {"objects": 100000, "threads": 8, "size": 64, "ptr_array_bytes": 6400000,
          "live1_kib": 56000, "freed1_kib": 3000, "live2_kib": 56100, "freed2_kib": 3000,
          "exit_kib": 3000, "trim_kib": 2000}


def runs_of(wname: str, alloc: str, value: float, rounds: int = 3, crash: bool = False,
            output: dict | None = None) -> list[RunResult]:
    """The rounds of one row, each with value; crash: the last round was
    killed by a signal, as the runner records it."""
    rs = [RunResult(wname, alloc, i + 1, ok=True, value=value, maxrss_kib=4096, minflt=100,
                    output=dict(output or {})) for i in range(rounds)]
    if crash:
        rs[-1] = RunResult(wname, alloc, rounds, ok=False, error="killed by signal 11 (SIGSEGV)")
    return rs


def suite_runs(times: dict, crash: set = frozenset(), rss: dict | None = None) -> list[RunResult]:
    """times: {(workload, allocator): median}; crash: the (workload,
    allocator) rows with a crashed round."""
    runs = []
    for (wname, alloc), value in times.items():
        out = rss if wname in RSS else None
        runs += runs_of(wname, alloc, value, crash=(wname, alloc) in crash, output=out)
    return runs


def healthy_times(secure: float = 1.05, pool: float = 30.0) -> dict:
    """Every row of TIMED and POOL: fastalloc the fastest, the hardened
    build secure times its time, fa_pool at pool ms against malloc's 100
    (glibc) and 80 (fastalloc); RSS's rows (glibc's objpool-rss,
    objpool-rss-pool)."""
    t = {}
    for w in TIMED:
        t[(w, "fastalloc")] = 10.0
        t[(w, "glibc")] = 20.0
        t[(w, "jemalloc")] = 15.0
        t[(w, SECURE)] = 10.0 * secure
    t[(POOL[0], "fastalloc")] = 80.0
    t[(POOL[0], "glibc")] = 100.0
    t[(POOL[0], "jemalloc")] = 90.0
    t[(POOL[0], SECURE)] = 85.0
    t[(POOL[1], "fastalloc")] = pool
    t[(RSS[0], "glibc")] = RSS_OK["live1_kib"]
    t[(RSS[1], "fastalloc")] = RSS_OK["live1_kib"]
    return t


def verdicts(times: dict, crash=frozenset(), quick=False, rss=None, allocs=ALLOCS):
    """(summary lines, failed checks, table notes) as report.py gets them."""
    workloads = [BY_NAME[n] for n in TIMED + POOL + RSS]
    rows_by = summarize_all(workloads, allocs, suite_runs(times, crash, rss or RSS_OK))
    tables = [types.SimpleNamespace(name=n, notes=[], subtables=[], bullets=[])
              for n in ("objpool-shuffle", "objpool-rss")]
    summary, failed = checks.add_checks(tables, workloads, rows_by, [], quick)
    return summary, failed, tables


def lines_with(lines: list[str], text: str) -> list[str]:
    return [line for line in lines if text in line]


class FullRun(unittest.TestCase):
    def test_all_met(self):
        summary, failed, _ = verdicts(healthy_times())
        self.assertEqual(failed, [], "\n".join(summary))
        self.assertTrue(lines_with(summary, "PASS <= 1.10x"), summary)
        self.assertEqual(len(lines_with(summary, "fa_pool objpool-shuffle 1t")), 1)
        self.assertNotIn(checks.NO_VERDICTS, summary)

    def test_hardened_over_its_mean(self):
        _, failed, _ = verdicts(healthy_times(secure=1.2))
        self.assertEqual(len(failed), 1, failed)
        self.assertIn("FAIL <= 1.10x", failed[0])

    def test_hardened_one_row_over_1_5x(self):
        t = healthy_times()
        t[(TIMED[0], SECURE)] = 16.0   # 1.6x on one workload, 1.05x on the other
        t[(TIMED[1], SECURE)] = 7.0    # the mean stays under 1.10x
        _, failed, _ = verdicts(t)
        self.assertEqual(len(failed), 1, failed)
        self.assertIn("FAIL <= 1.10x", failed[0])

    def test_hardened_crash_is_no_gap(self):
        """The hardened library crashed on one workload: the other one alone
        would pass the rule; the crash fails it, and the geometric means
        name the workload they left out."""
        summary, failed, _ = verdicts(healthy_times(), crash={(TIMED[1], SECURE)})
        hardened = lines_with(failed, f"{SECURE} vs fastalloc")
        self.assertEqual(len(hardened), 1, summary)
        self.assertIn("FAIL", hardened[0])
        self.assertIn(f"{TIMED[1]} ({SECURE} 1/3)", hardened[0])
        left_out = lines_with(failed, "left out of the geometric means")
        self.assertEqual(len(left_out), 1, summary)
        self.assertIn(TIMED[1], left_out[0])
        # Of the three timed workloads (TIMED and objpool-shuffle-1t), two.
        self.assertIn("over 2 workloads", lines_with(summary, "fastalloc vs glibc")[0])

    def test_peer_crash_is_no_gap(self):
        """A crash under a peer's column leaves fastalloc's ratio to the best
        unknown: a failure too."""
        _, failed, _ = verdicts(healthy_times(), crash={(TIMED[0], "jemalloc")})
        self.assertEqual(len(failed), 1, failed)
        self.assertIn(f"{TIMED[0]} (jemalloc 1/3)", failed[0])

    def test_pool_target_missed(self):
        _, failed, tables = verdicts(healthy_times(pool=60.0))   # 0.60x glibc, over 0.50x
        self.assertEqual(len(failed), 1, failed)
        self.assertIn("FAIL <= 0.50x", failed[0])
        body = tables[0].subtables[0][1]
        self.assertEqual(body[0][3], "FAIL")

    def test_pool_crash(self):
        _, failed, _ = verdicts(healthy_times(), crash={(POOL[1], "fastalloc")})
        self.assertEqual(len(failed), 1, failed)
        self.assertIn("failed runs (fa_pool 1/3)", failed[0])

    def test_pool_reference_crash(self):
        """jemalloc crashed on objpool-shuffle: the best malloc is not known
        (glibc's, the best that ran, would pass)."""
        _, failed, _ = verdicts(healthy_times(), crash={(POOL[0], "jemalloc")})
        pool = lines_with(failed, "fa_pool objpool-shuffle 1t")
        self.assertEqual(len(pool), 1, failed)
        self.assertIn("jemalloc 1/3", pool[0])

    def test_pool_reference_not_run(self):
        """--allocators without glibc: that target is not checked, and not
        failed; the others still are."""
        times = {k: v for k, v in healthy_times().items() if k[1] != "glibc"}
        summary, failed, _ = verdicts(times, allocs=[FASTALLOC, JEMALLOC, HARDENED])
        self.assertEqual(failed, [], summary)
        pool = lines_with(summary, "fa_pool objpool-shuffle 1t")[0]
        self.assertIn("not run <= 0.50x", pool)
        self.assertIn("PASS <= 0.70x", pool)

    def test_pool_rss_bound_missed(self):
        rss = dict(RSS_OK, trim_kib=20000)   # 36% of the peak after fa_pool_trim
        _, failed, _ = verdicts(healthy_times(), rss=rss)
        self.assertEqual(len(failed), 1, failed)
        self.assertIn("fa_pool_trim", failed[0])

    def test_rss_not_read(self):
        """A value not read fails fa_pool's bound and every allocator's line
        under the objpool-rss table."""
        rss = dict(RSS_OK, live2_kib=0)
        _, failed, _ = verdicts(healthy_times(), rss=rss)
        self.assertTrue(lines_with(failed, "fa_pool, second round: VmRSS not read"), failed)
        self.assertTrue(lines_with(failed, "glibc: VmRSS not read"), failed)


class SmokeRun(unittest.TestCase):
    def test_no_verdict(self):
        """Every target missed, and no verdict: one line says why."""
        rss = dict(RSS_OK, trim_kib=20000)
        summary, failed, tables = verdicts(healthy_times(secure=1.6, pool=90.0), quick=True, rss=rss)
        self.assertEqual(failed, [], summary)
        self.assertIn(checks.NO_VERDICTS, summary)
        for line in summary + tables[1].bullets:
            self.assertNotRegex(line, r"\b(PASS|FAIL)\b")
        self.assertEqual(tables[0].subtables, [])

    def test_crash_still_fails(self):
        _, failed, _ = verdicts(healthy_times(), crash={(TIMED[0], "glibc")}, quick=True)
        self.assertEqual(len(failed), 1, failed)
        self.assertIn("left out of the geometric means", failed[0])


class ExitStatus(unittest.TestCase):
    """bench/run.py's main: the runs are made up (no program runs), the
    report is written for real into a folder of its own."""

    def main(self, times: dict, quick: bool, crash=frozenset()) -> tuple[int, str]:
        runs = suite_runs(times, crash, RSS_OK)
        fake_suite = types.SimpleNamespace(announce=lambda: None, run=lambda: None, elapsed_s=1.0, runs=runs,
                                           failures=[(r, "true") for r in runs if not r.ok])
        programs = types.SimpleNamespace(why_no_callgrind="")
        out = io.StringIO()
        with tempfile.TemporaryDirectory() as tmp, \
                mock.patch.object(run, "choose_allocators", return_value=(ALLOCS, [])), \
                mock.patch.object(run, "check_libraries"), \
                mock.patch.object(run, "prepare_programs", return_value=programs), \
                mock.patch.object(run, "Suite", return_value=fake_suite), \
                mock.patch.object(report, "make_plots", return_value=({}, "")), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            argv = ["--out", tmp, "--only", ",".join(TIMED + POOL + RSS)] + (["--quick"] if quick else [])
            status = run.main(argv)
            text = out.getvalue()
            self.assertIn("## Failed checks" if "check(s) FAILED" in text else "# fastalloc",
                          (Path(tmp) / "report.md").read_text())
        return status, text

    def test_full_run_fails_on_a_fail_line(self):
        status, text = self.main(healthy_times(pool=60.0), quick=False)
        self.assertEqual(status, 1, text)
        self.assertIn("1 check(s) FAILED:", text)

    def test_full_run_passes(self):
        status, text = self.main(healthy_times(), quick=False)
        self.assertEqual(status, 0, text)

    def test_smoke_run_gives_no_verdict(self):
        status, text = self.main(healthy_times(pool=60.0, secure=1.3), quick=True)
        self.assertEqual(status, 0, text)
        self.assertIn(checks.NO_VERDICTS, text)

    def test_smoke_run_fails_on_a_crash(self):
        status, text = self.main(healthy_times(), quick=True, crash={(TIMED[0], SECURE)})
        self.assertEqual(status, 1, text)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=1)
