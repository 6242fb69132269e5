#!/usr/bin/env python3
"""Portability: every kernel under every -D specialization the host emits compiles with clang's
OpenCL front end as OpenCL C 1.2, 2.0 and 3.0 with -Werror, as another vendor's compiler would.

The specializations are the host's own (specializations.py: the programs given run with
MHLA_DUMP_PROGRAMS), plus each file with no options (its defaults). Fails when a kernel file the
library embeds was never requested: a test program list that misses a stage checks nothing of it.
Exits 77 (meson's "skipped") with a message when clang is absent.

    kernels_clang.py KERNEL_DIR PROGRAM...
"""
import concurrent.futures
import os
import shutil
import subprocess
import sys

from specializations import collect

STANDARDS = ["CL1.2", "CL2.0", "CL3.0"]
LIBRARY_FILES = {"block_summary", "output", "mixing", "causal_summary", "causal_prefix", "causal_output", "decoder",
                 "softmax", "backward_summary", "backward_readout", "backward_mixing", "backward_causal",
                 "backward_causal_readout"}


def find_clang():
    for name in ("clang-14", "clang"):
        path = shutil.which(name)
        if path:
            return path
    return None


def compile_one(clang, kernel_dir, name, opts, std):
    cmd = [clang, "-x", "cl", "-cl-std=" + std, "-fsyntax-only", "-Werror", "-Xclang", "-finclude-default-header",
           "-I", kernel_dir] + opts.split() + [os.path.join(kernel_dir, name + ".cl")]
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return run.returncode, " ".join(cmd), run.stdout


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    clang = find_clang()
    if not clang:
        print("kernels_clang: skipped: no clang-14 or clang on PATH (Debian: apt-get install clang-14)")
        return 77
    kernel_dir = argv[1]
    specs = collect(argv[2:], "kernels_clang")
    names = sorted({name for name, _ in specs})
    missing = LIBRARY_FILES - set(names)
    if missing:
        print("kernels_clang: no specialization of %s was collected" % ", ".join(sorted(missing)))
        return 1
    specs |= {(name, "") for name in names}  # each file with its own defaults
    jobs = [(name, opts, std) for name, opts in sorted(specs) for std in STANDARDS]
    failures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for (rc, cmd, out), job in zip(pool.map(lambda j: compile_one(clang, kernel_dir, *j), jobs), jobs):
            if rc != 0:
                failures.append((cmd, out))
    print("kernels_clang: %d specializations of %d kernel files (%s), %d compiles with %s"
          % (len(specs), len(names), ", ".join(names), len(jobs), clang))
    for cmd, out in failures[:5]:
        print("FAILED: %s\n%s" % (cmd, out))
    if failures:
        print("kernels_clang: %d of %d compiles failed" % (len(failures), len(jobs)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
