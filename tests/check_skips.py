#!/usr/bin/env python3
"""Counts a ctest run and holds its skips to tests/skips.txt.

    check_skips.py SKIPS_FILE BUILD_DIR CTEST_STATUS

`make test` runs ctest with --output-junit BUILD_DIR/ctest-results.xml, then
this.  ctest's own "100% tests passed" counts a skipped test as passed, so a
tool that goes missing (valgrind, gnuplot, pkg-config) would turn checks into
quiet skips.  Here a skip counts only where the list names it for this kind
of build:

  - a test that skipped and is on the list counts as skipped;
  - a test that skipped and is not on the list counts as failed;
  - a test on the list that ran counts as failed too: the list no longer
    says what the build does.

It prints what ctest printed nowhere in one place: each skip with the
reason its test gave, each mismatch, and one closing line,
"tests: N passed, N failed, N skipped".  The exit status is 0 only when
ctest passed, every test it was asked for has a result, and nothing failed
by the rules above.

The kind of build comes from the build's CMakeCache.txt (FA_SANITIZE):
"default" without a sanitizer, "address" for ASan+UBSan, "thread" for TSan.
A run that selects tests (-R) is held only to the listed tests it ran.
"""

from __future__ import annotations

import fnmatch
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def build_kind(build: Path) -> str:
    """default, address or thread, from the cache's FA_SANITIZE."""
    try:
        for line in (build / "CMakeCache.txt").read_text().splitlines():
            if line.startswith("FA_SANITIZE:"):
                value = line.split("=", 1)[1].strip()
                if "thread" in value:
                    return "thread"
                if "address" in value:
                    return "address"
                return "default"
    except OSError:
        pass
    return "default"


def read_list(path: Path, kind: str) -> dict[str, str]:
    """Pattern -> reason, for the lines of this kind (or of "all")."""
    allowed: dict[str, str] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) < 3:
            raise SystemExit(f"{path}:{n}: want 'KIND TEST REASON', got {raw!r}")
        kinds, pattern, reason = parts
        if kind in kinds.split(",") or kinds == "all":
            allowed[pattern] = reason
    return allowed


def listed(name: str, allowed: dict[str, str]) -> str | None:
    for pattern, reason in allowed.items():
        if fnmatch.fnmatchcase(name, pattern):
            return reason
    return None


def skip_reason(case: ET.Element) -> str:
    """The first line that the skipped test printed (fa_skip and the tests
    print "SKIP: why"), else ctest's own message."""
    out = (case.findtext("system-out") or "").strip()
    for line in out.splitlines():
        if line.strip():
            return line.strip()
    sk = case.find("skipped")
    return sk.get("message", "") if sk is not None else ""


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    skips_file, build, ctest_status = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    kind = build_kind(build)
    allowed = read_list(skips_file, kind)
    junit = build / "ctest-results.xml"
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"check_skips: no test results in {junit} ({e})")
        print("tests: 0 passed, 1 failed, 0 skipped")
        return 1

    passed = failed = skipped = 0
    problems: list[str] = []
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        status = case.get("status", "")
        reason = listed(name, allowed)
        if case.find("skipped") is not None or status in ("notrun", "disabled"):
            why = skip_reason(case)
            if reason is None:
                failed += 1
                problems.append(f"unexpected skip: {name}: {why} (not in {skips_file.name} for a {kind} build)")
            else:
                skipped += 1
                print(f"skipped, as listed: {name}: {why}")
        elif case.find("failure") is not None or status == "fail":
            failed += 1
        else:
            if reason is not None:
                failed += 1
                problems.append(f"listed as skipped in a {kind} build, but it ran: {name} "
                                f"(the list says: {reason})")
            else:
                passed += 1
    for p in problems:
        print(p)
    if passed + failed + skipped == 0:
        print("check_skips: ctest ran no test")
        failed += 1
    if ctest_status != 0 and failed == 0:
        # ctest failed without a failed test to show for it (a build or
        # set-up error): that is a failure all the same.
        print(f"check_skips: ctest exited with status {ctest_status}")
        failed += 1
    print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
