#!/usr/bin/env python3
"""Runs a program under `mpirun -np R` for the mpi suite: --oversubscribe (more ranks than cores),
--allow-run-as-root where the test runs as root, and two PoCL devices unless POCL_DEVICES is set,
so that ranks share out devices as on a multi-GPU node. Usage: mpirun.py MPIRUN R PROGRAM [ARGS]."""
import os
import subprocess
import sys

mpirun, ranks, prog = sys.argv[1], sys.argv[2], sys.argv[3:]
cmd = [mpirun, "-np", ranks, "--oversubscribe"]
if hasattr(os, "geteuid") and os.geteuid() == 0:
    cmd.append("--allow-run-as-root")
env = dict(os.environ)
env.setdefault("POCL_DEVICES", "pthread pthread")
# Containers often forbid the cross-memory attach Open MPI's shared-memory transport tries first.
env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
sys.exit(subprocess.call(cmd + prog, env=env))
