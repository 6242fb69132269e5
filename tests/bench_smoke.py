#!/usr/bin/env python3
"""Runs mhla-bench once on a tiny sweep and checks what it writes with independent readers
(Python's json, csv and XML parsers): every requested row measured (the causal chunk form and
decoding included; the host ops blas and sgemm when built with OpenBLAS, else skipped saying so),
each checked against the double reference before it was timed,
figures consistent with each other and with the flop formulas recomputed here, the %sgemm and
blas/mhla columns recomputed from the times, the CSV matching the JSON, a well-formed SVG with the
three series, and --compare of the report with itself reading 1.

    bench_smoke.py MHLA_BENCH
"""
import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

NO_BLAS = "built without OpenBLAS (Debian: libopenblas-dev)"
SGEMM_N = 2048


def check(cond, what):
    if not cond:
        sys.exit("bench_smoke: " + what)


def check_decode(r, rows, label):
    """A decode row: per-step times over runs of C = 32 steps, one chunk start in each."""
    check(r["steps"] == 32 and r["iters"] >= 2, label + ": steps and runs")
    check(0 < r["ms_min"] <= r["ms_median"] <= r["ms_max"], label + ": min <= median <= max")
    # A run's mean step lies between the fastest and the slowest step, and so does the chunk start.
    check(r["ms_min"] <= r["step_mean_ms"] <= r["ms_max"], label + ": mean over C steps")
    if r["host_clock"] == 1:  # no device timestamps: the chunk start is not told apart from the other steps
        check(r["chunk_start_ms"] is None, label + ": no chunk start without device timestamps")
    else:
        check(r["ms_min"] <= r["chunk_start_ms"] <= r["ms_max"], label + ": chunk start")
    check(math.isclose(r["tokens_per_s"], r["batch"] * 1e3 / r["step_mean_ms"], rel_tol=1e-6), label + ": tokens/s")
    check(math.isclose(r["flops"], 4 * 2 * 32 * 16), label + ": flops per token")
    check(math.isclose(r["bytes"], 4 * 2 * (2 * 32 + 2 * 16 + 3 * 32 * 16)), label + ": bytes per token")
    check(math.isclose(r["gflops"], r["flops"] / r["ms_median"] / 1e6, rel_tol=1e-6), label + ": GFLOP/s")
    check(r["summary_ms"] is None and r["ratio_causal_mhla"] is None, label + ": no stages or causal ratio")
    first = min((x for x in rows if x["op"] == "decode"), key=lambda x: x["n"])
    check(math.isclose(r["ratio_context"], r["ms_median"] / first["ms_median"], rel_tol=1e-6),
          label + ": ratio to the smallest context")


def check_sgemm(r, label):
    """The sgemm row: one 2048^3 SGEMM on the host, timed with the host clock."""
    check(r["n"] == SGEMM_N and r["dk"] == SGEMM_N and r["dv"] == SGEMM_N and r["heads"] == 1, label + ": size")
    check(r["iters"] >= 2 and 0 < r["ms_min"] <= r["ms_median"] <= r["ms_max"], label + ": runs and times")
    check(math.isclose(r["flops"], 2 * SGEMM_N ** 3), label + ": flops 2n^3")
    check(r["gflops"] > 0 and math.isclose(r["gflops"], r["flops"] / r["ms_median"] / 1e6, rel_tol=1e-6),
          label + ": GFLOP/s")
    check(r["host_clock"] == 2, label + ": host wall time (host_clock 2), not %s" % r["host_clock"])
    check(math.isclose(r["pct_sgemm"], 100.0, rel_tol=1e-9), label + ": its own %sgemm")


