"""Cross-attention (k and v on a token grid of their own) and grouped key/value heads (k and v with
H_kv heads dividing q's H) through Context.forward/backward and mhla.torch.MHLA, against the
library's float64 reference and a NumPy formula written from docs/spec.md."""
import numpy as np
import pytest

import mhla
from conftest import phi, rand

TOL_FWD, TOL_BWD = 1e-5, 1e-4  # docs/spec.md "Accuracy the tests hold", f32


def numpy_cross(q, k, v, mc, q_blocks, kv_blocks, feature_eps=1e-6, eps=1e-6):
    """1D grids, layout bnhd, relu-eps, paper normalizer: o = q~ S~_i / (q~ . z~_i + eps) with
    S~_i = sum_j Mc[i, j] S_j over the key blocks, query head h reading kv head h // (H / H_kv)."""
    b, n, h, _ = q.shape
    n_kv, h_kv = k.shape[1], k.shape[2]
    qt, kt = phi(q, "relu-eps", feature_eps), phi(k, "relu-eps", feature_eps)
    out = np.zeros(q.shape[:3] + (v.shape[3],))
    nb, nbk = n // q_blocks, n_kv // kv_blocks
    for bi in range(b):
        for hi in range(h):
            hk = hi // (h // h_kv)
            s = [kt[bi, j * nbk:(j + 1) * nbk, hk].T @ v[bi, j * nbk:(j + 1) * nbk, hk] for j in range(kv_blocks)]
            z = [kt[bi, j * nbk:(j + 1) * nbk, hk].sum(0) for j in range(kv_blocks)]
            for i in range(q_blocks):
                sm = sum(mc[i, j] * s[j] for j in range(kv_blocks))
                zm = sum(mc[i, j] * z[j] for j in range(kv_blocks))
                x = qt[bi, i * nb:(i + 1) * nb, hi]
                out[bi, i * nb:(i + 1) * nb, hi] = (x @ sm) / ((x @ zm) + eps)[:, None]
    return out


def test_cross_forward_matches_numpy(ctx, rng):
    q = rand(rng, (2, 48, 4, 8))
    k, v = rand(rng, (2, 20, 2, 8)), rand(rng, (2, 20, 2, 6))
    mc = mhla.init_mixing("exp", 3, kv_blocks=5)
    assert mc.shape == (3, 5)
    out = ctx.forward(q, k, v, mc, blocks=3, kv_blocks=5)
    assert out.shape == (2, 48, 4, 6)
    err = mhla.max_rel_err(out, numpy_cross(q, k, v, mc.astype(np.float64), 3, 5))
    assert err <= TOL_FWD, err


@pytest.mark.parametrize("layout", ["bnhd", "bhnd"])
def test_cross_grids_backward(ctx, rng, layout):
    """A 2D query grid attending to a 1D sequence: forward and gradients against the reference."""
    shape = (lambda b, n, h, d: (b, n, h, d)) if layout == "bnhd" else (lambda b, n, h, d: (b, h, n, d))
    q, k, v = rand(rng, shape(1, 64, 2, 8)), rand(rng, shape(1, 12, 1, 8)), rand(rng, shape(1, 12, 1, 4))
    mc = mhla.init_mixing("linear", (2, 2), kv_blocks=3)
    kw = dict(grid=(8, 8), blocks=(2, 2), kv_blocks=3, layout=layout)
    out = ctx.forward(q, k, v, mc, **kw)
    assert mhla.max_rel_err(out, mhla.reference_forward(q, k, v, mc, **kw)) <= TOL_FWD
    dout = rand(rng, out.shape)
    got = ctx.backward(q, k, v, mc, dout, **kw)
    assert [g.shape for g in got] == [q.shape, k.shape, v.shape, mc.shape]
    ref = mhla.reference_backward(q, k, v, mc, dout, **kw)
    for name, g, r in zip(("dq", "dk", "dv", "dmixing"), got, ref):
        assert mhla.max_rel_err(g, r) <= TOL_BWD, name


def test_gqa_equals_repeated_heads(ctx, rng):
    """Grouped heads give what repeating each key/value head over its query heads gives; dk and dv
    are the repeated heads' gradients summed over each group."""
    q, k, v = rand(rng, (1, 32, 4, 8)), rand(rng, (1, 32, 2, 8)), rand(rng, (1, 32, 2, 8))
    mc = mhla.init_mixing("paper", 4)
    rep = lambda x: np.ascontiguousarray(np.repeat(x, 2, axis=2))
    out = ctx.forward(q, k, v, mc, blocks=4)
    np.testing.assert_array_equal(out, ctx.forward(q, rep(k), rep(v), mc, blocks=4))
    dout = rand(rng, out.shape)
    dq, dk, dv, dm = ctx.backward(q, k, v, mc, dout, blocks=4)
    dq2, dk2, dv2, dm2 = ctx.backward(q, rep(k), rep(v), mc, dout, blocks=4)
    np.testing.assert_allclose(dq, dq2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dk, dk2.reshape(1, 32, 2, 2, 8).sum(3), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dv, dv2.reshape(1, 32, 2, 2, 8).sum(3), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dm, dm2, rtol=1e-4, atol=1e-5)


