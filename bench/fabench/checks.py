"""fastalloc's own checks after the tables: fa_pool's targets on
objpool-shuffle, the objpool-rss bounds, the hardened build's cost, and the
summary lines (geometric means, where fastalloc is not the best).

Every line that carries a FAIL mark is a failed check, and fails the run
(add_checks returns them; run.py exits 1): a missed target, a bound not
met, a value not read, and a workload left out of a geometric mean because
a run of it failed under some allocator (a crash is a failure, not a gap in
the mean).  A smoke run (--quick) gives no verdict on the targets and bounds:
its counts are tiny and its rounds few, so its ratios say nothing; it says so
in a line of its own."""

from __future__ import annotations

import re

from .allocators import PROFILE, SECURE, SECURE_SHUFFLE, SECURE_TAILS, VARIANTS
from .stats import fmt_num, fmt_ratio, fmt_rss, geomean
from .tables import Table
from .workloads import SHUFFLE_THREADS, Workload

# Targets the issues set for fa_pool (a full run fails on a missed one).
POOL_TARGET_VS_GLIBC = 0.5
POOL_TARGET_VS_BEST = 0.7
POOL_TARGET_VS_OWN = 0.85    # fastalloc's own malloc (#25)
POOL_RSS_SLACK = 0.03        # live RSS <= (objects + pointer arrays) * 1.03
POOL_RSS_FLAT = 0.01         # second round: at most 1% above the first
POOL_RSS_TRIM = 0.10         # after fa_pool_trim: under 10% of the peak


# The mark of a failed check in a line; any line that has it fails a run.
FAIL_MARK = re.compile(r"\bFAIL\b")

# What a smoke run says in place of the verdicts.
NO_VERDICTS = ("no verdicts on the targets (fa_pool's times and RSS bounds, the hardened build's "
               "cost): a smoke run's tiny counts and one or two rounds cannot hold a ratio; "
               "a full run checks them")


def failed_runs(rows: list[dict]) -> list[str]:
    """'row k/n' for each of rows with a failed run."""
    return [f"{r['name']} {r['failed']}/{r['runs']}" for r in rows if r["failed"]]


def timed_workloads(workloads: list[Workload]) -> list[Workload]:
    """The workloads the geometric means run over: malloc, timed (no
    fastalloc API of its own, no instruction count, no run without a
    preload)."""
    return [w for w in workloads if w.kind == "alloc" and not w.label]


def rss_value(out: dict, key: str) -> float | None:
    """An RSS value (KiB) of the program's output, or None when it is
    missing or not above zero: the read failed, and no bound may pass on it
    (a process always has pages resident)."""
    v = out.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        return None
    return float(v)


def rss_checks(rows_by: dict, quick: bool = False) -> tuple[list[str], list[str]]:
    """objpool-rss: growth of every allocator; fa_pool's three bounds (not
    in a smoke run).  Returns (lines for the report and terminal, short
    summary lines)."""
    lines, summary = [], []
    for wname in ("objpool-rss", "objpool-rss-pool"):
        for r in rows_by.get(wname, []):
            out = r.get("median_output")
            if r["failed"] or not out:
                if wname == "objpool-rss-pool" and not quick:  # no run to check: the bounds are not met
                    fail = f"fa_pool RSS bounds: not checked, {r['failed']} of {r['runs']} runs failed: FAIL"
                    lines.append(fail)
                    summary.append(fail)
                continue
            keys = ("live1_kib", "freed1_kib", "live2_kib", "freed2_kib", "exit_kib") + \
                (("trim_kib",) if wname == "objpool-rss-pool" else ())
            unread = [k for k in keys if rss_value(out, k) is None]
            live1, live2 = rss_value(out, "live1_kib"), rss_value(out, "live2_kib")
            if live1 is None or live2 is None:
                lines.append(f"{r['name']}: VmRSS not read ({', '.join(f'{k}={out.get(k)!r}' for k in unread)}): FAIL")
            else:
                growth = live2 - live1
                mark = "ok" if growth <= POOL_RSS_FLAT * live1 else "GROWS"
                lines.append(f"{r['name']}: live {fmt_rss(live1)}, freed {fmt_rss(out.get('freed1_kib'))}, "
                             f"live again {fmt_rss(live2)} (growth {growth / 1024:+.2f} MiB, {mark}), "
                             f"freed {fmt_rss(out.get('freed2_kib'))}, threads exited {fmt_rss(out.get('exit_kib'))}"
                             + (f", after fa_pool_trim {fmt_rss(out.get('trim_kib'))}" if wname == "objpool-rss-pool" else "")
                             + (f"; not read: {', '.join(unread)}: FAIL" if unread else ""))
            if wname == "objpool-rss-pool" and not quick:
                checks = pool_rss_bounds(out)
                lines += checks
                summary += checks
    return lines, summary


