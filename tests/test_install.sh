#!/bin/sh
# The install, as a user makes it: this build tree, configured for one prefix
# (/usr/local by default), installed into a fresh folder with
# `cmake --install BUILD --prefix DIR` (what `make install PREFIX=DIR` runs).
# Then, against that folder only:
#   - a program built with pkg-config (the README's `cc ... $(pkg-config
#     --cflags --libs fastalloc)`), whose -I and -L must be the install's;
#   - the same program built through the CMake package, with
#     fastalloc::fastalloc (shared) and fastalloc::fastalloc_static;
#   - a program not linked against fastalloc, run through the installed
#     fastalloc-run, which must preload the installed library.
# Each program checks that its blocks are fastalloc's and prints the
# libfastalloc.so it runs on, which must be the installed one.  How the shared
# ones find it at run time: the pkg-config one through LD_LIBRARY_PATH (the
# pkg-config file carries no rpath), the CMake ones through the RUNPATH that
# CMake gives programs in their build tree (LD_LIBRARY_PATH unset).
#
# Exit status 0: all passed; 1: a check failed; 77: skipped (pkg-config or
# cmake missing, or an install layout that cannot be moved).
#
# usage: test_install.sh cmake=PATH build=DIR cc=PATH malloc=malloc|fa_malloc
#        bindir=D libdir=D includedir=D prefix=P [build_type=T] [generator=G]
#        [make_program=PATH] [cflags=FLAGS] [ldflags=FLAGS] [run_env=VAR=VALUE]
# (the relative install dirs and the configured prefix of the build; cflags
# and ldflags are added to every program, e.g. the sanitizer's; run_env is set
# for the run through fastalloc-run)
set -u

cmake='' build='' cc='' malloc='' bindir='' libdir='' includedir='' configured_prefix=''
build_type=Release generator='' make_program='' cflags='' ldflags='' run_env=''
for arg in "$@"; do
    case $arg in
    cmake=*) cmake=${arg#*=} ;;
    build=*) build=${arg#*=} ;;
    cc=*) cc=${arg#*=} ;;
    malloc=*) malloc=${arg#*=} ;;
    bindir=*) bindir=${arg#*=} ;;
    libdir=*) libdir=${arg#*=} ;;
    includedir=*) includedir=${arg#*=} ;;
    prefix=*) configured_prefix=${arg#*=} ;;
    build_type=*) build_type=${arg#*=} ;;
    generator=*) generator=${arg#*=} ;;
    make_program=*) make_program=${arg#*=} ;;
    cflags=*) cflags=${arg#*=} ;;
    ldflags=*) ldflags=${arg#*=} ;;
    run_env=*) run_env=${arg#*=} ;;
    *)
        echo "test_install: unknown argument: $arg"
        exit 2
        ;;
    esac
done
for v in cmake build cc malloc bindir libdir includedir configured_prefix; do
    if eval "[ -z \"\$$v\" ]"; then
        echo "test_install: missing argument $v"
        exit 2
    fi
done
src=$(cd "$(dirname "$0")" && pwd)/install

# ---------------------------------------------------------------- skips
# A skip says why, and ctest lists the test as skipped (never as passed).
if [ ! -x "$cmake" ]; then
    cmake=$(command -v cmake) || {
        echo "SKIP: cmake is not installed (the test installs with cmake --install)"
        exit 77
    }
fi
if ! command -v pkg-config >/dev/null 2>&1; then
    echo "SKIP: pkg-config is not installed (apt-get install pkg-config)"
    exit 77
