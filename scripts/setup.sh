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

mhla_build() {
    if [ ! -f "$MHLA_BUILD_DIR/build.ninja" ]; then
        meson setup "$MHLA_BUILD_DIR" "$MHLA_ROOT" --buildtype=release >/dev/null
    elif pkg-config --exists openblas &&
        ! grep -q '"name": "openblas"' "$MHLA_BUILD_DIR/meson-info/intro-dependencies.json" 2>/dev/null; then
        # Configured before OpenBLAS was installed: the bench's blas and sgemm rows need it found.
        meson setup --reconfigure "$MHLA_BUILD_DIR" "$MHLA_ROOT" >/dev/null
    fi
    ninja -C "$MHLA_BUILD_DIR" >/dev/null
}

mhla_install_missing
mhla_build
