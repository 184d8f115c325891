"""The modules behind bench/run.py, the benchmark driver (Python 3 standard
library only).

    workloads   the WORKLOADS table, picking workloads, the run plan (rounds,
                allocators per workload, --list)
    allocators  finding fastalloc, glibc and the peers to preload
    programs    building and finding the benchmark programs, runwrap, valgrind
    runner      one program run under LD_PRELOAD, its checks, and the whole
                suite in alternation
    verify      what each program must report it checked ("checked"), for
                its command line
    stats       medians, ratios, and how numbers are written
    tables      the result tables (terminal and Markdown layout)
    checks      fa_pool's targets, the objpool-rss checks, the summary lines
    memory      fastalloc's statistics at its peak (FASTALLOC_STATS), the
                memory table, the peak RSS lines against the leanest peer
    plots       gnuplot SVGs
    report      the terminal output after the runs, report.md, results.json

See bench/README.md.
"""

from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent.parent
REPO = BENCH_DIR.parent


class SetupError(Exception):
    """A usage or setup problem found before any run: run.py prints it after
    "run.py: " and exits 2."""
