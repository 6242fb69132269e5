"""Module-level calls that need no plan: devices, Mc initializers, the library's double reference,
bfloat16 conversions, and a small tuner."""
import statistics
import time

import numpy as np

from . import _config
from ._config import Options, dtype_of, grid3, prepare
from ._ffi import check, ffi, invalid, lib


def version():
    return ffi.string(lib.mhla_version_string()).decode()


def devices():
    """Every OpenCL device, in the order device specs index them, as dicts (what `mhla info` prints)."""
    count = ffi.new("size_t *")
    check(lib.mhla_device_list(ffi.NULL, 0, count))
    infos = ffi.new("mhla_device_info[]", count[0])
    check(lib.mhla_device_list(infos, count[0], count))
    out = []
    for i in range(count[0]):
        d = infos[i]
        row = {}
        for name, _ in ffi.typeof("mhla_device_info").fields:
            value = getattr(d, name)
            if isinstance(value, ffi.CData):  # the char[128] strings
                value = ffi.string(value).decode(errors="replace")
            row[name] = value
        out.append(row)
    return out


def init_mixing(kind, blocks, param=None, kv_blocks=None):
    """The M x M initial mixing matrix (float32) of the initializer `kind` ("linear", "cos",
    "exp", "gaussian", "local", "paper", "causal-uniform") for a block grid (an int or 1-3 extents):
    docs/spec.md "Mixing-matrix initializers". With kv_blocks (cross-attention's key/value block
    grid), the M x M_kv matrix over the distances between query and key block centres."""
    k = ffi.new("mhla_init_kind *")
    check(lib.mhla_init_kind_parse(str(kind).encode(), k))
    if blocks is None:
        raise invalid("init_mixing needs blocks: an int or 1 to 3 extents")
    bt, bh, bw = grid3(blocks, None, "blocks")
    m = bt * bh * bw
    p = ffi.new("double *", param) if param is not None else ffi.NULL
    if kv_blocks is not None:
        kb = grid3(kv_blocks, None, "kv_blocks")
        m_kv = kb[0] * kb[1] * kb[2]
        out = np.empty((m, m_kv), dtype=np.float32) if m > 0 and m_kv > 0 else np.empty((0, 0), np.float32)
        check(lib.mhla_mixing_init_cross(k[0], p, ffi.new("int64_t[3]", (bt, bh, bw)), ffi.new("int64_t[3]", kb),
                                         ffi.from_buffer("float[]", out, require_writable=True), out.size))
        return out
    out = np.empty((m, m), dtype=np.float32) if m > 0 else np.empty((0, 0), np.float32)
    check(lib.mhla_mixing_init(k[0], p, bt, bh, bw, ffi.from_buffer("float[]", out, require_writable=True), out.size))
    return out


def to_bf16(x):
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest even as the library does."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(x.shape, dtype=np.uint16)
    check(lib.mhla_convert(lib.MHLA_DTYPE_BF16, ffi.from_buffer(out, require_writable=True),
                           lib.MHLA_DTYPE_F32, ffi.from_buffer(x), x.size))
    return out


def from_bf16(x):
    """bfloat16 bit patterns (uint16) -> float32 (exact)."""
    x = np.asarray(x)
    if x.dtype != np.uint16:
        raise invalid("from_bf16 takes uint16 bit patterns, not %s" % x.dtype)
    return (np.ascontiguousarray(x).astype(np.uint32) << 16).view(np.float32)


def _widened(x, dtype):
    """The float32 values a storage type holds (the reference takes the rounded inputs widened)."""
    if dtype == "bf16":
        return from_bf16(x)
    return np.ascontiguousarray(x, dtype=np.float32)


