"""The plots: gnuplot scripts written beside the report (<stem>.gp, so they
can be redrawn by hand) and the SVGs they draw."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

from .workloads import Workload


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
    if "objpool-shuffle-mixed" in by_plot:
        add("objpool-shuffle-mixed", plot_threads(
            gnuplot, out_dir, "objpool-shuffle-mixed",
            "objpool-shuffle-mixed: allocate+free time, objects of 16..1024 B",
            "ms (lower is better)", by_plot["objpool-shuffle-mixed"], rows_by, logy=True))
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
