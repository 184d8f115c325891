"""Where fastalloc's memory goes: the split of its resident bytes at its
peak, which fastalloc itself writes at exit (FASTALLOC_STATS=json:PATH, the
"at_peak" object), read after each of its runs; the memory table; and the
summary lines that set each allocator's peak RSS against the leanest peer's
(issue 24)."""

from __future__ import annotations

import glob
import json
import os
from typing import TYPE_CHECKING

from .allocators import GLIBC, PEERS, VARIANTS
from .stats import fmt_num, fmt_ratio, geomean
from .tables import Table
from .workloads import Workload

if TYPE_CHECKING:  # runner imports this module to read the files
    from .runner import RunResult

# The allocators a workload's leanest peer is chosen from: glibc and the
# peers, never fastalloc itself, its hardened build or a --lib extra (an
# older fastalloc would otherwise be its own yardstick).
LEAN_PEERS = (GLIBC.name,) + tuple(name for name, _, _ in PEERS)

# The parts of at_peak, in the order of the table: what the program holds,
# then the four places an allocator can keep memory the program does not.
PARTS = (("in_use", "in use"), ("owned_free", "owned free"), ("central", "central"),
         ("unpurged", "unpurged"), ("metadata", "metadata"))
# Those that can hold an excess over the leanest peer (in use is the
# program's own: every allocator holds it).
EXCESS_PARTS = ("owned_free", "central", "unpurged", "metadata")

STATS_VAR = "FASTALLOC_STATS"
# fastalloc keeps the value in a fixed buffer (FA_OPT_TEXT_MAX, 256 bytes
# with its end); a longer one would be cut and written somewhere else.
STATS_VALUE_MAX = 255


def stats_value(folder: str) -> str | None:
    """FASTALLOC_STATS for a run whose files go to folder: one file per
    process (%p, the process id), since the real programs start several.
    None when the path would not fit fastalloc's buffer."""
    value = f"json:{os.path.join(folder, 'fastalloc-%p.json')}"
    return value if len(value) <= STATS_VALUE_MAX else None


def parse_at_peak(obj) -> dict | None:
    """The at_peak object of one process's statistics, or None when it is
    missing (a build from before it) or malformed: every part a byte count,
    and resident above zero (a peak was sampled)."""
    if not isinstance(obj, dict):
        return None
    peak = obj.get("at_peak")
    if not isinstance(peak, dict):
        return None
    out = {}
    for key in ("resident",) + tuple(k for k, _ in PARTS):
        v = peak.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            return None
        out[key] = v
    return out if out["resident"] > 0 else None


def read_at_peak(folder: str) -> tuple[dict | None, int]:
    """(the at_peak of the process whose at_peak.resident is largest, or
    None; the number of statistics files found).  A process that crashed or
    was killed left no file, or half of one: such files are passed over."""
    best, files = None, sorted(glob.glob(os.path.join(folder, "fastalloc-*.json")))
    for path in files:
        try:
            with open(path) as f:
                peak = parse_at_peak(json.load(f))
        except (OSError, ValueError):
            continue
        if peak is not None and (best is None or peak["resident"] > best["resident"]):
            best = peak
    return best, len(files)


def leanest(rows: list[dict]) -> dict | None:
    """The peer row with the lowest peak RSS, among those that ran without
    a failure."""
    peers = [r for r in rows if r["allocator"] in LEAN_PEERS and not r["failed"] and r["maxrss_kib"]]
    return min(peers, key=lambda r: r["maxrss_kib"]) if peers else None


def at_peak_of(w: Workload, runs: list[RunResult]) -> tuple[dict | None, int | None]:
    """(at_peak, peak RSS in KiB) of fastalloc's run with the highest peak
    RSS (the one the peak RSS column shows), so that "other" subtracts
    figures of the same process."""
    good = [r for r in runs if r.workload == w.name and r.allocator == "fastalloc" and r.ok and r.maxrss_kib]
    if not good:
        return None, None
    top = max(good, key=lambda r: r.maxrss_kib)
    return top.at_peak, top.maxrss_kib


def memory_rows(workloads: list[Workload], rows_by: dict, runs: list[RunResult]) -> list[dict]:
    """One entry per malloc workload: fastalloc's peak RSS, the leanest
    peer's, the ratio, the parts at fastalloc's peak, "other" (peak RSS
    less the allocator's resident bytes: the program, its libraries, the
    harness) and the part that holds the excess; and every allocator's peak
    RSS.  Rows of fastalloc's own APIs (a label) are left out: no peer runs
    them.  A workload that fastalloc did not run (--allocators) has an entry
    too, with "fastalloc" false, for a --lib allocator's summary line."""
    out = []
    for w in workloads:
        if w.kind != "alloc" or w.label or not rows_by.get(w.name):
            continue
        rows = rows_by[w.name]
        fa = next((r for r in rows if r["allocator"] == "fastalloc"),
                  {"failed": 0, "runs": 0, "errors": [], "maxrss_kib": None})
        lean = leanest(rows)
        m = {"workload": w.name, "fastalloc": bool(fa["runs"]), "failed": fa["failed"], "runs": fa["runs"],
             "errors": fa["errors"], "fastalloc_kib": fa["maxrss_kib"],
             "leanest": lean["name"] if lean else None, "leanest_kib": lean["maxrss_kib"] if lean else None,
             "ratio": None, "at_peak": None, "other_bytes": None, "excess": None,
             # every allocator's peak RSS, for the summary lines (not a row with a failed run)
             "peak_kib": {r["name"]: r["maxrss_kib"] for r in rows if not r["failed"] and r["maxrss_kib"]}}
        if not fa["failed"] and fa["maxrss_kib"] and lean:
            m["ratio"] = fa["maxrss_kib"] / lean["maxrss_kib"]
        peak, rss_kib = at_peak_of(w, runs)
        if peak is not None and not fa["failed"]:
            m["at_peak"] = peak
            m["other_bytes"] = rss_kib * 1024 - peak["resident"]
            if m["ratio"] is not None and m["ratio"] > 1.0:
                m["excess"] = max(EXCESS_PARTS, key=lambda k: peak[k])
        out.append(m)
    return out


