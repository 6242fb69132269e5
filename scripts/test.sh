#!/usr/bin/env bash
# The tests: installs what is missing, builds, runs `meson test` (every suite; the mpi and wheel
# suites after the others), the Python suite on the wheel scripts/wheel.sh builds, the fuzzers'
# short pass, the wheel in a fresh environment, the run-time-loaded build's checks (build-dlopen/,
# tests/integration/) and the mutation check (tests/mutations/: known defects put back, each must be
# caught), and closes with one "N passed, N failed, N skipped" line, which also counts the cases
# skipped inside programs that passed. Arguments narrow it to `meson test ARGS` alone (--suite unit,
# --suite opencl, a test's name...).
#   scripts/test.sh --sanitize [ARGS]: the unit, opencl and cli suites (or ARGS) under ASan+UBSan
#   instead, in build-asan/ (tests/sanitize/: the suppressions and runtime options).
#   scripts/test.sh --mutations [ARGS]: the mutation check alone (ARGS go to tests/mutations/run.py):
#   known defects put back one at a time, each must be caught by the cases named for it.
#   scripts/test.sh --python [PYTEST ARGS]: only the Python suite (python/tests), which the plain
#   command runs after meson's suites.
set -euo pipefail
# clang-14: the portability suite compiles every kernel specialization with its OpenCL front end.
# libopenmpi-dev openmpi-bin: libmhla_mpi and the mpi suite (meson -Dmpi=auto finds them).
# libclang-rt-14-dev (libFuzzer, ASan, UBSan runtimes; only a Recommends of clang-14) and llvm-14
# (llvm-symbolizer, for the reports' stacks): the fuzzers' short pass (tests/fuzz/).
# python3-*: the Python package (python/), built into a wheel by meson-python and
# scripts/wheel.sh, installed into a virtual environment of Debian's python3 (build/python-venv)
# and tested there with pytest, and into a fresh one without system site packages (unzip: the
# wheel's listing). cmake: find_package(mhla) from an outside project (tests/integration/). gdb: the
# stacks of a test that hung (tests/run_with.py).
MHLA_EXTRA_PACKAGES="clang-14 libclang-rt-14-dev llvm-14 mesa-opencl-icd oclgrind qemu-user libopenmpi-dev openmpi-bin gdb \
python3-numpy python3-cffi python3-pyopencl python3-torch python3-pytest python3-mesonpy python3-sklearn python3-pip \
python3-venv unzip cmake ${MHLA_EXTRA_PACKAGES:-}"
sanitize=0
if [ "${1:-}" = "--sanitize" ]; then
    sanitize=1
    shift
fi
mutations=0
if [ "${1:-}" = "--mutations" ]; then
    mutations=1
    shift
fi
python_only=0
if [ "${1:-}" = "--python" ]; then
    python_only=1
    shift
fi
nargs=$#
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# stamp WHAT: "test.sh: WHAT at N s" (seconds since the command started), after each phase of the
# full run: where a slow run spent its time, read from its log.
stamp() { if [ "$sanitize" = 0 ] && [ "$nargs" = 0 ]; then echo "test.sh: $1 at ${SECONDS} s"; fi; }
if [ "$mutations" = 1 ]; then
    exec python3 "$MHLA_ROOT/tests/mutations/run.py" "$@"
fi
if [ "$python_only" = 1 ]; then
    exec "$MHLA_ROOT/scripts/python-suite.sh" "$@"
