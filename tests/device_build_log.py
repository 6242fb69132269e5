#!/usr/bin/env python3
"""The specializations the host emits (specializations.py; one per kernel file and set of types and
widths: one_per_shape) built by the device under test's own compiler, with its compile cache off,
and no build log may hold a warning (tests/build_log.c): a warning is printed on stderr by PoCL ("N warnings generated.") and usually means slow code
(a vector wider than the device's registers changes the calling convention).

    device_build_log.py BUILD_LOG_EXE KERNEL_DIR PROGRAM...
"""
import concurrent.futures
import os
import subprocess
import sys
import tempfile

from specializations import collect, one_per_shape, write_dump


def main(argv):
    if len(argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    build_log, kernel_dir = argv[1], argv[2]
    collected = collect(argv[3:], "device_build_log")
    specs = sorted(one_per_shape(collected))
    print("device_build_log: %d of the %d specializations collected (one per kernel file and types: "
          "specializations.one_per_shape)" % (len(specs), len(collected)))
    # One build_log process per core at a time, over a few parts of the list each: compiling is most
    # of this test, and it runs last, beside little else; parts keep both cores busy to the end
    # (each part's process costs a context, a fraction of a second).
    jobs = max(1, min(os.cpu_count() or 1, len(specs)))
    parts = max(1, min(len(specs), 4 * jobs))
    dumps = []
    try:
        for j in range(parts):
            fd, dump = tempfile.mkstemp(prefix="mhla-specs-")
            os.close(fd)
            dumps.append(dump)
            write_dump(set(specs[j::parts]), dump)
        # A program from the compile cache comes back with an empty log.
        # Built as users' programs are: the suite's -cl-opt-disable (tests/meson.build) left out.
        env = dict(os.environ, POCL_KERNEL_CACHE="0", MESA_SHADER_CACHE_DISABLE="true")
        env.pop("POCL_EXTRA_BUILD_FLAGS", None)
        run = lambda dump: subprocess.run([build_log, kernel_dir, dump], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True, errors="replace")
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            runs = list(pool.map(run, dumps))
        for r in runs:
            sys.stdout.write(r.stdout)
        return next((r.returncode for r in runs if r.returncode != 0), 0)
    finally:
        for dump in dumps:
            os.unlink(dump)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
