"""PyTorch: MHLA as an autograd Function and an nn.Module whose forward and backward run in libmhla
on an OpenCL device.

Tensors are CPU tensors: they reach the device through host memory (the library's *_host calls),
so each call copies q, k, v (and dout) in and the results out. A GPU-resident framework tensor
would need its memory as an OpenCL cl_mem in the device's context: CUDA and ROCm tensors are not
OpenCL buffers, so there is no zero-copy path from them; an application that keeps its tensors in
OpenCL uses pyopencl arrays with mhla.Context.wrap(queue) instead (no host copy).
"""
import numpy as np
import torch

from . import _functions
from ._context import Context
from ._ffi import invalid

_default = None


def default_context():
    """The context MHLA modules use unless given one (MHLA_DEVICE, else the first GPU, else the CPU)."""
    global _default
    if _default is None:
        _default = Context()
    return _default


_STORAGE = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _host(t, what):
    if t.device.type != "cpu":
        raise invalid("%s is on %s: mhla.torch takes CPU tensors (they reach the OpenCL device "
                      "through host memory; see help(mhla.torch))" % (what, t.device))
    return t.detach().contiguous()


def _to_numpy(t, dtype):
    if dtype == "bf16":  # NumPy has no bfloat16: the bit patterns travel as uint16
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _from_numpy(a, dtype):
    if dtype == "bf16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


class MHLAFunction(torch.autograd.Function):
    """out = MHLAFunction.apply(q, k, v, mixing, context, options): q, k [B,N,H,Dk], v [B,N,H,Dv]
    (options["layout"] "bhnd": [B,H,N,D]) in float32, float16 or bfloat16 (f32 arithmetic), mixing
    float32; `options` are Context.forward's keywords. The backward is mhla_backward (dq, dk, dv and
    dMc). float64 inputs take the reference path: the forward is the library's float64 reference
    (on the inputs rounded to float32) and the backward the float32 kernels, which is what
    torch.autograd.gradcheck compares: numeric derivatives of the reference against the kernels'
    gradients."""

    @staticmethod
    def forward(fctx, q, k, v, mixing, context, options):
        context = context or default_context()
        reference = q.dtype == torch.float64
        dtype = "f32" if reference else _STORAGE.get(q.dtype)
        if dtype is None:
            raise invalid("q has dtype %s: mhla.torch takes float32, float16, bfloat16 "
                          "(or float64 for the reference path)" % q.dtype)
        cast = (lambda t: t.float()) if reference else (lambda t: t)
        qh, kh, vh = (cast(_host(t, n)) for t, n in ((q, "q"), (k, "k"), (v, "v")))
        mh = _host(mixing, "mixing").float()
        opts = dict(options or {})
        opts.pop("dtype", None)  # the storage type follows the tensors
        arrays = [_to_numpy(t, dtype) for t in (qh, kh, vh)]
        if reference:
            out = torch.from_numpy(_functions.reference_forward(*arrays, mh.numpy(), **opts))
        else:
            out = _from_numpy(context.forward(*arrays, mh.numpy(), dtype=dtype, **opts), dtype)
        fctx.save_for_backward(qh, kh, vh, mh)
        fctx.context, fctx.options, fctx.dtype, fctx.reference = context, opts, dtype, reference
        fctx.mixing_dtype = mixing.dtype
        return out

    @staticmethod
    def backward(fctx, dout):
        qh, kh, vh, mh = fctx.saved_tensors
        dtype = fctx.dtype
        d = _host(dout.float() if fctx.reference else dout.to(qh.dtype), "dout")
        arrays = [_to_numpy(t, dtype) for t in (qh, kh, vh, d)]
        dq, dk, dv, dm = fctx.context.backward(*arrays[:3], mh.numpy(), arrays[3], dtype=dtype,
                                               dmixing=fctx.needs_input_grad[3], **fctx.options)
        grads = [_from_numpy(g, dtype) for g in (dq, dk, dv)]
        if fctx.reference:
            grads = [g.double() for g in grads]
        dmix = torch.from_numpy(dm).to(fctx.mixing_dtype) if dm is not None else None
        return grads[0], grads[1], grads[2], dmix, None, None


