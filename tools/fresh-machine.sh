#!/bin/sh
# The project on a machine that has nothing but Debian 12's base system, as a
# new user or a new CI machine gets it: a minimal root made with debootstrap
# (--variant=minbase), a clone of this repository's HEAD inside it, and then,
# under chroot, as root:
#
#   readme  the README's Quick start: its install lines (apt-get, "sudo "
#           left out: the root has no sudo), `make bench QUICK=1`, `make test`;
#   ci      `.ci/run`, in a root of its own, with CI=true as CI runs it.
#
# Each scenario starts from the same untouched base (debootstrap runs once
# and is kept as a tarball), so that what one installs cannot help the other.
# Two runs may share a --work folder, one scenario each, at the same time
# (each on a root of its own): that is also `make test` twice at once.
# Each step's time is printed, and a summary at the end; the exit status is
# non-zero if any step failed.
#
# usage: sudo sh tools/fresh-machine.sh [--work DIR] [--mirror URL] [--keep]
#                                       [--rebase] [readme] [ci]
#   --work DIR    where the roots go (default /var/tmp/fa-fresh; needs about
#                 6 GB); the base tarball is kept there between runs
#   --mirror URL  Debian mirror (default http://deb.debian.org/debian)
#   --rebase      make the base again with debootstrap, even if one is kept
#   --keep        leave the roots in place afterwards (to look inside)
#   scenarios     readme and ci by default
#
# Needs root (debootstrap, chroot, mount), debootstrap and git on this
# machine, and Debian's package registry.  It commits nothing: what it tests
# is HEAD as committed.
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
work=/var/tmp/fa-fresh
mirror=http://deb.debian.org/debian
keep=0
rebase=0
scenarios=""
while [ $# -gt 0 ]; do
    case $1 in
        --work) work=$2; shift 2 ;;
        --mirror) mirror=$2; shift 2 ;;
        --keep) keep=1; shift ;;
        --rebase) rebase=1; shift ;;
        readme | ci) scenarios="$scenarios $1"; shift ;;
        *) echo "usage: fresh-machine.sh [--work DIR] [--mirror URL] [--keep] [--rebase] [readme] [ci]" >&2
           exit 2 ;;
    esac
done
[ -n "$scenarios" ] || scenarios="readme ci"
[ "$(id -u)" -eq 0 ] || { echo "fresh-machine.sh: needs root (debootstrap, chroot, mount)" >&2; exit 2; }
for tool in debootstrap git chroot mount; do
    command -v $tool >/dev/null 2>&1 || { echo "fresh-machine.sh: $tool is not installed" >&2; exit 2; }
done
mkdir -p "$work"

summary=""
failed=0
# timed NAME COMMAND...: run it, print and note its time and verdict.
timed() {
    name=$1
    shift
    echo "== $name"
    t0=$(date +%s)
    rc=0
    "$@" || rc=$?
    secs=$(($(date +%s) - t0))
    if [ $rc -eq 0 ]; then
        line="passed: $name ($secs s)"
    else
        line="FAILED: $name (exit status $rc, $secs s)"
        failed=1
    fi
    echo "=> $line"
    summary="$summary$line
"
    return $rc
}

# ---- the base: debootstrap once, kept as a tarball
base=$work/bookworm-minbase.tar
if [ $rebase -eq 1 ] || [ ! -s "$base" ]; then
    rm -rf "$work/base"
    timed "debootstrap --variant=minbase bookworm" \
        debootstrap --variant=minbase bookworm "$work/base" "$mirror" >"$work/debootstrap.log" 2>&1 || {
        tail -20 "$work/debootstrap.log"
        exit 1
    }
    tar -C "$work/base" -cf "$base.tmp" . && mv "$base.tmp" "$base"
    rm -rf "$work/base"
fi

# ---- a root of one's own for each scenario
mounted=""
unmount_all() {
    for m in $mounted; do
        umount -l "$m" 2>/dev/null || :
    done
    mounted=""
}
made=""
cleanup() {
    unmount_all
    if [ $keep -eq 0 ]; then
        # The roots this run made (another run may use the same --work for
        # another scenario), and only once nothing is mounted there: rm must
        # not reach this machine's /dev.
        for r in $made; do
            if ! grep -q " $r/" /proc/mounts; then
                rm -rf "$r"
            fi
        done
    fi
}
trap cleanup EXIT INT TERM

# new_root NAME: a fresh root from the base, with /proc, /sys and /dev, no
# service started by a package (policy-rc.d: the root shares this machine's
# network, and redis-server's package would start a server on its port), and
# a clone of HEAD in /root/fastalloc.
new_root() {
    root=$work/root-$1
    unmount_all
    rm -rf "$root"
    mkdir -p "$root"
    made="$made $root"
    tar -C "$root" -xf "$base"
    cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || :
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
    chmod 755 "$root/usr/sbin/policy-rc.d"
    mount -t proc proc "$root/proc" && mounted="$root/proc $mounted"
    mount -t sysfs sysfs "$root/sys" && mounted="$root/sys $mounted"
    mount --bind /dev "$root/dev" && mounted="$root/dev $mounted"
    mount --bind /dev/pts "$root/dev/pts" && mounted="$root/dev/pts $mounted"
    if [ -d /dev/shm ]; then
        mount -t tmpfs -o mode=1777 shm "$root/dev/shm" && mounted="$root/dev/shm $mounted"
    fi
    git clone -q --no-local "$repo" "$root/root/fastalloc"
}

# in_root COMMAND: run a shell command in the root, in the clone, with a
# clean environment (nothing of this machine's but the root's own files).
in_root() {
    env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 TERM=dumb DEBIAN_FRONTEND=noninteractive \
        chroot "$root" /bin/sh -c "cd /root/fastalloc && $1"
}

# The README's install lines: the apt-get lines of the Quick start's first
# code block, continuation lines joined, "sudo " dropped.
readme_install() {
    awk '
        /^## Quick start/ { inqs = 1; next }
        inqs && /^```/ { if (inblock) exit; inblock = 1; next }
        inblock {
            line = $0
            if (cont) { cmd = cmd " " line } else { cmd = line }
            cont = sub(/\\$/, "", cmd)
            if (!cont && cmd ~ /apt-get/) { sub(/^[ \t]*sudo[ \t]+/, "", cmd); print cmd }
        }' "$repo/README.md"
}

for s in $scenarios; do
    case $s in
        readme)
            cmds=$(readme_install)
            if [ -z "$cmds" ]; then
                echo "FAILED: no apt-get line in README.md's Quick start"
                failed=1
                continue
            fi
            timed "readme: a fresh root and a clone" new_root readme || continue
            echo "$cmds" | sed 's/^/   /'
            timed "readme: the README's install lines" in_root "set -e; $cmds" || continue
            timed "readme: make bench QUICK=1" in_root "make bench QUICK=1" || :
            timed "readme: make test" in_root "make test" || :
            ;;
        ci)
            timed "ci: a fresh root and a clone" new_root ci || continue
            timed "ci: CI=true bash .ci/run" in_root "CI=true bash .ci/run" || :
            ;;
    esac
done

echo "== fresh-machine summary"
printf '%s' "$summary"
exit $failed
