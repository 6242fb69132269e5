#!/usr/bin/env python3
"""Runs a program under `mpirun -np R` for the mpi suite: --oversubscribe (more ranks than cores),
--allow-run-as-root where the test runs as root, PoCL's ICD alone (whatever else is installed or
listed in OCL_ICD_VENDORS) with two devices unless POCL_DEVICES is set,
so that ranks share out devices as on a multi-GPU node, each rank with a PoCL kernel cache of its own.
Usage: mpirun.py MPIRUN R PROGRAM [ARGS]."""
import os
import shutil
import subprocess
import sys

mpirun, ranks, prog = sys.argv[1], sys.argv[2], sys.argv[3:]
cmd = [mpirun, "-np", ranks, "--oversubscribe"]
if hasattr(os, "geteuid") and os.geteuid() == 0:
    cmd.append("--allow-run-as-root")
env = dict(os.environ)
env.setdefault("POCL_DEVICES", "pthread pthread")
# PoCL's devices only, as the suite says: with another ICD listed first (a GPU's, or rusticl), ranks
# would pick devices of two implementations and a rank's bytes would depend on which it drew.
vendors = "/etc/OpenCL/vendors"
pocl_icd = [os.path.join(vendors, f) for f in sorted(os.listdir(vendors)) if f.endswith(".icd")
            and "pocl" in open(os.path.join(vendors, f)).read()] if os.path.isdir(vendors) else []
if pocl_icd:
    env["OCL_ICD_VENDORS"] = pocl_icd[0]
# Containers often forbid the cross-memory attach Open MPI's shared-memory transport tries first.
env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
# Each rank compiles into a PoCL kernel cache of its own: ranks building the same kernel at once into
# one cold cache made PoCL fail a build now and then ("Device ... failed to build the program", empty
# log; seen once in a cold run of the GPU row's three ranks). Kept between runs, so only the first is cold.
cache = env.get("POCL_CACHE_DIR") or os.path.join(
    env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "pocl")
# Rank 0's cache starts as a copy of the suite's own (kcache: what the tests before have built, CLBlast's
# GEMMs among them), hard-linked: a cold run's ranks then load those kernels instead of building each
# again (the GPU row's ranks: 25 s). PoCL writes new entries beside the old ones and never into one.
# A rank's cache starts as a copy of rank 0's (the mpi tests run one at a time, so nothing writes to
# it meanwhile): rank 1 of mpi_np2 then loads what mpi_np1 built instead of building it again.
seed = os.path.join(cache, "mpi-rank0")
shared = os.path.join(cache, "kcache")


def link_or_copy(src, dst):
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links refused: a copy
        shutil.copy2(src, dst)


if os.path.isdir(shared) and not os.path.exists(seed):
    shutil.rmtree(seed + ".tmp", ignore_errors=True)  # a copy an earlier run did not finish
    shutil.copytree(shared, seed + ".tmp", symlinks=True, copy_function=link_or_copy)
    os.replace(seed + ".tmp", seed)
for r in range(1, int(ranks)):
    own = os.path.join(cache, "mpi-rank%d" % r)
    if os.path.isdir(seed) and not os.path.exists(own):
        shutil.rmtree(own + ".tmp", ignore_errors=True)  # a copy an earlier run did not finish
        shutil.copytree(seed, own + ".tmp", symlinks=True, copy_function=link_or_copy)
        os.replace(own + ".tmp", own)
rank_cache = ['sh', '-c', 'POCL_CACHE_DIR="$0/mpi-rank${OMPI_COMM_WORLD_RANK:-0}"; export POCL_CACHE_DIR; exec "$@"',
              cache]
sys.exit(subprocess.call(cmd + rank_cache + prog, env=env))