def mhla(q, k, v, mixing, context=None, **options):
    """Functional form: MHLAFunction.apply with Context.forward's keywords."""
    return MHLAFunction.apply(q, k, v, mixing, context, options)


class MHLA(torch.nn.Module):
    """The MHLA attention core with a learnable mixing matrix Mc: forward(q, k, v) -> out, tensors
    [B, N, H, D] (layout "bnhd") or [B, H, N, D] ("bhnd"), the layout of the released code's core
    after its q/k/v projections. Non-causal: `blocks` is the block grid over `grid` (default the 1D
    sequence); Mc is M x M, initialised by `init` (any of the library's initializers: "paper",
    "linear", "cos", "exp", "gaussian", "local"). Cross-attention: `kv_blocks` is the keys' block
    grid over `kv_grid` (default: 1D over k's tokens), and Mc is M x M_kv. Grouped key/value heads
    come from the shapes (k and v with H_kv heads dividing q's H). Causal (causal=True): Mc is R x R for sequences
    of up to R * chunk tokens (R = `blocks`), "causal-uniform" by default. Mc is clipped to [0, 1]
    before each forward, as the paper does (clip=False keeps it free). Other keywords are
    Context.forward's (normalizer, feature_map, scale, eps, feature_eps, chunk, dtype follows the
    inputs)."""

    def __init__(self, blocks, *, grid=None, causal=False, init=None, init_param=None, clip=True,
                 context=None, kv_blocks=None, kv_grid=None, **options):
        super().__init__()
        kind = init or ("causal-uniform" if causal else "paper")
        self.mixing = torch.nn.Parameter(torch.from_numpy(
            _functions.init_mixing(kind, blocks, init_param, kv_blocks=kv_blocks)))
        self.clip, self.context = clip, context
        self.options = dict(options, causal=causal)
        if not causal:
            self.options["blocks"] = blocks
            if grid is not None:
                self.options["grid"] = grid
            if kv_blocks is not None:
                self.options["kv_blocks"] = kv_blocks
            if kv_grid is not None:
                self.options["kv_grid"] = kv_grid

    def forward(self, q, k, v):
        if self.clip:
            with torch.no_grad():
                self.mixing.clamp_(0.0, 1.0)
        return MHLAFunction.apply(q, k, v, self.mixing, self.context, self.options)


class _SoftmaxFunction(torch.autograd.Function):
    """Softmax attention whose forward runs in libmhla (mhla_softmax_plan) and whose backward is
    PyTorch's on the host: the library has no softmax backward (it is the baseline, not the
    subject). Used by the digits example to compare the three cores."""

    @staticmethod
    def forward(fctx, q, k, v, context, scale):
        context = context or default_context()
        qh, kh, vh = (_host(t, n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
        fctx.save_for_backward(qh, kh, vh)
        fctx.scale = scale if scale else qh.shape[-1] ** -0.5
        return torch.from_numpy(context.softmax(qh.numpy(), kh.numpy(), vh.numpy(), scale=scale))

    @staticmethod
    def backward(fctx, dout):
        qh, kh, vh = fctx.saved_tensors
        with torch.enable_grad():
            q, k, v = (t.detach().requires_grad_() for t in (qh, kh, vh))
            s = torch.einsum("bnhd,bmhd->bhnm", q, k) * fctx.scale
            out = torch.einsum("bhnm,bmhd->bnhd", s.softmax(-1), v)
            dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
        return dq, dk, dv, None, None


class SoftmaxAttention(torch.nn.Module):
    """Softmax attention over all tokens, [B, N, H, D] tensors: libmhla's forward, PyTorch's backward."""

    def __init__(self, scale=None, context=None):
        super().__init__()
        self.scale, self.context = scale, context

    def forward(self, q, k, v):
        return _SoftmaxFunction.apply(q, k, v, self.context, self.scale)
