#!/usr/bin/env python3
"""fastalloc benchmark driver (Python 3 standard library only).

Runs every workload of the WORKLOADS table under every allocator -- fastalloc
(<build>/libfastalloc.so), glibc (no preload) and, when installed, jemalloc,
tcmalloc and mimalloc -- by LD_PRELOAD, alternating the allocators round by
round (A B C D A B C D ...).  Prints one progress line per run to stderr, the
result tables to stdout, and writes <out>/report.md, <out>/results.json and
SVG plots (gnuplot) beside them.

Exit status: 0 when every run and every check passed; 1 when any run failed
(a validation error, a crash, a timeout, a preload that did not take) or any
check printed a FAIL line (a target missed: fa_pool's ratios, its RSS
bounds, the hardened build's cost; a workload left out of a geometric mean
because a run of it failed); 2 on a usage or setup error.  A smoke run
(--quick) gives the targets no verdict, and says so: its ratios mean nothing.
`make bench QUICK=1` (CI) relies on that.

    python3 bench/run.py [--build build] [--quick] [--only PATTERN[,..]]
                         [--allocators NAME[,..]] [--lib NAME=PATH] ...

This file parses the options and runs the steps; the work is done by the
package beside it, bench/fabench/ (its __init__.py says which module holds
what).

See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fabench import BENCH_DIR, REPO, SetupError
from fabench.allocators import check_libraries, choose_allocators
from fabench.programs import prepare_programs
from fabench.report import loadavg, report_results, run_meta
from fabench.runner import Suite
from fabench.workloads import FULL_ROUNDS, QUICK_ROUNDS, Plan, print_plan, select_workloads


def make_parser() -> argparse.ArgumentParser:
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
                    help="run only these allocators, in this order (fastalloc, fastalloc-secure, glibc, "
                    "jemalloc, tcmalloc, mimalloc, a --lib name, or fastalloc-profile, which runs "
                    "only when named)")
    ap.add_argument("--lib", action="append", default=[], metavar="NAME=PATH",
                    help="also measure the allocator at PATH under NAME (e.g. an older fastalloc build)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a workload parameter, e.g. --set ops=5M")
    ap.add_argument("--timeout", type=float, help="seconds before a run is killed (default per workload)")
    ap.add_argument("--out", default=str(BENCH_DIR / "results"),
                    help="folder for report.md, results.json and the plots (default: %(default)s)")
    ap.add_argument("--require-valgrind", action="store_true",
                    help="fail (exit 2) instead of skipping the instruction counts when valgrind is "
                    "missing (CI, where it is installed)")
    ap.add_argument("--list", action="store_true", help="list the workloads and allocators, run nothing")
    return ap


def split_list(values: list[str] | None) -> list[str]:
    return [x.strip() for v in values or [] for x in v.split(",") if x.strip()]


def check_options(ap: argparse.ArgumentParser, args) -> tuple[dict, list[tuple[str, str]]]:
    """--rounds, --set and --lib, checked (a bad one exits 2 with the usage).
    Returns (the --set overrides, the --lib (name, path) pairs)."""
    if args.rounds is not None and args.rounds < 0:  # --rounds 0 keeps the default
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
    return overrides, extra


def main(argv=None) -> int:
    ap = make_parser()
    args = ap.parse_args(argv)
    overrides, extra = check_options(ap, args)
    build = Path(args.build).resolve()
    try:
        workloads = select_workloads(split_list(args.only))
        allocs, skipped = choose_allocators(build, extra, split_list(args.allocators))
        plan = Plan(build, args.quick, args.rounds, overrides, args.timeout, workloads, allocs)
        if args.list:
            print_plan(plan, skipped)
            return 0
        check_libraries(allocs)
        programs = prepare_programs(plan, args.require_valgrind)
    except SetupError as e:
        print(f"run.py: {e}", file=sys.stderr)
        return 2

    for n, why in skipped:
        print(f"skip {n}: {why}", file=sys.stderr)
    if programs.why_no_callgrind:  # said again after the tables, where it cannot scroll away
        print(f"SKIPPED fast-path instructions: {programs.why_no_callgrind}", file=sys.stderr)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    suite = Suite(plan, programs)
    suite.announce()
    meta = run_meta(plan)
    try:
        suite.run()
    except KeyboardInterrupt:
        print("\nrun.py: interrupted; no report written", file=sys.stderr)
        return 130
    meta["elapsed_s"] = suite.elapsed_s
    meta["load_end"] = loadavg()
    failed_checks = report_results(plan, skipped, suite, meta, out_dir, programs.why_no_callgrind)
    return 1 if suite.failures or failed_checks else 0


if __name__ == "__main__":
    sys.exit(main())
