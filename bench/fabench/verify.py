"""What each benchmark program must report it checked.

Every program of ours prints, in its output line, a "checked" object: the
checks it did, counted where they are done (blocks checked before their free,
blocks checked in every byte, the bytes those read, and a few counts of its
own).  A failing check ends the program (exit 3), so the counts are checks
that passed.  Here they are compared with the work run.py asked for (the
program's command line): a program that skipped its checks, or did less work
than it was asked to do (and so looks fast), fails its run.  The RSS values
the RSS benchmarks print are checked too: a missing or impossible one must
not pass for a small one.

One function per program, EXPECT[program](opts, out) -> the problems found
(empty: all good); opts are the command line's --name value pairs, out the
program's output line.  A program built from bench/ without an entry here
fails every run, so that a new program cannot go unchecked.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

MASK64 = (1 << 64) - 1
TAG_STEP = 0x9E3779B97F4A7C16   # bench_tag's step (bench/bench_common.h)


def count(text: str) -> int:
    """A count in the programs' syntax (bench_count): 100000, 100k, 2M, 1.5G."""
    s = str(text).strip()
    mult = 1
    if s and s[-1] in "kKmMgG":
        mult = {"k": 1e3, "m": 1e6, "g": 1e9}[s[-1].lower()]
        s = s[:-1]
    return int(float(s) * mult + 0.5)


def options(args: list[str]) -> dict[str, str]:
    """--name value pairs of a program's command line (every option of ours
    takes a value)."""
    opts = {}
    it = iter(args)
    for a in it:
        if a.startswith("--"):
            opts[a[2:]] = next(it, "")
    return opts


def mix64(x: int) -> int:
    """splitmix64's output function (tests/common.h)."""
    x &= MASK64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & MASK64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & MASK64
    x ^= x >> 31
    return x


class Report:
    """The "checked" object of one output line, and the problems found in it."""

    def __init__(self, out: dict):
        self.out = out
        c = out.get("checked")
        self.checked = c if isinstance(c, dict) else {}
        self.problems: list[str] = []

    def get(self, key: str) -> int | None:
        v = self.checked.get(key)
        if isinstance(v, bool) or not isinstance(v, int):
            self.problems.append(f"checked.{key} missing or not a count: {v!r}")
            return None
        return v

    def equal(self, key: str, want: int, what: str) -> None:
        v = self.get(key)
        if v is not None and v != want:
            self.problems.append(f"checked.{key} = {v}, expected {want} ({what})")

    def between(self, key: str, lo: float, hi: float, what: str) -> None:
        v = self.get(key)
        if v is not None and not lo <= v <= hi:
            self.problems.append(f"checked.{key} = {v}, expected {math.ceil(lo)}..{math.floor(hi)} ({what})")

    def bytes_of_full(self, lo: int, hi: int) -> None:
        """bytes: what the full checks read, each block lo..hi bytes."""
        full = self.checked.get("full")
        if isinstance(full, int):
            self.between("bytes", lo * full, hi * full, f"{full} full checks of {lo}..{hi} B")

    def rss(self, *keys: str, at_least_kib: float = 0.0) -> None:
        """RSS values (KiB) that must have been read: a number above zero (a
        process always has pages resident), and at least at_least_kib."""
        for key in keys:
            v = self.out.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                self.problems.append(f"{key} = {v!r}: the RSS was not read")
            elif v < at_least_kib:
                self.problems.append(f"{key} = {v} KiB, below the {at_least_kib:.0f} KiB the program "
                                     "wrote: the RSS read is wrong")


def size_range(spec: str) -> tuple[int, int]:
    """The smallest and largest size of a malloc_micro --sizes spec (64,
    16-1024, 16-1024:8, 16,64,200)."""
    body = spec.split(":", 1)[0]
    sizes = [int(x) for x in body.replace("-", ",").split(",") if x.strip()]
    return min(sizes), max(sizes)


