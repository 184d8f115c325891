"""The result tables: one per table name of the workloads (allocator rows,
encode-fixed64, the instruction counts), and their layout as text and as
Markdown."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .allocators import Allocator
from .stats import fmt_count, fmt_extra, fmt_num, fmt_ratio, fmt_rss
from .workloads import Workload

if TYPE_CHECKING:
    from .runner import RunResult


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
              "min-max", "spread", "peak RSS", "faults"] + [h for _, h, _ in extras] + ["vs glibc", "vs best other"]
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
                     fmt_rss(r["maxrss_kib"]), fmt_count(r["minflt"])]
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


def build_tables(workloads: list[Workload], allocs: list[Allocator], runs: list[RunResult],
                 rows_by: dict, why_no_callgrind: str) -> list[Table]:
    """The tables in the order of the workloads."""
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
    return tables


def add_plots(tables: list[Table], plots: dict[str, list[str]]) -> None:
    """Gives each table its plots; the ratios plot gets a section of its own."""
    for t in tables:
        t.plots = plots.get(t.name, [])
    if plots.get("ratios"):
        tables.append(Table("ratios to glibc", [], [], plots=plots["ratios"],
                            notes=["Every workload's median against glibc's (fastalloc, its fa_pool and "
                                   "fa_free_sized rows, and the peers); below 1 is better."]))
