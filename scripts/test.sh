#!/usr/bin/env bash
# The tests: installs what is missing, builds, runs `meson test` (every suite; pass --suite unit,
# --suite opencl or --suite cli to narrow it), and closes with one "N passed, N failed, N skipped" line.
set -euo pipefail
# clang-14: the portability suite compiles every kernel specialization with its OpenCL front end.
# libopenmpi-dev openmpi-bin: libmhla_mpi and the mpi suite (issue 15; meson -Dmpi=auto finds them).
MHLA_EXTRA_PACKAGES="clang-14 mesa-opencl-icd oclgrind qemu-user libopenmpi-dev openmpi-bin ${MHLA_EXTRA_PACKAGES:-}"
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
rc=0
meson test -C "$MHLA_BUILD_DIR" --print-errorlogs "$@" || rc=$?
python3 - "$MHLA_BUILD_DIR/meson-logs/testlog.json" <<'PY'
import json, sys
counts = {"OK": 0, "FAIL": 0, "SKIP": 0}
with open(sys.argv[1]) as f:
    for line in f:
        r = json.loads(line).get("result", "")
        key = "OK" if r in ("OK", "EXPECTEDFAIL") else "SKIP" if r == "SKIP" else "FAIL"
        counts[key] += 1
print("meson: %d passed, %d failed, %d skipped" % (counts["OK"], counts["FAIL"], counts["SKIP"]))
PY
exit $rc
