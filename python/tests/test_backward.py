"""Context.backward against the library's float64 reference gradients (token-pair form) and against
finite differences of the NumPy formula, in the non-causal, causal and varlen modes."""
import numpy as np
import pytest

import mhla
from conftest import numpy_mhla_1d, qkv, rand

TOL = 1e-4  # docs/spec.md "Accuracy the tests hold", backward f32


def check(got, ref, tol=TOL):
    for name, g, r in zip(("dq", "dk", "dv", "dmixing"), got, ref):
        if g is None:
            continue
        err = mhla.max_rel_err(g, r)
        assert err <= tol, "%s: max_rel_err %.3g > %.3g" % (name, err, tol)


@pytest.mark.parametrize("normalizer", ["paper", "official", "none"])
@pytest.mark.parametrize("feature_map", ["relu-eps", "elu1"])
def test_non_causal(ctx, rng, normalizer, feature_map):
    q, k, v = qkv(rng, b=2, n=32, h=2, dk=8, dv=6)
    mixing = mhla.init_mixing("exp", 4)
    dout = rand(rng, v.shape)
    kw = dict(blocks=4, normalizer=normalizer, feature_map=feature_map)
    got = ctx.backward(q, k, v, mixing, dout, **kw)
    assert [g.shape for g in got] == [q.shape, k.shape, v.shape, mixing.shape]
    check(got, mhla.reference_backward(q, k, v, mixing, dout, **kw))


def test_against_finite_differences_of_numpy(ctx, rng):
    """dMc and dv from the kernels against central differences of the float64 NumPy formula."""
    q, k, v = qkv(rng, n=16, h=1, dk=4, dv=4)
    mixing = mhla.init_mixing("paper", 4).astype(np.float64)
    dout = rand(rng, v.shape).astype(np.float64)
    _, _, dv, dm = ctx.backward(q, k, v, mixing.astype(np.float32), dout.astype(np.float32), blocks=4)
    loss = lambda mc, vv: float(np.sum(numpy_mhla_1d(q, k, vv, mc, 4) * dout))
    h = 1e-6
    for i, j in [(0, 0), (1, 3), (3, 2)]:
        e = np.zeros_like(mixing)
        e[i, j] = h
        fd = (loss(mixing + e, v) - loss(mixing - e, v)) / (2 * h)
        assert abs(dm[i, j] - fd) <= 1e-4 * max(1.0, abs(fd))
    vd = v.astype(np.float64)
    e = np.zeros_like(vd)
    e[0, 5, 0, 2] = h
    fd = (loss(mixing, vd + e) - loss(mixing, vd - e)) / (2 * h)
    assert abs(dv[0, 5, 0, 2] - fd) <= 1e-4 * max(1.0, abs(fd))


@pytest.mark.parametrize("normalizer", ["none", "paper"])
def test_causal(ctx, rng, normalizer):
    q, k, v = qkv(rng, n=40)
    mixing = mhla.init_mixing("causal-uniform", 3)
    dout = rand(rng, v.shape)
    kw = dict(causal=True, chunk=16, normalizer=normalizer)
    got = ctx.backward(q, k, v, mixing, dout, **kw)
    ref = mhla.reference_backward(q, k, v, mixing, dout, **kw)
    check(got, ref)
    assert np.all(np.triu(got[3], 1) == 0)  # only Mc[i, j <= i] is read


def test_varlen(ctx, rng):
    cu = np.array([0, 19, 19, 50], np.int32)
    q, k, v = qkv(rng, n=50)
    mixing = mhla.init_mixing("causal-uniform", 4)
    dout = rand(rng, v.shape)
    kw = dict(causal=True, chunk=8, cu_seqlens=cu)
    check(ctx.backward(q, k, v, mixing, dout, **kw), mhla.reference_backward(q, k, v, mixing, dout, **kw))


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_storage(ctx, rng, dtype):
    q, k, v = qkv(rng, n=32)
    dout = rand(rng, v.shape)
    conv = (lambda x: x.astype(np.float16)) if dtype == "f16" else mhla.to_bf16
    q, k, v, dout = (conv(x) for x in (q, k, v, dout))
    mixing = mhla.init_mixing("paper", 4)
    got = ctx.backward(q, k, v, mixing, dout, blocks=4, dtype=dtype)
    widen = (lambda x: x.astype(np.float32)) if dtype == "f16" else mhla.from_bf16
    got = [widen(g) for g in got[:3]] + [got[3]]
    check(got, mhla.reference_backward(q, k, v, mixing, dout, blocks=4, dtype=dtype),
          mhla.tolerance(dtype, backward=True))


def test_no_dmixing(ctx, rng):
    q, k, v = qkv(rng)
    mixing = mhla.init_mixing("paper", 4)
    dq, dk, dv, dm = ctx.backward(q, k, v, mixing, rand(rng, v.shape), blocks=4, dmixing=False)
    assert dm is None and np.all(np.isfinite(dq))


@pytest.mark.parametrize("parts", [3, 16])
def test_causal_diagonal_in_parts(rng, parts):
    """dMc's diagonal with bc_diag split over `parts` work-items per (chunk, head) (the tuning field
    dg_parts: 1 on CPU rows, 32 on the GPU row), against the reference."""
    with mhla.Context() as c:
        c.set_tuning("dg_parts=%d" % parts)
        assert "dg_parts=%d" % parts in c.tuning
        q, k, v = qkv(rng, n=45)
        mixing = mhla.init_mixing("causal-uniform", 3)
        dout = rand(rng, v.shape)
        kw = dict(causal=True, chunk=16, normalizer="paper")
        check(c.backward(q, k, v, mixing, dout, **kw), mhla.reference_backward(q, k, v, mixing, dout, **kw))
