#!/usr/bin/env bash
# Sourced by run.sh and test.sh: installs the Debian packages libmhla needs (only the missing
# ones, plus MHLA_EXTRA_PACKAGES), then configures (once) and builds. MHLA_BUILD_DIR picks the
# build folder (default: build).
set -euo pipefail

MHLA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MHLA_BUILD_DIR=${MHLA_BUILD_DIR:-$MHLA_ROOT/build}
# gcc/libc6-dev/python3: a bare Debian has no C compiler, and meson and scripts/cl2c.py need python3.
# libopenblas-dev: mhla-bench's blas and sgemm rows (the bench alone uses it; the library does not).
MHLA_PACKAGES="gcc libc6-dev python3 ocl-icd-opencl-dev opencl-headers libclblast-dev pocl-opencl-icd \
meson ninja-build libcmocka-dev pkg-config libopenblas-dev ${MHLA_EXTRA_PACKAGES:-}"

mhla_install_missing() {
    local missing=() p
    for p in $MHLA_PACKAGES; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
        sudo="sudo"
    fi
    echo "setup: installing ${missing[*]}" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

# Optional dependencies meson looks for only when it configures, one "NAME|PROBE" a line: the name
# meson's log gives it, and a command that succeeds when it is installed. One installed after a build
# folder was configured stays unseen there (no mpi suite, no blas rows in the bench) until meson
# reconfigures. (clang-14 is not one: kernels_clang.py looks for it when it runs, and build-fuzz,
# compiled by it, is configured through mhla_configure when clang-14 is there.)
MHLA_OPTIONAL_DEPS="openblas|pkg-config --exists openblas
mpi|pkg-config --exists ompi-c || command -v mpicc
mpirun|command -v mpirun"

# mhla_configure DIR [MESON_SETUP_OPTIONS...]: configures DIR (in the caller's environment, e.g.
# CC=clang-14) when it has no build.ninja, else reconfigures it when an optional dependency is
# installed that its last configure did not find (meson-logs/meson-log.txt; one an option disabled,
# -Dmpi=disabled, was "skipped" and stays out).
mhla_configure() {
    local dir=$1 name probe missed=""
    shift
    local out
    if [ ! -f "$dir/build.ninja" ]; then
        # Meson prints its ERROR line on stdout: shown (with what led to it) only when it fails.
        out=$(meson setup "$dir" "$MHLA_ROOT" "$@" 2>&1) || { printf '%s\n' "$out" | tail -n 25 >&2; return 1; }
        return 0
    fi
    while IFS='|' read -r name probe; do
        # meson logs "Run-time dependency MPI for c found: YES", "Dependency mpi found: YES (cached)"
        # on a reconfigure, "Program mpirun found: NO", "Dependency mpi skipped: feature mpi disabled".
        if eval "$probe" >/dev/null 2>&1 &&
            ! grep -Eiq "^(run-time )?(dependency|program) $name( for c)? (found: YES|skipped)" \
                "$dir/meson-logs/meson-log.txt" 2>/dev/null; then
            missed+=" $name"
        fi
    done <<<"$MHLA_OPTIONAL_DEPS"
    if [ -n "$missed" ]; then
        echo "setup:$missed installed since $dir was configured: reconfiguring" >&2
        out=$(meson setup --reconfigure "$dir" "$MHLA_ROOT" 2>&1) || { printf '%s\n' "$out" | tail -n 25 >&2; return 1; }
    fi
}

mhla_build() {
    mhla_configure "$MHLA_BUILD_DIR" --buildtype=release
    ninja -C "$MHLA_BUILD_DIR" >/dev/null
}

mhla_install_missing
# MHLA_SETUP_NO_BUILD=1: the packages alone (scripts/wheel.sh builds in a folder of its own).
[ "${MHLA_SETUP_NO_BUILD:-0}" = 1 ] || mhla_build