def pool_rss_bounds(out: dict) -> list[str]:
    """fa_pool's three RSS bounds, with PASS/FAIL marks: all objects live
    costs little more than the objects and the benchmark's pointer arrays,
    the second round does not grow, fa_pool_trim gives the memory back.  A
    value that was not read fails the bounds it is in."""
    payload = out["objects"] * out["threads"] * out["size"]
    limit_b = (payload + out["ptr_array_bytes"]) * (1 + POOL_RSS_SLACK)
    live1, live2, trim = (rss_value(out, k) for k in ("live1_kib", "live2_kib", "trim_kib"))
    if live1 is None:
        unread = f"not read ({out.get('live1_kib')!r})"
        return [f"fa_pool, all {out['objects'] * out['threads'] / 1e6:.1f} M objects live: VmRSS {unread}: FAIL",
                f"fa_pool, second round: VmRSS {unread}: FAIL",
                f"fa_pool, after the threads exited and fa_pool_trim: VmRSS {unread}: FAIL"]
    growth = live2 - live1 if live2 is not None else None
    live_b = live1 * 1024
    c1 = live_b <= limit_b
    c2 = growth is not None and growth <= POOL_RSS_FLAT * live1
    c3 = trim is not None and trim < POOL_RSS_TRIM * live1
    return [
        f"fa_pool, all {out['objects'] * out['threads'] / 1e6:.1f} M objects live: VmRSS "
        f"{live_b / 1e6:.1f} MB <= {limit_b / 1e6:.1f} MB ((objects {payload / 1e6:.1f} MB + "
        f"pointer arrays {out['ptr_array_bytes'] / 1e6:.1f} MB) + {POOL_RSS_SLACK:.0%}): "
        f"{'PASS' if c1 else 'FAIL'}",
        (f"fa_pool, second round: {growth / 1024:+.2f} MiB ({100 * growth / live1:+.2f}%, "
         f"at most +{POOL_RSS_FLAT:.0%}): {'PASS' if c2 else 'FAIL'}" if growth is not None else
         f"fa_pool, second round: VmRSS not read ({out.get('live2_kib')!r}): FAIL"),
        (f"fa_pool, after the threads exited and fa_pool_trim: {fmt_rss(trim)} "
         f"= {100 * trim / live1:.1f}% of the peak (under "
         f"{POOL_RSS_TRIM:.0%}): {'PASS' if c3 else 'FAIL'}" if trim is not None else
         f"fa_pool, after the threads exited and fa_pool_trim: VmRSS not read "
         f"({out.get('trim_kib')!r}): FAIL"),
    ]


def target_mark(ratio: float | None, target: float, reference_ran: bool) -> str:
    """PASS or FAIL against target; "not run" where the reference allocator
    was not part of the run (--allocators), so that there is nothing to hold
    the ratio to.  A reference that ran and failed leaves no ratio: FAIL."""
    if not reference_ran:
        return "not run"
    return "PASS" if ratio is not None and ratio <= target else "FAIL"


