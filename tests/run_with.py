#!/usr/bin/env python3
"""Runs a test program on another OpenCL implementation, or under a checker, for the Meson suites
`rusticl`, `oclgrind` and the emulated-AVX2 test of `portability`:

    run_with.py rusticl   CMD ARGS...   Mesa's rusticl on llvmpipe (RUSTICL_ENABLE=llvmpipe,
                                        MHLA_DEVICE=llvmpipe); a run that hangs is reported with
                                        its stacks and run once more (run_guarded)
    run_with.py oclgrind  CMD ARGS...   oclgrind --data-races --check-api: any report (out-of-bounds
                                        access, data race, uninitialized read, API misuse) fails
    run_with.py qemu-avx2 CMD ARGS...   qemu-x86_64 -cpu Haswell-v4: PoCL sees an AVX2 CPU without
                                        AVX-512 (float width 8), whatever this machine has

Exits 77 (Meson's SKIP) with the reason when the implementation is not installed (the README's
test command installs all three), else with the program's status, or 1 when Oclgrind reported
anything.
"""
import os
import platform
import shutil
import subprocess
import sys
import tempfile

SKIP = 77


def skip(why):
    print("run_with: SKIP: " + why)
    sys.exit(SKIP)


HUNG = "run_with: HUNG:"


def stacks(pid):
    """Every thread's stack of process pid, as gdb prints them (a line saying why not, without gdb)."""
    gdb = shutil.which("gdb")
    if not gdb:
        return ["(no stacks: gdb is not installed)"]
    try:
        run = subprocess.run([gdb, "-p", str(pid), "-batch", "-ex", "thread apply all bt"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, errors="replace", timeout=120)
    except subprocess.TimeoutExpired:
        return ["(no stacks: gdb did not finish within 120 s)"]
    return [line for line in run.stdout.splitlines() if line.startswith(("#", "Thread"))] or run.stdout.splitlines()


def run_guarded(cmd, env):
    """Runs cmd; one that is still running after MHLA_HANG_S seconds (default 300: three times the longest
    of these tests cold) has hung: its threads' stacks are printed, it is killed and run once more, and
    the test passes only if that run passes. The line HUNG starts stays in the log (scripts/test.sh
    names such tests in its closing lines). Seen on rusticl in one cold run of the test command in ten:
    test_errors stopped in a plan's creation after its earlier cases, for the 900 s of meson's limit;
    never when run alone (docs/devices.md, (al))."""
    limit = float(os.environ.get("MHLA_HANG_S", "300"))
    for attempt in (1, 2):
        proc = subprocess.Popen(cmd, env=env)
        try:
            return proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            sys.stdout.flush()
            print("%s %s still running after %.0f s (run %d); its threads' stacks:" % (HUNG, " ".join(cmd), limit,
                                                                                     attempt))
            print("\n".join(stacks(proc.pid)[:200]))
            proc.kill()
            proc.wait()
            print("run_with: killed; %s" % ("running it once more" if attempt == 1 else "it hung twice: a failure"))
            sys.stdout.flush()
    return 1


def rusticl(cmd):
    if not os.path.exists("/etc/OpenCL/vendors/rusticl.icd"):
        skip("rusticl is not installed (Debian: apt-get install mesa-opencl-icd)")
    env = dict(os.environ, RUSTICL_ENABLE="llvmpipe", MHLA_DEVICE="llvmpipe")
    return run_guarded(cmd, env)


def oclgrind(cmd):
    tool = shutil.which("oclgrind")
    if not tool:
        skip("oclgrind is not installed (Debian: apt-get install oclgrind)")
    fd, log = tempfile.mkstemp(prefix="mhla-oclgrind-", suffix=".log")
    os.close(fd)
    try:
        run = subprocess.run([tool, "--data-races", "--check-api", "--log", log] + cmd, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, errors="replace")
        sys.stdout.write(run.stdout)
        rc = run.returncode
        with open(log, encoding="utf-8", errors="replace") as f:
            report = f.read().strip()
        # Some runtime errors bypass --log and go to stderr.
        marker = "Oclgrind - OpenCL runtime error detected"
        if marker in run.stdout:
            report += "\n" + run.stdout[run.stdout.index(marker):]
    finally:
        os.unlink(log)
    if report:
        lines = report.splitlines()
        print("run_with: Oclgrind reported %d line(s); the first 80:" % len(lines))
        print("\n".join(lines[:80]))
        return rc or 1
    print("run_with: Oclgrind reported nothing (no out-of-bounds access, data race or API misuse)")
    return rc


def qemu_avx2(cmd):
    tool = shutil.which("qemu-x86_64")
    if platform.machine() != "x86_64" or not tool:
        skip("needs qemu-x86_64 on an x86-64 machine (Debian: apt-get install qemu-user)")
    # qemu warns about every CPUID bit its translator lacks on every start: noise, not results.
    run = subprocess.run([tool, "-cpu", "Haswell-v4"] + cmd, stderr=subprocess.PIPE, text=True)
    for line in run.stderr.splitlines():
        if "TCG doesn't support requested feature" not in line:
            sys.stderr.write(line + "\n")
    return run.returncode


def main(argv):
    if len(argv) < 3 or argv[1] not in ("rusticl", "oclgrind", "qemu-avx2"):
        sys.stderr.write(__doc__)
        return 2
    runner = {"rusticl": rusticl, "oclgrind": oclgrind, "qemu-avx2": qemu_avx2}[argv[1]]
    return runner(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
