#!/usr/bin/env python3
"""Checks of the run-time-loaded build (tests/integration/meson.build).

needed LIB: `readelf -d LIB` lists no OpenCL and no CLBlast library among its needed entries.
missing EXE: EXE (api_check) run with MHLA_OPENCL_LIBRARY naming a library that does not exist
fails context creation with MHLA_ERR_DEVICE_NOT_FOUND (exit 77: no device) and a message that
names the library it tried and why it did not open.
"""
import os
import re
import subprocess
import sys


def needed(lib):
    out = subprocess.run(["readelf", "-d", lib], check=True, capture_output=True, text=True).stdout
    entries = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    print("readelf -d %s: NEEDED %s" % (os.path.basename(lib), ", ".join(entries)))
    bad = [e for e in entries if re.match(r"lib(OpenCL|clblast)", e, re.I)]
    if not entries or bad:
        print("FAILED: %s" % ("no NEEDED entries read" if not entries else "links " + ", ".join(bad)))
        return 1
    return 0


def missing(exe):
    lib = "/nonexistent/libOpenCL-for-mhla-test.so"
    env = dict(os.environ, MHLA_OPENCL_LIBRARY=lib)
    r = subprocess.run([exe], env=env, capture_output=True, text=True)
    text = r.stdout + r.stderr
    print("exit %d: %s" % (r.returncode, text.strip()))
    want = ["no OpenCL library could be opened", "MHLA_OPENCL_LIBRARY: " + lib, "No such file"]
    lost = [w for w in want if w not in text]
    if r.returncode != 77 or lost:
        print("FAILED: expected exit 77 and a message with %s" % lost)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit({"needed": needed, "missing": missing}[sys.argv[1]](sys.argv[2]))
