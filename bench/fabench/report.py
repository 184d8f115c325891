"""What comes out after the runs: the tables on the terminal, report.md and
results.json in the output folder, and the facts about the run they carry
(date, revision, host, load)."""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from pathlib import Path

from .allocators import git_revision
from .checks import add_checks
from .memory import memory_lines, memory_rows, memory_table
from .plots import make_plots
from .runner import Suite, group_failures
from .stats import fmt_clock, summarize_all
from .tables import Table, add_plots, build_tables, md_table, text_table
from .workloads import Plan


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


def run_meta(plan: Plan) -> dict:
    """The facts known before the first run; main adds elapsed_s and
    load_end after the last."""
    return {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "revision": git_revision(), "build": str(plan.build), "host": host_info(),
            "load_start": loadavg(), "rounds": plan.default_rounds, "quick": plan.quick}


def report_results(plan: Plan, skipped, suite: Suite, meta: dict, out_dir: Path,
                   why_no_callgrind: str) -> list[str]:
    """From the runs to the rows, tables, checks and plots: prints them and
    writes report.md and results.json into out_dir.  Returns the checks that
    failed (checks.add_checks), which fail the run as a failed run does."""
    rows_by = summarize_all(plan.workloads, plan.allocs, suite.runs)
    tables = build_tables(plan.workloads, plan.allocs, suite.runs, rows_by, why_no_callgrind)
    mem = memory_rows(plan.workloads, rows_by, suite.runs)
    mem_lines = memory_lines(mem)
    summary, failed_checks = add_checks(tables, plan.workloads, rows_by, mem_lines, plan.quick)
    plots, plot_note = make_plots(out_dir, plan.workloads, rows_by, [a.name for a in plan.allocs])
    add_plots(tables, plots)
    if any(m["fastalloc"] for m in mem):  # the last table: it sums up the peak RSS of the others
        tables.append(memory_table(mem, mem_lines))
    grouped = group_failures(suite.failures)
    print_results(tables, summary, skipped, plot_note, suite.failures, grouped, why_no_callgrind,
                  failed_checks)
    report = out_dir / "report.md"
    write_report(report, meta, plan.allocs, skipped, tables, summary, grouped, plan.quick, plot_note,
                 why_no_callgrind, failed_checks)
    write_results_json(out_dir / "results.json", meta, plan, skipped, rows_by, suite.runs, mem)
    print(f"\nwrote {report}, {out_dir / 'results.json'}"
          f"{' and ' + str(sum(len(v) for v in plots.values())) + ' plots' if plots else ''} "
          f"({fmt_clock(meta['elapsed_s'])})", file=sys.stderr)
    return failed_checks


