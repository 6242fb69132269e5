#!/usr/bin/env python3
"""The kernel specializations the host emits, collected from its own requests: each program given
runs with MHLA_DUMP_PROGRAMS set, and every "<kernel file>\\t<options>" line it writes is kept.

A program is "EXE[@NAME=VALUE...][ ARG...]": environment variables after '@' ("@-NAME" unsets
one), arguments after spaces (e.g. "mhla@MHLA_TUNING=row=gpu selftest"). Used by kernels_clang.py (clang front end),
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
        if pair.startswith("-"):  # "@-NAME": NAME unset
            env.pop(pair[1:], None)
            continue
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


# Macros that pick among a kernel's formulas (index arithmetic, feature map, normalizer) without
# changing any type or vector width: the device compiler's own warnings (a vector wider than the
# registers changing the calling convention, half types) do not depend on them, and the clang front
# end checks every specialization with each of them (kernels_clang.py).
FORMULA_MACROS = ("LAYOUT_BHND", "FEATURE_MAP", "NORMALIZER")


def one_per_shape(specs):
    """specs with one specialization kept per kernel file and options other than FORMULA_MACROS:
    what a device build checks (device_build_log.py, avx2_emulated.py), a fraction of the builds."""
    kept = {}
    for name, opts in sorted(specs):
        key = (name, " ".join(o for o in opts.split() if o.split("=")[0][2:] not in FORMULA_MACROS))
        kept.setdefault(key, (name, opts))
    return set(kept.values())


def write_dump(specs, path):
    """Writes specs as MHLA_DUMP_PROGRAMS lines (what tests/build_log.c reads)."""
    with open(path, "w", encoding="utf-8") as f:
        for name, opts in sorted(specs):
            f.write("%s\t%s\n" % (name, opts))
