"""mhla.Context: one OpenCL device (or a pyopencl queue), plans cached per configuration, and the
forward and backward passes on NumPy arrays (through host memory) or pyopencl arrays (no host
copy)."""
import collections
import threading

import numpy as np

from . import _config
from ._config import Options, check_array, prepare
from ._ffi import bad_shape, check, ffi, lib
from ._ffi import invalid as _bad

# Plans kept per context: each holds its kernels and workspace; a training loop uses a handful.
PLAN_CACHE = 32


def _is_cl_array(x):
    return hasattr(x, "base_data") and hasattr(x, "queue") and hasattr(x, "offset")


class _Plan:
    __slots__ = ("handle", "lock")

    def __init__(self, handle):
        self.handle, self.lock = handle, threading.Lock()


class Context:
    """An OpenCL device for libmhla. `device`: None (MHLA_DEVICE, else the first GPU, else the first
    device), "P:D", an index, or a name substring ("pthread", "NVIDIA"). Plans are created on first
    use of a configuration and kept (the last 32); close() (or `with`) releases everything."""

    def __init__(self, device=None, _handle=None, _queue=None):
        self._plans = collections.OrderedDict()
        self._lock = threading.Lock()
        self._children = []  # decoders, closed before the context
        self._queue = _queue  # the pyopencl queue of a wrapped context (keeps it alive)
        if _handle is not None:
            self._ctx = _handle
            return
        out = ffi.new("mhla_context **")
        check(lib.mhla_context_create(device.encode() if device else ffi.NULL, out))
        self._ctx = out[0]

    @classmethod
    def wrap(cls, queue):
        """A context on an application's pyopencl CommandQueue: the library enqueues its work on that
        queue (so it is ordered with the application's own) and forward/backward take and return
        pyopencl arrays on it."""
        if not hasattr(queue, "int_ptr") or not hasattr(queue, "context"):
            raise _bad("Context.wrap takes a pyopencl.CommandQueue, not %s" % type(queue).__name__)
        out = ffi.new("mhla_context **")
        check(lib.mhla_context_wrap(ffi.cast("cl_context", queue.context.int_ptr),
                                    ffi.cast("cl_command_queue", queue.int_ptr), out))
        return cls(_handle=out[0], _queue=queue)

    # ---- lifetime -----------------------------------------------------------------------------
    def close(self):
        with self._lock:
            for child in self._children:
                child.close()
            self._children = []
            for plan in self._plans.values():
                lib.mhla_plan_destroy(plan.handle)
            self._plans.clear()
            if self._ctx is not None:
                lib.mhla_context_destroy(self._ctx)
                self._ctx = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _handle(self):
        if self._ctx is None:
            raise _bad("this mhla.Context is closed")
        return self._ctx

    # ---- what it runs on ----------------------------------------------------------------------
    @property
    def device_name(self):
        return ffi.string(lib.mhla_context_device_name(self._handle())).decode()

    @property
    def queue(self):
        """The pyopencl queue of a wrapped context, else None."""
        return self._queue

    @property
    def tuning(self):
        buf = ffi.new("char[]", 4096)
        check(lib.mhla_context_tuning(self._handle(), buf, 4096), self._ctx)
        return ffi.string(buf).decode()

    def set_tuning(self, spec):
        """Overrides the tuning for plans created afterwards ("row=gpu", "wg=64,...", "" clears);
        the plans cached so far are dropped so that the next call uses it."""
        check(lib.mhla_context_set_tuning(self._handle(), (spec or "").encode()), self._ctx)
        with self._lock:
            for plan in self._plans.values():
                lib.mhla_plan_destroy(plan.handle)
            self._plans.clear()

    # ---- device time per kernel ----------------------------------------------------------------
    def profile_kernels(self, on=True):
        """Records every kernel this context enqueues from now on, the library's and CLBlast's
        (on=True; one OpenCL event per launch), for kernel_times(); on=False stops and drops the
        records. Raises mhla.Unsupported for a wrapped queue made without
        profiling."""
        check(lib.mhla_context_profile_kernels(self._handle(), 1 if on else 0), self._ctx)

    def kernel_times(self):
        """Waits for the queue, then returns the launches recorded since the last call as a list
        of (name, calls, ms) in the order of first launch: ms is the device time summed over the
        calls, None where the implementation gave no times. Launches past the records' capacity
        come last as ("(dropped)", count, None). The records are emptied; recording goes on."""
        size = 1 << 16
        buf = ffi.new("char[]", size)
        check(lib.mhla_context_kernel_times(self._handle(), buf, size), self._ctx)
        rows = []
        for line in ffi.string(buf).decode().splitlines():
            if line.startswith("(dropped "):
                rows.append(("(dropped)", int(line.split()[1]), None))
                continue
            name, calls, ms = line.rsplit(" ", 2)
            rows.append((name, int(calls), None if ms == "untimed" else float(ms)))
        return rows

    # ---- plans ---------------------------------------------------------------------------------
    def _plan(self, cfg, key, softmax):
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                return plan
            out = ffi.new("mhla_plan **")
            create = lib.mhla_softmax_plan_create if softmax else lib.mhla_plan_create
            check(create(self._handle(), cfg, out), self._ctx)
            plan = _Plan(out[0])
            self._plans[key] = plan
            while len(self._plans) > PLAN_CACHE:
                _, old = self._plans.popitem(last=False)
                with old.lock:
                    lib.mhla_plan_destroy(old.handle)
            return plan

    def plans(self):
        """How many plans the context holds (one per configuration used, at most 32)."""
        return len(self._plans)

    # ---- forward ------------------------------------------------------------------------------
    def forward(self, q, k, v, mixing=None, *, grid=None, blocks=None, normalizer=None,
                feature_map=None, causal=False, chunk=None, cu_seqlens=None, dtype=None,
                layout="bnhd", scale=None, eps=None, feature_eps=None, out=None, kv_grid=None,
                kv_blocks=None):
        """MHLA's output for q [B,N,H,Dk], k [B,N_kv,H_kv,Dk] and v [B,N_kv,H_kv,Dv] (layout "bnhd";
        "bhnd" is [B,H,N,D]), shaped like q with v's Dv. mixing: float32 M x M_kv (M = the product of
        `blocks`, M_kv of `kv_blocks`), or R x R for causal=True (R >= ceil(N / chunk)).
        Cross-attention (non-causal): k and v on their own token grid `kv_grid` (default: `grid` where
        N_kv = N, else 1D) in `kv_blocks` (default `blocks` on the query grid). Grouped key/value heads:
        H_kv dividing H, query head h reading kv head h // (H // H_kv), from the shapes alone.
        Options default to the library's (docs/spec.md "Defaults"): see help(mhla). out: an array
        to write into (NumPy inputs: C-contiguous, the output's shape and dtype), which saves the
        first-touch page faults of a fresh output on every call (about 10% at N = 16384 on a CPU
        device)."""
        opts = Options(grid, blocks, normalizer, feature_map, causal, chunk, cu_seqlens, dtype,
                       layout, scale, eps, feature_eps, kv_grid=kv_grid, kv_blocks=kv_blocks)
        return self._forward(q, k, v, mixing, opts, out)

    def softmax(self, q, k, v, *, grid=None, dtype=None, layout="bnhd", scale=None):
        """Softmax attention over all N tokens (the baseline MHLA is measured against)."""
        opts = Options(grid=grid, dtype=dtype, layout=layout, scale=scale, softmax=True)
        return self._forward(q, k, v, None, opts)

    def _forward(self, q, k, v, mixing, opts, out=None):
        if _is_cl_array(q):
            if out is not None:
                raise _bad("out= is for NumPy arrays; the pyopencl path returns a new array")
            return self._forward_cl(q, k, v, mixing, opts)
        cfg, key, shapes, _, cu = prepare(opts, [(q, "q"), (k, "k"), (v, "v")], mixing)
        plan = self._plan(cfg, key, opts.softmax)
        if out is None:
            out = np.empty(shapes[3], dtype=_config.numpy_dtype(opts.dtype))
        else:
            if not isinstance(out, np.ndarray) or check_array(out, "out", opts.dtype) != shapes[3]:
                raise bad_shape("out must be an ndarray shaped like the output, %s (got %s)"
                                % (shapes[3], getattr(out, "shape", type(out).__name__)))
            if not out.flags.writeable or any(np.shares_memory(out, x) for x in (q, k, v, mixing) if x is not None):
                raise _bad("out must be writable and share no memory with q, k, v or mixing")
        fb = ffi.from_buffer
        mix = fb("float[]", mixing) if mixing is not None else ffi.NULL
        with plan.lock:
            if cu is not None:
                st = lib.mhla_forward_varlen_host(plan.handle, fb(q), fb(k), fb(v), mix,
                                                  fb("int32_t[]", cu), cu.size - 1, fb(out, require_writable=True))
            else:
                st = lib.mhla_forward_host(plan.handle, fb(q), fb(k), fb(v), mix, fb(out, require_writable=True))
        check(st, self._ctx)
        return out

    # ---- backward -----------------------------------------------------------------------------
    def backward(self, q, k, v, mixing, dout, *, grid=None, blocks=None, normalizer=None,
                 feature_map=None, causal=False, chunk=None, cu_seqlens=None, dtype=None,
                 layout="bnhd", scale=None, eps=None, feature_eps=None, dmixing=True, kv_grid=None,
                 kv_blocks=None):
        """The gradients of forward()'s output against dout = dL/dO: (dq, dk, dv, dmixing), the first
        three shaped and typed like q, k, v (dk and dv summed over the query heads that share a
        key/value head), dmixing float32 like mixing (summed over batch and heads; None with
        dmixing=False, which skips that work)."""
        opts = Options(grid, blocks, normalizer, feature_map, causal, chunk, cu_seqlens, dtype,
                       layout, scale, eps, feature_eps, kv_grid=kv_grid, kv_blocks=kv_blocks)
        if _is_cl_array(q):
            return self._backward_cl(q, k, v, mixing, dout, opts, dmixing)
        cfg, key, shapes, mshape, cu = prepare(opts, [(q, "q"), (k, "k"), (v, "v"), (dout, "dout")], mixing)
        plan = self._plan(cfg, key, False)
        npd = _config.numpy_dtype(opts.dtype)
        grads = [np.empty(s, dtype=npd) for s in shapes[:3]]
        dmix = np.empty(mshape, dtype=np.float32) if dmixing else None
        fb = ffi.from_buffer
        w = [fb(g, require_writable=True) for g in grads]
        dm = fb("float[]", dmix, require_writable=True) if dmix is not None else ffi.NULL
        with plan.lock:
            if cu is not None:
                st = lib.mhla_backward_varlen_host(plan.handle, fb(q), fb(k), fb(v), fb("float[]", mixing),
                                                   fb("int32_t[]", cu), cu.size - 1, fb(dout), w[0], w[1], w[2], dm)
            else:
                st = lib.mhla_backward_host(plan.handle, fb(q), fb(k), fb(v), fb("float[]", mixing), fb(dout),
                                            w[0], w[1], w[2], dm)
        check(st, self._ctx)
        return grads[0], grads[1], grads[2], dmix

    # ---- pyopencl arrays: cl_mem in, cl_mem out, on the wrapped queue ---------------------------
    def _cl_mem(self, x, what, waits):
        if not _is_cl_array(x):
            raise _bad("%s is a %s but q is a pyopencl array: pass every tensor as a pyopencl array"
                       % (what, type(x).__name__))
        if x.offset != 0:
            raise _bad("%s starts %d bytes into its buffer (a view): libmhla takes whole buffers; "
                       "pass a copy (x.copy()) or the base array" % (what, x.offset))
        if x.context.int_ptr != int(ffi.cast("intptr_t", lib.mhla_context_cl_context(self._handle()))):
            raise _bad("%s lives in another OpenCL context than this mhla.Context: create it with "
                       "mhla.Context.wrap(queue) on the arrays' queue" % what)
        waits.extend(e.int_ptr for e in getattr(x, "events", ()))
        return ffi.cast("cl_mem", x.base_data.int_ptr)

    def _cl_call(self, fn, args, outs):
        """Runs an enqueue call with the inputs' events to wait for, and hands its done event to
        every output array so that pyopencl orders what reads them after it."""
        import pyopencl as cl

        waits = args.pop()
        wl = ffi.new("cl_event[]", [ffi.cast("cl_event", p) for p in waits]) if waits else ffi.NULL
        done = ffi.new("cl_event *")
        check(fn(*args, len(waits), wl, done), self._ctx)
        event = cl.Event.from_int_ptr(int(ffi.cast("intptr_t", done[0])), retain=False)
        for o in outs:
            o.add_event(event)

    def _cl_prepare(self, q, k, v, mixing, opts, extra=()):
        import pyopencl.array as cla

        if self._queue is None:
            raise _bad("pyopencl arrays need a context made by mhla.Context.wrap(queue)")
        waits = []
        named = [(q, "q"), (k, "k"), (v, "v")] + list(extra)
        mems = [self._cl_mem(x, n, waits) for x, n in named]
        mix = ffi.NULL if opts.softmax else self._cl_mem(mixing, "mixing", waits)
        cfg, key, shapes, mshape, cu = prepare(opts, named, mixing)
        plan = self._plan(cfg, key, opts.softmax)
        return cla, plan, mems, shapes, mix, mshape, cu, waits

    def _forward_cl(self, q, k, v, mixing, opts):
        cla, plan, mems, shapes, mix, _, cu, waits = self._cl_prepare(q, k, v, mixing, opts)
        out = cla.empty(self._queue, shapes[3], _config.numpy_dtype(opts.dtype))
        o = ffi.cast("cl_mem", out.base_data.int_ptr)
        with plan.lock:
            if cu is not None:
                self._cl_call(lib.mhla_forward_varlen, [plan.handle, *mems, mix, ffi.from_buffer("int32_t[]", cu),
                                                         cu.size - 1, o, waits], [out])
            else:
                self._cl_call(lib.mhla_forward, [plan.handle, *mems, mix, o, waits], [out])
        return out

    def _backward_cl(self, q, k, v, mixing, dout, opts, want_dmixing):
        cla, plan, mems, shapes, mix, mshape, cu, waits = self._cl_prepare(q, k, v, mixing, opts, [(dout, "dout")])
        npd = _config.numpy_dtype(opts.dtype)
        grads = [cla.empty(self._queue, s, npd) for s in shapes[:3]]
        dmix = cla.empty(self._queue, mshape, np.float32) if want_dmixing else None
        gm = [ffi.cast("cl_mem", g.base_data.int_ptr) for g in grads]
        dm = ffi.cast("cl_mem", dmix.base_data.int_ptr) if dmix is not None else ffi.NULL
        outs = grads + ([dmix] if dmix is not None else [])
        with plan.lock:
            if cu is not None:
                self._cl_call(lib.mhla_backward_varlen, [plan.handle, *mems[:3], mix, ffi.from_buffer("int32_t[]", cu),
                                                          cu.size - 1, mems[3], *gm, dm, waits], outs)
            else:
                self._cl_call(lib.mhla_backward, [plan.handle, *mems[:3], mix, mems[3], *gm, dm, waits], outs)
        return grads[0], grads[1], grads[2], dmix
