#!/usr/bin/env bash
# The Python suite (python/tests): installs the package the README's way, `pip install
# --no-build-isolation .` (meson-python builds the library into it), into a virtual environment of
# Debian's python3 that sees the Debian packages (numpy, cffi, pyopencl, torch, pytest), then runs
# pytest on the PoCL pthread device. Arguments go to pytest. Called by scripts/test.sh, which
# installs the packages first, builds the wheel (scripts/wheel.sh) and installs it here
# (--install-wheel: the same meson-python build, then repaired, so the suite tests what users
# install) while meson's tests run, then runs pytest (--no-install).
set -euo pipefail
install=1 tests=1
case "${1:-}" in
--install-wheel) install=2 tests=0; shift ;;
--no-install) install=0; shift ;;
esac
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MHLA_BUILD_DIR:-$root/build}
# Debian's interpreter: the python3-* packages are installed for it, whatever python3 is first on PATH.
py=/usr/bin/python3
venv=$build/python-venv
[ "$install" = 0 ] || [ -x "$venv/bin/python" ] || "$py" -m venv --system-site-packages "$venv"
if [ "$install" = 2 ]; then
    "$venv/bin/python" -m pip install -q --no-deps --force-reinstall --disable-pip-version-check \
        "$(cat "$build/wheel.path")" >"$build/python-install.log" 2>&1 ||
        { cat "$build/python-install.log" >&2; echo "python: pip install of the wheel failed" >&2; exit 1; }
fi
if [ "$install" = 1 ]; then
    # A build folder of its own keeps the package's rebuild incremental (meson-python's builddir).
    "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps --force-reinstall \
        --config-settings=builddir="$build/python-build" "$root" >"$build/python-install.log" 2>&1 ||
        { cat "$build/python-install.log" >&2; echo "python: pip install failed" >&2; exit 1; }
fi
[ "$tests" = 1 ] || exit 0
cache=$build/tests/cache/python
rm -rf "$cache"
mkdir -p "$cache"
cd "$build"  # not the source tree: `import mhla` must find the installed package, not python/mhla
# PoCL builds as most of meson's tests do (tests/meson.build: one work-group function a
# kernel, LLVM's optimizations off), sharing their kernels; the library fills the blocks it
# allocates and frees, as in those tests (MHLA_MALLOC_PERTURB).
MHLA_CLI=$build/cli/mhla MHLA_DEVICE=pthread MHLA_CACHE_DIR=$cache MHLA_PROGRAM_CACHE_DIR=$build/tests/programs-unoptimized \
    POCL_WORK_GROUP_SPECIALIZATION=0 POCL_EXTRA_BUILD_FLAGS=-cl-opt-disable MHLA_MALLOC_PERTURB=165 \
    "$venv/bin/python" -m pytest -p no:cacheprovider -ra -q "$root/python/tests" "$@"
