"""PyTorch: MHLAFunction's gradients (gradcheck of the float64 reference path against the float32
kernels), the MHLA module (Mc learnable and clipped), half storage, and refusals."""
import numpy as np
import pytest

import mhla

torch = pytest.importorskip("torch")
import mhla.torch as mt  # noqa: E402


def t(rng, shape, dtype=torch.float64):
    return torch.tensor(rng.uniform(-1, 1, size=shape), dtype=dtype, requires_grad=True)


@pytest.mark.parametrize("options", [dict(blocks=4), dict(blocks=(2, 2), grid=(4, 4), normalizer="official"),
                                     dict(causal=True, chunk=4, normalizer="paper")])
def test_gradcheck_reference_against_kernels(ctx, rng, options):
    """Numeric derivatives of the library's float64 reference (inputs rounded to float32, steps of
    1e-3) against the analytical gradients of the float32 kernels."""
    q, k, v = (t(rng, (1, 16, 2, 4)) for _ in range(3))
    kind = "causal-uniform" if options.get("causal") else "paper"
    m = torch.tensor(mhla.init_mixing(kind, 4 if not options.get("causal") else 4), dtype=torch.float64,
                     requires_grad=True)
    fn = lambda q, k, v, m: mt.MHLAFunction.apply(q, k, v, m, ctx, options)
    assert torch.autograd.gradcheck(fn, (q, k, v, m), eps=1e-3, atol=2e-3, rtol=2e-3)


def test_gradcheck_fails_on_a_wrong_gradient(ctx, rng):
    """The check above can fail: a backward that drops dMc's diagonal is caught."""
    q, k, v = (t(rng, (1, 16, 1, 4)) for _ in range(3))
    m = torch.tensor(mhla.init_mixing("paper", 4), dtype=torch.float64, requires_grad=True)

    class Broken(mt.MHLAFunction):
        @staticmethod
        def backward(fctx, dout):
            g = list(mt.MHLAFunction.backward(fctx, dout))
            g[3] = g[3] - torch.diag(torch.diagonal(g[3]))
            return tuple(g)

    fn = lambda q, k, v, m: Broken.apply(q, k, v, m, ctx, dict(blocks=4))
    assert not torch.autograd.gradcheck(fn, (q, k, v, m), eps=1e-3, atol=2e-3, rtol=2e-3, raise_exception=False)


def test_module_gradients_match_the_reference(ctx, rng):
    layer = mt.MHLA((2, 2), grid=(8, 8), init="cos", context=ctx)
    q, k, v = (t(rng, (2, 64, 2, 8), torch.float32) for _ in range(3))
    out = layer(q, k, v)
    dout = torch.tensor(rng.uniform(-1, 1, size=out.shape), dtype=torch.float32)
    out.backward(dout)
    args = [x.detach().numpy() for x in (q, k, v)] + [layer.mixing.detach().numpy()]
    kw = dict(grid=(8, 8), blocks=(2, 2))
    ref_out = mhla.reference_forward(*args, **kw)
    assert mhla.max_rel_err(out.detach().numpy(), ref_out) <= 1e-5
    ref = mhla.reference_backward(*args[:3], args[3], dout.numpy(), **kw)
    for got, r in zip((q.grad, k.grad, v.grad, layer.mixing.grad), ref):
        assert mhla.max_rel_err(got.numpy(), r) <= 1e-4


def test_mixing_is_clipped_to_unit_interval(ctx, rng):
    layer = mt.MHLA(4, context=ctx)
    with torch.no_grad():
        layer.mixing[0, 0] = 3.0
        layer.mixing[1, 2] = -1.0
    q, k, v = (t(rng, (1, 32, 1, 4), torch.float32) for _ in range(3))
    layer(q, k, v)
    assert layer.mixing.max().item() <= 1.0 and layer.mixing.min().item() >= 0.0


@pytest.mark.parametrize("dtype,name", [(torch.float16, "f16"), (torch.bfloat16, "bf16")])
def test_half_tensors(ctx, rng, dtype, name):
    q, k, v = (t(rng, (1, 32, 2, 8), dtype) for _ in range(3))
    layer = mt.MHLA(4, context=ctx)
    out = layer(q, k, v)
    assert out.dtype == dtype
    out.float().sum().backward()
    assert q.grad.dtype == dtype and torch.isfinite(q.grad.float()).all()
    widened = [x.detach().float().numpy() for x in (q, k, v)]
    ref = mhla.reference_forward(*widened, layer.mixing.detach().numpy(), blocks=4)
    assert mhla.max_rel_err(out.detach().float().numpy(), ref) <= mhla.tolerance(name, 32)


def test_causal_module_and_softmax_core(ctx, rng):
    q, k, v = (t(rng, (1, 40, 2, 8), torch.float32) for _ in range(3))
    causal = mt.MHLA(3, causal=True, chunk=16, context=ctx)
    out = causal(q, k, v)
    ref = mhla.reference_forward(*[x.detach().numpy() for x in (q, k, v)], causal.mixing.detach().numpy(),
                                 causal=True, chunk=16)
    assert mhla.max_rel_err(out.detach().numpy(), ref) <= 1e-5
    sm = mt.SoftmaxAttention(context=ctx)
    out = sm(q, k, v)
    out.sum().backward()
    qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
    s = torch.einsum("bnhd,bmhd->bhnm", qq, kk) * 8 ** -0.5
    expect = torch.einsum("bhnm,bmhd->bnhd", s.softmax(-1), vv)
    expect.sum().backward()
    assert torch.allclose(out, expect, atol=1e-5) and torch.allclose(q.grad, qq.grad, atol=1e-5)


def test_causal_module_default_chunk_is_64(ctx, rng):
    """mt.MHLA(causal=True) without chunk= uses the library's C = 64, not another: the chunk is part
    of the model (Mc's rows are chunks)."""
    q, k, v = (t(rng, (1, 150, 2, 8), torch.float32) for _ in range(3))
    layer = mt.MHLA(3, causal=True, context=ctx)  # 3 chunks of 64; C = 128 would read 2 rows of Mc
    out = layer(q, k, v).detach().numpy()
    args = [x.detach().numpy() for x in (q, k, v)] + [layer.mixing.detach().numpy()]
    assert mhla.max_rel_err(out, mhla.reference_forward(*args, causal=True, chunk=64)) <= 1e-5
    assert mhla.max_rel_err(out, mhla.reference_forward(*args, causal=True, chunk=128)) > 1e-2


def test_torch_refusals(ctx, rng):
    q = torch.zeros(1, 16, 1, 4, dtype=torch.int32)
    m = torch.tensor(mhla.init_mixing("paper", 4))
    with pytest.raises(mhla.InvalidArgument, match="q has dtype torch.int32"):
        mt.MHLAFunction.apply(q, q, q, m, ctx, dict(blocks=4))
    meta = torch.zeros(1, 16, 1, 4, device="meta")
    with pytest.raises(mhla.InvalidArgument, match="q is on meta: mhla.torch takes CPU tensors"):
        mt.MHLAFunction.apply(meta, meta, meta, m, ctx, dict(blocks=4))
