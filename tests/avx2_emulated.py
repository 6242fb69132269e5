#!/usr/bin/env python3
"""The AVX2 CPU path, on whatever CPU runs the tests: PoCL under qemu-x86_64 -cpu Haswell-v4 is an
AVX2 device without AVX-512 (float width 8), as on most x86 machines.

1. `mhla info` there reports float width 8 and picks the CPU row with 8-wide vectors.
2. The specializations that row emits (one per kernel file and set of types and widths:
   specializations.one_per_shape) build for the AVX2 target with no warning in the build log
   (tests/build_log.c): no float16 reaches a function call there. Built natively with PoCL
   targeting haswell where it can (the same compiler and target as under qemu, ten times faster),
   else on the emulated device. They are collected
   natively from `mhla selftest --quick` with PoCL compiling for haswell (POCL_KERNELLIB_NAME=avx2,
   as scripts/as-avx2 does: the library then derives the very row the emulated device gets, from
   the target in PoCL's device name); where this PoCL cannot, with MHLA_TUNING=row=cpu,vec=8 (the
   same widths, the register tiles of the native register count).

    avx2_emulated.py RUN_WITH MHLA BUILD_LOG KERNEL_DIR

Exits 77 (skipped) where qemu-x86_64 is missing, as run_with.py does.
"""
import os
import subprocess
import sys
import tempfile

from specializations import collect, one_per_shape, write_dump


def main(argv):
    if len(argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    run_with, mhla, build_log, kernel_dir = argv[1:]
    emulate = [sys.executable, run_with, "qemu-avx2"]
    env = dict(os.environ, MHLA_DEVICE="pthread")
    env.pop("MHLA_TUNING", None)
    info = subprocess.run(emulate + [mhla, "info"], env=env, stdout=subprocess.PIPE, text=True)
    if info.returncode == 77:
        print(info.stdout.strip())
        return 77
    print(info.stdout)
    if info.returncode != 0:
        print("avx2_emulated: mhla info failed (%d) under qemu" % info.returncode)
        return 1
    cpu_row = "row 'cpu'" in info.stdout or "row 'cpu-intel'" in info.stdout  # cpu-intel: Intel's CPUs
    if "float width       8" not in info.stdout or not cpu_row or " vec=8 " not in info.stdout:
        print("avx2_emulated: the emulated AVX2 device should report float width 8 and get a CPU row with vec=8")
        return 1
    as_haswell = subprocess.run([mhla, "info"], env=dict(env, POCL_KERNELLIB_NAME="avx2"), stdout=subprocess.PIPE,
                                text=True)
    derived = " registers: haswell)" in as_haswell.stdout
    print("specializations collected natively " + ("as the haswell target (the AVX2 row derived)" if derived else
                                                   "with MHLA_TUNING=row=cpu,vec=8 (PoCL cannot compile for haswell)"))
    native = "@POCL_KERNELLIB_NAME=avx2@MHLA_TUNING=" if derived else "@MHLA_TUNING=row=cpu,vec=8"
    specs = collect([mhla + native + "@MHLA_DEVICE=pthread selftest --quick"], "avx2_emulated")
    fd, dump = tempfile.mkstemp(prefix="mhla-avx2-specs-")
    os.close(fd)
    try:
        write_dump(one_per_shape(specs), dump)
        build_env = dict(env, POCL_KERNEL_CACHE="0")
        build_env.pop("POCL_EXTRA_BUILD_FLAGS", None)  # built as users' programs are (tests/meson.build)
        if derived:
            # The same compiler for the same target (haswell) as under qemu, at native speed: PoCL
            # under qemu takes ten times as long to build the same programs.
            print("building them natively as the haswell target (POCL_KERNELLIB_NAME=avx2)")
            return subprocess.run([build_log, kernel_dir, dump], env=dict(build_env, POCL_KERNELLIB_NAME="avx2")).returncode
        return subprocess.run(emulate + [build_log, kernel_dir, dump], env=build_env).returncode
    finally:
        os.unlink(dump)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