fi
stamp "built"

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
    # Each test's own library cache (tests/meson.build) starts empty on every run: nothing a run
    # stored (a tuning entry, a program) can change what the next one checks.
    rm -rf "$MHLA_BUILD_DIR/tests/cache"
    fuzz_dir=$MHLA_ROOT/build-fuzz
    prep=()
    if [ "$nargs" = 0 ]; then
        # Built while meson's tests run (niced: they take the cores first; most of their time is
        # PoCL compiling kernels, one process per core, with idle moments between tests): the
        # fuzzers (clang-14, libFuzzer, ASan, UBSan), the wheel (scripts/wheel.sh) installed for the
        # Python suite with the PyPI wheels its clean-environment check installs beside it, the
        # run-time-loaded build without CLBlast (its checks alone: tests/integration/).
        prep_log=$MHLA_BUILD_DIR/test-prep
        mkdir -p "$prep_log"
        (CC=clang-14 mhla_configure "$fuzz_dir" --buildtype=debugoptimized -Dfuzz=true \
            -Db_sanitize=address,undefined -Db_lundef=false && nice -n 10 ninja -C "$fuzz_dir" fuzzers) \
            >"$prep_log/fuzz.log" 2>&1 &
        prep+=("$!:fuzzers:$prep_log/fuzz.log")
        (nice -n 10 "$MHLA_ROOT/scripts/wheel.sh" && "$MHLA_ROOT/scripts/python-suite.sh" --install-wheel &&
            "$MHLA_ROOT/tests/integration/wheel_check.sh" --fetch "$MHLA_ROOT" "$MHLA_BUILD_DIR") \
            >"$prep_log/python.log" 2>&1 &
        prep+=("$!:wheel:$prep_log/python.log")
        dlopen_dir=$MHLA_ROOT/build-dlopen
        (mhla_configure "$dlopen_dir" --buildtype=release -Dopencl_loader=dlopen -Dclblast=disabled -Dtests=disabled \
            -Dmpi=disabled -Dblas=disabled && nice -n 10 ninja -C "$dlopen_dir" tests/integration/api_check) \
            >"$prep_log/dlopen.log" 2>&1 &
        prep+=("$!:run-time-loaded build:$prep_log/dlopen.log")
        # The mutation check (tests/mutations/: each known defect put back must be caught by the cases
        # named for it; its last line "mutations: N of N defects caught ..."; a table that no longer
        # matches the code stops it, and fails the run), niced from the start: one process, mostly
        # PoCL compiling the defective kernels, that takes the cycles meson's tests leave and then a
        # core beside the last suites below. (Run after meson's tests, it kept one core to itself
        # for its last two minutes, cold, with the other idle.) Its controls (each catching case
        # passes without a defect) are meson's own run of those cases, read from its log below.
        nice -n 10 python3 "$MHLA_ROOT/tests/mutations/run.py" --no-controls >"$prep_log/mutations-run.log" 2>&1 &
        mutations_pid=$!
    fi
    # The wheel's suite runs after the wheel is built, below; the mpi suite there too, beside what
    # remains of the mutation check: its tests run alone (several ranks each), which here would
    # leave a core idle.
    if [ "$nargs" = 0 ]; then
        set -- --no-suite wheel --no-suite mpi
    fi
    meson test -C "$MHLA_BUILD_DIR" --print-errorlogs "$@" || rc=$?
    logs+=("$MHLA_BUILD_DIR/meson-logs/testlog.json")
    stamp "meson's suites done"
    prep_ok=1
    for p in "${prep[@]}"; do
        if ! wait "${p%%:*}"; then
            rest=${p#*:}
            echo "test.sh: building the ${rest%%:*} failed:" >&2
            tail -n 40 "${rest#*:}" >&2
            prep_ok=0 rc=1
        fi
    done
    stamp "the fuzzers, the wheel and the run-time-loaded build built"
    if [ "$nargs" = 0 ] && [ "$prep_ok" = 1 ]; then
        # The Python package, the wheel built above, tested with pytest (its own summary line).
        "$MHLA_ROOT/scripts/python-suite.sh" --no-install >"$prep_log/pytest.log" 2>&1 || rc=1
        cat "$prep_log/pytest.log"
        stamp "the Python suite done"
        # The sharded forward under mpirun (a SKIP that says why where MPI is missing).
        meson test -C "$MHLA_BUILD_DIR" --no-rebuild --print-errorlogs --suite mpi --logbase mpilog || rc=$?
        logs+=("$MHLA_BUILD_DIR/meson-logs/mpilog.json")
        # The fuzzers' short pass (tests/fuzz/): each harness over its seed corpus, then a fixed
        # number of mutations from seed 1.
        meson test -C "$fuzz_dir" --no-rebuild --print-errorlogs --suite fuzz || rc=$?
        logs+=("$fuzz_dir/meson-logs/testlog.json")
        # The integration checks that need the builds above: the wheel in a fresh environment, and
        # the run-time-loaded build (a forward, a backward and a causal call; its needed entries).
        meson test -C "$MHLA_BUILD_DIR" --no-rebuild --print-errorlogs --suite wheel --logbase wheellog || rc=$?
        logs+=("$MHLA_BUILD_DIR/meson-logs/wheellog.json")
        meson test -C "$dlopen_dir" --no-rebuild --print-errorlogs --suite integration || rc=$?
        logs+=("$dlopen_dir/meson-logs/testlog.json")
        stamp "the mpi, fuzz, wheel and integration suites done"
    fi
    if [ "$nargs" = 0 ]; then
        wait "$mutations_pid" || rc=1
        stamp "the mutation check done"
        python3 "$MHLA_ROOT/tests/mutations/run.py" --controls-only --passed "$MHLA_BUILD_DIR/meson-logs/testlog.json" \
            >>"$prep_log/mutations-run.log" 2>&1 || rc=1
        cat "$prep_log/mutations-run.log"
    fi
fi
python3 - "${logs[@]}" <<'PY'
import json, re, sys
counts = {"OK": 0, "FAIL": 0, "SKIP": 0}
inner = []  # cases skipped inside programs that passed (tests/helpers.c prints "cases skipped: K of N")
failed = []
hung = []
for path in sys.argv[1:]:
    with open(path) as f:
        for line in f:
            t = json.loads(line)
            r = t.get("result", "")
            key = "OK" if r in ("OK", "EXPECTEDFAIL") else "SKIP" if r == "SKIP" else "FAIL"
            counts[key] += 1
            m = re.search(r"^cases skipped: (\d+) of (\d+)$", t.get("stdout") or "", re.M)
            if m and key == "OK":
                inner.append("%s %s/%s" % (t["name"], m.group(1), m.group(2)))
            if key == "FAIL":
                failed.append(t)
            elif "run_with: HUNG:" in (t.get("stdout") or ""):  # tests/run_with.py: hung, ran again, passed
                hung.append(t["name"])
# Each failed test again, last: its name, result and the end of its output, so that a log cut to its
# last lines (a CI page) still says what failed and why (meson's own report is far above, before the
# later suites and the mutation check).
for t in failed:
    out = ((t.get("stdout") or "") + "\n" + (t.get("stderr") or "")).strip().splitlines()
    # The lines that say what went wrong (cmocka prints a case's message before its closing list),
    # then the output's end.
    told = [i for i, line in enumerate(out) if re.search(r"FAIL|HUNG|[Ee]rror|Traceback|[Tt]imed? ?out|Assert", line)]
    keep = sorted(set(told[:10]) | set(range(max(0, len(out) - 6), len(out))))
    print("failed: %s (%s, exit %s, %.0f s):" % (t["name"], t.get("result"), t.get("returncode"), t.get("duration") or 0))
    for i in keep:
        print("  | " + out[i][:240])
if hung:
    print("hung, and passed when run again (the stacks of the hung run are in its log): " + ", ".join(hung))
print("meson: %d passed, %d failed, %d skipped; %d skipped case(s) inside passing programs%s"
      % (counts["OK"], counts["FAIL"], counts["SKIP"], sum(int(x.split()[-1].split("/")[0]) for x in inner),
         " (" + ", ".join(inner) + ")" if inner else ""))
PY
exit $rc