def expect_malloc_micro(o: dict, out: dict) -> list[str]:
    r = Report(out)
    t, ops = count(o.get("threads", 1)), count(o.get("ops", "1M"))
    warm = count(o["warmup"]) if "warmup" in o else min(ops // 10, 200000)
    live = count(o.get("live", 64)) if o.get("mode", "reuse") == "window" else 0
    # Every free checks its block: the warm-up's, the timed ones, the window
    # drained at the end; the warm-up's blocks and the window's first fill
    # are checked in every byte.
    r.equal("blocks", t * (warm + ops + live), f"{t} threads x ({warm} warm-up + {ops} pairs + {live} live)")
    r.equal("full", t * (warm + live), f"{t} threads x ({warm} warm-up + {live} live)")
    r.bytes_of_full(*size_range(o.get("sizes", "64")))
    return r.problems


def expect_strings(o: dict, out: dict) -> list[str]:
    r = Report(out)
    nbuf, size, rounds = count(o.get("buffers", 10000)), count(o.get("size", 1024)), count(o.get("rounds", 1000))
    every = nbuf * (rounds + 1)   # the untimed warm-up round and the timed ones
    r.equal("blocks", every, f"{nbuf} buffers x {rounds + 1} rounds")
    r.equal("zeroed", every, f"{nbuf} buffers x {rounds + 1} rounds")
    r.equal("full", nbuf, "the warm-up round's buffers")
    r.equal("bytes", nbuf * size, f"{nbuf} buffers of {size} B")
    return r.problems


def expect_objpool(o: dict, out: dict) -> list[str]:
    r = Report(out)
    rss = o.get("mode", "shuffle") == "rss"
    t, objects, size = count(o.get("threads", 1)), count(o.get("objects", 100000)), count(o.get("size", 64))
    rounds = 2 if rss else count(o.get("rounds", 50))
    n = t * objects * rounds
    what = f"{t} threads x {objects} objects x {rounds} rounds"
    r.equal("blocks", n, what)
    r.equal("full", n, what)
    if "sizes" in o:   # mixed sizes (shuffle mode, malloc): each object MIN..MAX bytes
        r.bytes_of_full(*size_range(o["sizes"]))
        return r.problems
    r.equal("bytes", n * size, f"{what} x {size} B")
    if rss:
        # With all objects live, every word of every object has been written:
        # those pages are resident (10% for the kernel's counters, which
        # threads update in batches).
        payload_kib = t * objects * size / 1024
        r.rss("base_kib", "freed1_kib", "freed2_kib", "exit_kib")
        r.rss("live1_kib", "live2_kib", at_least_kib=0.9 * payload_kib)
        if o.get("api") == "pool":
            r.rss("trim_kib")
    return r.problems


def expect_prodcons(o: dict, out: dict) -> list[str]:
    r = Report(out)
    pairs, ops = count(o.get("pairs", 1)), count(o.get("ops", "1M"))
    lo, hi = count(o.get("min", 16)), count(o.get("max", 512))
    r.equal("blocks", pairs * ops, f"{pairs} consumers x {ops} objects")
    r.equal("full", pairs * -(-ops // 16), f"every 16th of {pairs} x {ops} objects")
    r.bytes_of_full(lo, hi)
    return r.problems


def expect_xferbag(o: dict, out: dict) -> list[str]:
    r = Report(out)
    p, n = count(o.get("producers", 1)), count(o.get("objects", "2M"))
    batch, bag, size = count(o.get("batch", 4096)), count(o.get("bag", 100)), count(o.get("size", 0))
    r.equal("blocks", p * n, f"{p} producers x {n} objects, checked by the consumers")
    r.equal("full", p * -(-n // 16), f"every 16th of {p} x {n} objects")
    r.equal("batches", p * -(-n // batch), f"{p} producers x {n} objects in batches of {batch}")
    r.bytes_of_full(*((size, size) if size else (8, 2048)))
    most = out.get("max_in_bag")
    if isinstance(most, bool) or not isinstance(most, int) or not 1 <= most <= bag:
        r.problems.append(f"max_in_bag = {most!r}, expected 1..{bag} (--bag)")
    return r.problems


def expect_rpring(o: dict, out: dict) -> list[str]:
    r = Report(out)
    t, loops = count(o.get("threads", 2)), count(o.get("loops", "20k"))
    n, cross = count(o.get("ops", 100)), count(o.get("cross", 2))
    lists = -(-loops // cross) if t > 1 else 0
    made = loops * n + lists * n   # per thread: its table's blocks, its lists' blocks
    r.equal("blocks", t * made, f"{t} threads x ({loops} loops + {lists} lists) x {n} blocks, each checked")
    r.equal("full", t * -(-made // 16), f"every 16th of {t} x {made} blocks")
    r.equal("lists", t * lists, f"{t} threads x a list every {cross} of {loops} loops")
    r.bytes_of_full(count(o.get("min", 8)), count(o.get("max", 16000)))
    return r.problems


def expect_bursts(o: dict, out: dict) -> list[str]:
    r = Report(out)
    t, burst, size = count(o.get("threads", 2)), count(o.get("burst", 1000)), count(o.get("size", 192))
    bursts = count(o.get("blocks", "2M")) // burst   # per thread: whole bursts only
    n = bursts * burst
    r.equal("blocks", t * n, f"{t} threads x {bursts} bursts x {burst} blocks, each freed by the next thread")
    r.equal("full", t * -(-n // 16), f"every 16th of {t} x {n} blocks")
    r.equal("bytes", t * -(-n // 16) * size, f"full checks of {size} B")
    r.equal("sessions", t * n, f"a session per block, {t} x {n}")
    r.equal("bursts", t * bursts, f"{t} threads x {bursts} bursts received")
    if out.get("blocks") != n:
        r.problems.append(f"blocks = {out.get('blocks')!r}, expected {n} (blocks per thread, whole bursts)")
    return r.problems


def expect_poolbursts(o: dict, out: dict) -> list[str]:
    r = Report(out)
    t, burst, size = count(o.get("threads", 2)), count(o.get("burst", 1000)), count(o.get("size", 192))
    rounds = count(o.get("requests", "1M")) // burst   # whole bursts only
    n = rounds * burst
    every, sessions = count(o.get("every", 4)), count(o.get("sessions", 512))
    r.equal("blocks", t * n, f"{t} threads x {rounds} bursts x {burst} requests, each given back by the next thread")
    r.equal("full", t * -(-n // 16), f"every 16th of {t} x {n} requests")
    r.equal("bytes", t * -(-n // 16) * size, f"full checks of {size} B")
    r.equal("sessions", t * (rounds * -(-burst // every) + sessions),
            f"{t} x ({rounds} bursts x a session per {every} requests + the {sessions} left)")
    if out.get("requests") != n:
        r.problems.append(f"requests = {out.get('requests')!r}, expected {n} (per thread, whole bursts)")
    return r.problems


def expect_larson(o: dict, out: dict) -> list[str]:
    r = Report(out)
    t, slots, ops = count(o.get("threads", 2)), count(o.get("slots", 1000)), count(o.get("ops", "2M"))
    r.equal("blocks", t * (ops + slots), f"{t} lineages x ({ops} operations + {slots} slots at the end)")
    return r.problems


def expect_rsspeak(o: dict, out: dict) -> list[str]:
    r = Report(out)
    t, peak_mib = count(o.get("threads", 4)), float(o.get("peak-mib", 1024))
    lo, hi = count(o.get("min", 16)), count(o.get("max", 1024))
    budget = t * int(peak_mib * 1048576.0 / t)   # each thread allocates until its share is live
    blocks = out.get("blocks")
    if not isinstance(blocks, int) or blocks * hi < budget:
        r.problems.append(f"blocks = {blocks!r}: too few to hold the {peak_mib:g} MiB peak in blocks "
                          f"of at most {hi} B")
    else:
        r.equal("blocks", blocks, "every block allocated")
        r.between("full", blocks / 64, blocks / 64 + t, "every 64th block of each thread")
        r.bytes_of_full(lo, hi)
    # Every block was stamped at both ends: with blocks of at most a page,
    # every page that holds one is resident at the peak.
    r.rss("rss_base_kib", "rss_freed_kib", "rss_1s_kib", "rss_end_kib")
    r.rss("rss_peak_kib", at_least_kib=0.9 * budget / 1024 if hi <= 4096 else 0)
    return r.problems


def expect_manythreads(o: dict, out: dict) -> list[str]:
    r = Report(out)
    t, repeat = count(o.get("threads", 256)), count(o.get("repeat", 4))
    live, lo, hi = count(o.get("live-kib", 1024)) * 1024, count(o.get("min", 16)), count(o.get("max", 512))
    least = t * repeat * -(-live // hi)   # blocks of at most hi bytes until live bytes are live
    pairs = out.get("total_ops")
    if not isinstance(pairs, int) or pairs < least:
        r.problems.append(f"total_ops = {pairs!r}, expected at least {least} "
                          f"({t} threads x {repeat} x {live} B in blocks of at most {hi} B)")
    else:
        r.equal("blocks", pairs, "every pair")
        r.between("full", pairs / 32, pairs / 32 + t * repeat, "every 32nd block of each repeat")
        r.bytes_of_full(lo, hi)
    r.rss("rss_base_kib", "rss_started_kib", "rss_max_sampled_kib", "rss_exit_kib")
    return r.problems


def expect_largechurn(o: dict, out: dict) -> list[str]:
    r = Report(out)
    n, replace = count(o.get("buffers", 20)), count(o.get("replace", 2000))
    lo, hi = count(o.get("min-mib", 5)) << 20, count(o.get("max-mib", 25)) << 20
    every = n + replace
    r.equal("blocks", every, f"{n} buffers + {replace} replaced, each checked before its free")
    r.equal("full", -(-every // 16), f"every 16th of {every} buffers")
    r.bytes_of_full(lo, hi)
    # A chunk tag every 4 KiB of every buffer (all but a last chunk under 16 B).
    r.between("chunks", every * (lo // 4096), every * -(-hi // 4096), f"4 KiB chunks of {every} buffers "
              f"of {lo >> 20}..{hi >> 20} MiB")
    return r.problems


def expect_threadchurn(o: dict, out: dict) -> list[str]:
    r = Report(out)
    lines, gens, k = count(o.get("threads", 2)), count(o.get("gens", 500)), count(o.get("blocks", 256))
    lo, hi = count(o.get("min", 16)), count(o.get("max", 65536))
    large = count(o.get("large", 270000))
    threads = lines * gens
    r.equal("threads", threads, f"{lines} lineages x {gens} threads")
    r.equal("blocks", threads * k, f"{threads} threads x {k} blocks")
    r.equal("handed", threads * (k // 2), f"{threads} threads x {k // 2} blocks handed over")
    r.equal("full", threads * sum(1 for j in range(k) if j % 16 < 2), f"2 in 16 of {threads} x {k} blocks")
    r.bytes_of_full(lo, max(hi, large + large // 16))
    return r.problems


def expect_manyclasses(o: dict, out: dict) -> list[str]:
    r = Report(out)
    slots, steps = count(o.get("slots", 4000)), count(o.get("steps", "5M"))
    # Which steps allocate depends on the random sequence, but each step
    # either frees a block or allocates one, a block is only freed after it
    # was allocated, and at most slots blocks are live at the end.
    allocs, frees = out.get("allocs"), out.get("frees")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (allocs, frees)) \
            or allocs + frees != steps or not frees <= allocs <= frees + slots:
        r.problems.append(f"allocs = {allocs!r}, frees = {frees!r}: expected allocs + frees = {steps} "
                          f"steps and frees <= allocs <= frees + {slots} slots")
        return r.problems
    r.equal("blocks", allocs, "every block allocated, checked before its free")
    r.equal("full", -(-allocs // 16), f"every 16th of {allocs} blocks")
    r.bytes_of_full(16, 8192)
    peak = out.get("peak_live_bytes")
    if isinstance(peak, bool) or not isinstance(peak, int) or not 16 <= peak <= slots * 8192:
        r.problems.append(f"peak_live_bytes = {peak!r}, expected 16..{slots * 8192} ({slots} slots of at most 8 KiB)")
    return r.problems


def expect_randsmall(o: dict, out: dict) -> list[str]:
    r = Report(out)
    t, slots, iters = count(o.get("threads", 2)), count(o.get("slots", 1024)), count(o.get("iters", "5M"))
    lo, hi = count(o.get("min", 8)), count(o.get("max", 4096))
    n = slots + iters   # blocks each thread allocates, and checks before their free
    r.equal("blocks", t * n, f"{t} threads x ({slots} slots + {iters} iterations)")
    r.equal("full", t * -(-n // 16), f"every 16th of {t} x {n} blocks")
    r.bytes_of_full(lo, hi)
    return r.problems


@functools.lru_cache(maxsize=8)
def reallocgrow_work(seed: int, threads: int, objects: int, rounds: int, max_kib: int) -> dict[str, int]:
    """What reallocgrow does for its command line, computed as reallocgrow.c
    decides it (object_hash, start_object, grown_capacity): each object's
    kind, final length and chunk come from a hash of (seed, thread, number),
    so the reallocs, the bytes checked after them and before the frees, and
    the appends are known without the run (the order of the steps changes
    none of them).  Cached: every round of a workload asks the same."""
    total = {"reallocs": 0, "kept": 0, "final": 0, "appends": 0}
    most = max_kib << 10
    for t in range(threads):
        base = mix64(seed * 0x9E3779B97F4A7C15 + t + 1)
        for k in range(objects * rounds):
            h = mix64(base ^ ((k * 0xD1B54A32D192ED03) & MASK64))
            u = (h >> 40) + 1
            length = min((1 << 52) // u // u, most)
            cap = 0
            if h & 1 == 0:   # a list of length // 8 elements, one per append
                elements = length // 8
                while cap < elements:   # full: grow for one more element
                    need = cap + 1
                    if cap:
                        total["reallocs"] += 1
                        total["kept"] += 8 * cap
                    cap = need + (need >> 3) + 6
                total["final"] += 8 * elements
                total["appends"] += elements
            else:            # a string builder: chunks of c bytes, capacity doubled from 16
                c = 1 + ((h >> 1) & 31)
                cap = 16
                while cap < min(c, length):
                    cap *= 2
                while length > cap:
                    i = cap // c   # the first append that does not fit
                    need = min((i + 1) * c, length)
                    total["reallocs"] += 1
                    total["kept"] += i * c
                    while cap < need:
                        cap *= 2
                total["final"] += length
                total["appends"] += -(-length // c)
    return total


def expect_reallocgrow(o: dict, out: dict) -> list[str]:
    r = Report(out)
    seed, t = count(o.get("seed", 1)), count(o.get("threads", 1))
    objects, rounds, max_kib = count(o.get("objects", 2000)), count(o.get("rounds", 10)), count(o.get("max-kib", 512))
    work = reallocgrow_work(seed, t, objects, rounds, max_kib)
    n = t * objects * rounds
    r.equal("blocks", n, f"{t} threads x {objects} objects x {rounds} rounds, checked before their free")
    r.equal("reallocs", work["reallocs"], "the reallocs the objects' growth calls for, each checked")
    r.equal("full", n + work["reallocs"], "every object before its free and after every realloc")
    r.equal("bytes", work["kept"] + work["final"], "the bytes kept by every realloc, and every object's")
    for key, want in (("reallocs", work["reallocs"]), ("appends", work["appends"]),
                      ("final_bytes", work["final"])):
        v = out.get(key)
        if v != want:
            r.problems.append(f"{key} = {v!r}, expected {want}")
    moves = out.get("moves")
    if isinstance(moves, bool) or not isinstance(moves, int) or not 0 <= moves <= work["reallocs"]:
        r.problems.append(f"moves = {moves!r}, expected 0..{work['reallocs']} (reallocs that moved)")
    return r.problems


# realprog: the lines of each program's output for --n (sqlite: 4 lines and
# one per group of rows, 97 groups), and the fewest processes a run starts.
REALPROG_LINES = {"python": lambda n: 6, "sqlite": lambda n: 4 + min(n, 97), "gcc": lambda n: 1,
                  "cc": lambda n: 0}   # cc: checked by its object file instead
# gcc: gcc, cc1, as at least; cc: the driver, cc1 or cc1plus, as
REALPROG_PROCESSES = {"python": 1, "sqlite": 1, "gcc": 3, "cc": 3}


def expect_realprog(o: dict, out: dict) -> list[str]:
    r = Report(out)
    prog, n = o.get("program", "python"), count(o.get("n", 0))
    if prog not in REALPROG_LINES:
        return [f"unknown --program {prog!r}"]
    r.equal("outputs", 1, "the program's output, compared with what it must be")
    r.equal("items", n, "--n")
    if prog == "cc":   # no output; the object file names the symbol asked for
        r.equal("symbols", 1, "the symbol found in the object file")
    else:
        r.equal("lines", REALPROG_LINES[prog](n), f"{prog}'s output for --n {n}")
    r.between("processes", REALPROG_PROCESSES[prog], 10000, f"loader logs of {prog}'s processes")
    # Under a preload (an allocator other than glibc served realprog's own
    # malloc), every process must have had it.
    procs = r.checked.get("processes")
    if "preloaded" in r.checked or out.get("allocator") != "glibc":
        r.equal("preloaded", procs if isinstance(procs, int) else -1,
                "every process the run started had the preloaded allocator")
    return r.problems


def expect_replaytrace(o: dict, out: dict) -> list[str]:
    r = Report(out)
    records = r.checked.get("records")
    r.equal("ops", records if isinstance(records, int) and records > 0 else -1,
            "every record of the trace replayed")
    return r.problems


def expect_coding_bench(o: dict, out: dict) -> list[str]:
    r = Report(out)
    r.equal("slots", 8192 + 1024, "8192 binary and 1024 text slots read back")
    r.equal("sums", 2, "the decode and strtoull sums")
    return r.problems


def icount_checksum(size: int, n: int) -> int:
    """The sum of the tags of measure()'s n allocations (icount.c):
    bench_tag(mix64(0x1c0 ^ size), i) = (base | 1) + i * TAG_STEP."""
    base = mix64(0x1C0 ^ size) | 1
    return (n * base + TAG_STEP * (n * (n - 1) // 2)) & MASK64


def expect_icount(o: dict, out: dict) -> list[str]:
    r = Report(out)
    mode, size = o.get("mode", "reuse"), count(o.get("size", 64))
    n, warm = count(o.get("n", 200000)), count(o.get("warm", 50000))
    r.equal("pairs", n, "--n")
    r.equal("checksum", icount_checksum(size, n), f"the tags of {n} blocks of {size} B, read back")
    if mode == "window":
        live = count(o.get("live", 64))
        r.equal("blocks", warm + live, f"{warm} warm-up pairs + the {live} blocks left at the end")
        r.equal("full", warm, f"{warm} warm-up pairs")
    else:
        held = -(-warm // 8) * 8   # the warm-up holds 8 blocks at a time
        r.equal("blocks", held, f"{warm} warm-up pairs, 8 at a time")
        r.equal("full", held, f"{warm} warm-up pairs, 8 at a time")
    r.equal("bytes", size * (r.checked.get("full") or 0), f"full checks of {size} B")
    return r.problems


def expect_cxxmap(o: dict, out: dict) -> list[str]:
    r = Report(out)
    ops = count(o.get("ops", "2M"))
    vals = {k: out.get(k) for k in ("inserts", "erases", "appends", "live")}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals.values()) \
            or vals["inserts"] + vals["erases"] + vals["appends"] != ops \
            or vals["live"] != vals["inserts"] - vals["erases"]:
        r.problems.append(f"{vals}: expected inserts + erases + appends = {ops} ops "
                          "and live = inserts - erases")
        return r.problems
    # Every erase and append checked its value first; every value left is
    # checked in full at the end.
    r.equal("full", vals["live"], "every value left at the end")
    r.equal("blocks", vals["erases"] + vals["appends"] + vals["live"],
            "each value looked up, and each one left")
    r.between("bytes", 16 * vals["live"], (255 + 8 * ops) * max(vals["live"], 1), "values of 16 B or more")
    return r.problems


EXPECT: dict[str, Callable[[dict, dict], list[str]]] = {
    "cxxmap": expect_cxxmap,
    "malloc_micro": expect_malloc_micro,
    "strings": expect_strings,
    "strings_O0": expect_strings,
    "objpool": expect_objpool,
    "prodcons": expect_prodcons,
    "xferbag": expect_xferbag,
    "rpring": expect_rpring,
    "bursts": expect_bursts,
    "poolbursts": expect_poolbursts,
    "larson": expect_larson,
    "rsspeak": expect_rsspeak,
    "manythreads": expect_manythreads,
    "largechurn": expect_largechurn,
    "threadchurn": expect_threadchurn,
    "manyclasses": expect_manyclasses,
    "randsmall": expect_randsmall,
    "reallocgrow": expect_reallocgrow,
    "realprog": expect_realprog,
    "replaytrace": expect_replaytrace,
    "coding_bench": expect_coding_bench,
    "icount": expect_icount,
}


def check_report(binary: str, ours: bool, args: list[str], out: dict) -> list[str]:
    """The problems with one run's "checked" report (empty: it is present,
    non-trivial and matches the work asked for).  binary: the workload's
    program; ours: built from bench/ (a program that is not, e.g. python3
    timed by wall_s, has no report)."""
    expect = EXPECT.get(binary)
    if expect is None:
        return [f"no checks are known for program {binary}: add it to bench/fabench/verify.py"] if ours else []
    if not isinstance(out.get("checked"), dict) or not out["checked"]:
        return ["no \"checked\" report in the program's output (what it verified)"]
    zero = [k for k, v in out["checked"].items() if v == 0 and k != "full" and k != "bytes"]
    problems = [f"checked.{k} is 0: nothing was checked" for k in zero]
    return problems + expect(options(args), out)
