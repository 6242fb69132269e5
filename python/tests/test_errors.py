"""Every refusal: a clear exception of the status's class carrying a message that names the value;
nothing is silently copied or converted."""
import numpy as np
import pytest

import mhla
from mhla import _ffi
from conftest import qkv, rand



@pytest.fixture
def args(rng):
    q, k, v = qkv(rng)
    return q, k, v, mhla.init_mixing("paper", 4)


def test_status_classes_map_one_to_one():
    lib = _ffi.lib
    names = {
        "MHLA_ERR_INVALID_ARGUMENT": mhla.InvalidArgument, "MHLA_ERR_INVALID_SHAPE": mhla.InvalidShape,
        "MHLA_ERR_BUFFER_TOO_SMALL": mhla.BufferTooSmall, "MHLA_ERR_UNSUPPORTED": mhla.Unsupported,
        "MHLA_ERR_DEVICE_NOT_FOUND": mhla.DeviceNotFound, "MHLA_ERR_OUT_OF_DEVICE_MEMORY": mhla.OutOfDeviceMemory,
        "MHLA_ERR_OUT_OF_HOST_MEMORY": mhla.OutOfHostMemory, "MHLA_ERR_BUILD_FAILED": mhla.BuildFailed,
        "MHLA_ERR_OPENCL": mhla.OpenCLError, "MHLA_ERR_BLAS": mhla.BlasError,
        "MHLA_ERR_SEQUENCE_TOO_LONG": mhla.SequenceTooLong, "MHLA_ERR_CAPACITY_EXCEEDED": mhla.CapacityExceeded,
        "MHLA_ERR_CONFIG_MISMATCH": mhla.ConfigMismatch, "MHLA_ERR_MPI": mhla.MPIError,
        "MHLA_ERR_IO": mhla.FileError}
    for name, cls in names.items():
        code = getattr(lib, name)
        e = _ffi.error(code, "the message")
        assert type(e) is cls and e.status == code and e.status_name == name
        assert str(e) == name + ": the message" and isinstance(e, mhla.MHLAError)
    for cls in (mhla.DeviceNotFound, mhla.OutOfDeviceMemory, mhla.BuildFailed, mhla.OpenCLError, mhla.BlasError):
        assert issubclass(cls, mhla.DeviceError)
    assert issubclass(mhla.InvalidArgument, ValueError) and issubclass(mhla.InvalidShape, ValueError)
    assert len(set(names.values())) == len(names)
    assert type(_ffi.error(999, "x")) is mhla.MHLAError  # a status this binding does not know


def test_device_not_found_lists_devices():
    with pytest.raises(mhla.DeviceNotFound, match="no OpenCL device matches device spec 'no-such-device'.*devices: 0"):
        mhla.Context("no-such-device")


def test_wrong_dtypes(ctx, args):
    q, k, v, m = args
    with pytest.raises(mhla.InvalidArgument, match="q has dtype float64"):
        ctx.forward(q.astype(np.float64), k, v, m, blocks=4)
    with pytest.raises(mhla.InvalidArgument, match="k has dtype float16 but dtype='f32' needs float32"):
        ctx.forward(q, k.astype(np.float16), v, m, blocks=4)
    with pytest.raises(mhla.InvalidArgument, match="q is uint16: pass dtype='bf16'"):
        ctx.forward(q.view(np.uint16)[..., ::2].copy(), k, v, m, blocks=4)
    with pytest.raises(mhla.InvalidArgument, match="mixing has dtype float64"):
        ctx.forward(q, k, v, m.astype(np.float64), blocks=4)
    with pytest.raises(mhla.InvalidArgument, match="dtype='f8' is not one of bf16, f16, f32"):
        ctx.forward(q, k, v, m, blocks=4, dtype="f8")


def test_non_contiguous_and_layout(ctx, args):
    q, k, v, m = args
    with pytest.raises(mhla.InvalidArgument, match="v is not C-contiguous"):
        ctx.forward(q, k, v.transpose(0, 2, 1, 3), m, blocks=4)
    with pytest.raises(mhla.InvalidShape, match="v has shape .* but k has .* B, N and H must agree"):
        ctx.forward(q, np.ascontiguousarray(k[:, :32]), v, m, blocks=4)
    with pytest.raises(mhla.InvalidShape, match="k has shape .* but q has .* B must agree"):
        ctx.forward(q, np.concatenate([k, k]), np.concatenate([v, v]), m, blocks=4)
    with pytest.raises(mhla.InvalidShape, match="k has head dimension 4 but q has 8"):
        ctx.forward(q, np.ascontiguousarray(k[..., :4]), v, m, blocks=4)
    with pytest.raises(mhla.InvalidShape, match="expected 4 dimensions"):
        ctx.forward(q[0], k, v, m, blocks=4)
    with pytest.raises(mhla.InvalidArgument, match="layout='nhd' is not one of bhnd, bnhd"):
        ctx.forward(q, k, v, m, blocks=4, layout="nhd")
    # BNHD arrays named BHND: N and H swap, and the block grid no longer divides the 2 "tokens"
    with pytest.raises(mhla.InvalidShape, match="2"):
        ctx.forward(q, k, v, m, blocks=4, layout="bhnd")