def print_results(tables: list[Table], summary: list[str], skipped, plot_note: str,
                  failures: list, grouped: dict, why_no_callgrind: str = "",
                  failed_checks: list[str] = ()) -> None:
    """The tables, the summary, what was skipped, each distinct failure
    with the command that reproduces it, and the checks that failed, to
    stdout."""
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
    if why_no_callgrind:
        print(f"SKIPPED fast-path instructions: {why_no_callgrind}")
    if plot_note:
        print(plot_note)
    if failures:
        print(f"\n{len(failures)} run(s) FAILED:")
        for (wname, aname, error), (rounds_failed, cmd, _) in grouped.items():
            print(f"  {wname} / {aname}, round {','.join(map(str, rounds_failed))}: {error}\n"
                  f"    reproduce: {cmd}")
    if failed_checks:
        print(f"\n{len(failed_checks)} check(s) FAILED:")
        for line in failed_checks:
            print(f"  {line}")


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
    "objpool-shuffle-mixed": "objpool-shuffle with mixed sizes: T threads each allocate 100,000 objects of "
                             "16..1024 B (multiples of 8, drawn per object and round from the thread's "
                             "seeded generator, before the timed phase), shuffle the pointers, free them; "
                             "5 rounds (full), the phases and the timing as in objpool-shuffle. malloc only: "
                             "a fixed-size pool cannot serve mixed sizes. Every object is stamped, and "
                             "checked in every word between the phases, as there. 16 threads hold about "
                             "830 MB at once.",
    "realloc-grow": "Objects grown by appending, as lists and string builders grow: each thread starts "
                    "2,000 objects, appends to a random unfinished one at a time until each has its final "
                    "length (heavy-tailed: median 64 B, 1 in 128 above 256 KiB, at most 512 KiB), then "
                    "checks and frees them all; rounds of that. Lists hold 8-byte elements appended one at "
                    "a time, their capacity grown to n + n/8 + 6 elements (Python's lists); strings get "
                    "chunks of 1..32 bytes, their capacity doubled from 16. Every realloc is followed by a "
                    "check of all the bytes the object held, moved or not. median = seconds for the whole "
                    "run (lower is better); reallocs = how many (the same under every allocator); moved = "
                    "those that returned a new address, so the allocator copied the object.",
    "real programs": "Real programs under each allocator (LD_PRELOAD, which reaches every process they "
                     "start: checked in the dynamic loader's log of each), timed by bench/realprog.c from "
                     "the program's start to its end, and their output compared with what realprog "
                     "computes from the input it wrote: python3 running bench/programs/dicts.py with "
                     "PYTHONMALLOC=malloc (so that its small objects come from malloc, not from its own "
                     "arenas); sqlite3 inserting rows one INSERT at a time into an in-memory database in "
                     "one transaction, indexing and querying them; gcc compiling and linking a generated "
                     "C file at -O2 (gcc, cc1, as, collect2, ld; the compiled program is run, untimed, and "
                     "its output checked). peak RSS and faults are those of the whole process tree "
                     "(realprog's own are small). median = seconds (lower is better).",
    "objpool-rss": "Seed 001: 16 threads x 100,000 x 64 B (102.4 MB of objects, 12.8 MB of pointer "
                   "arrays, mmap'd by the benchmark), VmRSS read by the main thread while the workers "
                   "hold their objects. median = VmRSS with everything live (first round).",
    "threads-64b": "Seed 003: threads each allocating and freeing 64 B blocks, at once (reuse) or "
                   "with a window of 64 live blocks. 32 threads on {cpus} CPUs: oversubscribed. The "
                   "seed's claim: 32 threads, system malloc ~2 M ops/s, a lock-free pool > 50 M ops/s.",
    "producer-consumer": "Every block is freed by another thread than the one that allocated it: "
                         "P producers allocate 16..512 B, fill it, pass it through an SPSC ring; P "
                         "consumers check it and free it. xferbag: P producers fill batches of 4,096 "
                         "objects of 8..2048 B and push them onto one bag (a stack of at most 100 "
                         "batches under a mutex), P consumers pop any batch and free its objects in a "
                         "run (the Lever-Boreham xmalloc test's pattern); xferbag-*2+2: 2 producers and "
                         "2 consumers that allocate nothing, as the outside suite runs xmalloc-test. "
                         "rpring: threads in a ring keep 1,000 blocks of 8..16,000 B live and hand 100 "
                         "to the next thread every second loop (rptest's pattern). peak RSS = "
                         "ru_maxrss of the process.",
    "bursts": "Cross-thread frees in bursts, a server-like loop: 2 threads each allocate bursts of "
              "1,000, 5,000 or 50,000 blocks of 192 B and hand them to the other, which checks and "
              "frees them in a shuffled order; for every block a thread also mallocs a 1 KiB "
              "\"session\" and frees the one made 16 before. median = ns per block of one thread "
              "(lower is better).",
    "larson": "Larson-style server: each lineage keeps 1,000 live objects of 10..1,000 B, replaces a "
              "random one per operation, and hands its array to a new thread every 20,000 operations "
              "(the old thread exits).",
    "cxx": "A C++ program's allocations: std::map<uint64_t, std::string> with 100,000 keys, churned "
           "by random operations (insert a 16..255 B string, or check a value and erase it or append "
           "8 bytes to it), and a temporary string built every 64 operations; every allocation is a "
           "new-expression in the standard library, every free a sized delete. fastalloc exports "
           "operator new and delete itself; glibc's column goes through libstdc++'s. median = ns per "
           "operation (lower is better).",
    "many-classes": "One thread with about 1 MiB live over many size classes, as the espresso logic "
                    "minimizer keeps its heap: 4,000 slots; each step picks one at random and frees its "
                    "block, or, when it is empty, puts there a new block of 16..127 B (60%), 128..1023 B "
                    "(30%) or 1..8 KiB (10%), written whole. About half the slots are full: 1.3 MiB "
                    "live, 1.5 MiB at the peak (peak live: the most bytes asked for and not yet freed). "
                    "median = ns per step (lower is better); the peak RSS column is the point of it: "
                    "what the allocator needs around so little live data (the memory table).",
    "threads-random-small": "The loop of glibc's bench-malloc-thread (mimalloc-bench's glibc-thread): "
                            "each thread keeps 1,024 blocks and replaces a random one per iteration "
                            "by a new block of 8 B..32 KiB, the sizes inverse-square distributed (1/size "
                            "uniform: half under 16 B, mean 67 B). A fixed number of iterations per thread "
                            "instead of glibc's fixed time. 4 threads on {cpus} CPUs: oversubscribed "
                            "there. median = iterations (free + malloc) per second, all threads together.",
    "memory": "Where fastalloc's memory goes, one row per workload of the tables above (fastalloc's own "
              "APIs left out): its peak RSS against the leanest peer's (the lowest peak RSS of glibc, "
              "jemalloc, tcmalloc and mimalloc on that row), and its resident bytes split into parts "
              "where they stood at their highest, as fastalloc itself sampled them "
              "(FASTALLOC_STATS=json:PATH, the \"at_peak\" object, which run.py sets for fastalloc's "
              "runs). \"-\": no parts (a build that does not write them, or a run that left no file).",
    "rss-after-peak": "4 threads build a 1 GiB peak of 16..1024 B blocks, free it all and exit; the "
                      "process then stays idle (no allocator call) and VmRSS is sampled every 100 ms. "
                      "median = VmRSS 5 s after the last free (lower is better).",
    "many-threads": "256 threads at once, each allocating 1 MiB in 16..512 B blocks, freeing it, 4 "
                    "times. peak RSS = ru_maxrss; max VmRSS = highest 10 ms sample.",
    "churn": "Where giving memory back costs page faults. large-churn: 20 live buffers of 5..25 MiB, "
             "each written whole when allocated; a random one is checked, freed and replaced, 500 "
             "times. thread-churn: 2 chains of short-lived threads; each allocates 256 blocks (16 B.."
             "64 KiB, 1 in 32 ~270 KB), writes them, frees the half its predecessor handed it and half "
             "its own, hands the rest to the thread it starts, and exits. median = seconds for the "
             "whole run (lower is better); faults = minor page faults of the process: an allocator "
             "that unmaps or purges what it will soon reuse pays one per page (zeroed by the kernel) "
             "each time.",
}


