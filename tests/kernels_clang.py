#!/usr/bin/env python3
"""Portability: every kernel under every -D specialization the host emits compiles with clang's
OpenCL front end as OpenCL C 1.2 with -Werror, as another vendor's compiler would, and as 2.0 and
3.0 one specialization per kernel file and set of types and widths.

The specializations are the host's own (specializations.py: the programs given run with
MHLA_DUMP_PROGRAMS), plus each file with no options (its defaults); mhla-bench's peak.cl, which the
library never requests, with the widths bench/peak.c builds it for. Fails unless every .cl file of
KERNEL_DIR has at least one specialization: a test program list that misses a stage (or a new
kernel file nobody requests) checks nothing of it, and would otherwise pass.
Exits 77 (meson's "skipped") with a message when clang is absent.

    kernels_clang.py KERNEL_DIR PROGRAM...
"""
import concurrent.futures
import os
import shutil
import subprocess
import sys

from specializations import collect, one_per_shape

STANDARDS = ["CL1.2", "CL2.0", "CL3.0"]
# Kernel files built by mhla-bench, not the library: their specializations (bench/peak.c).
BENCH_SPECS = {"peak": ["-DPEAK_WIDTH=4", "-DPEAK_WIDTH=8", "-DPEAK_WIDTH=16"]}


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
    files = sorted(f[:-3] for f in os.listdir(kernel_dir) if f.endswith(".cl"))
    specs = collect(argv[2:], "kernels_clang")
    specs |= {(name, opts) for name, all_opts in BENCH_SPECS.items() for opts in all_opts}
    per_file = {f: sum(1 for name, opts in specs if name == f and opts) for f in files}
    missing = [f for f in files if per_file[f] == 0]
    if not files or missing:
        print("kernels_clang: no specialization of %s was collected (from %d programs)"
              % (", ".join(missing) or "any kernel file", len(argv) - 2))
        return 1
    unknown = sorted({name for name, _ in specs} - set(files))
    if unknown:
        print("kernels_clang: specializations of %s, which %s does not hold" % (", ".join(unknown), kernel_dir))
        return 1
    names = files
    specs |= {(name, "") for name in names}  # each file with its own defaults
    # Every specialization as OpenCL C 1.2 (what the library builds); as 2.0 and 3.0, whose rules
    # differ from 1.2's in the language, not in a kernel's formulas, one per kernel file and set of
    # types and widths (specializations.one_per_shape).
    jobs = [(name, opts, STANDARDS[0]) for name, opts in sorted(specs)]
    jobs += [(name, opts, std) for name, opts in sorted(one_per_shape(specs)) for std in STANDARDS[1:]]
    failures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for (rc, cmd, out), job in zip(pool.map(lambda j: compile_one(clang, kernel_dir, *j), jobs), jobs):
            if rc != 0:
                failures.append((cmd, out))
    print("kernels_clang: %d specializations of %d kernel files (%s), %d compiles with %s"
          % (len(specs), len(names), ", ".join("%s %d" % (f, per_file[f]) for f in names), len(jobs), clang))
    for cmd, out in failures[:5]:
        print("FAILED: %s\n%s" % (cmd, out))
    if failures:
        print("kernels_clang: %d of %d compiles failed" % (len(failures), len(jobs)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
