"""The benchmark programs: built by bench/CMakeLists.txt into <build>/bench/
(built here when the build folder predates them), or found on PATH; runwrap,
which starts each of them; valgrind for the instruction counts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import BENCH_DIR, REPO, SetupError
from .workloads import Plan

# Programs built by bench/CMakeLists.txt that have no .c file of their name.
EXTRA_TARGETS = {"strings_O0"}


def cmake_cache_value(build: Path, key: str) -> str | None:
    try:
        with open(build / "CMakeCache.txt") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def ensure_built(build: Path, targets: list[str]) -> None:
    """A build folder configured before bench/CMakeLists.txt had these
    programs has no targets for them: configure it again and build them.
    Raises SetupError when the benchmarks cannot be built there."""
    missing = [t for t in targets if not (build / "bench" / t).exists()]
    if not missing:
        return
    if not (build / "CMakeCache.txt").exists():
        raise SetupError(f"{build} is not a configured build folder (run make)")
    if cmake_cache_value(build, "FA_SANITIZE"):
        raise SetupError(f"{build} is a sanitizer build, which does not build the benchmarks")
    print(f"run.py: {', '.join(missing)} missing in {build}/bench; configuring and building them",
          file=sys.stderr)
    r = subprocess.run(["cmake", "-S", str(REPO), "-B", str(build)], stdout=subprocess.DEVNULL)
    if r.returncode == 0:
        r = subprocess.run(["cmake", "--build", str(build), "-j", str(os.cpu_count() or 2),
                            "--target", *missing], stdout=subprocess.DEVNULL)
    if r.returncode != 0:
        raise SetupError("building the benchmarks failed")


def is_ours(binary: str) -> bool:
    """A program built by bench/CMakeLists.txt (the others are absolute
    paths or found on PATH)."""
    return ((BENCH_DIR / f"{binary}.c").exists() or (BENCH_DIR / f"{binary}.cpp").exists()
            or binary in EXTRA_TARGETS)


def resolve_binary(build: Path, name: str) -> str | None:
    if os.path.isabs(name):
        return name if os.access(name, os.X_OK) else None
    local = build / "bench" / name
    if local.exists():
        return str(local)
    return shutil.which(name)


@dataclass
class Programs:
    binaries: dict[str, str]    # workload name -> path of its program
    runwrap: Path | None        # None: started straight from Python
    valgrind: str | None
    why_no_callgrind: str       # "" when valgrind is there


def prepare_programs(plan: Plan, require_valgrind: bool = False) -> Programs:
    """Finds valgrind, builds the programs of ours that the plan needs and
    finds every program.  Without valgrind the callgrind workloads leave the
    plan, and why_no_callgrind names them (run.py says so before the runs
    and again after the tables); with require_valgrind (CI) that is a
    SetupError instead.  Raises SetupError when a program cannot be built or
    found."""
    valgrind = shutil.which("valgrind")
    counted = [w.name for w in plan.workloads if w.kind == "callgrind"]
    why_no_callgrind = ""
    if counted and not valgrind:
        if require_valgrind:
            raise SetupError(f"valgrind not found (apt-get install -y valgrind), and --require-valgrind "
                             f"asks for the instruction counts ({', '.join(counted)})")
        why_no_callgrind = (f"valgrind not found (apt-get install -y valgrind): the instruction counts "
                            f"({', '.join(counted)}) were not measured")
        plan.workloads = [w for w in plan.workloads if w.kind != "callgrind"]
    # Programs of ours: built by bench/CMakeLists.txt (others: absolute or on PATH).
    ours = sorted({w.binary for w in plan.workloads if is_ours(w.binary)} | {"runwrap"})
    ensure_built(plan.build, ours)
    binaries = {}
    for w in plan.workloads:
        path = resolve_binary(plan.build, w.binary)
        if path is None:
            raise SetupError(f"program {w.binary} not found (in {plan.build}/bench or on PATH)")
        binaries[w.name] = path
    runwrap = plan.build / "bench" / "runwrap"
    if not runwrap.exists():
        print(f"run.py: {runwrap} missing: peak RSS will include this Python process's own",
              file=sys.stderr)
        runwrap = None
    return Programs(binaries, runwrap, valgrind, why_no_callgrind)
