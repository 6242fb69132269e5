#!/usr/bin/env python3
"""What the Python layer adds to a forward call: Context.forward on NumPy arrays (argument checks,
the plan lookup, the output allocation, then mhla_forward_host) against mhla_forward_host called
directly on the same plan and the same arrays (the C call; cffi adds well under a microsecond),
and mhla.torch's function on CPU tensors. Alternated call by call, on one device, medians.

usage: python_overhead.py [--n 1024,16384] [--runs 30]   (the device: MHLA_DEVICE)
"""
import argparse
import statistics
import time

import numpy as np

import mhla
from mhla._ffi import ffi, lib


def blocks_for(n):
    """The bench's M: the largest power of 4 with M^2 <= N and blocks of at least 256 tokens."""
    m = 1
    while (4 * m) ** 2 <= n and n // (4 * m) >= 256:
        m *= 4
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", default="1024,16384")
    ap.add_argument("--runs", type=int, default=30)
    a = ap.parse_args()
    ctx = mhla.Context()
    try:
        import torch
        import mhla.torch as mt
    except ImportError:
        torch = None
    print("device: %s; B=1, H=8, D=64; median of %d calls each, alternated (min-max)" % (ctx.device_name, a.runs))
    print("| N | M | C call ms | Context.forward ms | overhead ms (%) | forward(out=) ms | overhead ms (%) "
          "| mhla.torch ms | overhead ms (%) |")
    print("|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(1)
    for n in (int(x) for x in a.n.split(",")):
        m = blocks_for(n)
        q, k, v = (rng.standard_normal((1, n, 8, 64), dtype=np.float32) for _ in range(3))
        mixing = mhla.init_mixing("paper", m)
        out = ctx.forward(q, k, v, mixing, blocks=m)  # builds the plan and its kernels
        plan = next(iter(p for p in ctx._plans.values()))
        fb = ffi.from_buffer
        ptrs = (fb(q), fb(k), fb(v), fb("float[]", mixing), fb(out, require_writable=True))
        tq, tk, tv, tm = (torch.from_numpy(x) for x in (q, k, v, mixing)) if torch else (None,) * 4
        c_ms, py_ms, th_ms, into_ms = [], [], [], []
        into = np.empty_like(out)
        for _ in range(a.runs):
            t0 = time.perf_counter()
            assert lib.mhla_forward_host(plan.handle, *ptrs) == lib.MHLA_OK
            t1 = time.perf_counter()
            ctx.forward(q, k, v, mixing, blocks=m)
            t2 = time.perf_counter()
            if torch:
                with torch.no_grad():
                    mt.mhla(tq, tk, tv, tm, ctx, blocks=m)
            t3 = time.perf_counter()
            ctx.forward(q, k, v, mixing, blocks=m, out=into)
            t4 = time.perf_counter()
            into_ms.append((t4 - t3) * 1e3)
            c_ms.append((t1 - t0) * 1e3)
            py_ms.append((t2 - t1) * 1e3)
            th_ms.append((t3 - t2) * 1e3)
        c, p, o = statistics.median(c_ms), statistics.median(py_ms), statistics.median(into_ms)
        th = statistics.median(th_ms) if torch else float("nan")
        span = lambda xs: "%.3f-%.3f" % (min(xs), max(xs))
        print("| %d | %d | %.3f (%s) | %.3f (%s) | %.3f (%.1f%%) | %.3f (%s) | %.3f (%.1f%%) | %.3f (%s) | %.3f (%.1f%%) |"
              % (n, m, c, span(c_ms), p, span(py_ms), p - c, 100 * (p - c) / c, o, span(into_ms), o - c,
                 100 * (o - c) / c, th, span(th_ms) if torch else "-", th - c, 100 * (th - c) / c))
        ctx.set_tuning("")  # drops the plan: the next size starts clean
    ctx.close()


if __name__ == "__main__":
    main()
