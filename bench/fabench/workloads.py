"""The workloads: the WORKLOADS table, picking workloads by name, and the
plan of one invocation (which workloads, under which allocators, how many
rounds)."""

from __future__ import annotations

import fnmatch
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import BENCH_DIR, SetupError
from .allocators import GLIBC, Allocator

FULL_ROUNDS = 3
QUICK_ROUNDS = 2


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
             "utime_s", "stime_s", "maxrss_kib", "minflt" and "majflt" may
             instead come from runwrap's measurement of the whole process.
             scale multiplies it (ops/s -> M ops/s).
    table    workloads with the same table are printed together.
    kind     "alloc": run under every allocator, rounds times (the default);
             "once": run once, without a preload (no allocator involved);
             "callgrind": run once per allocator under callgrind (exact
             instruction counts, see icount.c).
    only     run under these allocators only (e.g. fastalloc's own APIs).
    label    the name of the row instead of the allocator's (e.g. "fa_pool").
    compare_to  the workload whose rows give this row's references (glibc's
             median and the best peer's), e.g. fa_pool against malloc.
    extras   more columns: (output key, header, format) -- the median of that
             key over the rounds; format "kib" (shown in MiB), "mib", "num".
    threads, plot  x value and plot family for the thread-scaling plots.
    rounds   rounds for this workload (full, quick); 0 = the run's default.
    full     part of a default full run (else only with --only).
    needs    programs the workload runs that must be on PATH (the real
             programs: sqlite3, gcc); without one, its runs fail, saying so.
    """

    name: str
    binary: str
    args: tuple[str, ...]
    params: dict = field(default_factory=dict)
    quick: dict = field(default_factory=dict)
    metric: str = "ns_per_pair"
    unit: str = "ns/pair"
    higher_is_better: bool = False
    scale: float = 1.0
    table: str = "malloc_micro"
    title: str = ""
    timeout_s: float = 120.0
    kind: str = "alloc"
    only: tuple[str, ...] = ()
    label: str = ""
    compare_to: str = ""
    extras: tuple = ()
    threads: int = 0
    plot: str = ""
    rounds: tuple[int, int] = (0, 0)
    full: bool = True
    needs: tuple[str, ...] = ()

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

    def runs_under(self, alloc: Allocator) -> bool:
        return not self.only or alloc.name in self.only


def micro(mode: str, sizes: str, threads: int, live: int = 64, *, table="malloc_micro",
          prefix="micro", ops="10M", quick_ops="1M", per_s=False, plot="", full=True) -> Workload:
    """A malloc_micro configuration (see malloc_micro.c)."""
    size_name = "mixed" if "-" in sizes or "," in sizes else sizes
    mode_name = mode if mode == "reuse" else f"window{live}"
    args = ["--mode", mode, "--sizes", sizes, "--threads", str(threads), "--ops", "{ops}"]
    if mode == "window":
        args[2:2] = ["--live", str(live)]
    size_text = "sizes 16..1024 (step 16, shuffled)" if size_name == "mixed" else f"{sizes} B"
    mode_text = ("malloc+free at once" if mode == "reuse"
                 else f"{live} live blocks, free oldest + malloc new")
    name = (f"{prefix}-{mode_name}-{size_name}-{threads}t" if prefix == "micro"
            else f"{prefix}-{mode_name}-{threads}t")
    extra = dict(metric="ops_per_s", unit="M ops/s", higher_is_better=True, scale=1e-6) if per_s else {}
    return Workload(
        name=name, binary="malloc_micro", args=tuple(args),
        params={"ops": ops},   # malloc+free pairs per thread
        quick={"ops": quick_ops},
        title=f"{mode_text}, {size_text}, {threads} thread{'s' if threads > 1 else ''}",
        table=table, threads=threads, plot=plot, full=full, **extra)


SHUFFLE_THREADS = (1, 2, 4, 8, 16)


def objpool_shuffle(threads: int, api: str) -> Workload:
    pool = api == "pool"
    base = f"objpool-shuffle-{threads}t"
    return Workload(
        name=f"objpool-shuffle-pool-{threads}t" if pool else base,
        binary="objpool",
        args=("--mode", "shuffle", "--api", api, "--threads", str(threads),
              "--objects", "{objects}", "--rounds", "{rounds}"),
        params={"objects": "100k", "rounds": 5}, quick={"objects": "10k", "rounds": 2},
        metric="alloc_free_ms", unit="ms", table="objpool-shuffle",
        title=(f"{threads} thread(s) x 100k x 64 B: allocate, shuffle, free; "
               f"{'fa_pool_get/put' if pool else 'malloc/free'}; allocate+free phases timed"),
        extras=(("ns_per_pair", "ns/pair/thread", "num"), ("alloc_ms", "allocate ms", "num"),
                ("free_ms", "free ms", "num")),
        only=("fastalloc",) if pool else (), label="fa_pool" if pool else "",
        compare_to=base if pool else "", threads=threads, plot="objpool-shuffle",
        timeout_s=300)


def poolbursts(burst: int, name: str, order: str, threads: int, api: str) -> Workload:
    """Issue #40's server-like loop: bursts of 192 B requests that the next
    thread gives back, malloc/free or fa_pool_get/put (bench/poolbursts.c)."""
    pool = api == "pool"
    base = f"poolbursts-{name}-{order}-{threads}t"
    return Workload(
        name=f"poolbursts-pool-{name}-{order}-{threads}t" if pool else base,
        binary="poolbursts",
        args=("--api", api, "--threads", str(threads), "--burst", str(burst), "--requests", "{requests}",
              "--order", order, "--size", "192", "--session", "1024", "--sessions", "512", "--every", "4"),
        params={"requests": "1M"}, quick={"requests": "50k"},
        metric="elapsed_s", unit="ms", scale=1e3, table="poolbursts",
        title=(f"{threads} thread(s) in a ring, bursts of {burst:,} requests of 192 B "
               f"({'fa_pool_get/put' if pool else 'malloc/free'}) given back {order} by the next thread "
               "after a barrier; a 1 KiB session (512 live, malloc) replaced every 4 requests; 1M requests "
               "per thread"),
        only=("fastalloc",) if pool else (), label="fa_pool" if pool else "",
        compare_to=base if pool else "", threads=threads, timeout_s=300)


def objpool_shuffle_mixed(threads: int) -> Workload:
    """objpool-shuffle with sizes 16..1024 B drawn per object: malloc only
    (a fixed-size pool cannot serve them)."""
    return Workload(
        name=f"objpool-shuffle-mixed-{threads}t",
        binary="objpool",
        args=("--mode", "shuffle", "--api", "malloc", "--threads", str(threads),
              "--objects", "{objects}", "--rounds", "{rounds}", "--sizes", "16-1024"),
        params={"objects": "100k", "rounds": 5}, quick={"objects": "10k", "rounds": 2},
        metric="alloc_free_ms", unit="ms", table="objpool-shuffle-mixed",
        title=(f"{threads} thread(s) x 100k objects of 16..1024 B (multiples of 8, drawn per object): "
               "allocate, shuffle, free; malloc/free; allocate+free phases timed"),
        extras=(("ns_per_pair", "ns/pair/thread", "num"), ("alloc_ms", "allocate ms", "num"),
                ("free_ms", "free ms", "num")),
        threads=threads, plot="objpool-shuffle-mixed", timeout_s=300)


def objpool_rss(api: str) -> Workload:
    pool = api == "pool"
    return Workload(
        name="objpool-rss-pool" if pool else "objpool-rss",
        binary="objpool",
        args=("--mode", "rss", "--api", api, "--threads", "16", "--objects", "{objects}"),
        params={"objects": "100k"}, quick={"objects": "100k"},
        metric="live1_mib", unit="MiB", table="objpool-rss",
        title="16 threads x 100k x 64 B live, freed, again: VmRSS at each step",
        extras=(("live2_kib", "2nd live", "kib"), ("freed2_kib", "2nd freed", "kib"),
                ("exit_kib", "threads exited", "kib"))
        + ((("trim_kib", "after fa_pool_trim", "kib"),) if pool else ()),
        only=("fastalloc",) if pool else (), label="fa_pool" if pool else "",
        compare_to="objpool-rss" if pool else "")


# 38 small sizes (16, 42, ..., 978 B) and two large ones.
MIXED_LARGE = ",".join([str(16 + 26 * i) for i in range(38)] + ["300000", "900000"])

# The real programs' interpreter: the Python that runs run.py (its real
# binary, not a launcher script in front of it); --set python=PATH for another.
PYTHON = sys.executable or "python3"
DICTS_SCRIPT = str(BENCH_DIR / "programs" / "dicts.py")
# The compiler rows' translation units (#54): this project's own trace.c,
# with its include folders, and the C++ standard library whole.
SRC_DIR = BENCH_DIR.parent / "src"
TRACE_C = str(SRC_DIR / "09-diag" / "trace.c")
TRACE_INC = f"{SRC_DIR}:{BENCH_DIR.parent / 'include'}"
STDCPP_CC = str(BENCH_DIR / "programs" / "stdcpp.cpp")
STDCPP_QUICK_CC = str(BENCH_DIR / "programs" / "stdcpp_quick.cpp")

# The suite.  Add entries here (and programs to bench/CMakeLists.txt).
WORKLOADS: list[Workload] = [
    # -- malloc_micro: the first harness's micro-benchmark (64 B with 2 and
    #    32 threads is the threads-64b table below)
    *[micro(mode, sizes, threads, full=not (sizes == "64" and threads == 2))
      for mode in ("reuse", "window") for sizes in ("16-1024", "64") for threads in (1, 2)],

    # -- malloc_micro with 1 block in 20 large (300 KiB or 900 KiB): their
    #    frees keep the page heap's dirty memory above its purge floor, so
    #    this is where the purging policy shows (docs/MEMORY.md).
    Workload("micro-window256-mixedlarge-4t", "malloc_micro",
             ("--mode", "window", "--live", "256", "--sizes", MIXED_LARGE, "--threads", "4",
              "--ops", "{ops}"),
             params={"ops": "400k"}, quick={"ops": "40k"}, table="malloc_micro", threads=4,
             title="256 live blocks per thread, free oldest + malloc new, 38 sizes 16..978 B "
                   "and 300 KiB, 900 KiB (1 block in 20), 4 threads"),

    # -- 1. strings (seed 000)
    Workload("strings-1024", "strings",
             ("--buffers", "{buffers}", "--size", "1024", "--rounds", "{rounds}"),
             params={"buffers": 10000, "rounds": 200}, quick={"buffers": 10000, "rounds": 3},
             metric="ns_per_buffer", unit="ns/buffer", table="strings",
             title="10,000 buffers of 1,024 B, malloc+memset, all live, then freed; -O2 loop"),
    Workload("strings-1024-O0", "strings_O0",
             ("--buffers", "{buffers}", "--size", "1024", "--rounds", "{rounds}"),
             params={"buffers": 10000, "rounds": 200}, quick={"buffers": 10000, "rounds": 3},
             metric="ns_per_buffer", unit="ns/buffer", table="strings",
             title="the same loop compiled at -O0 (allocators stay -O2 in their libraries)"),
    Workload("strings-1024-sized", "strings",
             ("--buffers", "{buffers}", "--size", "1024", "--rounds", "{rounds}", "--free", "sized"),
             params={"buffers": 10000, "rounds": 200}, quick={"buffers": 10000, "rounds": 3},
             metric="ns_per_buffer", unit="ns/buffer", table="strings",
             title="-O2 loop, freed with fa_free_sized(p, 1024)",
             only=("fastalloc",), label="fa_free_sized", compare_to="strings-1024"),

    # -- 2. objpool-shuffle (seed 001): malloc, then fa_pool, per thread count
    *[w for t in SHUFFLE_THREADS for w in (objpool_shuffle(t, "malloc"), objpool_shuffle(t, "pool"))],

    # -- 2b. objpool-shuffle with mixed sizes (malloc only)
    *[objpool_shuffle_mixed(t) for t in SHUFFLE_THREADS],

    # -- 3. objpool-rss (seed 001)
    objpool_rss("malloc"), objpool_rss("pool"),

    # -- 4. threads-64b (seed 003)
    *[micro(mode, "64", threads, table="threads-64b", prefix="threads64", per_s=True,
            ops=ops, quick_ops=qops, plot=f"threads-64b-{mode}")
      for mode in ("reuse", "window")
      for threads, ops, qops in ((2, "10M", "1M"), (32, "500k", "50k"))],

    # -- 5. producer-consumer (remote frees).  Ten rounds for these rings:
    # a round moved by up to 2.4x under one library (prodcons-1+1 under
    # the default library: 5.1, 10.5 and 12.2 M ops/s in one run of 3
    # rounds), and with 3 a median decided the hardened build's "no row
    # above 1.5x" (#41).
    *[Workload(f"prodcons-{p}+{p}", "prodcons",
               ("--pairs", str(p), "--ops", "{ops}", "--min", "16", "--max", "512"),
               params={"ops": ops}, quick={"ops": "50k"},
               metric="ops_per_s", unit="M ops/s", higher_is_better=True, scale=1e-6,
               table="producer-consumer", threads=2 * p,
               title=f"{p} producer(s) -> SPSC ring -> {p} consumer(s), 16..512 B, consumer frees; 10 rounds",
               rounds=(10, 0))
      for p, ops in ((1, "3M"), (4, "1M"))],
    # One size, as an outside suite runs it: its figures under fastalloc
    # were bimodal (1.40-2.91 s against mimalloc's steady 1.50-1.70), so
    # ten rounds, each of which counts.
    Workload("prodcons-64b-1+1", "prodcons",
             ("--pairs", "1", "--ops", "{ops}", "--min", "64", "--max", "64"),
             params={"ops": "3M"}, quick={"ops": "50k"},
             metric="ops_per_s", unit="M ops/s", higher_is_better=True, scale=1e-6,
             table="producer-consumer", threads=2,
             title="1 producer -> SPSC ring -> 1 consumer, 64 B blocks, consumer frees; 10 rounds",
             rounds=(10, 0)),
    # The Lever-Boreham xmalloc test's pattern (issue #39): producers fill
    # batches of 4,096 objects of 8..2048 B (17 sizes) and push them onto a
    # shared bag (a mutex-guarded stack of at most 100 batches); any
    # consumer pops one, checks and frees its objects in a run.
    *[Workload(f"xferbag-{p}+{p}", "xferbag",
               ("--producers", str(p), "--objects", "{objects}", "--batch", "4096", "--bag", "100",
                "--size", "0"),
               params={"objects": objects}, quick={"objects": "20k"},
               metric="ops_per_s", unit="M ops/s", higher_is_better=True, scale=1e-6,
               table="producer-consumer", threads=2 * p,
               title=f"{p} producer(s) -> bag of batches (4,096 objects each, at most 100 waiting) -> "
                     f"{p} consumer(s), 8..2048 B mixed, consumers free whole batches")
      for p, objects in ((1, "2M"), (4, "500k"))],
    # xmalloc-test as the outside suite runs it (#53): 2 threads that
    # allocate, 2 that only free, 64 B blocks and the 17 sizes; peak RSS
    # is the row's point (the bag holds at most 100 batches, 26 MiB of
    # 64 B objects).
    *[Workload(f"xferbag-{tag}2+2", "xferbag",
               ("--producers", "2", "--objects", "{objects}", "--batch", "4096", "--bag", "100",
                "--size", str(size)),
               params={"objects": "2M"}, quick={"objects": "20k"},
               metric="ops_per_s", unit="M ops/s", higher_is_better=True, scale=1e-6,
               table="producer-consumer", threads=4,
               title=f"2 producers -> bag of batches (4,096 objects each, at most 100 waiting) -> 2 consumers "
                     f"that allocate nothing, {label}, consumers free whole batches")
      for tag, size, label in (("64b-", 64, "64 B"), ("", 0, "8..2048 B mixed"))],
    # rptest's pattern (#53, bench/rpring.c): 2 threads each keep 1,000
    # blocks of 8..16,000 B live, replace 100 a loop, and hand 100 more to
    # the other every second loop.
    Workload("rpring-2t", "rpring",
             ("--threads", "2", "--loops", "{loops}", "--slots", "1000", "--ops", "100", "--cross", "2",
              "--min", "8", "--max", "16000"),
             params={"loops": "20k"}, quick={"loops": "500"},
             metric="ops_per_s", unit="M ops/s", higher_is_better=True, scale=1e-6,
             table="producer-consumer", threads=2,
             title="2 threads in a ring, 1,000 live blocks of 8..16,000 B each, 100 replaced a loop, 100 "
                   "more handed to the other thread every second loop (rptest's pattern)"),

    # -- 5b. bursts (issue #39): cross-thread frees in bursts, a server-like
    #    loop: each thread allocates bursts of 192 B blocks (and a 1 KiB
    #    "session" per block, 16 live), hands each burst to the next thread
    #    and frees its predecessor's in a shuffled order.
    *[Workload(f"bursts-{name}", "bursts",
               ("--threads", "2", "--burst", str(burst), "--blocks", "{blocks}", "--size", "192",
                "--session", "1024", "--live", "16"),
               params={"blocks": "2M"}, quick={"blocks": "100k"},
               metric="ns_per_block", unit="ns/block", table="bursts", threads=2,
               title=f"2 threads, each handing bursts of {burst:,} blocks of 192 B to the other, which "
                     "frees them shuffled; a 1 KiB session per block (16 live); 2M blocks per thread")
      for name, burst in (("1k", 1000), ("5k", 5000), ("50k", 50000))],

    # -- 5c. poolbursts (issue #40): the same traffic through fa_pool, each
    #    burst given back by the next thread after a barrier, shuffled or in
    #    order; the malloc rows are the references of the fa_pool rows.
    *[w for burst, name in ((1000, "1k"), (5000, "5k"), (50000, "50k")) for order in ("shuffled", "inorder")
      for w in (poolbursts(burst, name, order, 2, "malloc"), poolbursts(burst, name, order, 2, "pool"))],
    *[poolbursts(50000, "50k", "shuffled", 1, api) for api in ("malloc", "pool")],

    # -- 6. larson-style server
    *[Workload(f"larson-{t}t", "larson",
               ("--threads", str(t), "--slots", "1000", "--ops", "{ops}", "--gen-ops", "{gen}",
                "--min", "10", "--max", "1000"),
               params={"ops": ops, "gen": "20k"}, quick={"ops": "40k", "gen": "10k"},
               metric="ops_per_s", unit="M ops/s", higher_is_better=True, scale=1e-6,
               table="larson", threads=t,
               title=f"{t} lineages x 1,000 slots of 10..1,000 B; a new thread every 20k ops")
      for t, ops in ((2, "4M"), (8, "1M"))],
    # The outside suite's other bimodal test: 2 threads, each a random
    # malloc/free loop over its own 1,024 blocks up to 32 KiB, no thread
    # replaced (larson's sizes start at 9 B: its stamps need them).
    Workload("larson-own-2t", "larson",
             ("--threads", "2", "--slots", "1024", "--ops", "{ops}", "--gen-ops", "{ops}",
              "--min", "9", "--max", "32768"),
             params={"ops": "4M"}, quick={"ops": "40k"},
             metric="ops_per_s", unit="M ops/s", higher_is_better=True, scale=1e-6,
             table="larson", threads=2,
             title="2 threads x 1,024 slots of 9 B..32 KiB, each thread its own, none replaced; 10 rounds",
             rounds=(10, 0)),

    # -- 6b. one thread, about 1 MiB live over many size classes, as the
    #    espresso logic minimizer keeps its heap: a random slot's block freed,
    #    or a new one put there.
    # -- C++: std::map and std::string through operator new and delete
    #    (#27): the library's own operators where it exports them.
    Workload("cxx-map-strings", "cxxmap", ("--keys", "{keys}", "--ops", "{ops}"),
             params={"keys": "100k", "ops": "4M"}, quick={"ops": "200k"},
             metric="ns_per_op", unit="ns/op", table="cxx",
             title="std::map<uint64_t, std::string> of 100k keys, 1 thread: a random key inserted "
                   "(16..255 B), or checked and then erased or appended to; a temporary string "
                   "of 8 numbers every 64 operations"),

    Workload("onethread-many-classes", "manyclasses", ("--slots", "4000", "--steps", "{steps}"),
             params={"steps": "5M"}, quick={"steps": "100k"},
             metric="ns_per_step", unit="ns/step", table="many-classes",
             extras=(("peak_live_kib", "peak live", "kib"),),
             title="1 thread, 4,000 slots: a random one's block freed, or a new one of 16..127 B (60%), "
                   "128..1023 B (30%) or 1..8 KiB (10%) written whole; about 1.5 MiB live at the peak"),

    # -- 6c. glibc's bench-malloc-thread loop (mimalloc-bench's glibc-thread):
    #    each thread replaces random blocks of its 1,024, sizes inverse-square
    #    distributed over 8 B..32 KiB (most of them small), as glibc's (which
    #    starts at 4 B; the blocks here carry an 8-byte tag).
    *[Workload(f"threads-random-small-{t}t", "randsmall",
               ("--threads", str(t), "--slots", "1024", "--iters", "{iters}", "--min", "8", "--max", "32768"),
               params={"iters": "10M"}, quick={"iters": "50k"},
               metric="ops_per_s", unit="M ops/s", higher_is_better=True, scale=1e-6,
               table="threads-random-small", threads=t,
               title=f"{t} threads x 1,024 blocks, each iteration a random one freed and replaced by one "
                     "of 8 B..32 KiB (1/size uniform: half under 16 B); 10M iterations per thread")
      for t in (2, 4)],

    # -- 9. rss-after-peak
    Workload("rss-after-peak", "rsspeak",
             ("--threads", "4", "--peak-mib", "{peak}", "--min", "16", "--max", "1024",
              "--idle-s", "{idle}", "--interval-ms", "100"),
             params={"peak": 1024, "idle": 5}, quick={"peak": 128, "idle": 1.5},
             metric="rss_end_mib", unit="MiB", table="rss-after-peak",
             title="4 threads: 1 GiB of 16..1024 B blocks, freed, threads exit, idle 5 s",
             extras=(("free_s", "free phase s", "num"), ("rss_peak_kib", "at peak", "kib"),
                     ("rss_freed_kib", "freed", "kib"), ("rss_1s_kib", "1 s after", "kib")),
             rounds=(0, 1), timeout_s=300),

    # -- 10. many-threads
    Workload("many-threads", "manythreads",
             ("--threads", "256", "--live-kib", "1024", "--min", "16", "--max", "512",
              "--repeat", "{repeat}", "--sample-ms", "10"),
             params={"repeat": 4}, quick={"repeat": 1},
             metric="ops_per_s", unit="M ops/s", higher_is_better=True, scale=1e-6,
             table="many-threads", extras=(("rss_max_sampled_kib", "max VmRSS", "kib"),),
             title="256 threads, each 1 MiB live in 16..512 B blocks, freed, 4 times", timeout_s=300,
             # Its peak RSS follows how many of the 256 threads the scheduler
             # has mid-cycle at once: one build's runs span 21 to 124 MiB, and
             # three rounds cannot tell 10% apart (their medians moved by a
             # third between two runs of the same builds).
             rounds=(15, 0)),

    # -- 11. page faults: large buffers replaced, and short-lived threads
    #    (the issue "Lean without the page-fault tax").  Time, with the peak
    #    RSS and the minor faults (runwrap) beside it.
    Workload("large-churn", "largechurn",
             ("--buffers", "{buffers}", "--replace", "{replace}", "--min-mib", "5", "--max-mib", "25"),
             params={"buffers": 20, "replace": 500}, quick={"buffers": 8, "replace": 30},
             metric="elapsed_s", unit="s", table="churn",
             title="20 live buffers of 5..25 MiB, each written whole; a random one replaced 500 times "
                   "(2,000 in the issue: scaled down to fit the suite's time)"),
    Workload("thread-churn", "threadchurn",
             ("--threads", "2", "--gens", "{gens}", "--blocks", "256", "--min", "16", "--max", "65536",
              "--large", "270000", "--large-every", "32"),
             params={"gens": 300}, quick={"gens": 20},
             metric="elapsed_s", unit="s", table="churn", threads=2,
             title="2 chains of 300 threads, one after the other: each allocates 256 blocks of 16 B..64 KiB "
                   "(1 in 32 ~270 KB) and writes them, frees the 128 its predecessor handed it and half "
                   "its own, hands the rest on, exits"),

    # -- 12. realloc growth: many live objects grown by appending, as lists
    #    (capacity n + n/8 + 6) and string builders (capacity doubled) grow;
    #    a few grow past 256 KiB into large blocks.
    *[Workload(f"realloc-grow-{t}t", "reallocgrow",
               ("--threads", str(t), "--objects", "{grow_objects}", "--rounds", "{grow_rounds}",
                "--max-kib", "512"),
               params={"grow_objects": 2000, "grow_rounds": rounds}, quick={"grow_objects": 500, "grow_rounds": 1},
               metric="elapsed_s", unit="s", table="realloc-grow", threads=t,
               extras=(("reallocs", "reallocs", "num"), ("moves", "moved", "num"),
                       ("moved_pct", "moved %", "num")),
               title=f"{t} thread(s) x 2,000 objects x {rounds} rounds, each grown by appending "
                     "(lists by n/8 + 6 elements, strings doubled) to a heavy-tailed length "
                     "(16 B..512 KiB, median 64 B), checked after every realloc and before its free")
      for t, rounds in ((1, 10), (4, 4))],

    # -- 13. real programs, each timed by realprog (the program alone, from
    #    its fork to its end) with its output checked; the preload reaches
    #    every process they start (gcc's cc1, as, collect2, ld).  One round
    #    in a quick run: they exist there to prove they run and validate.
    Workload("prog-python-dicts", "realprog",
             ("--program", "python", "--exe", "{python}", "--script", "{script}", "--n", "{records}"),
             params={"python": PYTHON, "script": DICTS_SCRIPT, "records": "60k"}, quick={"records": "3k"},
             metric="elapsed_s", unit="s", table="real programs", rounds=(0, 1),
             title="python3 (PYTHONMALLOC=malloc) runs bench/programs/dicts.py: 60,000 records as dicts, "
                   "indexed, grouped into lists, counted, a third deleted, sorted, joined"),
    Workload("prog-sqlite-bulk", "realprog", ("--program", "sqlite", "--exe", "sqlite3", "--n", "{rows}"),
             params={"rows": "150k"}, quick={"rows": "5k"},
             metric="elapsed_s", unit="s", table="real programs", rounds=(0, 1), needs=("sqlite3",),
             title="sqlite3, in-memory database: 150,000 INSERTs in one transaction, 2 indexes, "
                   "grouped and ranged queries, a third deleted"),
    Workload("prog-gcc-O2", "realprog", ("--program", "gcc", "--exe", "gcc", "--n", "{functions}"),
             params={"functions": 120}, quick={"functions": 5},
             metric="elapsed_s", unit="s", table="real programs", rounds=(0, 1), needs=("gcc",),
             title="gcc -O2 compiles and links a generated C file of 120 functions (cc1, as, collect2, ld)"),
    # Compilers on real translation units: their peak RSS is the memory
    # table's row (#54: at most jemalloc's), their time the table's.
    Workload("prog-cc-trace", "realprog",
             ("--program", "cc", "--exe", "gcc", "--src", "{src}", "--incdir", "{inc}",
              "--symbol", "fa__trace_alloc", "--n", "1"),
             params={"src": TRACE_C, "inc": TRACE_INC},
             metric="elapsed_s", unit="s", table="real programs", rounds=(0, 1), needs=("gcc",),
             title="gcc -O2 -c src/09-diag/trace.c (cc1 callocs tables of 64-256 KiB it fills sparsely)"),
    Workload("prog-cxx-stdcpp", "realprog",
             ("--program", "cc", "--exe", "g++", "--src", "{src}", "--symbol", "bench_stdcpp_run", "--n", "1"),
             params={"src": STDCPP_CC}, quick={"src": STDCPP_QUICK_CC}, timeout_s=300.0,
             metric="elapsed_s", unit="s", table="real programs", rounds=(0, 1), needs=("g++",),
             title="g++ -O2 -c bench/programs/stdcpp.cpp: <bits/stdc++.h>, containers, regex and streams "
                   "instantiated (cc1plus)"),

    # -- replay: the same real programs' allocation traces (recorded once with
    # fastalloc, FASTALLOC_TRACE) replayed by fastalloc-trace under each
    # allocator: the allocator's own time on the program's calls, without
    # the program's work around them.
    Workload("replay-python", "replaytrace",
             ("--program", "python", "--exe", "{python}", "--script", "{script}", "--n", "{records}"),
             params={"python": PYTHON, "script": DICTS_SCRIPT, "records": "60k"}, quick={"records": "3k"},
             metric="elapsed_s", unit="ms", scale=1e3, table="replay",
             extras=(("heap_peak_kib", "heap peak", "kib"),),
             title="python3 dicts.py's trace (60,000 records), replayed: one thread"),
    Workload("replay-sqlite", "replaytrace", ("--program", "sqlite", "--exe", "sqlite3", "--n", "{rows}"),
             params={"rows": "150k"}, quick={"rows": "5k"},
             metric="elapsed_s", unit="ms", scale=1e3, table="replay", needs=("sqlite3",),
             extras=(("heap_peak_kib", "heap peak", "kib"),),
             title="sqlite3's trace (150,000 rows inserted, indexed, queried), replayed"),
    Workload("replay-gcc", "replaytrace", ("--program", "gcc", "--exe", "gcc", "--n", "{functions}"),
             params={"functions": 120}, quick={"functions": 5},
             metric="elapsed_s", unit="ms", scale=1e3, table="replay", needs=("gcc",),
             extras=(("heap_peak_kib", "heap peak", "kib"),),
             title="cc1's trace (gcc -O2 on a file of 120 functions), replayed"),

    # -- 7. encode-fixed64 (seed 004): no allocator involved, run once
    Workload("encode-fixed64", "coding_bench", ("--n", "{n}", "--n-text", "{nt}"),
             params={"n": "100M", "nt": "100M"}, quick={"n": "1M", "nt": "1M"},
             metric="encode_fixed64_ns", unit="ns/call", table="encode-fixed64", kind="once",
             title="fa__encode/decode_fixed64 vs sprintf(\"%llu\")/strtoull, 10^8 calls each",
             timeout_s=300),

    # -- 8. fast-path instructions (callgrind, exact)
    Workload("icount-64-reuse", "icount", ("--mode", "reuse", "--size", "64", "--n", "{n}", "--warm", "{warm}"),
             params={"n": "200k", "warm": "20k"}, quick={"n": "20k", "warm": "4k"}, metric="inside", unit="instr/pair", table="instructions",
             kind="callgrind", title="64 B malloc+free at once"),
    Workload("icount-64-window64", "icount",
             ("--mode", "window", "--live", "64", "--size", "64", "--n", "{n}", "--warm", "{warm}"),
             params={"n": "200k", "warm": "20k"}, quick={"n": "20k", "warm": "4k"}, metric="inside", unit="instr/pair", table="instructions",
             kind="callgrind", title="64 B, window of 64 live blocks"),
    Workload("icount-1k-reuse", "icount", ("--mode", "reuse", "--size", "1024", "--n", "{n}", "--warm", "{warm}"),
             params={"n": "200k", "warm": "20k"}, quick={"n": "20k", "warm": "4k"}, metric="inside", unit="instr/pair", table="instructions",
             kind="callgrind", title="1 KiB malloc+free at once"),
    Workload("icount-pool-64", "icount", ("--mode", "pool", "--size", "64", "--n", "{n}", "--warm", "{warm}"),
             params={"n": "200k", "warm": "20k"}, quick={"n": "20k", "warm": "4k"}, metric="inside", unit="instr/pair", table="instructions",
             kind="callgrind", only=("fastalloc",), label="fa_pool",
             title="fa_pool_get + fa_pool_put, 64 B"),
]


def row_name(w: Workload, alloc_name: str) -> str:
    return w.label or alloc_name


def select_workloads(patterns: list[str]) -> list[Workload]:
    if not patterns:
        return [w for w in WORKLOADS if w.full]
    chosen = []
    for pat in patterns:
        if pat == "all":
            hits = list(WORKLOADS)
        else:
            hits = [w for w in WORKLOADS if fnmatch.fnmatchcase(w.name, pat) or w.table == pat]
        if not hits:
            raise SetupError(f"--only {pat!r} matches no workload (see --list)")
        chosen += [w for w in hits if w not in chosen]
    # a row that is compared to another workload needs that one too
    refs = {w.compare_to for w in chosen if w.compare_to}
    chosen += [w for w in WORKLOADS if w.name in refs and w not in chosen]
    return [w for w in WORKLOADS if w in chosen]


@dataclass
class Plan:
    """What one invocation runs.  rounds: --rounds (None or 0: the default,
    and each workload's own rounds count); timeout: --timeout (None: each
    workload's own); overrides: the --set values."""

    build: Path
    quick: bool
    rounds: int | None
    overrides: dict
    timeout: float | None
    workloads: list[Workload]
    allocs: list[Allocator]

    @property
    def default_rounds(self) -> int:
        return self.rounds or (QUICK_ROUNDS if self.quick else FULL_ROUNDS)

    def rounds_of(self, w: Workload) -> int:
        if w.kind != "alloc":
            return 1
        r = w.rounds[1 if self.quick else 0]
        return r if r and not self.rounds else self.default_rounds

    def allocs_of(self, w: Workload) -> list[Allocator]:
        return [GLIBC] if w.kind == "once" else [a for a in self.allocs if w.runs_under(a)]

    def argv(self, w: Workload) -> list[str]:
        return w.argv(self.overrides, self.quick)

    def total_runs(self) -> int:
        return sum(self.rounds_of(w) * len(self.allocs_of(w)) for w in self.workloads)


def print_plan(plan: Plan, skipped: list[tuple[str, str]]) -> None:
    """--list: the workloads with their command lines, then the allocators."""
    for w in plan.workloads:
        who = "once, no preload" if w.kind == "once" else (
            f"{w.kind}, " if w.kind != "alloc" else "") + (", ".join(w.only) if w.only else "all")
        print(f"{w.name:28} {w.binary} {' '.join(plan.argv(w))}   # {w.title} [{who}]")
    print()
    for a in plan.allocs:
        print(f"{a.name:12} {a.lib or '(no preload)'}")
    for n, why in skipped:
        print(f"{n:12} skipped: {why}")
