"""The allocators to preload: fastalloc from the build folder, glibc (no
preload), the peers when installed, and any --lib."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from . import REPO, SetupError


@dataclass
class Allocator:
    name: str
    lib: str | None            # path to LD_PRELOAD; None for glibc
    package: str | None = None  # Debian package that provides it
    expect: str | None = None   # what the programs must report as "allocator"
    version: str = ""
    env: tuple = ()             # ("NAME=value", ...) set for its runs


GLIBC = Allocator("glibc", None, "libc6", "glibc")

# name, shared object to look for, Debian package
PEERS = [
    ("jemalloc", "libjemalloc.so.2", "libjemalloc2"),
    ("tcmalloc", "libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
    ("mimalloc", "libmimalloc.so.2", "libmimalloc2.0"),
]


def elf_machine(path: str) -> tuple[int, int] | None:
    """(ELF class, e_machine) of a file, or None if it is not ELF."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    order = "little" if head[5] == 1 else "big"
    return head[4], int.from_bytes(head[18:20], order)


def find_library(soname: str, want_machine) -> str | None:
    """Multiarch-aware search: our own triplet first, then any lib dir."""
    dirs = []
    triplet = sysconfig.get_config_var("MULTIARCH")
    if triplet:
        dirs += [f"/usr/lib/{triplet}", f"/lib/{triplet}"]
    dirs += sorted(glob.glob("/usr/lib/*-linux-gnu*")) + sorted(glob.glob("/lib/*-linux-gnu*"))
    dirs += ["/usr/lib64", "/lib64", "/usr/lib", "/lib", "/usr/local/lib"]
    seen = set()
    for d in dirs:
        path = os.path.join(d, soname)
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(path):
            continue
        seen.add(real)
        if want_machine is None or elf_machine(path) == want_machine:
            return path
    return None


SECURE = "fastalloc-secure"
# The default library with the sampled heap profile on (README.md, "Heap
# profiles"), written to /dev/null at exit: what the profile costs.  Run
# only when --allocators names it.
PROFILE = "fastalloc-profile"
PROFILE_ENV = ("FASTALLOC_PROFILE=/dev/null",)
# The hardened library with its tails option on (SECURITY.md): what the
# option costs.  Run only when --allocators names it.
SECURE_TAILS = "fastalloc-secure-tails"
SECURE_TAILS_ENV = ("FASTALLOC_SECURE_TAILS=1",)
# The same with its random order on (`secure_shuffle`).
SECURE_SHUFFLE = "fastalloc-secure-shuffle"
SECURE_SHUFFLE_ENV = ("FASTALLOC_SECURE_SHUFFLE=1",)
# Run only when named.
ON_REQUEST = (PROFILE, SECURE_TAILS, SECURE_SHUFFLE)
# fastalloc's own variants: never anyone's "best other allocator", and no
# memory column of their own.
VARIANTS = (SECURE, PROFILE, SECURE_TAILS, SECURE_SHUFFLE)


def package_version(package: str) -> str:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def git_revision() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def discover_allocators(build: Path, extra: list[tuple[str, str]], want_machine):
    """Returns (available allocators in run order, skipped [(name, why)])."""
    found, skipped = [], []
    found.append(Allocator("fastalloc", str(build / "libfastalloc.so"), None, "fastalloc", git_revision()))
    # The hardened build (SECURITY.md): its own column, never anyone's
    # "best other allocator" (stats.add_ratios), and its cost against the
    # default library in the summary (checks.secure_lines).
    secure = build / "libfastalloc-secure.so"
    if secure.is_file():
        # Its programs report "fastalloc-secure" (bench_detect_allocator): a
        # column that ran the default library fails its runs.
        found.append(Allocator(SECURE, str(secure), None, SECURE, git_revision()))
        found.append(Allocator(SECURE_TAILS, str(secure), None, SECURE, git_revision(), SECURE_TAILS_ENV))
        found.append(Allocator(SECURE_SHUFFLE, str(secure), None, SECURE, git_revision(), SECURE_SHUFFLE_ENV))
    else:
        skipped.append((SECURE, f"{secure} not found; build it first (make)"))
    found.append(Allocator(PROFILE, str(build / "libfastalloc.so"), None, "fastalloc", git_revision(),
                           PROFILE_ENV))
    found.append(Allocator("glibc", None, "libc6", "glibc", package_version("libc6")))
    for name, soname, package in PEERS:
        path = find_library(soname, want_machine)
        if path is None:
            skipped.append((name, f"{soname} not found; apt-get install -y {package}"))
        else:
            found.append(Allocator(name, path, package, name, package_version(package)))
    for name, path in extra:
        found.append(Allocator(name, str(Path(path).resolve()), None, None, "custom"))
    return found, skipped


def choose_allocators(build: Path, extra: list[tuple[str, str]], wanted: list[str]):
    """The allocators found, narrowed to --allocators (wanted, in that order)
    when given.  Returns (allocators, skipped [(name, why)])."""
    allocs, skipped = discover_allocators(build, extra, elf_machine(sys.executable))
    names = [a.name for a in allocs]
    if len(set(names)) != len(names):
        raise SetupError("two allocators share a name; pick another --lib NAME")
    if not wanted:  # the profile's and the tails' columns only when asked for
        return [a for a in allocs if a.name not in ON_REQUEST], skipped
    known = set(names) | {n for n, _ in skipped}
    for n in wanted:
        if n not in known:
            raise SetupError(f"unknown allocator {n!r} (known: {', '.join(sorted(known))})")
        for sn, why in skipped:
            if sn == n:
                raise SetupError(f"{n} was asked for but is not installed: {why}")
    return [next(a for a in allocs if a.name == n) for n in dict.fromkeys(wanted)], []


def check_libraries(allocs: list[Allocator]) -> None:
    """Every library to preload must exist (fastalloc's is built by make)."""
    for a in allocs:
        if a.lib and not os.path.isfile(a.lib):
            raise SetupError(f"{a.name}: {a.lib} not found; build it first (make)")
