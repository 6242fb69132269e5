"""From arrays and keyword options to an mhla_config: every check a NumPy, pyopencl or PyTorch
caller's arguments need before they reach the library, each refusal naming the argument.

Nothing here copies or converts an array: a wrong dtype, a non-contiguous array or a shape that
does not match the layout is refused, because a silent copy would hide a layout mistake (BNHD
passed as BHND has the same size) and cost the copy on every call."""
import numpy as np

from ._ffi import bad_shape as _shape_err
from ._ffi import ffi, lib
from ._ffi import invalid as _bad

_DTYPES = {"f32": (lib.MHLA_DTYPE_F32, np.dtype(np.float32)),
           "f16": (lib.MHLA_DTYPE_F16, np.dtype(np.float16)),
           # NumPy has no bfloat16: bf16 tensors travel as their uint16 bit patterns
           # (mhla.to_bf16 / mhla.from_bf16, or torch's bfloat16 viewed as int16).
           "bf16": (lib.MHLA_DTYPE_BF16, np.dtype(np.uint16))}
_LAYOUTS = {"bnhd": lib.MHLA_LAYOUT_BNHD, "bhnd": lib.MHLA_LAYOUT_BHND}
_NORMALIZERS = {"paper": lib.MHLA_NORMALIZER_PAPER, "official": lib.MHLA_NORMALIZER_OFFICIAL,
                "none": lib.MHLA_NORMALIZER_NONE}
_FEATURE_MAPS = {"none": lib.MHLA_FEATURE_NONE, "relu": lib.MHLA_FEATURE_RELU,
                 "relu-eps": lib.MHLA_FEATURE_RELU_EPS, "elu1": lib.MHLA_FEATURE_ELU1}


def _pick(table, value, what):
    if value not in table:
        raise _bad("%s=%r is not one of %s" % (what, value, ", ".join(sorted(table))))
    return table[value]


def dtype_of(name, array_dtype, what="q"):
    """The library dtype for `name` (None: from the array's dtype), refusing a mismatch."""
    if name is None:
        for key, (_, npd) in _DTYPES.items():
            if array_dtype == npd and key != "bf16":
                return key
        if array_dtype == np.dtype(np.uint16):
            raise _bad("%s is uint16: pass dtype='bf16' if it holds bfloat16 bit patterns" % what)
        raise _bad("%s has dtype %s: libmhla takes float32 (f32), float16 (f16) or uint16 bfloat16 "
                   "bit patterns (dtype='bf16')" % (what, array_dtype))
    _pick(_DTYPES, name, "dtype")
    return name


def numpy_dtype(name):
    return _DTYPES[name][1]


def check_array(x, what, dtype_name, ndim=None):
    """x must be C-contiguous with the dtype the storage type needs; returns its shape."""
    if x is None:
        raise _bad("%s is None" % what)
    want = _DTYPES[dtype_name][1] if dtype_name is not None else None
    dt = np.dtype(x.dtype)
    if want is not None and dt != want:
        raise _bad("%s has dtype %s but dtype=%r needs %s (nothing is converted: convert it first)"
                   % (what, dt, dtype_name, want))
    if ndim is not None and len(x.shape) != ndim:
        raise _shape_err("%s has %d dimensions %s, expected %d" % (what, len(x.shape), tuple(x.shape), ndim))
    if not x.flags.c_contiguous:  # numpy and pyopencl arrays both say so
        raise _bad("%s is not C-contiguous (shape %s, strides %s): pass a contiguous array "
                   "(np.ascontiguousarray) in the layout you name" % (what, tuple(x.shape), tuple(x.strides)))
    return tuple(int(s) for s in x.shape)


def out_shape_of(q_shape, v_shape):
    """The output's shape: q's, with v's head dimension (the last extent in both layouts)."""
    return tuple(q_shape[:3]) + (v_shape[3],) if len(q_shape) == 4 and len(v_shape) == 4 else tuple(v_shape)


def grid3(grid, n, what):
    """An int or 1-3 extents as (T, H, W): (N,) -> (N, 1, 1), (H, W) -> (1, H, W); None -> (n, 1, 1)."""
    if grid is None:
        return (n, 1, 1)
    g = tuple(int(v) for v in (grid if isinstance(grid, (tuple, list)) else (grid,)))
    if len(g) == 1:
        return (g[0], 1, 1)
    if len(g) == 2:
        return (1, g[0], g[1])
    if len(g) == 3:
        return g
    raise _shape_err("%s=%r must have 1 to 3 extents" % (what, grid))


class Options:
    """The keyword options of forward/backward, resolved once, with a hashable key."""

    def __init__(self, grid=None, blocks=None, normalizer=None, feature_map=None, causal=False,
                 chunk=None, cu_seqlens=None, dtype=None, layout="bnhd", scale=None, eps=None,
                 feature_eps=None, softmax=False, kv_grid=None, kv_blocks=None):
        self.grid, self.blocks = grid, blocks
        self.kv_grid, self.kv_blocks = kv_grid, kv_blocks
        self.normalizer, self.feature_map = normalizer, feature_map
        self.causal, self.chunk = bool(causal), chunk
        self.cu_seqlens = cu_seqlens
        self.dtype, self.layout = dtype, layout
        self.scale, self.eps, self.feature_eps = scale, eps, feature_eps
        self.softmax = bool(softmax)