def reference_forward(q, k, v, mixing=None, *, softmax=False, **options):
    """The library's float64 reference (docs/spec.md computed directly) for the same arguments as
    Context.forward (or softmax=True for Context.softmax); returns float64 shaped like the output."""
    opts = Options(softmax=softmax, **options)
    cfg, _, shapes, _, cu = prepare(opts, [(q, "q"), (k, "k"), (v, "v")], mixing)
    qf, kf, vf = (_widened(x, opts.dtype) for x in (q, k, v))
    out = np.empty(shapes[3], dtype=np.float64)
    fb = ffi.from_buffer
    o = fb("double[]", out, require_writable=True)
    if softmax:
        check(lib.mhla_reference_softmax(cfg, fb("float[]", qf), fb("float[]", kf), fb("float[]", vf), o))
    elif cu is not None:
        check(lib.mhla_reference_forward_varlen(cfg, fb("float[]", qf), fb("float[]", kf), fb("float[]", vf),
                                                fb("float[]", mixing), fb("int32_t[]", cu), cu.size - 1, o))
    else:
        check(lib.mhla_reference_forward(cfg, fb("float[]", qf), fb("float[]", kf), fb("float[]", vf),
                                         fb("float[]", mixing), o))
    return out


def reference_backward(q, k, v, mixing, dout, **options):
    """The library's float64 reference gradients (dq, dk, dv, dmixing) for Context.backward's
    arguments (token-pair form: O(N^2) per head, for small sizes)."""
    opts = Options(**options)
    cfg, _, shapes, mshape, cu = prepare(opts, [(q, "q"), (k, "k"), (v, "v"), (dout, "dout")], mixing)
    f = [_widened(x, opts.dtype) for x in (q, k, v, dout)]
    grads = [np.empty(s, dtype=np.float64) for s in shapes[:3]] + [np.empty(mshape, dtype=np.float64)]
    fb = ffi.from_buffer
    g = [fb("double[]", x, require_writable=True) for x in grads]
    fl = [fb("float[]", x) for x in f]
    if cu is not None:
        check(lib.mhla_reference_backward_varlen(cfg, fl[0], fl[1], fl[2], fb("float[]", mixing),
                                                 fb("int32_t[]", cu), cu.size - 1, fl[3], *g))
    else:
        check(lib.mhla_reference_backward(cfg, fl[0], fl[1], fl[2], fb("float[]", mixing), fl[3], *g))
    return tuple(grads)


def max_rel_err(got, ref):
    """The accuracy measure of docs/spec.md "Accuracy the tests hold": max |got - ref| / max |ref|
    (NaN/Inf must match in kind)."""
    g = np.ascontiguousarray(got, dtype=np.float32)
    r = np.ascontiguousarray(ref, dtype=np.float64)
    if g.size != r.size:
        raise invalid("max_rel_err: %d values against %d" % (g.size, r.size))
    return float(lib.mhla_max_rel_err(ffi.from_buffer("float[]", g), ffi.from_buffer("double[]", r), g.size))


def tolerance(dtype="f32", n=1024, backward=False):
    """The tolerance for max_rel_err (forward at n tokens, or the backward's):
    docs/spec.md "Accuracy the tests hold"."""
    code = _config._DTYPES[dtype_of(dtype, None)][0]
    return float(lib.mhla_reference_backward_tolerance(code) if backward else lib.mhla_reference_tolerance(code, n))


# The built-in rows (host/tune/tuning_rows.c): the vendor GPU rows differ from 'gpu' in a few fields
# only, and 'mobile' is 'default' with the mixing kernel.
ROWS = ("llvmpipe", "cpu-intel", "cpu", "cpu-wide", "nvidia", "amd", "intel-gpu", "mobile", "gpu", "default")


