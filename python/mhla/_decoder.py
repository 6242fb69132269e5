"""mhla.Decoder: the streaming causal decoder (docs/spec.md "Streaming decoder") on NumPy
arrays: step tokens one at a time, prefill a prompt, save and restore the state as bytes."""
import numpy as np

from . import _config
from ._ffi import bad_shape, check, ffi, invalid, lib


class Decoder:
    """A causal decoder on `ctx` for `capacity` tokens of one configuration: q [B,n,H,Dk], k
    [B,n,H_kv,Dk] and v [B,n,H_kv,Dv] (layout "bnhd", or [B,H,n,D] for "bhnd"; kv_heads = H_kv
    dividing H, default H: grouped key/value heads keep H_kv heads' state), mixing R x R float32
    with R = mixing_rows (0: ceil(capacity / chunk))."""

    def __init__(self, ctx, *, heads, dk, dv=None, capacity, batch=1, chunk=None, mixing_rows=0,
                 normalizer=None, feature_map=None, scale=None, eps=None, feature_eps=None,
                 dtype="f32", layout="bnhd", kv_heads=None):
        _config.dtype_of(dtype, None)
        cfg = ffi.new("mhla_config *")
        lib.mhla_config_init_causal(cfg)
        cfg.batch, cfg.heads, cfg.dk, cfg.dv = batch, heads, dk, dk if dv is None else dv
        cfg.kv_heads = 0 if kv_heads is None else int(kv_heads)
        cfg.seq_t = capacity
        cfg.mixing_rows = mixing_rows
        cfg.dtype = _config._DTYPES[dtype][0]
        cfg.layout = _config._pick(_config._LAYOUTS, layout, "layout")
        if chunk is not None:
            cfg.chunk = chunk
        if normalizer is not None:
            cfg.normalizer = _config._pick(_config._NORMALIZERS, normalizer, "normalizer")
        if feature_map is not None:
            cfg.feature_map = _config._pick(_config._FEATURE_MAPS, feature_map, "feature_map")
        for name, value in (("scale", scale), ("eps", eps), ("feature_eps", feature_eps)):
            if value is not None:
                setattr(cfg, name, float(value))
        out = ffi.new("mhla_decoder **")
        self._ctx = ctx
        check(lib.mhla_decoder_create(ctx._handle(), cfg, int(capacity), out), ctx._ctx)
        self._dec = out[0]
        self.dtype, self.layout = dtype, layout
        resolved = lib.mhla_decoder_config(self._dec)
        self._rows = int(resolved.mixing_rows)
        self._shape = (int(resolved.batch), int(resolved.heads), int(resolved.dk), int(resolved.dv),
                       int(resolved.kv_heads))
        ctx._children.append(self)

    def close(self):
        if getattr(self, "_dec", None) is not None:
            lib.mhla_decoder_destroy(self._dec)
            self._dec = None

    def _handle(self):
        if self._dec is None:
            raise invalid("this mhla.Decoder is closed")
        return self._dec

    @property
    def position(self):
        return int(lib.mhla_decoder_position(self._handle()))

    @property
    def capacity(self):
        return int(lib.mhla_decoder_capacity(self._handle()))

    @property
    def mixing_rows(self):
        return self._rows

    def reset(self):
        check(lib.mhla_decoder_reset(self._handle()), self._ctx._ctx)

    def _tokens(self, q, k, v, mixing):
        b, h, dk, dv, h_kv = self._shape
        arrays = ((q, "q", dk, h), (k, "k", dk, h_kv), (v, "v", dv, h_kv))
        n = None
        for x, name, d, heads in arrays:
            shape = _config.check_array(x, name, self.dtype, ndim=4)
            nn = shape[1] if self.layout == "bnhd" else shape[2]
            want = (b, nn, heads, d) if self.layout == "bnhd" else (b, heads, nn, d)
            if shape != want or (n is not None and nn != n):
                raise bad_shape("%s has shape %s; this decoder takes %s (layout %s)"
                                   % (name, shape, want, self.layout))
            n = nn
        mshape = _config.check_array(mixing, "mixing", "f32", ndim=2)
        if mshape != (self._rows, self._rows):
            raise bad_shape("mixing has shape %s; this decoder's Mc is %d x %d"
                               % (mshape, self._rows, self._rows))
        return n

    def _run(self, fn, q, k, v, mixing):
        n = self._tokens(q, k, v, mixing)
        out = np.empty(_config.out_shape_of(q.shape, v.shape), dtype=v.dtype)
        fb = ffi.from_buffer
        check(fn(self._handle(), fb(q), fb(k), fb(v), fb("float[]", mixing), fb(out, require_writable=True), n),
              self._ctx._ctx)
        return out

    def step(self, q, k, v, mixing):
        """Consumes n tokens one after the other (the recurrent form); returns their outputs."""
        return self._run(lib.mhla_decoder_step_host, q, k, v, mixing)

    def prefill(self, q, k, v, mixing):
        """Consumes n tokens at once (whole chunks through the chunk form); returns their outputs."""
        return self._run(lib.mhla_decoder_prefill_host, q, k, v, mixing)

    def state(self):
        """The decoder's state as bytes (include/mhla.h "Decoder state"); Mc is not in it."""
        size = lib.mhla_decoder_state_size(self._handle())
        buf = ffi.new("char[]", size)
        check(lib.mhla_decoder_state_read(self._dec, buf, size), self._ctx._ctx)
        return bytes(ffi.buffer(buf, size))

    def load_state(self, data):
        """Restores a state from state() of a decoder of the same configuration."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise invalid("load_state takes bytes, not %s" % type(data).__name__)
        check(lib.mhla_decoder_state_write(self._handle(), ffi.from_buffer(data), len(data)), self._ctx._ctx)