def build(opts, q_shape, k_shape, v_shape, mixing_shape):
    """(mhla_config cdata, key) for these shapes; raises naming the first thing that is wrong."""
    layout = _pick(_LAYOUTS, opts.layout, "layout")
    if len(q_shape) != 4:
        raise _shape_err("q has shape %s: expected 4 dimensions, %s" % (
            q_shape, "[B, N, H, Dk]" if opts.layout == "bnhd" else "[B, H, N, Dk]"))
    def split(shape, what):
        if len(shape) != 4:
            raise _shape_err("%s has shape %s: expected 4 dimensions like q" % (what, shape))
        b, a1, a2, d = shape
        return (b, a1, a2, d) if opts.layout == "bnhd" else (b, a2, a1, d)
    b, n, h, dk = split(q_shape, "q")
    # k and v have their own tokens (cross-attention) and heads (grouped key/value heads)
    bk, n_kv, h_kv, dk2 = split(k_shape, "k")
    if bk != b:
        raise _shape_err("k has shape %s but q has %s: B must agree (layout %s)" % (k_shape, q_shape, opts.layout))
    if split(v_shape, "v")[:3] != (bk, n_kv, h_kv):
        raise _shape_err("v has shape %s but k has %s: B, N and H must agree (layout %s)"
                         % (v_shape, k_shape, opts.layout))
    if dk2 != dk:
        raise _shape_err("k has head dimension %d but q has %d" % (dk2, dk))
    if h % h_kv:
        raise _shape_err("k and v have %d heads, which do not divide q's %d (each key/value head serves "
                         "H / H_kv query heads)" % (h_kv, h))
    dv = split(v_shape, "v")[3]

    cfg = ffi.new("mhla_config *")
    (lib.mhla_config_init_causal if opts.causal else lib.mhla_config_init)(cfg)
    cfg.batch, cfg.heads, cfg.dk, cfg.dv = b, h, dk, dv
    cfg.kv_heads = h_kv
    cfg.layout = layout
    cfg.dtype = _DTYPES[opts.dtype][0]
    if opts.normalizer is not None:
        cfg.normalizer = _pick(_NORMALIZERS, opts.normalizer, "normalizer")
    if opts.feature_map is not None:
        cfg.feature_map = _pick(_FEATURE_MAPS, opts.feature_map, "feature_map")
    if opts.scale is not None:
        cfg.scale = float(opts.scale)
    if opts.eps is not None:
        cfg.eps = float(opts.eps)
    if opts.feature_eps is not None:
        cfg.feature_eps = float(opts.feature_eps)

    if opts.causal and (opts.kv_grid is not None or opts.kv_blocks is not None or n_kv != n):
        raise _bad("kv_grid, kv_blocks or keys of their own length (%d for %d queries): cross-attention is "
                   "non-causal" % (n_kv, n))
    if opts.softmax and n_kv != n:  # every query sees every key: the keys' grid does not matter
        cfg.kv_seq_t, cfg.kv_seq_h, cfg.kv_seq_w = n_kv, 1, 1
    if opts.causal:
        if opts.grid is not None and grid3(opts.grid, n, "grid")[1:] != (1, 1):
            raise _bad("grid=%r: the causal chunk form takes a 1D sequence" % (opts.grid,))
        if opts.blocks is not None:
            raise _bad("blocks=%r: the causal chunk form has chunks, not blocks (use chunk=)" % (opts.blocks,))
        cfg.causal = 1
        cfg.seq_t = n
        if opts.chunk is not None:
            cfg.chunk = int(opts.chunk)
        if mixing_shape is not None:
            if len(mixing_shape) != 2 or mixing_shape[0] != mixing_shape[1]:
                raise _shape_err("mixing has shape %s: the causal Mc is square, R x R with "
                                 "R >= ceil(N / chunk)" % (mixing_shape,))
            cfg.mixing_rows = mixing_shape[0]
        if opts.cu_seqlens is not None:
            cfg.varlen = 1
    else:
        if opts.cu_seqlens is not None:
            raise _bad("cu_seqlens is given but causal=False: packed variable-length batches "
                       "are a causal mode")
        t, hs, ws = grid3(opts.grid, n, "grid")
        if t * hs * ws != n:
            raise _shape_err("grid=%r has %d tokens but the arrays have N = %d" % (opts.grid, t * hs * ws, n))
        cfg.seq_t, cfg.seq_h, cfg.seq_w = t, hs, ws
        if not opts.softmax:
            blocks = opts.blocks
            if blocks is None:
                if mixing_shape is None or len(mixing_shape) != 2:
                    raise _bad("blocks= is needed (the block grid), or a square mixing matrix")
                if (hs, ws) != (1, 1):
                    raise _bad("blocks= is needed for a %s grid: the M x M mixing matrix does not say "
                               "how the blocks tile it" % ("2D" if t == 1 else "3D"))
                blocks = (mixing_shape[0],)
            g = tuple(int(v) for v in (blocks if isinstance(blocks, (tuple, list)) else (blocks,)))
            if opts.grid is not None:
                given = opts.grid if isinstance(opts.grid, (tuple, list)) else (opts.grid,)
                if len(g) != len(given):
                    raise _bad("blocks=%r has %d extents but grid=%r has %d" % (blocks, len(g), opts.grid, len(given)))
            bt, bh, bw = grid3(g, n, "blocks")
            cfg.block_t, cfg.block_h, cfg.block_w = bt, bh, bw
            m = bt * bh * bw
            # the key/value grid: kv_grid, else the query grid where k has q's N, else 1D
            kv = grid3(opts.kv_grid, n_kv, "kv_grid") if opts.kv_grid is not None else \
                ((t, hs, ws) if n_kv == n else (n_kv, 1, 1))
            if kv[0] * kv[1] * kv[2] != n_kv:
                raise _shape_err("kv_grid=%r has %d tokens but k and v have N = %d"
                                 % (opts.kv_grid, kv[0] * kv[1] * kv[2], n_kv))
            if opts.kv_blocks is not None:
                kb = grid3(opts.kv_blocks, n_kv, "kv_blocks")
            elif kv == (t, hs, ws):
                kb = (bt, bh, bw)
            else:
                raise _bad("kv_blocks= is needed: the key/value grid %r is not the query grid %r"
                           % (kv, (t, hs, ws)))
            cross = kv != (t, hs, ws) or kb != (bt, bh, bw)
            if cross:
                cfg.kv_seq_t, cfg.kv_seq_h, cfg.kv_seq_w = kv
                cfg.kv_block_t, cfg.kv_block_h, cfg.kv_block_w = kb
            m_kv = kb[0] * kb[1] * kb[2]
            if mixing_shape is not None and tuple(mixing_shape) != (m, m_kv):
                raise _shape_err("mixing has shape %s but blocks=%r make M = %d: expected (%d, %d)%s"
                                 % (tuple(mixing_shape), blocks, m, m, m_kv,
                                    " (M_kv = %d blocks of kv_blocks=%r)" % (m_kv, opts.kv_blocks) if cross else ""))
    key = tuple(getattr(cfg, f) for f in (
        "batch", "heads", "seq_t", "seq_h", "seq_w", "block_t", "block_h", "block_w", "dk", "dv",
        "layout", "feature_map", "feature_eps", "scale", "normalizer", "eps", "dtype", "causal",
        "chunk", "mixing_rows", "varlen", "kv_heads", "kv_seq_t", "kv_seq_h", "kv_seq_w", "kv_block_t",
        "kv_block_h", "kv_block_w")) + (opts.softmax,)
    return cfg, key


