"""libmhla for Python: Multi-Head Linear Attention (arXiv 2601.07832) on any OpenCL device.

    import numpy as np, mhla
    ctx = mhla.Context()                                   # MHLA_DEVICE, else first GPU, else CPU
    q = k = v = np.random.rand(1, 1024, 8, 64).astype(np.float32)   # [B, N, H, D]
    out = ctx.forward(q, k, v, mhla.init_mixing("paper", 16), blocks=16)
    dq, dk, dv, dmixing = ctx.backward(q, k, v, mhla.init_mixing("paper", 16), np.ones_like(out), blocks=16)

Options of forward/backward (defaults are the library's, docs/spec.md "Defaults"): grid (N,),
(H, W) or (T, H, W) tokens; blocks, the block grid (M = their product); normalizer "paper" |
"official" | "none"; feature_map "relu-eps" | "relu" | "elu1" | "none"; causal; chunk, the causal
chunk size C (default 64, as in the library and `mhla run --causal`: Mc's rows are chunks, so C is
part of the model); cu_seqlens (packed causal batches); dtype "f32" | "f16" | "bf16" (uint16 bit
patterns); layout "bnhd" | "bhnd"; scale, eps, feature_eps. pyopencl arrays work through
mhla.Context.wrap(queue); PyTorch through mhla.torch.
"""
from ._context import Context
from ._decoder import Decoder
from ._ffi import (BlasError, BufferTooSmall, BuildFailed, CapacityExceeded, ConfigMismatch, DeviceError,
                   DeviceNotFound, FileError, InvalidArgument, InvalidShape, MHLAError, MPIError, OpenCLError,
                   OutOfDeviceMemory, OutOfHostMemory, SequenceTooLong, Unsupported)
from ._functions import (devices, diagnose, from_bf16, init_mixing, max_rel_err, reference_backward, reference_forward,
                         to_bf16, tolerance, tune, version)

__version__ = version()
__all__ = ["Context", "Decoder", "devices", "diagnose", "init_mixing", "reference_forward", "reference_backward",
           "max_rel_err", "tolerance", "tune", "to_bf16", "from_bf16", "version", "MHLAError",
           "InvalidArgument", "InvalidShape", "BufferTooSmall", "Unsupported", "DeviceError", "DeviceNotFound",
           "OutOfDeviceMemory", "OutOfHostMemory", "BuildFailed", "OpenCLError", "BlasError", "SequenceTooLong",
           "CapacityExceeded", "ConfigMismatch", "MPIError", "FileError"]