def test_refusals_name_the_problem(ctx, rng):
    q = rand(rng, (1, 16, 4, 8))
    with pytest.raises(mhla.MHLAError, match="kv_blocks= is needed"):
        ctx.forward(q, rand(rng, (1, 12, 4, 8)), rand(rng, (1, 12, 4, 8)), mhla.init_mixing("linear", 2), blocks=2)
    with pytest.raises(mhla.MHLAError, match="do not divide"):
        ctx.forward(q, rand(rng, (1, 16, 3, 8)), rand(rng, (1, 16, 3, 8)), mhla.init_mixing("linear", 2), blocks=2)
    with pytest.raises(mhla.MHLAError, match="non-causal"):
        ctx.forward(q, rand(rng, (1, 8, 4, 8)), rand(rng, (1, 8, 4, 8)), mhla.init_mixing("causal-uniform", 1),
                    causal=True, chunk=16)
    with pytest.raises(mhla.MHLAError, match=r"make M = 2: expected \(2, 3\)"):
        ctx.forward(q, rand(rng, (1, 12, 4, 8)), rand(rng, (1, 12, 4, 8)), mhla.init_mixing("linear", 2),
                    blocks=2, kv_blocks=3)


def test_torch_module_cross(rng):
    torch = pytest.importorskip("torch")
    import mhla.torch as mt

    layer = mt.MHLA(blocks=(2, 2), grid=(4, 4), kv_blocks=2, init="linear")
    assert tuple(layer.mixing.shape) == (4, 2)
    q = torch.from_numpy(rand(rng, (1, 16, 2, 4))).requires_grad_()
    k = torch.from_numpy(rand(rng, (1, 6, 1, 4))).requires_grad_()
    v = torch.from_numpy(rand(rng, (1, 6, 1, 4))).requires_grad_()
    out = layer(q, k, v)
    assert tuple(out.shape) == (1, 16, 2, 4)
    out.sum().backward()
    assert k.grad is not None and tuple(k.grad.shape) == (1, 6, 1, 4)
    assert layer.mixing.grad is not None and tuple(layer.mixing.grad.shape) == (4, 2)
    # float64 runs the reference forward and the float32 backward: gradcheck's pairing (elu1 and
    # exp's positive Mc keep every denominator away from 0, where finite differences blow up)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    mc = torch.from_numpy(mhla.init_mixing("exp", (2, 2), kv_blocks=2)).double().requires_grad_()
    opts = dict(blocks=(2, 2), grid=(4, 4), kv_blocks=2, feature_map="elu1")
    fn = lambda a, b, c, m: mt.MHLAFunction.apply(a, b, c, m, None, opts)
    assert torch.autograd.gradcheck(fn, (qd, kd, vd, mc), eps=1e-3, atol=2e-3, rtol=2e-3)


def test_causal_gqa_and_decoder_state(ctx, rng):
    """Grouped heads in the causal chunk form, its backward, and the decoder, whose state holds the
    key/value heads' summaries: H_kv / H of the bytes of H heads'."""
    q, k, v = rand(rng, (1, 40, 4, 8)), rand(rng, (1, 40, 2, 8)), rand(rng, (1, 40, 2, 8))
    mc = mhla.init_mixing("causal-uniform", 3)
    kw = dict(causal=True, chunk=16, normalizer="paper")
    out = ctx.forward(q, k, v, mc, **kw)
    ref = mhla.reference_forward(q, k, v, mc, **kw)
    assert mhla.max_rel_err(out, ref) <= TOL_FWD
    dout = rand(rng, out.shape)
    got = ctx.backward(q, k, v, mc, dout, **kw)
    for name, g, r in zip(("dq", "dk", "dv", "dmixing"), got, mhla.reference_backward(q, k, v, mc, dout, **kw)):
        assert mhla.max_rel_err(np.nan_to_num(g), np.nan_to_num(r)) <= TOL_BWD, name
    sizes = []
    for h_kv in (4, 2):
        dec = mhla.Decoder(ctx, heads=4, kv_heads=h_kv, dk=8, capacity=40, chunk=16, normalizer="paper")
        kk, vv = (k, v) if h_kv == 2 else (np.ascontiguousarray(np.repeat(k, 2, 2)), np.ascontiguousarray(np.repeat(v, 2, 2)))
        o = dec.step(q[:, :32], kk[:, :32], vv[:, :32], mc)
        assert mhla.max_rel_err(o, ref[:, :32]) <= TOL_FWD
        sizes.append(len(dec.state()) - 128)
        dec.close()
    assert sizes[1] * 2 == sizes[0]


def test_softmax_baseline(ctx, rng):
    """The softmax baseline with keys of their own (cross-attention) and grouped heads."""
    q, k, v = rand(rng, (1, 48, 4, 8)), rand(rng, (1, 20, 2, 8)), rand(rng, (1, 20, 2, 6))
    out = ctx.softmax(q, k, v)
    assert out.shape == (1, 48, 4, 6)
    assert mhla.max_rel_err(out, mhla.reference_forward(q, k, v, softmax=True)) <= TOL_FWD
