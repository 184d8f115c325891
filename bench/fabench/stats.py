"""Medians and ratios over the rounds, and how the numbers are written."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

from .allocators import VARIANTS, Allocator
from .workloads import Workload, row_name

if TYPE_CHECKING:  # runner imports this module for its progress lines
    from .runner import RunResult


def fmt_num(v: float | None) -> str:
    if v is None:
        return "-"
    a = abs(v)
    if a >= 99.95:
        return f"{v:.0f}"
    if a >= 9.995:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_count(n: float | None) -> str:
    """A count such as page faults: 812, 45.3k, 7.68M."""
    if n is None or n < 0:
        return "-"
    if n < 1e4:
        return f"{n:.0f}"
    if n < 1e6:
        return f"{n / 1e3:.1f}k"
    return f"{n / 1e6:.2f}M"


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


def fmt_clock(s: float) -> str:
    return f"{int(s) // 60}:{int(s) % 60:02d}"


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


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
        if rs:
            rows.append(summary_row(w, a, rs))
    add_ratios(w, rows, refs)
    return rows


def summary_row(w: Workload, a: Allocator, rs: list[RunResult]) -> dict:
    """The median, range, peak RSS, minor faults (median over the rounds)
    and extra columns of one allocator's runs.
    A row with a failed run has no median: it gets no ratios either."""
    good = [r for r in rs if r.ok]
    bad = [r for r in rs if not r.ok]
    vals = [r.value for r in good]
    rss = [r.maxrss_kib for r in good if r.maxrss_kib]
    faults = [r.minflt for r in good if r.minflt]
    row = {"workload": w.name, "allocator": a.name, "name": row_name(w, a.name),
           "runs": len(rs), "failed": len(bad),
           "errors": sorted({r.error for r in bad}), "values": vals,
           "median": statistics.median(vals) if vals and not bad else None,
           "min": min(vals) if vals else None, "max": max(vals) if vals else None,
           "maxrss_kib": max(rss) if rss else None,
           "minflt": statistics.median(faults) if faults else None,
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
    return row


def add_ratios(w: Workload, rows: list[dict], refs: list[dict] | None) -> None:
    """vs_glibc, vs_best and best of every row: against the rows themselves,
    or against refs (the malloc rows a fastalloc API compares to)."""
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
            others = [o for o in refs if o["allocator"] != r["allocator"] and o["allocator"] not in VARIANTS and o["median"] is not None]
        else:  # the hardened build and the profile are fastalloc too, not peers
            others = [o for o in rows if o is not r and o["median"] is not None and o["allocator"] not in VARIANTS]
        if others:
            best = pick(others, key=lambda o: o["median"])
            r["vs_best"], r["best"] = ratio(r["median"], best["median"]), best["name"]


def summarize_all(workloads: list[Workload], allocs: list[Allocator],
                  runs: list[RunResult]) -> dict[str, list[dict]]:
    """{workload name: its rows}.  The references (compare_to) are summarized
    first, since the rows compared to them need their medians."""
    rows_by: dict[str, list[dict]] = {}
    for w in sorted(workloads, key=lambda w: bool(w.compare_to)):
        if w.kind == "once":
            continue
        refs = rows_by.get(w.compare_to) if w.compare_to else None
        rows_by[w.name] = summarize(w, allocs, runs, refs if w.compare_to else None)
    return rows_by