def test_options_refused_by_name(ctx, args):
    q, k, v, m = args
    with pytest.raises(mhla.InvalidArgument, match="normalizer='softmax'"):
        ctx.forward(q, k, v, m, blocks=4, normalizer="softmax")
    with pytest.raises(mhla.InvalidArgument, match="feature_map='gelu'"):
        ctx.forward(q, k, v, m, blocks=4, feature_map="gelu")
    with pytest.raises(mhla.InvalidShape, match=r"mixing has shape \(4, 4\) but blocks=8 make M = 8"):
        ctx.forward(q, k, v, m, blocks=8)
    with pytest.raises(mhla.InvalidShape, match="divid|block"):
        ctx.forward(q, k, v, mhla.init_mixing("paper", 3), blocks=3)  # 64 tokens in 3 blocks
    with pytest.raises(mhla.InvalidArgument, match="blocks= is needed for a 2D grid"):
        ctx.forward(q, k, v, m, grid=(8, 8))
    with pytest.raises(mhla.InvalidShape, match=r"grid=\(8, 7\) has 56 tokens but the arrays have N = 64"):
        ctx.forward(q, k, v, m, grid=(8, 7), blocks=(2, 2))
    with pytest.raises(mhla.InvalidArgument, match="causal chunk form has chunks, not blocks"):
        ctx.forward(q, k, v, m, causal=True, blocks=4)
    with pytest.raises(mhla.InvalidArgument, match="cu_seqlens is given but causal=False"):
        ctx.forward(q, k, v, m, blocks=4, cu_seqlens=[0, 64])
    with pytest.raises(mhla.InvalidArgument, match="scale|eps"):
        ctx.forward(q, k, v, m, blocks=4, eps=-1.0)


def test_causal_refusals(ctx, args):
    q, k, v, _ = args
    mc = mhla.init_mixing("causal-uniform", 2)
    with pytest.raises(mhla.SequenceTooLong, match="64.*16 \\* 2 = 32|32.*64"):
        ctx.forward(q, k, v, mc, causal=True, chunk=16)
    with pytest.raises(mhla.InvalidArgument, match=r"cu_seqlens\[1\]"):
        ctx.forward(q, k, v, mhla.init_mixing("causal-uniform", 4), causal=True, chunk=16,
                    cu_seqlens=np.array([0, 40, 30, 64], np.int32))
    with pytest.raises(mhla.InvalidArgument, match="cu_seqlens has dtype float32: it must be int32"):
        ctx.forward(q, k, v, mc, causal=True, chunk=16, cu_seqlens=np.array([0, 64], np.float32))
    with pytest.raises(mhla.InvalidShape, match="causal Mc is square"):
        ctx.forward(q, k, v, np.ones((4, 2), np.float32), causal=True)


def test_backward_refusals(ctx, args, rng):
    q, k, v, m = args
    with pytest.raises(mhla.InvalidShape, match="dout has shape"):
        ctx.backward(q, k, v, m, rand(rng, (1, 64, 2, 4)), blocks=4)
    with pytest.raises(mhla.InvalidArgument, match="dout has dtype float16"):
        ctx.backward(q, k, v, m, v.astype(np.float16), blocks=4)


def test_library_refusals_keep_the_library_message(ctx):
    with pytest.raises(mhla.InvalidArgument, match="unknown|row|field"):
        ctx.set_tuning("no_such_field=3")
    with pytest.raises(mhla.InvalidArgument, match="sigma|param"):
        mhla.init_mixing("exp", 4, param=-1.0)
    with pytest.raises(mhla.InvalidArgument, match="spiral"):
        mhla.init_mixing("spiral", 4)


def test_closed_context(rng):
    c = mhla.Context()
    c.close()
    q, k, v = qkv(rng)
    with pytest.raises(mhla.InvalidArgument, match="closed"):
        c.forward(q, k, v, mhla.init_mixing("paper", 4), blocks=4)
    c.close()  # twice is fine
