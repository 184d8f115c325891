"""fastalloc's own checks after the tables: fa_pool's targets on
objpool-shuffle, the objpool-rss bounds, and the summary lines (geometric
means, where fastalloc is not the best).  A missed target is reported with a
FAIL mark, not a failure of the run."""

from __future__ import annotations

from .allocators import PROFILE, SECURE, SECURE_SHUFFLE, SECURE_TAILS, VARIANTS
from .stats import fmt_num, fmt_ratio, fmt_rss, geomean
from .tables import Table
from .workloads import SHUFFLE_THREADS, Workload

# Targets the issue sets for fa_pool (reported, not enforced).
POOL_TARGET_VS_GLIBC = 0.5
POOL_TARGET_VS_BEST = 0.7
POOL_TARGET_VS_OWN = 0.85    # fastalloc's own malloc (#25)
POOL_RSS_SLACK = 0.03        # live RSS <= (objects + pointer arrays) * 1.03
POOL_RSS_FLAT = 0.01         # second round: at most 1% above the first
POOL_RSS_TRIM = 0.10         # after fa_pool_trim: under 10% of the peak


def rss_value(out: dict, key: str) -> float | None:
    """An RSS value (KiB) of the program's output, or None when it is
    missing or not above zero: the read failed, and no bound may pass on it
    (a process always has pages resident)."""
    v = out.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        return None
    return float(v)


def rss_checks(rows_by: dict) -> tuple[list[str], list[str]]:
    """objpool-rss: growth of every allocator; fa_pool's three bounds.
    Returns (lines for the report and terminal, short summary lines)."""
    lines, summary = [], []
    for wname in ("objpool-rss", "objpool-rss-pool"):
        for r in rows_by.get(wname, []):
            out = r.get("median_output")
            if r["failed"] or not out:
                if wname == "objpool-rss-pool":  # no run to check: the bounds are not met
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
            if wname == "objpool-rss-pool":
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


def pool_targets(rows_by: dict) -> tuple[list[list[str]], list[str]]:
    """fa_pool against glibc and the best malloc peer, per thread count."""
    body, summary = [], []
    for t in SHUFFLE_THREADS:
        r = next(iter(rows_by.get(f"objpool-shuffle-pool-{t}t", [])), None)
        if r is None or r["median"] is None:
            continue
        g, b = r["vs_glibc"], r["vs_best"]
        own = next((m["median"] for m in rows_by.get(f"objpool-shuffle-{t}t", [])
                    if m["allocator"] == "fastalloc"), None)
        o = r["median"] / own if own else None
        ok_g = g is not None and g <= POOL_TARGET_VS_GLIBC
        ok_b = b is not None and b <= POOL_TARGET_VS_BEST
        ok_o = o is not None and o <= POOL_TARGET_VS_OWN
        body.append([f"{t}", fmt_num(r["median"]), fmt_ratio(g), "PASS" if ok_g else "FAIL",
                     f"{fmt_ratio(b)} ({r['best']})", "PASS" if ok_b else "FAIL",
                     fmt_ratio(o), "PASS" if ok_o else "FAIL"])
        summary.append(f"fa_pool objpool-shuffle {t}t: {fmt_ratio(g)} of glibc "
                       f"({'PASS' if ok_g else 'FAIL'} <= {POOL_TARGET_VS_GLIBC:.2f}x), {fmt_ratio(b)} of "
                       f"the best malloc ({r['best']}; {'PASS' if ok_b else 'FAIL'} <= "
                       f"{POOL_TARGET_VS_BEST:.2f}x), {fmt_ratio(o)} of fastalloc's malloc "
                       f"({'PASS' if ok_o else 'FAIL'} <= {POOL_TARGET_VS_OWN:.2f}x)")
    return body, summary


def summary_lines(workloads: list[Workload], rows_by: dict) -> list[str]:
    fa = [r for w in workloads if w.kind == "alloc" and not w.label
          for r in rows_by.get(w.name, []) if r["allocator"] == "fastalloc"]
    lines = []
    if not fa:
        return lines
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
    return lines


# The hardened build's cost: its time over the default library's, geometric
# mean over every timed workload both ran, at most 1.10x, with no workload
# above 1.5x (issue 41).
SECURE_TARGET = 1.10
SECURE_ROW_MAX = 1.5


def variant_ratios(workloads: list[Workload], rows_by: dict, variant: str):
    """A variant's time over the default library's, per timed workload both
    ran: (geometric mean, [(ratio, workload)] costliest first)."""
    ratios, worst = [], []
    for w in workloads:
        if w.kind != "alloc" or w.label:
            continue
        rows = {r["allocator"]: r for r in rows_by.get(w.name, []) if not r["name"].startswith("fa_")}
        fa, var = rows.get("fastalloc"), rows.get(variant)
        if not fa or not var or not fa["median"] or not var["median"]:
            continue
        ratio = fa["median"] / var["median"] if w.higher_is_better else var["median"] / fa["median"]
        ratios.append(ratio)
        worst.append((ratio, w.name))
    worst.sort(reverse=True)
    return geomean(ratios), worst


def secure_lines(workloads: list[Workload], rows_by: dict) -> list[str]:
    """The hardened build's cost against its target, and the profile's
    cost (no target: what a profiled run pays)."""
    lines = []
    g, worst = variant_ratios(workloads, rows_by, SECURE)
    if g is not None:
        ok = g <= SECURE_TARGET and worst[0][0] <= SECURE_ROW_MAX
        lines.append(f"{SECURE} vs fastalloc, geometric mean over {len(worst)} workloads: {g:.3f}x "
                     f"({'PASS' if ok else 'FAIL'} <= {SECURE_TARGET:.2f}x, no workload above "
                     f"{SECURE_ROW_MAX:.1f}x); the costliest: "
                     + ", ".join(f"{n} {r:.2f}x" for r, n in worst[:5]))
    for name, env in ((SECURE_TAILS, "FASTALLOC_SECURE_TAILS"), (SECURE_SHUFFLE, "FASTALLOC_SECURE_SHUFFLE")):
        g, worst = variant_ratios(workloads, rows_by, name)
        if g is not None:
            lines.append(f"{name} ({env} on) vs fastalloc, geometric mean over "
                         f"{len(worst)} workloads: {g:.3f}x; the costliest: "
                         + ", ".join(f"{n} {r:.2f}x" for r, n in worst[:5]))
    g, worst = variant_ratios(workloads, rows_by, PROFILE)
    if g is not None:
        lines.append(f"{PROFILE} (FASTALLOC_PROFILE on) vs fastalloc, geometric mean over {len(worst)} "
                     f"workloads: {g:.3f}x; the costliest: "
                     + ", ".join(f"{n} {r:.2f}x" for r, n in worst[:5]))
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
               memory: list[str] = ()) -> list[str]:
    """Puts fa_pool's targets under the objpool-shuffle table, the RSS
    checks under objpool-rss, and fastalloc's geometric means under the
    tables of GEOMEAN_TABLES.  Returns the summary lines; memory (the peak
    RSS lines, memory.memory_lines) go right after the time ones."""
    summary = summary_lines(workloads, rows_by) + list(memory)
    for tname in GEOMEAN_TABLES:
        lines = table_geomeans(tname, workloads, rows_by)
        summary += lines
        for t in tables:
            if t.name == tname:
                t.notes += lines
    summary += secure_lines(workloads, rows_by)
    pool_body, pool_summary = pool_targets(rows_by)
    rss_lines, rss_summary = rss_checks(rows_by)
    summary += pool_summary + rss_summary
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
    return summary
