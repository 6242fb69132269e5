"""Context.forward / softmax on NumPy arrays against the library's float64 reference and the NumPy
formulas in conftest.py, in every normalizer, feature map, grid, layout and storage type."""
import numpy as np
import pytest

import mhla
from conftest import numpy_causal, numpy_mhla_1d, qkv, rand, rel

F32 = 1e-5  # docs/spec.md "Accuracy the tests hold": f32 up to 4096 tokens


@pytest.mark.parametrize("normalizer", ["paper", "official", "none"])
@pytest.mark.parametrize("feature_map", ["relu-eps", "relu", "elu1", "none"])
def test_every_normalizer_and_feature_map(ctx, rng, normalizer, feature_map):
    q, k, v = qkv(rng, b=2, n=64, h=2, dk=8, dv=12)
    if feature_map == "none":  # the caller applied one: keep the denominators away from zero
        q, k = np.abs(q) + 0.1, np.abs(k) + 0.1
    mixing = mhla.init_mixing("paper", 4)
    kw = dict(blocks=4, normalizer=normalizer, feature_map=feature_map)
    out = ctx.forward(q, k, v, mixing, **kw)
    assert out.shape == v.shape and out.dtype == np.float32
    assert mhla.max_rel_err(out, mhla.reference_forward(q, k, v, mixing, **kw)) <= F32
    if normalizer != "official":
        ref = numpy_mhla_1d(q, k, v, mixing, 4, normalizer=normalizer, fm=feature_map)
        assert rel(out, ref) <= F32


def test_numpy_formula_catches_a_wrong_mixing(ctx, rng):
    """The NumPy formula is sensitive to Mc: a transposed Mc gives another output."""
    q, k, v = qkv(rng)
    mixing = mhla.init_mixing("paper", 4)
    mixing[0, 1] += 0.5
    out = ctx.forward(q, k, v, mixing, blocks=4)
    assert rel(out, numpy_mhla_1d(q, k, v, mixing, 4)) <= F32
    assert rel(out, numpy_mhla_1d(q, k, v, np.ascontiguousarray(mixing.T), 4)) > 1e-2


@pytest.mark.parametrize("grid,blocks", [((8, 8), (2, 2)), ((2, 4, 8), (2, 2, 2)), ((8, 8), (1, 1))])
def test_image_and_video_grids(ctx, rng, grid, blocks):
    n = int(np.prod(grid))
    q, k, v = qkv(rng, n=n)
    m = int(np.prod(blocks))
    mixing = mhla.init_mixing("cos", blocks)
    out = ctx.forward(q, k, v, mixing, grid=grid, blocks=blocks, scale=0.5, eps=0.25)
    assert mhla.max_rel_err(out, mhla.reference_forward(q, k, v, mixing, grid=grid, blocks=blocks,
                                                       scale=0.5, eps=0.25)) <= F32
    assert mixing.shape == (m, m)


def test_bhnd_layout_is_bnhd_transposed(ctx, rng):
    q, k, v = qkv(rng, n=64)
    mixing = mhla.init_mixing("linear", 4)
    out = ctx.forward(q, k, v, mixing, blocks=4)
    t = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))
    out_t = ctx.forward(t(q), t(k), t(v), mixing, blocks=4, layout="bhnd")
    assert out_t.shape == t(v).shape
    np.testing.assert_allclose(out_t, t(out), rtol=0, atol=1e-6)


@pytest.mark.parametrize("normalizer", ["none", "paper"])
def test_causal_against_numpy(ctx, rng, normalizer):
    q, k, v = qkv(rng, n=70)  # a partial last chunk
    mixing = mhla.init_mixing("causal-uniform", 5)  # R = 5 >= ceil(70 / 16)
    out = ctx.forward(q, k, v, mixing, causal=True, chunk=16, normalizer=normalizer)
    ref = numpy_causal(q, k, v, mixing, 16, normalizer=normalizer)
    assert rel(out, ref) <= F32
    assert mhla.max_rel_err(out, mhla.reference_forward(q, k, v, mixing, causal=True, chunk=16,
                                                       normalizer=normalizer)) <= F32