fi
for d in "$bindir" "$libdir" "$includedir"; do
    case $d in
    /*)
        echo "SKIP: the build installs into the absolute path $d, which no prefix can move"
        exit 77
        ;;
    esac
done

# ---------------------------------------------------------------- helpers
failed=0
fail() {
    echo "FAIL: $*"
    failed=$((failed + 1))
}
# logged NAME CMD...: run CMD with its output in $tmp/NAME.log; on failure
# show the end of it.
logged() {
    name=$1
    shift
    if "$@" >"$tmp/$name.log" 2>&1; then
        return 0
    else
        status=$?
        fail "$name exited with status $status: $*"
        tail -n 30 "$tmp/$name.log" | sed 's/^/  | /'
        return 1
    fi
}
# physical DIR: DIR with every symbolic link and .. resolved, or "" when it
# does not exist.
physical() {
    (CDPATH='' cd -- "$1" 2>/dev/null && pwd -P) || true
}
# check_lib NAME DIR: the "lib:" line of a program's output (in $tmp/NAME.log)
# names a libfastalloc.so in DIR, or, for DIR "none", says none is mapped.
check_lib() {
    line=$(grep '^lib: ' "$tmp/$1.log" | head -n 1)
    case $2 in
    none) want='lib: none' ;;
    *) want="lib: $2/libfastalloc.so*" ;;
    esac
    # shellcheck disable=SC2254
    case $line in
    $want)
        said=$(grep -E '^(consumer|probe): ' "$tmp/$1.log" | grep -v ': ok$' |
            sed 's/^[a-z]*: //' | tr '\n' ';' | sed 's/;$//; s/;/; /g')
        if [ "$2" = none ]; then
            echo "ok: $1 ($said), no libfastalloc.so mapped"
        else
            echo "ok: $1 ($said) runs on ${line#lib: }"
        fi
        ;;
    *) fail "$1 ran on the wrong library: '${line:-no lib: line}', expected '$want'" ;;
    esac
}

# ---------------------------------------------------------------- install
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fa-install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
# DESTDIR would move the install somewhere else again; a stray LD_PRELOAD or
# LD_LIBRARY_PATH would change which library the programs get.
unset DESTDIR LD_PRELOAD LD_LIBRARY_PATH
prefix=$tmp/prefix
logged install "$cmake" --install "$build" --prefix "$prefix" || exit 1
plibdir=$(physical "$prefix/$libdir")
pincludedir=$(physical "$prefix/$includedir")
if [ -z "$plibdir" ] || [ ! -f "$prefix/$includedir/fastalloc.h" ]; then
    fail "the install has no $libdir or no $includedir/fastalloc.h"
    exit 1
fi
echo "ok: installed into a fresh prefix (the build was configured for $configured_prefix)"

# Nothing installed may name the build tree, and the files made for this
# project may not name the configured prefix either: the programs below would
# then still work on this machine (where that prefix may hold an older
# install) while the install is broken anywhere else.  (The CMake package
# files may name it: CMake writes it there for one case, a prefix reached
# through a symbolic link such as /lib -> /usr/lib, and checks that it is
# that case before using it.)
for f in "$prefix/$libdir/pkgconfig/fastalloc.pc" "$prefix/$bindir/fastalloc-run" \
    "$prefix/$libdir/cmake/fastalloc/"*.cmake; do
    if [ ! -f "$f" ]; then
        fail "not installed: ${f#"$prefix"/}"
        continue
    fi
    if grep -F -n -e "$build" "$f" >"$tmp/grep.out"; then
        fail "${f#"$prefix"/} names the build tree:"
        sed 's/^/  | /' "$tmp/grep.out"
    fi
    case $configured_prefix:$f in
    /:* | *.cmake) ;;
    *)
        if grep -F -n -e "$configured_prefix" "$f" >"$tmp/grep.out"; then
            fail "${f#"$prefix"/} names the configured prefix $configured_prefix:"
            sed 's/^/  | /' "$tmp/grep.out"
        fi
        ;;
    esac
done

# ---------------------------------------------------------------- pkg-config
PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
export PKG_CONFIG_PATH
pcdir=$(pkg-config --variable=pcfiledir fastalloc)
if [ "$(physical "$pcdir")" != "$plibdir/pkgconfig" ]; then
    fail "pkg-config found fastalloc in '$pcdir', not in the install"
fi
# --cflags must lead to the installed header, --libs to the installed library.
inc=$(pkg-config --cflags-only-I fastalloc | sed 's/^ *-I//; s/ *$//')
if [ -z "$inc" ] || [ "$(physical "$inc")" != "$pincludedir" ] || [ ! -f "$inc/fastalloc.h" ]; then
    fail "pkg-config --cflags gives -I'$inc', not the installed include dir $prefix/$includedir"
else
    echo "ok: pkg-config --cflags: -I$inc"
fi
libpath=$(pkg-config --libs-only-L fastalloc | sed 's/^ *-L//; s/ *$//')
if [ -z "$libpath" ] || [ "$(physical "$libpath")" != "$plibdir" ]; then
    fail "pkg-config --libs gives -L'$libpath', not the installed lib dir $prefix/$libdir"
fi
# shellcheck disable=SC2046,SC2086
if logged build-pkg-config "$cc" $cflags -O2 -o "$tmp/consumer_pc" "$src/consumer.c" \
    $(pkg-config --cflags --libs fastalloc) $ldflags; then
    if logged consumer_pc env LD_LIBRARY_PATH="$prefix/$libdir" "$tmp/consumer_pc" "$malloc"; then
        check_lib consumer_pc "$plibdir"
    fi
fi

# ---------------------------------------------------------------- CMake package
set -- -S "$src" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_BUILD_TYPE="$build_type" -DCMAKE_C_FLAGS="$cflags" -DCMAKE_EXE_LINKER_FLAGS="$ldflags"
[ -n "$generator" ] && set -- "$@" -G "$generator"
[ -n "$make_program" ] && set -- "$@" -DCMAKE_MAKE_PROGRAM="$make_program"
if logged cmake-configure "$cmake" "$@" && logged cmake-build "$cmake" --build "$tmp/cmake"; then
    failed_before=$failed
    pkgdir=$(sed -n 's/^fastalloc_DIR:PATH=//p' "$tmp/cmake/CMakeCache.txt")
    if [ "$(physical "$pkgdir")" != "$plibdir/cmake/fastalloc" ]; then
        fail "find_package(fastalloc) found '$pkgdir', not the install"
    fi
    # The targets' include dir and libraries (written by the project).
    inc=$(sed -n 's/^include=//p' "$tmp/cmake/fastalloc-paths.txt")
    if [ "$(physical "$inc")" != "$pincludedir" ]; then
        fail "fastalloc::fastalloc's include dir is '$inc', not the installed $prefix/$includedir"
    fi
    for kind in shared static; do
        file=$(sed -n "s/^$kind=//p" "$tmp/cmake/fastalloc-paths.txt")
        if [ ! -f "$file" ] || [ "$(physical "$(dirname "$file")")" != "$plibdir" ]; then
            fail "the $kind library target is '$file', not one in the installed $prefix/$libdir"
        fi
    done
    [ $failed -eq "$failed_before" ] &&
        echo "ok: find_package(fastalloc) took the install's package, include dir and libraries"
    if logged consumer_shared "$tmp/cmake/consumer_shared" "$malloc"; then
        check_lib consumer_shared "$plibdir"
    fi
    if logged consumer_static "$tmp/cmake/consumer_static" "$malloc"; then
        check_lib consumer_static none
    fi

    # ------------------------------------------------------------ fastalloc-run
    probe=$tmp/cmake/probe
    # Without the wrapper the probe has no fastalloc (and says so).
    if "$probe" >"$tmp/probe_alone.log" 2>&1; then
        fail "the probe finds fastalloc without fastalloc-run"
    fi
    # Through the wrapper, found on PATH and started from another folder, as
    # a user would; with "malloc" the probe also checks that its malloc is
    # fastalloc's.
    # shellcheck disable=SC2016 # expanded by that sh
    if logged probe_run sh -c 'cd / && exec env ${4:+"$4"} PATH="$1:$PATH" fastalloc-run "$2" "$3"' \
        sh "$prefix/$bindir" "$probe" "$malloc" "$run_env"; then
        check_lib probe_run "$plibdir"
    fi
fi

if [ $failed -ne 0 ]; then
    echo "test_install: FAILED"
    exit 1
fi
echo "test_install: pkg-config, CMake (shared, static) and fastalloc-run all use the install"