def main(bench):
    tmp = tempfile.mkdtemp(prefix="mhla_bench_smoke")
    js, cs, svg = (os.path.join(tmp, n) for n in ("r.json", "r.csv", "r.svg"))
    # Chunks of 32: 8 and 16 of them; decode at 256 and 512 tokens of context (the --n list).
    # Every op by name: the host ops' rows exist (measured, or skipped saying why) in any build.
    ops = "mhla,linear,softmax,mhla-causal,decode,blas,sgemm"
    args = [bench, "--n", "256,512", "--image", "16", "--heads", "2", "--dims", "32x16", "--chunk", "32",
            "--ops", ops, "--target-ms", "1", "--min-iters", "2", "--json", js, "--csv", cs, "--plot", svg]
    run = subprocess.run(args, capture_output=True, text=True, timeout=600)
    check(run.returncode == 0, "exit status %d\n%s%s" % (run.returncode, run.stdout, run.stderr))
    check("median ms" in run.stdout and "softmax" in run.stdout and "%sgemm" in run.stdout
          and "blas/mhla" in run.stdout, "no table on stdout:\n" + run.stdout)
    check("decode per token" in run.stdout and "512 over 256 tokens of context: per-token median" in run.stdout,
          "no decode summary on stdout:\n" + run.stdout)

    rep = json.load(open(js))
    check(rep["format"] == "mhla-bench 1", "format")
    check(rep["device"]["name"] and rep["device"]["driver_version"], "device name/driver missing")
    check(rep["library_version"].count(".") == 2, "library version")
    check(rep["peak"]["gflops"] > 0 and rep["peak"]["copy_gbps"] > 0, "peak figures")
    par = rep["parameters"]
    check(par["target_ms"] == 1 and par["min_iters"] == 2 and par["n"] == [256, 512] and par["images"] == ["16x16"]
          and par["heads"] == [2] and par["dims"] == ["32x16"] and par["m"] == [] and par["ops"] == ops.split(",")
          and par["chunk"] == [32] and par["decode_context"] == [256, 512]
          and par["causal_normalizer"] == "none" and par["causal_mixing_init"] == "causal-uniform",
          "parameters: %s" % par)
    rows = rep["rows"]
    # sgemm first; 1D: mhla, linear, blas, softmax, mhla-causal at two N; 2D: the first four; then
    # decode at two contexts.
    check(len(rows) == 1 + 2 * 5 + 4 + 2, "%d rows" % len(rows))
    check(rows[0]["op"] == "sgemm", "the sgemm row first")
    check([r["op"] for r in rows[1:6]] == ["mhla", "linear", "blas", "softmax", "mhla-causal"], "row order")
    check([r["op"] for r in rows[-2:]] == ["decode"] * 2, "decode rows last")
    # Built with OpenBLAS: the sgemm row is measured; else it and every blas row say why not.
    blas_built = rows[0]["status"] == "ok"
    check(blas_built or (rows[0]["status"] == "skipped" and rows[0]["note"] == NO_BLAS),
          "sgemm row: %s %s" % (rows[0]["status"], rows[0]["note"]))
    check(("host wall time" in par["time"]) == blas_built and (par["blas"].startswith("none")) != blas_built,
          "parameters time/blas: %s / %s" % (par["time"], par["blas"]))
    sgemm_gflops = rows[0]["gflops"] if blas_built else None
    if blas_built:
        check_sgemm(rows[0], "sgemm")
    check(rows[0]["verify_n"] == 0 and rows[0]["verified"] is None, "sgemm: not verified (no attention)")
    for r in rows[1:]:
        label = "%s n=%d" % (r["op"], r["n"])
        check(r["heads"] == 2 and r["dk"] == 32 and r["dv"] == 16, label + ": sizes")
        if r["op"] == "blas" and not blas_built:
            check(r["status"] == "skipped" and r["note"] == NO_BLAS, label + ": skipped, saying why")
            check(r["ms_median"] is None and r["pct_sgemm"] is None, label + ": no time")
            continue
        check(r["status"] == "ok", label + ": status " + r["status"] + " " + r["note"])
        # Checked against the double reference before it was timed, at a smaller N, and passed.
        check(0 < r["verify_n"] <= r["n"] and r["verify_failed"] == 0 and r["verified"] is not None
              and r["verified"] <= r["verify_tolerance"] == 1e-5,
              label + ": verified %s at N=%s, failed %s" % (r["verified"], r["verify_n"], r["verify_failed"]))
        host = r["op"] == "blas"
        check(r["host_clock"] == 2 if host else r["host_clock"] in (0, 1),
              label + ": host_clock %d (2 for host ops only)" % r["host_clock"])
        # The probe's split of a device-timed run: the gate's latency, then the run's own span (every run's
        # two add up to its time; their medians stay within the runs' range). Host clocks have neither.
        if r["host_clock"] == 0:
            check(r["gate_ms"] is not None and r["gate_ms"] >= 0, label + ": gate_ms %s" % r["gate_ms"])
            if r["op"] == "decode":
                check(r["span_ms"] is None, label + ": no span for decode rows")
            else:
                check(r["span_ms"] is not None and 0 < r["span_ms"] <= r["ms_max"] * (1 + 1e-9),
                      label + ": span_ms %s within the runs (max %s)" % (r["span_ms"], r["ms_max"]))
        else:
            check(r["gate_ms"] is None and r["span_ms"] is None, label + ": no gate or span on the host clock")
        if sgemm_gflops:  # every rate as a percentage of the sgemm row's
            check(math.isclose(r["pct_sgemm"], 100 * r["gflops"] / sgemm_gflops, rel_tol=1e-6),
                  label + ": %%sgemm %s" % r["pct_sgemm"])
        else:
            check(r["pct_sgemm"] is None, label + ": no %sgemm without an sgemm row")
        causal = r["op"] in ("mhla-causal", "decode")
        check(r["chunk"] == (32 if causal else 0), label + ": chunk")
        if causal:
            check(r["m"] == -(-r["n"] // 32) and r["seq_h"] == 1, label + ": M is ceil(N/C) chunks")
        if r["op"] == "decode":
            check_decode(r, rows, label)
            continue
        check(r["iters"] >= 2, label + ": iterations")
        check(0 < r["ms_min"] <= r["ms_median"] <= r["ms_max"], label + ": min <= median <= max")
        check(math.isclose(r["gflops"], r["flops"] / r["ms_median"] / 1e6, rel_tol=1e-6), label + ": GFLOP/s")
        check(math.isclose(r["gbps"], r["bytes"] / r["ms_median"] / 1e6, rel_tol=1e-6), label + ": GB/s")
        check(math.isclose(r["pct_peak_flops"], 100 * r["gflops"] / rep["peak"]["gflops"], rel_tol=1e-6),
              label + ": % of peak")
        stages = [r["summary_ms"], r["mixing_ms"], r["output_ms"]]
        if r["op"] in ("softmax", "blas"):
            check(stages == [None] * 3, label + ": no stages")
        elif r["host_clock"] == 1:  # no device timestamps (rusticl on llvmpipe): no markers to time stages by
            check(stages == [None] * 3, label + ": no stages without device timestamps")
        else:  # each stage timed by the library's markers (a forward in one launch, tl_one, has it all
            # in the read-out's stage: summary and mixing 0 together); the stages of a run add up to
            # its markers' span, which is the run's time plus the lag of its last marker behind the
            # last kernel: on a CPU runtime a marker is timed when the runtime's thread gets to it,
            # a scheduler's time slice later on a busy machine (3.6 ms of read-out in a 1.6 ms run, 2
            # cores beside the mutation check). So each stage's median is at most the slowest run
            # plus that lag, and their sum at most twice that (at least half the runs reach each
            # stage's median, so the runs' spans add up to at least half the runs times that sum:
            # three runs of stages 5,5,0 / 5,0,5 / 0,5,5 ms have medians 5,5,5 in runs of 10 ms).
            lag = 15.0  # ms: a few of Linux's time slices
            check(all(s is not None and s >= 0 for s in stages) and (stages[0] > 0 or stages[1] == 0)
                  and stages[2] > 0 and max(stages) <= r["ms_max"] + lag
                  and sum(stages) <= 2 * (r["ms_max"] + lag),
                  label + ": stage times %s (slowest run %s ms)" % (stages, r["ms_max"]))
        if r["op"] == "softmax":
            check(math.isclose(r["flops"], 2 * 2 * r["n"] ** 2 * (32 + 16)), label + ": softmax flops")
        elif r["op"] == "mhla-causal":
            m, n = r["m"], r["n"]  # N is a multiple of C here: every chunk is full
            want = 2 * (4 * n * 32 * 16 + 32 * 16 * m * (m - 1) + (32 + 16) * m * 32 * 33)
            check(math.isclose(r["flops"], want), label + ": causal flops %g, expected %g" % (r["flops"], want))
            mhla = [x for x in rows if x["op"] == "mhla" and x["n"] == n and x["seq_h"] == 1][0]
            check(math.isclose(r["ratio_causal_mhla"], r["ms_median"] / mhla["ms_median"], rel_tol=1e-6),
                  label + ": causal/mhla ratio")
        else:  # mhla, linear, blas: the same count
            check(math.isclose(r["flops"], 4 * 2 * r["n"] * 32 * 16), label + ": linear-time flops")
            check(r["ratio_causal_mhla"] is None, label + ": causal/mhla on a non-causal row")
        if r["op"] != "mhla":
            check(r["ratio_blas_mhla"] is None, label + ": blas/mhla on a row other than mhla")
        if r["op"] == "mhla":
            check(r["m"] == r["block_t"] * r["block_h"] * r["block_w"] and r["m"] * r["m"] <= r["n"],
                  label + ": M")
            lin = [x for x in rows if x["op"] == "linear" and x["n"] == r["n"] and x["seq_h"] == r["seq_h"]][0]
            check(math.isclose(r["ratio_mhla_linear"], r["ms_median"] / lin["ms_median"], rel_tol=1e-6),
                  label + ": mhla/linear ratio")
            sm = [x for x in rows if x["op"] == "softmax" and x["n"] == r["n"] and x["seq_h"] == r["seq_h"]][0]
            check(math.isclose(r["ratio_softmax_mhla"], sm["ms_median"] / r["ms_median"], rel_tol=1e-6),
                  label + ": softmax/mhla ratio")
            grid = lambda x: (x["seq_t"], x["seq_h"], x["seq_w"], x["block_t"], x["block_h"], x["block_w"])
            blas = [x for x in rows if x["op"] == "blas" and grid(x) == grid(r)]
            check(len(blas) == 1, label + ": one blas row on the same tensors and blocks")
            if blas_built:
                check(math.isclose(r["ratio_blas_mhla"], blas[0]["ms_median"] / r["ms_median"], rel_tol=1e-6),
                      label + ": blas/mhla ratio %s" % r["ratio_blas_mhla"])
            else:
                check(r["ratio_blas_mhla"] is None, label + ": no blas/mhla without OpenBLAS")
    check([r["seq_h"] for r in rows if r["op"] == "mhla"] == [1, 1, 16], "2D row")
    check(not any(r["op"] == "mhla-causal" and r["seq_h"] > 1 for r in rows), "no 2D causal rows")

    with open(cs, newline="") as f:
        lines = list(csv.DictReader(f))
    check(len(lines) == len(rows), "CSV has %d lines for %d rows" % (len(lines), len(rows)))
    for line, r in zip(lines, rows):
        check(line["op"] == r["op"] and int(line["n"]) == r["n"], "CSV row order")
        check(line["device"] == rep["device"]["name"] and line["library_version"] == rep["library_version"],
              "CSV device columns")
        if r["status"] == "ok":
            check(math.isclose(float(line["ms_median"]), r["ms_median"], rel_tol=1e-5), "CSV ms_median")
        check(int(line["chunk"]) == r["chunk"] and int(line["steps"]) == r["steps"], "CSV chunk/steps")
        check(int(line["host_clock"]) == r["host_clock"], "CSV host_clock of " + r["op"])
        for key in ("step_mean_ms", "chunk_start_ms", "tokens_per_s", "ratio_causal_mhla", "ratio_context",
                    "pct_sgemm", "ratio_blas_mhla"):
            if r[key] is None:
                check(line[key] == "", "CSV %s of %s should be empty" % (key, r["op"]))
            else:
                check(math.isclose(float(line[key]), r[key], rel_tol=1e-5), "CSV %s of %s" % (key, r["op"]))

    root = ET.parse(svg).getroot()
    check(root.tag.endswith("svg"), "SVG root")
    text = ET.tostring(root, encoding="unicode")
    for color in ("#d62728", "#1f77b4", "#2ca02c"):  # mhla, linear, softmax
        check(text.count("fill='%s'" % color) + text.count('fill="%s"' % color) >= 2, "SVG series " + color)
    check(rep["device"]["name"] in text, "SVG title names the device")

    cmp = subprocess.run([bench, "--compare", js, js], capture_output=True, text=True, timeout=60)
    check(cmp.returncode == 0, "--compare failed: " + cmp.stderr)
    timed = sum(r["status"] == "ok" for r in rows)
    check(timed == (17 if blas_built else 13), "%d rows with times" % timed)
    check("%d rows in both" % timed in cmp.stdout and "decode      geometric mean B/A 1.000 over 2" in cmp.stdout
          and "mhla-causal geometric mean B/A 1.000 over 2" in cmp.stdout, "--compare output:\n" + cmp.stdout)
    if blas_built:
        check("sgemm       geometric mean B/A 1.000 over 1" in cmp.stdout
              and "blas        geometric mean B/A 1.000 over 3" in cmp.stdout, "--compare host ops:\n" + cmp.stdout)
    bad = subprocess.run([bench, "--compare", js, svg], capture_output=True, text=True, timeout=60)
    check(bad.returncode == 1 and svg in bad.stderr, "--compare of a non-report must fail naming it")
    # The backward rows: each beside its forward row of the same run, bwd/fwd their ratio,
    # credited with twice the forward's flops.
    bj = os.path.join(tmp, "b.json")
    ops = "mhla,linear,mhla-causal,mhla-bwd,mhla-bwd-saved,linear-bwd,mhla-causal-bwd"
    run = subprocess.run([bench, "--n", "256", "--image", "none", "--heads", "2", "--dims", "32x16", "--chunk", "32",
                          "--ops", ops, "--target-ms", "1", "--min-iters", "2", "--json", bj],
                         capture_output=True, text=True, timeout=600)
    check(run.returncode == 0 and "bwd/fwd" in run.stdout, "backward rows: exit %d\n%s%s"
          % (run.returncode, run.stdout, run.stderr))
    brows = json.load(open(bj))["rows"]
    check([r["op"] for r in brows] == ops.split(","), "backward row order")
    for r in brows:
        if not r["op"].endswith("-bwd") and r["op"] != "mhla-bwd-saved":
            continue
        f = next(x for x in brows if x["op"] == r["op"].split("-bwd")[0])
        check(r["status"] == "ok" and r["m"] == f["m"], r["op"] + ": measured on its forward's blocks")
        check(math.isclose(r["ratio_bwd_fwd"], r["ms_median"] / f["ms_median"], rel_tol=1e-6), r["op"] + ": bwd/fwd")
        check(math.isclose(r["flops"], 2 * f["flops"]), r["op"] + ": flops twice the forward's")
    # The kernel gate (--gate kernel; the default on GPUs): each run queued behind a calibrated
    # single work-item kernel, not a user event; the rows measured and checked as before. The
    # mhla row with the official normalizer (--normalizer), verified against the reference as every row.
    gj = os.path.join(tmp, "g.json")
    run = subprocess.run([bench, "--n", "256", "--image", "none", "--heads", "2", "--dims", "32x16", "--chunk", "32",
                          "--decode-context", "256", "--ops", "mhla,decode", "--target-ms", "1", "--min-iters", "2",
                          "--gate", "kernel", "--normalizer", "official", "--quick", "--json", gj],
                         capture_output=True, text=True, timeout=600)
    check(run.returncode == 0, "--gate kernel: exit %d\n%s%s" % (run.returncode, run.stdout, run.stderr))
    g = json.load(open(gj))
    check(g["parameters"]["normalizer"] == "official", "--normalizer official: parameters.normalizer %r"
          % g["parameters"]["normalizer"])
    gate = g["parameters"]["gate"]
    check(gate.startswith("kernel, ") and gate.endswith(" us") or gate == "event",  # (event: no device timestamps)
          "--gate kernel: parameters.gate %r" % gate)
    check("queued behind a" in run.stdout if gate != "event" else True, "--gate kernel: the table's header says so")
    for r in g["rows"]:
        check(r["status"] == "ok" and r["verify_failed"] == 0 and r["ms_median"] > 0,
              "--gate kernel %s: %s %s" % (r["op"], r["status"], r["ms_median"]))
        check(r["host_clock"] != 0 or r["gate_ms"] >= 0, "--gate kernel %s: gate_ms %s" % (r["op"], r["gate_ms"]))
    print("bench_smoke: %d rows checked, peak %.1f GFLOP/s, %.1f GB/s, %s" %
          (len(rows), rep["peak"]["gflops"], rep["peak"]["copy_gbps"],
           "sgemm %.1f GFLOP/s" % sgemm_gflops if blas_built else NO_BLAS))


if __name__ == "__main__":
    main(sys.argv[1])