def test_causal_default_chunk_is_64(ctx, rng):
    """Without chunk=, C is the library's 64, as in `mhla run --causal` and mhla.Decoder: the chunk
    is part of the model (Mc's rows are chunks), so every interface must pick the same one."""
    q, k, v = qkv(rng, n=150)  # 3 chunks of 64, the last partial; C = 128 would make 2
    mixing = mhla.init_mixing("causal-uniform", 3)
    out = ctx.forward(q, k, v, mixing, causal=True)
    assert rel(out, numpy_causal(q, k, v, mixing, 64)) <= F32
    assert rel(out, numpy_causal(q, k, v, mixing, 128)) > 1e-2
    assert mhla.max_rel_err(out, mhla.reference_forward(q, k, v, mixing, causal=True)) <= F32


def test_causal_output_ignores_the_future(ctx, rng):
    q, k, v = qkv(rng, n=48)
    mixing = mhla.init_mixing("causal-uniform", 3)
    a = ctx.forward(q, k, v, mixing, causal=True, chunk=16)
    k2, v2 = k.copy(), v.copy()
    k2[:, 30:], v2[:, 30:] = 7.0, -7.0
    b = ctx.forward(q, k2, v2, mixing, causal=True, chunk=16)
    np.testing.assert_array_equal(a[:, :30], b[:, :30])
    assert not np.array_equal(a[:, 30:], b[:, 30:])


def test_varlen_matches_each_sequence_alone(ctx, rng):
    lens = [20, 0, 45, 7]
    cu = np.cumsum([0] + lens).astype(np.int32)
    q, k, v = qkv(rng, n=int(cu[-1]))
    mixing = mhla.init_mixing("causal-uniform", 3)
    out = ctx.forward(q, k, v, mixing, causal=True, chunk=16, cu_seqlens=cu)
    assert mhla.max_rel_err(out, mhla.reference_forward(q, k, v, mixing, causal=True, chunk=16,
                                                       cu_seqlens=cu)) <= F32
    for s, (a, b) in enumerate(zip(cu[:-1], cu[1:])):
        if a == b:
            continue
        sl = lambda x: np.ascontiguousarray(x[:, a:b])
        alone = numpy_causal(sl(q), sl(k), sl(v), mixing, 16)
        assert rel(out[:, a:b], alone) <= F32, "sequence %d" % s


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
def test_half_storage(ctx, rng, dtype, causal):
    q, k, v = qkv(rng, n=64)
    conv = (lambda x: x.astype(np.float16)) if dtype == "f16" else mhla.to_bf16
    q, k, v = conv(q), conv(k), conv(v)
    mixing = mhla.init_mixing("causal-uniform" if causal else "paper", 4)
    kw = dict(causal=True, chunk=16) if causal else dict(blocks=4)
    out = ctx.forward(q, k, v, mixing, dtype=dtype, **kw)
    assert out.dtype == (np.float16 if dtype == "f16" else np.uint16)
    got = out.astype(np.float32) if dtype == "f16" else mhla.from_bf16(out)
    ref = mhla.reference_forward(q, k, v, mixing, dtype=dtype, **kw)
    assert mhla.max_rel_err(got, ref) <= mhla.tolerance(dtype, 64)


def test_softmax(ctx, rng):
    q, k, v = qkv(rng, n=50, dk=8, dv=4)
    out = ctx.softmax(q, k, v)
    s = np.einsum("bnhd,bmhd->bhnm", q.astype(np.float64), k.astype(np.float64)) * 8 ** -0.5
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("bhnm,bmhd->bnhd", p / p.sum(-1, keepdims=True), v.astype(np.float64))
    assert rel(out, ref) <= F32
    assert mhla.max_rel_err(out, mhla.reference_forward(q, k, v, softmax=True)) <= F32