def pool_targets(rows_by: dict) -> tuple[list[list[str]], list[str]]:
    """fa_pool against glibc, the best malloc peer and fastalloc's own
    malloc, per thread count.  A failed run of fa_pool or of any malloc row
    it is held to fails all three targets."""
    body, summary = [], []
    for t in SHUFFLE_THREADS:
        r = next(iter(rows_by.get(f"objpool-shuffle-pool-{t}t", [])), None)
        if r is None:
            continue
        # The malloc rows fa_pool is held to: glibc, the peers, fastalloc's
        # own (the hardened build and the profile are none of them).
        malloc_rows = [m for m in rows_by.get(f"objpool-shuffle-{t}t", []) if m["allocator"] not in VARIANTS]
        broken = failed_runs([r] + malloc_rows)
        ran = {m["allocator"] for m in malloc_rows}
        g, b = r["vs_glibc"], r["vs_best"]
        own = next((m["median"] for m in malloc_rows if m["allocator"] == "fastalloc"), None)
        o = r["median"] / own if own and r["median"] else None
        peers = any(a != "fastalloc" for a in ran)
        if broken:
            mg = mb = mo = "FAIL"
        else:
            mg = target_mark(g, POOL_TARGET_VS_GLIBC, "glibc" in ran)
            mb = target_mark(b, POOL_TARGET_VS_BEST, peers)
            mo = target_mark(o, POOL_TARGET_VS_OWN, "fastalloc" in ran)
        body.append([f"{t}", fmt_num(r["median"]), fmt_ratio(g), mg,
                     f"{fmt_ratio(b)} ({r['best']})", mb, fmt_ratio(o), mo])
        summary.append(f"fa_pool objpool-shuffle {t}t: " + (
            f"failed runs ({', '.join(broken)}), no ratio to hold to the targets: FAIL" if broken else
            f"{fmt_ratio(g)} of glibc ({mg} <= {POOL_TARGET_VS_GLIBC:.2f}x), {fmt_ratio(b)} of "
            f"the best malloc ({r['best']}; {mb} <= {POOL_TARGET_VS_BEST:.2f}x), {fmt_ratio(o)} of "
            f"fastalloc's malloc ({mo} <= {POOL_TARGET_VS_OWN:.2f}x)"))
    return body, summary


def summary_lines(workloads: list[Workload], rows_by: dict) -> list[str]:
    """fastalloc's geometric means over the timed workloads, and where it is
    not the best.  A workload with a failed run under any allocator is left
    out of them, and named, with a FAIL mark."""
    timed = timed_workloads(workloads)
    fa = [r for w in timed for r in rows_by.get(w.name, []) if r["allocator"] == "fastalloc"]
    lines = []
    if not fa:
        return lines
    broken = {w.name: failed_runs(rows_by.get(w.name, [])) for w in timed}
    broken = {name: rows for name, rows in broken.items() if rows}
    fa = [r for r in fa if r["workload"] not in broken]
    g = geomean([r["vs_glibc"] for r in fa])
    b = geomean([r["vs_best"] for r in fa])
    n = sum(1 for r in fa if r["median"] is not None)
    if g is not None:
        lines.append(f"fastalloc vs glibc, geometric mean over {n} workloads: {g:.2f}x")
    if b is not None:
        lines.append(f"fastalloc vs the best other allocator of each workload, geometric mean: {b:.2f}x")
    behind = [f"{r['workload']} {fmt_ratio(r['vs_best'])} of {r['best']}"
              for r in fa if r["vs_best"] is not None and r["vs_best"] > 1.0]
    if behind:
        lines.append(f"fastalloc is not the best in {len(behind)} of {n}: " + "; ".join(behind))
    if broken:
        lines.append(f"left out of the geometric means, {len(broken)} workload"
                     f"{'s' if len(broken) > 1 else ''} with failed runs: "
                     + "; ".join(f"{name} ({', '.join(rows)})" for name, rows in broken.items()) + ": FAIL")
    return lines


