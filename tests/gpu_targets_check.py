#!/usr/bin/env python3
"""scripts/gpu_targets.py against the H100 files in bench/results/ (their figures are known) and
against copies changed so that a target is met, a row failed its check, a row is missing, or a file
is not mhla-bench's: each must show in the table as it should."""
import copy
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "gpu_targets.py")
RESULTS = os.path.join(ROOT, "bench", "results")
BEFORE = os.path.join(RESULTS, "nvidia-h100_2026-11-27_2_ed5f934.json")
AFTER = os.path.join(RESULTS, "nvidia-h100_2026-11-27_2_6de2490.json")


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    return p.returncode, p.stdout


def expect(cond, what, out):
    if not cond:
        sys.exit("gpu_targets_check: %s\n%s" % (what, out))


def line(out, start):
    return next((l for l in out.splitlines() if l.startswith(start)), "")


def main():
    rc, out = run("before=" + BEFORE, "after=" + AFTER)
    expect(rc == 0, "exit status %d on the H100 files" % rc, out)
    expect(line(out, "| target | row | before | after | limit | verdict |"), "no header with both labels", out)
    expect(line(out, "| fwd | mhla N=16384 ms | 0.476 | 0.239 | <= 0.100 | missed |"), "the N = 16384 forward", out)
    expect(line(out, "| bwd | mhla-bwd / mhla N=16384 | 3.87 | 6.76 | <= 2.50 | missed |"), "mhla-bwd / mhla", out)
    expect(line(out, "| causal | mhla-causal C=64 / mhla N=1024 (floor 1.56) | 0.93 | 1.34 | <= 1.84 | met |"),
           "the causal floor at N = 1024", out)
    expect(line(out, "| decode | decode after 8192, C=64, us a token | 20.9 | 22.5 | <= 8.0 | missed |"),
           "decode per token", out)
    expect(line(out, "| fwd-b8 | mhla B=8 N=4096 % of peak | 8.5 | 18.9 | >= 30.0 | missed |"), "B = 8", out)
    expect(line(out, "| bound | mhla B=1 N=16384 over its bound | 7.8x | 3.7x |"), "the bound", out)
    expect("gpu_targets: 2 met, 18 missed, 0 not measured" in out, "the count", out)

    with open(AFTER) as f:
        data = json.load(f)
    changed = copy.deepcopy(data)
    for r in changed["rows"]:
        if r["op"] == "mhla" and r["n"] == 16384 and r["batch"] == 1:
            r["ms_median"] = 0.05  # met
        if r["op"] == "decode" and r["chunk"] == 64:
            r["status"] = "failed"  # a row that failed is not measured
        if r["op"] == "softmax" and r["n"] == 4096:
            r["verify_failed"] = 1
    changed["rows"] = [r for r in changed["rows"] if not (r["op"] == "linear-bwd" and r["n"] == 4096)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "changed.json")
        with open(path, "w") as f:
            json.dump(changed, f)
        rc, out = run(AFTER, "x=" + path)
        expect(rc == 0, "exit status %d" % rc, out)
        expect(line(out, "| fwd | mhla N=16384 ms | 0.239 | 0.050 | <= 0.100 | met |"), "a met target", out)
        expect(line(out, "| decode | decode after 8192, C=64, us a token | 22.5 | - | <= 8.0 | missed |"),
               "a failed row: '-', the verdict from the file that has it", out)
        expect(line(out, "| softmax | softmax N=4096 % of peak | 17.0 | - |"), "a row that failed its check", out)
        expect(line(out, "| bwd | linear-bwd / linear N=4096 | 6.44 | - |"), "a missing row", out)
        rc, out = run("x=" + path)
        expect(line(out, "| decode | decode after 8192, C=64, us a token | - | <= 8.0 | not measured |"),
               "not measured in the only file", out)
        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w") as f:
            json.dump({"format": "something else"}, f)
        rc, out = run(bad)
        expect(rc == 2 and "not an mhla-bench JSON file" in out, "a file of another format", out)
        rc, out = run(os.path.join(tmp, "missing.json"))
        expect(rc == 2 and "missing.json" in out, "a missing file", out)
    print("gpu_targets_check: the H100 files' targets, met, failed, missing rows and bad files as expected")


if __name__ == "__main__":
    main()
