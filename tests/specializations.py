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


# Head dimensions: sizes, not types or widths. What a kernel's widths depend on is their
# divisibility (a row staged in vectors of OUT_VE where it divides Dk, float4 loads where 4 does):
# one specialization per power-of-two divisor up to 16 (the widest vector) checks each choice.
SIZE_MACROS = ("DK", "DV")


def shape_option(option):
    """option as one_per_shape keys it: None for a formula macro, "-DDK%16=4" for Dk = 36."""
    macro, _, value = option[2:].partition("=")
    if macro in FORMULA_MACROS:
        return None
    if macro in SIZE_MACROS and value.isdigit() and int(value) > 0:
        n, div = int(value), 1
        while div < 16 and n % (2 * div) == 0:
            div *= 2
        return "-D%s%%16=%d" % (macro, div)
    return option


def one_per_shape(specs):
    """specs with one specialization kept per kernel file and options other than FORMULA_MACROS, head
    dimensions by their divisibility (SIZE_MACROS): what a device build checks (device_build_log.py,
    avx2_emulated.py), a fraction of the builds."""
    kept = {}
    for name, opts in sorted(specs):
        key = (name, " ".join(k for k in (shape_option(o) for o in opts.split()) if k))
        kept.setdefault(key, (name, opts))
    return set(kept.values())


def write_dump(specs, path):
    """Writes specs as MHLA_DUMP_PROGRAMS lines (what tests/build_log.c reads)."""
    with open(path, "w", encoding="utf-8") as f:
        for name, opts in sorted(specs):
            f.write("%s\t%s\n" % (name, opts))