# The hardened build's cost: its time over the default library's, geometric
# mean over every timed workload both ran, at most 1.10x, with no workload
# above 1.5x (issue 41).
SECURE_TARGET = 1.10
SECURE_ROW_MAX = 1.5


def variant_ratios(workloads: list[Workload], rows_by: dict, variant: str):
    """A variant's time over the default library's, per timed workload both
    ran: (geometric mean, [(ratio, workload)] costliest first, [workloads
    both ran without a ratio: a failed run, named]).  A workload only one
    of them ran (--allocators, --only) is in none of the three."""
    ratios, worst, lost = [], [], []
    for w in timed_workloads(workloads):
        rows = {r["allocator"]: r for r in rows_by.get(w.name, []) if not r["name"].startswith("fa_")}
        fa, var = rows.get("fastalloc"), rows.get(variant)
        if not fa or not var:
            continue
        if not fa["median"] or not var["median"]:
            lost.append(f"{w.name} ({', '.join(failed_runs([fa, var])) or 'no median'})")
            continue
        ratio = fa["median"] / var["median"] if w.higher_is_better else var["median"] / fa["median"]
        ratios.append(ratio)
        worst.append((ratio, w.name))
    worst.sort(reverse=True)
    return geomean(ratios), worst, lost


def variant_line(name: str, what: str, g: float | None, worst, lost: list[str], verdict: str = "") -> str:
    """One variant against the default library: its geometric mean, the
    verdict (if any), the costliest workloads, and those left out."""
    head = (f"{name}{what} vs fastalloc, geometric mean over {len(worst)} workloads: {g:.3f}x"
            if g is not None else f"{name}{what} vs fastalloc: no workload measured by both")
    return (head + (f" ({verdict})" if verdict else "")
            + ("; the costliest: " + ", ".join(f"{n} {r:.2f}x" for r, n in worst[:5]) if worst else "")
            + (f"; left out, failed runs: {'; '.join(lost)}" if lost else ""))


def secure_lines(workloads: list[Workload], rows_by: dict, quick: bool = False) -> list[str]:
    """The hardened build's cost against its target (no verdict in a smoke
    run), and the other variants' costs (no target: what they pay).  A
    workload where either library failed leaves the target unmet: its cost
    is not known."""
    lines = []
    g, worst, lost = variant_ratios(workloads, rows_by, SECURE)
    if worst or lost:
        ok = g is not None and not lost and g <= SECURE_TARGET and worst[0][0] <= SECURE_ROW_MAX
        verdict = "" if quick else (f"{'PASS' if ok else 'FAIL'} <= {SECURE_TARGET:.2f}x, no workload "
                                    f"above {SECURE_ROW_MAX:.1f}x, none failed")
        lines.append(variant_line(SECURE, "", g, worst, lost, verdict))
    for name, env in ((SECURE_TAILS, "FASTALLOC_SECURE_TAILS"), (SECURE_SHUFFLE, "FASTALLOC_SECURE_SHUFFLE"),
                      (PROFILE, "FASTALLOC_PROFILE")):
        g, worst, lost = variant_ratios(workloads, rows_by, name)
        if worst or lost:
            lines.append(variant_line(name, f" ({env} on)", g, worst, lost))
    return lines


# Tables that get fastalloc's geometric means of their own, under the table
# and in the summary.
GEOMEAN_TABLES = ("real programs",)