def tune(ctx, *, dk=64, dv=None, n=4096, heads=8, blocks=16, candidates=None, runs=5, store=True,
         margin=0.03):
    """Times the forward at (B=1, H=heads, N=n, Dk, Dv, M=blocks) under each candidate tuning spec
    (default: every built-in row), after checking each against the double reference at a small
    size (mhla_selftest_config, what `mhla tune` runs first); stores the fastest in the device's
    tuning database when it beats the device's own row by `margin`. Returns a dict: the device's
    own time, every candidate's median ms or its failure, the winner, and whether it was stored.
    The CLI's `mhla tune` searches field by field; this compares whole specs."""
    dv = dk if dv is None else dv
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, n, heads, dk), dtype=np.float32)
    k = rng.standard_normal((1, n, heads, dk), dtype=np.float32)
    v = rng.standard_normal((1, n, heads, dv), dtype=np.float32)
    mixing = init_mixing("paper", blocks)
    small = ffi.new("mhla_config *")
    lib.mhla_config_init(small)
    small.heads, small.seq_t, small.block_t, small.dk, small.dv = 2, 64 * blocks, blocks, dk, dv
    result = ffi.new("mhla_selftest_result *")

    def median_ms(spec):
        ctx.set_tuning(spec)
        check(lib.mhla_selftest_config(ctx._handle(), small, 0, 7, result), ctx._ctx)
        if not result.passed:
            return None, ffi.string(result.message).decode(errors="replace") or "wrong result"
        ctx.forward(q, k, v, mixing, blocks=blocks)  # build and warm up
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            ctx.forward(q, k, v, mixing, blocks=blocks)
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times), None

    report = {"device": ctx.device_name, "candidates": {}, "stored": False}
    try:
        base, err = median_ms("")
        if base is None:
            raise invalid("the device's own row fails its check: " + err)
        report["own_ms"] = base
        best, best_ms = None, base
        for spec in (candidates if candidates is not None else ["row=" + r for r in ROWS]):
            ms, err = median_ms(spec)
            report["candidates"][spec] = ms if ms is not None else "failed: " + err
            if ms is not None and ms < best_ms:
                best, best_ms = spec, ms
    finally:
        ctx.set_tuning("")
    report["best"], report["best_ms"] = best, best_ms
    if store and best is not None and best_ms < base * (1 - margin):
        check(lib.mhla_tuning_db_put(ctx._handle(), dk, dv, best.encode(),
                                     ("mhla.tune: %.3f ms against the own row's %.3f ms at N=%d, H=%d, M=%d"
                                      % (best_ms, base, n, heads, blocks)).encode()), ctx._ctx)
        report["stored"] = True
    return report


KINDS = ("softmax", "linear", "mhla")


def diagnose(q, k, mixing, *, max_rows=1024, sample=True, seed=1, rank_rtol=1e-5, **options):
    """The paper's diagnosis (mhla_diagnose): for softmax, linear attention and MHLA under Context.forward's
    options (grid, blocks, feature_map, causal, chunk, scale, ...), per head (averaged over the batch):
    numerical rank, mean row entropy (nats) and the singular values, materialised in float64 for up to
    max_rows query rows (a random sample of them beyond, when sample=True). Returns a dict."""
    opts = Options(**options)
    cfg = prepare(opts, [(q, "q"), (k, "k"), (k, "k")], mixing)[0]  # A needs no v: k's shape stands in
    o = ffi.new("mhla_diagnose_options *")
    lib.mhla_diagnose_options_init(o)
    o.max_rows, o.sample, o.seed, o.rank_rtol = int(max_rows), int(bool(sample)), int(seed), float(rank_rtol)
    res = ffi.new("mhla_diagnose_result *")
    fb = ffi.from_buffer
    check(lib.mhla_diagnose(cfg, fb("float[]", _widened(q, opts.dtype)), fb("float[]", _widened(k, opts.dtype)),
                            fb("float[]", mixing), o, res))
    try:
        h, r, kinds = res.heads, res.rows, len(KINDS)
        rank = np.frombuffer(ffi.buffer(res.rank, h * kinds * 8), np.float64).reshape(h, kinds).copy()
        entropy = np.frombuffer(ffi.buffer(res.entropy, h * kinds * 8), np.float64).reshape(h, kinds).copy()
        sigma = np.frombuffer(ffi.buffer(res.sigma, h * kinds * r * 8), np.float64).reshape(h, kinds, r).copy()
        return {"n": res.n, "rows": r, "sampled": bool(res.sampled), "rank_rtol": res.rank_rtol,
                "kinds": KINDS, "rank": rank, "entropy": entropy, "sigma": sigma,
                "rank_bound": tuple(res.rank_bound[i] for i in range(kinds))}
    finally:
        lib.mhla_diagnose_result_free(res)
