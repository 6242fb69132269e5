#!/usr/bin/env python3
"""The GPU speed targets, read from mhla-bench JSON files: one line per target and row, one column
per file, the verdict from the last file that has the row.

usage: scripts/gpu_targets.py [LABEL=]FILE.json [[LABEL=]FILE.json ...]

e.g. after scripts/gpu_check.sh: gpu_targets.py base=bench-base.json new=bench-new.json. Each target is
a row (or a ratio of two rows) of one file, B = 1 unless it says otherwise, H = 8, Dk = Dv = 64, as
mhla-bench's default rows time them on a GPU:

  fwd      mhla forward (paper normalizer) <= 0.10 ms at N = 16384 and <= 0.03 ms at N = 1024
  fwd-b8   mhla forward at B = 8, N = 4096: >= 30% of the file's peak probe (GFLOP/s)
  bwd      mhla-bwd over mhla, linear-bwd over linear, at N = 4096 and 16384: <= 2.5
  causal   mhla-causal (C = 64) over mhla at the same N: <= floor / 0.85, floor = 1 + C/2D + N/4C^2
           (bench/README.md "Causal over non-causal")
  cbwd     mhla-causal-bwd over mhla-causal, C = 64 and 128: <= 3
  decode   decode after 8192 tokens of context, the mean time a token over a chunk (step_mean_ms;
           the chunk start's included): <= 8 us
  softmax  softmax at N = 4096 and 16384: >= 40% of the peak probe

Besides, a line per mhla forward row with its time over its bound: the larger of its 4*B*H*N*Dk*Dv
flops at the file's peak probe and q, k, v and the output moved once (f32) at its copy probe (the
probes, not the data sheet: on the H100 62 TFLOP/s and 2.1 TB/s). A row a file lacks
(not run, FAILED its check, or only estimated) shows '-'. Exit status 0 (the verdicts are for reading),
2 for an unreadable file.
"""
import json
import sys


def fail(msg):
    print("gpu_targets: " + msg, file=sys.stderr)
    sys.exit(2)


def load(arg):
    label, sep, path = arg.partition("=")
    if not sep:
        label, path = arg, arg
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: %s" % (path, e))
    if not isinstance(data, dict) or not str(data.get("format", "")).startswith("mhla-bench"):
        fail("%s: not an mhla-bench JSON file (format %r)" % (path, data.get("format") if isinstance(data, dict)
                                                                else None))
    return label, data


def row(data, op, n, chunk=0, batch=1):
    """The row of these sizes, or None where the file lacks it or it was not timed and checked."""
    for r in data.get("rows", []):
        if (r.get("op") == op and r.get("n") == n and r.get("batch", 1) == batch and r.get("heads") == 8
                and r.get("dk") == 64 and r.get("dv") == 64 and (chunk == 0 or r.get("chunk") == chunk)
                and r.get("status", "ok") == "ok" and not r.get("verify_failed")):
            return r
    return None


def field(data, op, n, name, chunk=0, batch=1):
    r = row(data, op, n, chunk, batch)
    return None if r is None or r.get(name) is None else float(r[name])


def peak_gflops(data):
    p = data.get("peak") or {}
    return float(p["gflops"]) if p.get("gflops") else None


