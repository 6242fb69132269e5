#!/usr/bin/env python3
"""The kernel specializations the host emits, collected from its own requests: each program given
runs with MHLA_DUMP_PROGRAMS set, and every "<kernel file>\\t<options>" line it writes is kept.

A program is "EXE[@NAME=VALUE...][ ARG...]": environment variables after '@', arguments after
spaces (e.g. "mhla@MHLA_TUNING=row=gpu selftest"). Used by kernels_clang.py (clang front end),
device_build_log.py (the device's own compiler) and avx2_emulated.py.
"""
import os
import subprocess
import sys
import tempfile


def run_spec(spec, extra_env=None, **kwargs):
    """Runs one program spec; returns the CompletedProcess."""
    head, *args = spec.split(" ")
    exe, *pairs = head.split("@")
    env = dict(os.environ)
    for pair in pairs:
        key, _, value = pair.partition("=")
        env[key] = value
    env.update(extra_env or {})
    return subprocess.run([exe] + args, env=env, **kwargs)


def collect(programs, tool):
    """Runs each program spec with MHLA_DUMP_PROGRAMS; returns the set of (kernel, options).
    A program that fails ends the calling test (exit 1, its stderr shown)."""
    fd, dump = tempfile.mkstemp(prefix="mhla-programs-")
    os.close(fd)
    try:
        for spec in programs:
            run = run_spec(spec, {"MHLA_DUMP_PROGRAMS": dump}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
            if run.returncode != 0:
                sys.stderr.write("%s: %s failed (%d) while collecting specializations:\n%s\n"
                                 % (tool, spec, run.returncode, run.stderr[-2000:]))
                sys.exit(1)
        with open(dump, encoding="utf-8") as f:
            lines = [line.rstrip("\n").split("\t", 1) for line in f if "\t" in line]
        return {(name, opts) for name, opts in lines}
    finally:
        os.unlink(dump)


def write_dump(specs, path):
    """Writes specs as MHLA_DUMP_PROGRAMS lines (what tests/build_log.c reads)."""
    with open(path, "w", encoding="utf-8") as f:
        for name, opts in sorted(specs):
            f.write("%s\t%s\n" % (name, opts))