def test_plans_are_cached_per_configuration(rng):
    with mhla.Context() as c:
        q, k, v = qkv(rng)
        mixing = mhla.init_mixing("paper", 4)
        a = c.forward(q, k, v, mixing, blocks=4)
        b = c.forward(q, k, v, mixing, blocks=4)
        assert c.plans() == 1
        np.testing.assert_array_equal(a, b)  # bit-identical reruns
        c.forward(q, k, v, mixing, blocks=4, eps=0.5)
        assert c.plans() == 2


def test_init_mixing_against_spec(ctx):
    np.testing.assert_allclose(mhla.init_mixing("causal-uniform", 4),
                               np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None], rtol=1e-7)
    p = mhla.init_mixing("paper", (2, 2))
    c = np.array([(0, 0), (0, 1), (1, 0), (1, 1)], float)
    d = np.linalg.norm(c[:, None] - c[None], axis=-1)
    w = 1 - d / d.max(1, keepdims=True)
    np.testing.assert_allclose(p, w / w.sum(1, keepdims=True), rtol=1e-6)
    assert mhla.init_mixing("linear", 1).tolist() == [[1.0]]


def test_devices_lists_the_context_device(ctx):
    devs = mhla.devices()
    assert devs and all(isinstance(d["device_name"], str) for d in devs)
    assert any(d["device_name"] in ctx.device_name for d in devs)
    assert sum(d["is_default"] for d in devs) == 1


def test_tune_compares_whole_rows(ctx):
    report = mhla.tune(ctx, dk=8, n=256, heads=2, blocks=4, candidates=["row=cpu", "row=gpu"], runs=2,
                       store=False)
    assert report["own_ms"] > 0 and set(report["candidates"]) == {"row=cpu", "row=gpu"}
    assert all(isinstance(x, float) for x in report["candidates"].values())
    assert report["stored"] is False
    assert "built-in row" in ctx.tuning  # the override is cleared afterwards


def test_out_is_written_in_place(ctx, rng):
    q, k, v = qkv(rng)
    mixing = mhla.init_mixing("paper", 4)
    into = np.full(v.shape, np.nan, np.float32)
    got = ctx.forward(q, k, v, mixing, blocks=4, out=into)
    assert got is into and np.all(np.isfinite(into))
    assert mhla.max_rel_err(into, mhla.reference_forward(q, k, v, mixing, blocks=4)) <= F32
    with pytest.raises(mhla.InvalidShape, match="out must be an ndarray shaped like the output"):
        ctx.forward(q, k, v, mixing, blocks=4, out=np.empty((1, 64, 2, 4), np.float32))
    with pytest.raises(mhla.InvalidArgument, match="share no memory"):
        ctx.forward(q, k, v, mixing, blocks=4, out=v)


def test_kernel_times(rng):
    """Device time per kernel: a causal forward's three stages (the GPU row's tiled kernels) and a
    non-causal one's, in the order of first launch, each with a positive time; nothing recorded
    once profiling is off."""
    with mhla.Context() as ctx:
        ctx.set_tuning("row=gpu")
        q, k, v = qkv(rng, b=1, n=96, h=2, dk=8, dv=8)
        ctx.profile_kernels()
        ctx.forward(q, k, v, np.tril(mhla.init_mixing("paper", 3)), causal=True, chunk=32)
        rows = ctx.kernel_times()
        names = [r[0] for r in rows]
        assert names == ["causal_summary_tiled", "causal_prefix_tiled", "causal_output_tiled"], rows
        assert all(calls == 1 and ms is not None and ms > 0 for _, calls, ms in rows), rows
        assert ctx.kernel_times() == []  # emptied by the last call
        ctx.profile_kernels(False)
        ctx.forward(q, k, v, mhla.init_mixing("paper", 4), blocks=4)
        assert ctx.kernel_times() == []
