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


def _share_key(programs):
    """What the collected set depends on: the program specs, the environment they start from (MHLA_*
    and POCL_* but the per-test cache folder), and the times of the programs and of the library
    beside them (BUILD/host/libmhla*, which embeds the kernels)."""
    parts = list(programs)
    parts += sorted("%s=%s" % (k, v) for k, v in os.environ.items()
                    if k.startswith(("MHLA_", "POCL_")) and k not in ("MHLA_CACHE_DIR", "MHLA_SPEC_SHARE"))
    paths = []
    for spec in programs:
        exe = os.path.abspath(spec.split(" ")[0].split("@")[0])
        host = os.path.join(os.path.dirname(os.path.dirname(exe)), "host")
        libs = sorted(os.path.join(host, f) for f in os.listdir(host) if f.startswith("libmhla")) \
            if os.path.isdir(host) else []
        paths += [p for p in [exe] + libs if p not in paths]
    parts += ["%s %d" % (path, os.stat(path).st_mtime_ns) for path in paths]
    return "\n".join(parts)


def collect(programs, tool):
    """Runs each program spec with MHLA_DUMP_PROGRAMS; returns the set of (kernel, options).
    A program that fails ends the calling test (exit 1, its stderr shown). With MHLA_SPEC_SHARE=PATH
    (tests/meson.build: kernels_clang and device_build_log, which start together and collect from the
    same programs) the first to come collects and stores the set at PATH under a lock, keyed by the
    programs and their build times; the other waits for the lock and reads it."""
    share = os.environ.get("MHLA_SPEC_SHARE")
    if not share:
        return _collect(programs, tool)
    import fcntl
    key = _share_key(programs)
    with open(share + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(share, encoding="utf-8") as f:
                stored_key, _, body = f.read().partition("\n\n")
            if stored_key == key:
                return {tuple(line.split("\t", 1)) for line in body.splitlines() if "\t" in line}
        except OSError:
            pass
        specs = _collect(programs, tool)
        with open(share + ".tmp", "w", encoding="utf-8") as f:
            f.write(key + "\n\n" + "".join("%s\t%s\n" % spec for spec in sorted(specs)))
        os.replace(share + ".tmp", share)
        return specs


def _collect(programs, tool):
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
