#!/usr/bin/env python3
"""Tests run on the device they claim, checked two ways:

    device_claims.py BUILD_DIR

1. Every meson test whose environment sets a POCL_* variable (it tunes PoCL, so it claims a PoCL
   device; POCL_WORK_GROUP_SPECIALIZATION and POCL_EXTRA_BUILD_FLAGS, which tests/meson.build sets
   to compile less, only change how PoCL compiles, and other implementations ignore them) also sets
   MHLA_DEVICE, and every test has an MHLA_CACHE_DIR of its own (a tuning entry in
   the user's cache must not change what a test checks): read from `meson introspect --tests`.
2. On a machine whose first OpenCL platform is not PoCL (a GPU's, or here rusticl's, listed first
   through OCL_ICD_VENDORS), a few of those tests, run as meson runs them, still run on PoCL: the
   test programs print "device: <platform> <device>" (tests/helpers.c). Skipped (the first part
   still runs) without rusticl; the simulation is checked to be real (`mhla info` lists rusticl's
   device first).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

# PoCL variables that change how it compiles, not which device runs or what it can do.
COMPILE_ONLY = {"POCL_WORK_GROUP_SPECIALIZATION", "POCL_EXTRA_BUILD_FLAGS"}
# Cheap PoCL-claiming tests to run under the rusticl-first ordering, with the cmocka cases to run
# (MHLA_TEST_FILTER; None for all) and the device line each must print.
RUN = [
    ("context_two_devices", None, "device: Portable Computing Language pthread"),
    ("forward_wg64", "test_odd_sizes", "device: Portable Computing Language pthread"),
    ("storage_wg16", "test_varlen", "device: Portable Computing Language pthread"),
]


def fail(why):
    print("device_claims: FAIL: " + why)
    sys.exit(1)


def main(build):
    tests = json.loads(subprocess.run(["meson", "introspect", "--tests", build], check=True,
                                      stdout=subprocess.PIPE, text=True).stdout)
    cache_dirs = {}
    claims = 0
    for t in tests:
        env = t.get("env") or {}
        tunes = [k for k in env if k.startswith("POCL_") and k not in COMPILE_ONLY]
        if tunes:
            claims += 1
            if not env.get("MHLA_DEVICE"):
                fail("test '%s' sets %s but no MHLA_DEVICE: on a machine listing another platform first it "
                     "would run there" % (t["name"], tunes))
        cache = env.get("MHLA_CACHE_DIR")
        if not cache or cache == "off":
            fail("test '%s' has no MHLA_CACHE_DIR of its own" % t["name"])
        if cache in cache_dirs:
            fail("tests '%s' and '%s' share MHLA_CACHE_DIR %s" % (cache_dirs[cache], t["name"], cache))
        cache_dirs[cache] = t["name"]
    print("device_claims: %d tests, each with its own MHLA_CACHE_DIR; %d set POCL_* and name MHLA_DEVICE"
          % (len(tests), claims))

    vendors = "/etc/OpenCL/vendors"
    if not (os.path.exists(os.path.join(vendors, "rusticl.icd")) and os.path.exists(os.path.join(vendors, "pocl.icd"))):
        print("device_claims: SKIP (part 2): needs rusticl and PoCL installed (mesa-opencl-icd, pocl-opencl-icd)")
        sys.exit(77)
    by_name = {t["name"]: t for t in tests}
    with tempfile.TemporaryDirectory(prefix="mhla-icd-") as icd:
        # ocl-icd lists the files of OCL_ICD_VENDORS in name order: rusticl first, then PoCL.
        shutil.copy(os.path.join(vendors, "rusticl.icd"), os.path.join(icd, "0-rusticl.icd"))
        shutil.copy(os.path.join(vendors, "pocl.icd"), os.path.join(icd, "1-pocl.icd"))
        first = dict(os.environ, OCL_ICD_VENDORS=icd, RUSTICL_ENABLE="llvmpipe")
        first.pop("MHLA_DEVICE", None)
        mhla = os.path.join(build, "cli", "mhla")
        info = subprocess.run([mhla, "info"], env=first, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        device0 = next((line for line in info.stdout.splitlines() if line.startswith("  device 0 ")), "")
        if "llvmpipe" not in device0:
            fail("the simulation did not list rusticl first: %r" % device0)
        print("device_claims: with rusticl listed first, %s" % device0.strip())
        for name, cases, want in RUN:
            t = by_name.get(name)
            if not t:
                fail("no meson test named '%s' (update RUN)" % name)
            env = dict(first, **(t.get("env") or {}))
            if cases:
                env["MHLA_TEST_FILTER"] = cases
            run = subprocess.run(t["cmd"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 cwd=t.get("workdir") or None)
            said = next((line for line in run.stdout.splitlines() if line.startswith("device: ")), "(nothing)")
            if run.returncode != 0 or not said.startswith(want):
                fail("%s under rusticl-first: exit %d, ran on %s, expected '%s...'\n%s"
                     % (name, run.returncode, said, want, run.stdout[-3000:]))
            print("device_claims: %-20s %s" % (name, said))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
