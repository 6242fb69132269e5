#!/usr/bin/env bash
# The wheel in a clean environment (scripts/test.sh runs it after scripts/wheel.sh built dist/):
# a fresh virtual environment of Debian's python3 WITHOUT system site packages, the wheel installed
# with NumPy, cffi and pycparser from PyPI's wheels (build/wheelhouse, fetched by `--fetch` while
# the suites run: the only download), then tests/integration/wheel_check.py, on PoCL found through
# the wheel's own ICD loader and /etc/OpenCL/vendors.
# Usage: wheel_check.sh [--fetch] ROOT BUILD. Exit 77 (a skip) where BUILD has no wheel recorded
# (BUILD/wheel.path, written by scripts/wheel.sh).
set -euo pipefail
fetch=0
if [ "${1:-}" = "--fetch" ]; then
    fetch=1
    shift
fi
root=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
py=/usr/bin/python3
house=$build/wheelhouse
if [ "$fetch" = 1 ]; then
    # The wheels pip would take from PyPI for this interpreter, kept between runs.
    "$py" -m pip download -q --disable-pip-version-check --only-binary=:all: -d "$house" numpy cffi
    exit 0
fi
wheel=$(cat "$build/wheel.path" 2>/dev/null || true)
[ -f "$wheel" ] || { echo "wheel_check: skipped: no wheel from this build folder (scripts/wheel.sh builds it)"; exit 77; }
venv=$build/wheel-check-venv
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -c 'import sys; assert sys.prefix != sys.base_prefix' # a venv, no system site packages
echo "wheel_check: $(basename "$wheel") into a fresh venv ($("$venv/bin/python" --version), no system site packages)"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-index --find-links "$house" "$wheel"
"$venv/bin/python" -m pip list --disable-pip-version-check 2>/dev/null | sed -n '3,$p' | tr -s ' ' | paste -sd, |
    sed 's/^/wheel_check: installed: /'
cd "$build" # not the source tree: the import must find the installed package
"$venv/bin/python" "$root/tests/integration/wheel_check.py"