def prepare(opts, named, mixing):
    """Everything forward, backward, the reference and the diagnosis check before the library:
    the storage type (from the first array when opts.dtype is None), each array (dtype,
    contiguity), a dout after q, k, v shaped like the output, the mixing matrix (not for softmax),
    and the configuration. named: [(array, name), ...] with q, k, v first. Returns (cfg, key,
    shapes, mixing shape, cu_seqlens as int32 or None); shapes[3] is the output's, shapes[4]
    dout's where given."""
    opts.dtype = dtype_of(opts.dtype, np.dtype(named[0][0].dtype))
    shapes = [check_array(x, name, opts.dtype) for x, name in named]
    out_shape = out_shape_of(shapes[0], shapes[2])
    if len(shapes) > 3 and shapes[3] != out_shape:
        raise _shape_err("dout has shape %s but the output is shaped %s (q's, with v's head dimension)"
                         % (shapes[3], out_shape))
    shapes.insert(3, out_shape)
    mshape = None if opts.softmax else check_array(mixing, "mixing", "f32", ndim=2)
    cfg, key = build(opts, *shapes[:3], mshape)
    cu = cu_seqlens_array(opts.cu_seqlens) if opts.cu_seqlens is not None else None
    return cfg, key, shapes, mshape, cu


def cu_seqlens_array(cu):
    """cu_seqlens as a C-contiguous int32 array (a list is converted: it is index data, not a tensor)."""
    if isinstance(cu, np.ndarray):
        if cu.dtype != np.int32:
            raise _bad("cu_seqlens has dtype %s: it must be int32" % cu.dtype)
        if cu.ndim != 1 or not cu.flags.c_contiguous:
            raise _bad("cu_seqlens must be a 1D contiguous int32 array (shape %s)" % (cu.shape,))
        arr = cu
    else:
        arr = np.asarray(list(cu), dtype=np.int64)
        if arr.ndim != 1 or (arr.size and (arr.min() < -2**31 or arr.max() >= 2**31)):
            raise _bad("cu_seqlens must be a list of int32 offsets")
        arr = arr.astype(np.int32)
    if arr.size < 2:
        raise _bad("cu_seqlens has %d entries: it needs S + 1 >= 2 offsets" % arr.size)
    return arr