def table_geomeans(tname: str, workloads: list[Workload], rows_by: dict) -> list[str]:
    """fastalloc over one table: the geometric means of its ratios to glibc
    and to the best other allocator of each workload (as summary_lines does
    over the suite), and to the best peer over the whole table: the other
    allocator whose own medians have the best geometric mean against
    fastalloc's.  Only workloads where fastalloc has a median count; a peer
    counts only if it has a median on all of them."""
    ws = [w for w in workloads if w.table == tname and w.kind == "alloc" and not w.label]
    fa = {w.name: r for w in ws for r in rows_by.get(w.name, [])
          if r["allocator"] == "fastalloc" and r["median"] is not None}
    if not fa:
        return []
    n = len(fa)
    what = f"{n} {'workload' if n == 1 else 'workloads'}"
    lines = []
    g = geomean([r["vs_glibc"] for r in fa.values()])
    if g is not None:
        lines.append(f"{tname}: fastalloc vs glibc, geometric mean over {what}: {g:.2f}x")
    b = geomean([r["vs_best"] for r in fa.values()])
    if b is not None:
        lines.append(f"{tname}: fastalloc vs the best other allocator of each workload, geometric mean: {b:.2f}x")
    better = {w.name: w.higher_is_better for w in ws}
    peers: dict[str, list[float]] = {}
    for wname, fr in fa.items():
        for r in rows_by.get(wname, []):
            if r["allocator"] != "fastalloc" and r["allocator"] not in VARIANTS and not r["name"].startswith("fa_") and r["median"]:
                ratio = r["median"] / fr["median"] if better[wname] else fr["median"] / r["median"]
                peers.setdefault(r["name"], []).append(ratio)
    full = {name: geomean(rs) for name, rs in peers.items() if len(rs) == n and name != "glibc"}
    if full:
        best = max(full, key=lambda name: full[name])   # the peer fastalloc does worst against
        lines.append(f"{tname}: fastalloc vs the best peer over the table ({best}), geometric mean: "
                     f"{full[best]:.2f}x"
                     + (f" (the others: {', '.join(f'{k} {v:.2f}x' for k, v in full.items() if k != best)})"
                        if len(full) > 1 else ""))
    return lines


def add_checks(tables: list[Table], workloads: list[Workload], rows_by: dict,
               memory: list[str] = (), quick: bool = False) -> tuple[list[str], list[str]]:
    """Puts fa_pool's targets under the objpool-shuffle table, the RSS
    checks under objpool-rss, and fastalloc's geometric means under the
    tables of GEOMEAN_TABLES.  Returns (the summary lines, the failed
    checks: every line with a FAIL mark, in the summary or under a table).
    memory (the peak RSS lines, memory.memory_lines) go right after the time
    ones.  quick: a smoke run, which gives the targets and bounds no verdict
    and says so."""
    summary = summary_lines(workloads, rows_by) + list(memory)
    for tname in GEOMEAN_TABLES:
        lines = table_geomeans(tname, workloads, rows_by)
        summary += lines
        for t in tables:
            if t.name == tname:
                t.notes += lines
    summary += secure_lines(workloads, rows_by, quick)
    pool_body, pool_summary = pool_targets(rows_by) if not quick else ([], [])
    rss_lines, rss_summary = rss_checks(rows_by, quick)
    summary += pool_summary + rss_summary
    if quick:
        summary.append(NO_VERDICTS)
    for t in tables:
        if t.name == "objpool-shuffle" and pool_body:
            t.notes.append("fa_pool against the targets of the issues (fa_pool's time at most "
                           f"{POOL_TARGET_VS_GLIBC:.2f}x glibc's and {POOL_TARGET_VS_BEST:.2f}x the best "
                           f"malloc's, the first pool's; at most {POOL_TARGET_VS_OWN:.2f}x fastalloc's own malloc's, #25; "
                           "at every thread count):")
            t.subtables.append((["threads", "fa_pool ms", "vs glibc", f"<= {POOL_TARGET_VS_GLIBC:.2f}x",
                                 "vs best malloc", f"<= {POOL_TARGET_VS_BEST:.2f}x",
                                 "vs fastalloc's malloc", f"<= {POOL_TARGET_VS_OWN:.2f}x"], pool_body, (0,)))
        if t.name == "objpool-rss" and rss_lines:
            t.bullets += rss_lines
    failed = [line for line in summary + rss_lines if FAIL_MARK.search(line)]
    return summary, list(dict.fromkeys(failed))
