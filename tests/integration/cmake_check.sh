#!/usr/bin/env bash
# CMake's find_package(mhla CONFIG) as an application uses it: the build folder BUILD installed into
# a staging prefix (meson install --destdir: the package files must hold wherever the prefix lies),
# then the outside project tests/integration/cmake/ configured against it with CMAKE_PREFIX_PATH
# alone, built, and its api_check run (a forward, a backward and a causal call against the
# reference) with the library found through the run path CMake gives imported targets.
# Usage: cmake_check.sh BUILD SOURCE_ROOT. Exit 77 (a skip) where cmake is not installed.
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
command -v cmake >/dev/null || { echo "cmake_check: skipped: cmake is not installed"; exit 77; }
work=$build/tests/integration/cmake-check
rm -rf "$work"
mkdir -p "$work"
meson install -C "$build" --destdir "$work/stage" --no-rebuild --quiet >"$work/install.log" 2>&1 ||
    { cat "$work/install.log"; exit 1; }
prefix=$work/stage$(meson introspect "$build" --buildoptions |
    python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
config=$(find "$prefix" -name mhlaConfig.cmake)
echo "cmake_check: $(cmake --version | head -n 1); package file ${config#"$work"/}"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$src/tests/integration/cmake" -B "$work/consumer" "${gen[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/consumer" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
readelf -d "$work/consumer/api_check" | grep -E "NEEDED|RUNPATH|RPATH" | sed 's/^ */  /'
"$work/consumer/api_check"
if [ -x "$work/consumer/mpi_link" ]; then
    # libmhla_mpi's own dependency on libmhla is the system loader's to find (an installed prefix's
    # lib folder is on its path; this staging one is not), as it is for any library's dependencies.
    LD_LIBRARY_PATH=$(dirname "$(find "$prefix" -name 'libmhla.so.*' | head -n 1)") "$work/consumer/mpi_link"
fi
