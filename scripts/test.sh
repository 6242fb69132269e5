#!/usr/bin/env bash
# The tests: installs what is missing, builds, runs `meson test` (every suite; pass --suite unit,
# --suite opencl or --suite cli to narrow it), and closes with one "N passed, N failed, N skipped" line.
#   scripts/test.sh --sanitize [ARGS]: the unit, opencl and cli suites (or ARGS) under ASan+UBSan
#   instead, in build-asan/ (tests/sanitize/: the suppressions and runtime options).
set -euo pipefail
# clang-14: the portability suite compiles every kernel specialization with its OpenCL front end.
# libopenmpi-dev openmpi-bin: libmhla_mpi and the mpi suite (issue 15; meson -Dmpi=auto finds them).
# libclang-rt-14-dev (libFuzzer, ASan, UBSan runtimes; only a Recommends of clang-14) and llvm-14
# (llvm-symbolizer, for the reports' stacks): the fuzzers' short pass (tests/fuzz/).
MHLA_EXTRA_PACKAGES="clang-14 libclang-rt-14-dev llvm-14 mesa-opencl-icd oclgrind qemu-user libopenmpi-dev openmpi-bin \
${MHLA_EXTRA_PACKAGES:-}"
sanitize=0
if [ "${1:-}" = "--sanitize" ]; then
    sanitize=1
    shift
fi
nargs=$#
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

rc=0
logs=()
if [ "$sanitize" = 1 ]; then
    # A build of its own with gcc's ASan and UBSan (assertions on); every UBSan report fails the
    # test (tests/sanitize/options.sh), and leaks are reported but for the OpenCL stack's.
    asan_dir=$MHLA_ROOT/build-asan
    mhla_configure "$asan_dir" --buildtype=debugoptimized -Db_sanitize=address,undefined
    ninja -C "$asan_dir" >/dev/null
    source "$MHLA_ROOT/tests/sanitize/options.sh"
    [ $# -gt 0 ] || set -- --suite unit --suite opencl --suite cli
    meson test -C "$asan_dir" --print-errorlogs "$@" || rc=$?
    logs+=("$asan_dir/meson-logs/testlog.json")
else
    meson test -C "$MHLA_BUILD_DIR" --print-errorlogs "$@" || rc=$?
    logs+=("$MHLA_BUILD_DIR/meson-logs/testlog.json")
    if [ "$nargs" = 0 ]; then
        # The fuzzers' short pass (tests/fuzz/): each harness over its seed corpus, then a fixed
        # number of mutations from seed 1, built with clang-14, libFuzzer, ASan and UBSan.
        fuzz_dir=$MHLA_ROOT/build-fuzz
        CC=clang-14 mhla_configure "$fuzz_dir" --buildtype=debugoptimized -Dfuzz=true \
            -Db_sanitize=address,undefined -Db_lundef=false
        ninja -C "$fuzz_dir" fuzzers >/dev/null
        meson test -C "$fuzz_dir" --no-rebuild --print-errorlogs --suite fuzz || rc=$?
        logs+=("$fuzz_dir/meson-logs/testlog.json")
    fi
fi
python3 - "${logs[@]}" <<'PY'
import json, sys
counts = {"OK": 0, "FAIL": 0, "SKIP": 0}
for path in sys.argv[1:]:
    with open(path) as f:
        for line in f:
            r = json.loads(line).get("result", "")
            key = "OK" if r in ("OK", "EXPECTEDFAIL") else "SKIP" if r == "SKIP" else "FAIL"
            counts[key] += 1
print("meson: %d passed, %d failed, %d skipped" % (counts["OK"], counts["FAIL"], counts["SKIP"]))
PY
exit $rc