def lean_geomean(mem: list[dict], name: str) -> tuple[float | None, int]:
    """name's peak RSS against the leanest peer of each workload (the
    peer itself included when name is one), geometric mean over the
    workloads where both have one; (mean, how many)."""
    ratios = []
    for m in mem:
        mine = m["peak_kib"].get(name)
        peers = [kib for n, kib in m["peak_kib"].items() if n in LEAN_PEERS]
        if mine and peers:
            ratios.append(mine / min(peers))
    return geomean(ratios), len(ratios)


def memory_lines(mem: list[dict]) -> list[str]:
    """The summary lines: fastalloc's peak RSS against the leanest peer of
    each workload (geometric mean), the same for any --lib allocator (a
    build before a change, so that both figures come from one run), and
    each peer's own figure (glibc's is not 1.00x where another peer is
    leaner somewhere)."""
    lines, counts = [], []
    names = list(dict.fromkeys(n for m in mem for n in m["peak_kib"]))
    extras = [n for n in names if n not in LEAN_PEERS and n != "fastalloc" and n not in VARIANTS]
    for name in ["fastalloc"] + extras:
        g, n = lean_geomean(mem, name)
        if g is not None:
            lines.append(f"{name} peak RSS vs the leanest peer of each workload, geometric mean over "
                         f"{n} {'workload' if n == 1 else 'workloads'}: {g:.2f}x")
            counts.append(n)
    if not lines:
        return lines
    peers = []
    for name in [n for n in LEAN_PEERS if n in names]:
        g, n = lean_geomean(mem, name)
        if g is not None:  # over other workloads than the line above: say how many
            peers.append(f"{name} {g:.2f}x" + (f" ({n} workloads)" if n != counts[0] else ""))
    if peers:
        lines.append("the peers' peak RSS vs the leanest peer of each workload, geometric mean: "
                     + ", ".join(peers))
    return lines


def fmt_part(b: float | None) -> str:
    """Bytes, shown in MiB."""
    return "-" if b is None else fmt_num(b / 1048576)


def memory_table(mem: list[dict], lines: list[str]) -> Table:
    header = ["workload", "fastalloc MiB", "leanest peer", "its MiB", "ratio"] + \
        [h for _, h in PARTS] + ["other", "holds the excess"]
    t = Table("memory", header, [], left=(0, 2, len(header) - 1))
    for m in (m for m in mem if m["fastalloc"]):
        if m["failed"]:
            t.body.append([m["workload"], f"FAILED {m['failed']}/{m['runs']} runs: {'; '.join(m['errors'])}"])
            continue
        peak = m["at_peak"] or {}
        lean_kib = m["leanest_kib"]
        excess = dict(PARTS).get(m["excess"]) or ("-" if m["ratio"] and m["ratio"] > 1.0 and not peak else "")
        t.body.append([m["workload"], fmt_part(m["fastalloc_kib"] and m["fastalloc_kib"] * 1024),
                       m["leanest"] or "-", fmt_part(lean_kib and lean_kib * 1024), fmt_ratio(m["ratio"])]
                      + [fmt_part(peak.get(k)) for k, _ in PARTS] + [fmt_part(m["other_bytes"]), excess])
    t.notes.append("MiB. fastalloc MiB, its MiB: the highest peak RSS of the rounds (ru_maxrss) of "
                   "fastalloc and of the leanest peer (of " + ", ".join(LEAN_PEERS) + "); ratio: "
                   "fastalloc's over the peer's. The parts: fastalloc's resident bytes split where "
                   "they were when they were highest, from its run with the highest peak RSS "
                   "(FASTALLOC_STATS's at_peak; for a run of several processes, the one with the "
                   "most): in use (the blocks handed out, small ones at their class's size), owned "
                   "free (free blocks in the spans and large blocks that threads keep), central (free "
                   "blocks in the spans the central caches list), unpurged (free pages of the page heap "
                   "not purged yet), metadata (the allocator's records and page map); other = peak RSS "
                   "less their sum (the program, its libraries, the harness). holds the excess: where "
                   "fastalloc's peak RSS is above the leanest peer's, the largest of owned free, "
                   "central, unpurged and metadata.")
    if not any(m["at_peak"] for m in mem):
        t.notes.append("No parts: this fastalloc writes no at_peak in its statistics, or its runs "
                       "left no file.")
    t.notes += lines
    return t