def write_report(path: Path, meta: dict, allocs, skipped, tables: list[Table], summary, failures,
                 quick, plot_note, why_no_callgrind: str = "", failed_checks: list[str] = ()):
    lines = report_head(meta, allocs, skipped, quick)
    if why_no_callgrind:
        lines += [f"**Skipped: fast-path instructions.** {why_no_callgrind}.", ""]
    if summary:
        lines += ["## Summary", ""] + [f"- {s}" for s in summary] + [""]
    if plot_note:
        lines += [f"Plots: {plot_note}.", ""]
    for t in tables:
        lines += table_section(t, meta["host"]["cpus"])
    if failures:
        lines += ["## Failures", ""]
        for (wname, aname, error), (rounds_failed, cmd, tail) in failures.items():
            lines.append(f"- {wname} / {aname}, round {','.join(map(str, rounds_failed))}: {error}")
            lines.append(f"  - reproduce: `{cmd}`")
            if tail:
                lines.append("  - stderr: `" + tail.replace("`", "'").replace("\n", " / ") + "`")
        lines.append("")
    if failed_checks:
        lines += ["## Failed checks", ""] + [f"- {line}" for line in failed_checks] + [""]
    path.write_text("\n".join(lines))


def report_head(meta: dict, allocs, skipped, quick) -> list[str]:
    """The report's first lines: the run, the allocators, the columns."""
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
              "peak RSS = highest ru_maxrss of the rounds (whole process), faults = median of the "
              "minor page faults of the rounds (ru_minflt, whole process: pages touched that were "
              "not mapped, each zeroed by the kernel), vs glibc = the row's median "
              "against glibc's, vs best other = against the best median among the other allocators "
              "(named). Ratios are oriented so that below 1.00x is better, also for throughput. "
              "See bench/README.md.", ""]
    return lines


def table_section(t: Table, cpus) -> list[str]:
    """One table in Markdown, with its introduction, notes and plots."""
    lines = [f"## {t.name}", ""]
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
    return lines


def write_results_json(path: Path, meta: dict, plan: Plan, skipped, rows_by: dict, runs,
                       mem: list[dict] = ()) -> None:
    """Every single run (its output, its value, its peak RSS; fastalloc's:
    the parts at its peak), every row, and the memory table's rows."""
    raw = {"meta": meta,
           "allocators": [vars(a) for a in plan.allocs],
           "skipped": [{"name": n, "why": why} for n, why in skipped],
           "workloads": [{"name": w.name, "binary": w.binary, "args": plan.argv(w),
                          "kind": w.kind, "metric": w.metric, "unit": w.unit,
                          "higher_is_better": w.higher_is_better, "table": w.table, "title": w.title}
                         for w in plan.workloads],
           "summary": [{k: v for k, v in r.items() if k != "median_output"}
                       for rows in rows_by.values() for r in rows],
           "memory": list(mem),
           "runs": [vars(r) for r in runs]}
    path.write_text(json.dumps(raw, indent=1) + "\n")
