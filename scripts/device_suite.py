#!/usr/bin/env python3
"""Runs the test suite's device tests against one named OpenCL device, outside `meson test`.

Why: a GPU machine that is lent for a few minutes has no Meson configure of its own, and the
suite's tests pin themselves to PoCL (MHLA_DEVICE=pthread, POCL_* limits). This reads the test
list that `meson introspect --tests BUILD` wrote (on the machine that built BUILD), moves its
paths to where BUILD is now, points every test at --device and runs the ones that mean anything
there: the opencl, unit and cli suites, minus the tests that need PoCL's own devices (the POCL_*
work-group limits, two PoCL devices). Exit status: 0 when no test failed (skips are reported,
never counted as passes).

usage: device_suite.py --build DIR --tests TESTS.json --device SPEC [--log-dir DIR]
                       [--timeout S] [--only NAME,NAME]
"""
import argparse
import json
import os
import subprocess
import sys
import time

SUITES = {"libmhla:opencl", "libmhla:unit", "libmhla:cli"}
# Tests that only mean something on PoCL: they ask for two PoCL devices.
POCL_ONLY = {"two_devices", "context_two_devices"}
# PoCL's compile knobs that every test sets (one work-group function a kernel, unoptimized builds:
# tests/meson.build); other implementations ignore them, so they claim no PoCL device.
POCL_PASSIVE = {"POCL_WORK_GROUP_SPECIALIZATION", "POCL_EXTRA_BUILD_FLAGS"}


def remap(text, old_build, new_build, old_src, new_src):
    if not isinstance(text, str):
        return text
    return text.replace(old_build, new_build).replace(old_src, new_src)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--tests", required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--only", default="")
    a = ap.parse_args()

    with open(a.tests) as f:
        meta = json.load(f)
    tests, old_build = meta["tests"], meta["build"]
    old_src = os.path.dirname(old_build.rstrip("/"))
    new_build = os.path.abspath(a.build)
    new_src = os.path.dirname(new_build)
    only = set(filter(None, a.only.split(",")))
    if a.log_dir:
        os.makedirs(a.log_dir, exist_ok=True)

    results = []
    for t in tests:
        name = t["name"]
        if only and name not in only:
            continue
        if not SUITES.intersection(t["suite"]) or name in POCL_ONLY:
            continue
        if any(k.startswith("POCL_") and k not in POCL_PASSIVE for k in t["env"]):
            continue
        cmd = [remap(c, old_build, new_build, old_src, new_src) for c in t["cmd"]]
        if cmd[0].endswith("python3"):
            cmd[0] = sys.executable
        env = dict(os.environ)
        for k, v in t["env"].items():
            v = remap(v, old_build, new_build, old_src, new_src)
            # Meson's library path must not hide the caller's (a carried ICD loader, CLBlast).
            if k == "LD_LIBRARY_PATH" and os.environ.get(k):
                v = v + ":" + os.environ[k]
            env[k] = v
        env["MHLA_DEVICE"] = a.device
        cwd = remap(t.get("workdir") or old_build, old_build, new_build, old_src, new_src)
        if "MHLA_CACHE_DIR" in env:
            os.makedirs(env["MHLA_CACHE_DIR"], exist_ok=True)
        t0 = time.time()
        try:
            p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=a.timeout)
            rc, out = p.returncode, p.stdout.decode(errors="replace")
        except subprocess.TimeoutExpired as e:
            rc, out = "timeout", (e.stdout or b"").decode(errors="replace")
        dt = time.time() - t0
        verdict = "OK" if rc == 0 else "SKIP" if rc == 77 else "FAIL"
        results.append((name, verdict, dt))
        print(f"{verdict:5} {dt:7.1f} s  {name}", flush=True)
        if a.log_dir:
            with open(os.path.join(a.log_dir, name + ".log"), "w") as f:
                f.write(" ".join(cmd) + "\n" + out)
        if verdict == "FAIL":
            print("\n".join("      | " + l for l in out.strip().splitlines()[-25:]), flush=True)

    counts = {v: sum(1 for r in results if r[1] == v) for v in ("OK", "SKIP", "FAIL")}
    print(f"device {a.device}: {counts['OK']} ok, {counts['SKIP']} skipped, "
          f"{counts['FAIL']} failed of {len(results)}")
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