def targets():
    """(name, what, value(data) -> float or None, limit, 'le' or 'ge', unit)"""
    out = []
    for n, limit in ((16384, 0.10), (1024, 0.03)):
        out.append(("fwd", "mhla N=%d ms" % n, lambda d, n=n: field(d, "mhla", n, "ms_median"), limit, "le", "ms"))

    def pct(d, op, n, batch):
        g, p = field(d, op, n, "gflops", batch=batch), peak_gflops(d)
        return None if g is None or not p else 100.0 * g / p

    out.append(("fwd-b8", "mhla B=8 N=4096 % of peak", lambda d: pct(d, "mhla", 4096, 8), 30.0, "ge", "%"))
    for op, fwd in (("mhla-bwd", "mhla"), ("linear-bwd", "linear")):
        for n in (4096, 16384):
            out.append(("bwd", "%s / %s N=%d" % (op, fwd, n),
                        lambda d, op=op, fwd=fwd, n=n: ratio(d, (op, n, 0), (fwd, n, 0)), 2.5, "le", "x"))
    for n in (1024, 4096, 16384):
        c, dim = 64, 64
        floor = 1.0 + c / (2.0 * dim) + n / (4.0 * c * c)
        out.append(("causal", "mhla-causal C=64 / mhla N=%d (floor %.2f)" % (n, floor),
                    lambda d, n=n: ratio(d, ("mhla-causal", n, 64), ("mhla", n, 0)), floor / 0.85, "le", "x"))
    for c in (64, 128):
        for n in (1024, 4096, 16384):
            out.append(("cbwd", "mhla-causal-bwd / mhla-causal C=%d N=%d" % (c, n),
                        lambda d, c=c, n=n: ratio(d, ("mhla-causal-bwd", n, c), ("mhla-causal", n, c)), 3.0, "le",
                        "x"))
    for c in (64, 128):
        out.append(("decode", "decode after 8192, C=%d, us a token" % c,
                    lambda d, c=c: scaled(field(d, "decode", 8192, "step_mean_ms", chunk=c), 1000.0), 8.0, "le",
                    "us"))
    for n in (4096, 16384):
        out.append(("softmax", "softmax N=%d %% of peak" % n, lambda d, n=n: pct(d, "softmax", n, 1), 40.0, "ge",
                    "%"))
    return out


def ratio(d, a, b):
    x, y = field(d, a[0], a[1], "ms_median", chunk=a[2]), field(d, b[0], b[1], "ms_median", chunk=b[2])
    return None if x is None or not y else x / y


def scaled(x, k):
    return None if x is None else x * k


def bound_lines(files):
    """mhla forward rows: time over the bound, the larger of 4*B*H*N*Dk*Dv flops at the peak probe and
    q, k, v and the output read or written once (f32) at the copy probe."""
    lines = []
    for n, batch in ((1024, 1), (4096, 1), (16384, 1), (4096, 8)):
        cells = []
        for _, d in files:
            r = row(d, "mhla", n, batch=batch)
            p = d.get("peak") or {}
            if r is None or not p.get("gflops") or not p.get("copy_gbps"):
                cells.append("-")
                continue
            bh_n = float(r["batch"]) * float(r["heads"]) * float(r["n"])
            flops = 4.0 * bh_n * float(r["dk"]) * float(r["dv"])
            bytes_ = 4.0 * bh_n * 2.0 * (float(r["dk"]) + float(r["dv"]))  # q, k, v, out: f32, once
            bound = max(flops / (float(p["gflops"]) * 1e6), bytes_ / (float(p["copy_gbps"]) * 1e6))
            cells.append("%.1fx" % (float(r["ms_median"]) / bound))
        lines.append(("mhla B=%d N=%d over its bound" % (batch, n), cells))
    return lines


def fmt(x, unit):
    if x is None:
        return "-"
    return "%.3f" % x if unit == "ms" else "%.1f" % x if unit in ("%", "us") else "%.2f" % x


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    files = [load(a) for a in argv]
    labels = [label for label, _ in files]
    head = "| target | row | " + " | ".join(labels) + " | limit | verdict |"
    print(head)
    print("|" + " --- |" * (len(labels) + 4))
    met = missed = absent = 0
    for name, what, value, limit, sense, unit in targets():
        vals = [value(d) for _, d in files]
        last = next((v for v in reversed(vals) if v is not None), None)
        if last is None:
            verdict, absent = "not measured", absent + 1
        elif (last <= limit) if sense == "le" else (last >= limit):
            verdict, met = "met", met + 1
        else:
            verdict, missed = "missed", missed + 1
        print("| %s | %s | %s | %s %s | %s |" % (name, what, " | ".join(fmt(v, unit) for v in vals),
                                                "<=" if sense == "le" else ">=", fmt(limit, unit), verdict))
    for what, cells in bound_lines(files):
        print("| bound | %s | %s | | |" % (what, " | ".join(cells)))
    print("\ngpu_targets: %d met, %d missed, %d not measured (verdicts from the last file with the row: %s)"
          % (met, missed, absent, ", ".join(labels[::-1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
