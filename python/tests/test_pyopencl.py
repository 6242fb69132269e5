"""pyopencl interop: Context.wrap(queue), forward/backward on pyopencl arrays with no host copy,
results on the same queue, views and foreign contexts refused."""
import numpy as np
import pytest

import mhla
from conftest import qkv, rand

cl = pytest.importorskip("pyopencl")
cla = pytest.importorskip("pyopencl.array")


@pytest.fixture(scope="module")
def queue():
    """A queue on the device the suite runs on (MHLA_DEVICE names it, matched like the library)."""
    spec = mhla.Context().device_name
    for platform in cl.get_platforms():
        for device in platform.get_devices():
            if device.name in spec:
                return cl.CommandQueue(cl.Context([device]))
    pytest.skip("no pyopencl device matches %r" % spec)


@pytest.fixture(scope="module")
def wrapped(queue):
    c = mhla.Context.wrap(queue)
    yield c
    c.close()


def to_dev(queue, *xs):
    return [cla.to_device(queue, x) for x in xs]


def test_forward_on_device_arrays(wrapped, queue, rng):
    q, k, v = qkv(rng, n=64)
    m = mhla.init_mixing("paper", 4)
    out = wrapped.forward(*to_dev(queue, q, k, v, m), blocks=4)
    assert isinstance(out, cla.Array) and out.queue is queue and out.shape == v.shape
    got = out.get()
    assert mhla.max_rel_err(got, mhla.reference_forward(q, k, v, m, blocks=4)) <= 1e-5
    np.testing.assert_array_equal(got, wrapped.forward(q, k, v, m, blocks=4))  # host path agrees


def test_causal_varlen_and_backward_on_device_arrays(wrapped, queue, rng):
    cu = np.array([0, 30, 64], np.int32)
    q, k, v = qkv(rng, n=64)
    m = mhla.init_mixing("causal-uniform", 2)
    kw = dict(causal=True, chunk=32, cu_seqlens=cu)
    out = wrapped.forward(*to_dev(queue, q, k, v, m), **kw)
    assert mhla.max_rel_err(out.get(), mhla.reference_forward(q, k, v, m, **kw)) <= 1e-5
    dout = rand(rng, v.shape)
    grads = wrapped.backward(*to_dev(queue, q, k, v, m, dout), **kw)
    ref = mhla.reference_backward(q, k, v, m, dout, **kw)
    for g, r in zip(grads, ref):
        assert isinstance(g, cla.Array)
        assert mhla.max_rel_err(g.get(), r) <= 1e-4


def test_device_result_feeds_the_next_call(wrapped, queue, rng):
    """The output's event orders a pyopencl operation that reads it after the library's kernels."""
    q, k, v = qkv(rng, n=64)
    m = mhla.init_mixing("paper", 4)
    dq, dk, dv, m_d = to_dev(queue, q, k, v, m)
    out = wrapped.forward(dq, dk, dv, m_d, blocks=4)
    twice = (out * 2).get()
    np.testing.assert_array_equal(twice, 2 * wrapped.forward(q, k, v, m, blocks=4))


def test_views_and_mixed_arguments_refused(wrapped, queue, rng):
    q, k, v = qkv(rng, n=64)
    m = mhla.init_mixing("paper", 4)
    dq, dk, dv, dm = to_dev(queue, q, k, v, m)
    big = cla.to_device(queue, np.concatenate([q, q], axis=0))
    with pytest.raises(mhla.InvalidArgument, match="q starts 4096 bytes into its buffer"):
        wrapped.forward(big[1:], dk, dv, dm, blocks=4)
    with pytest.raises(mhla.InvalidArgument, match="k is a ndarray but q is a pyopencl array"):
        wrapped.forward(dq, k, dv, dm, blocks=4)
    other = cl.CommandQueue(cl.Context([queue.device]))
    with pytest.raises(mhla.InvalidArgument, match="v lives in another OpenCL context"):
        wrapped.forward(dq, dk, cla.to_device(other, v), dm, blocks=4)
    with pytest.raises(mhla.InvalidArgument, match="need a context made by mhla.Context.wrap"):
        mhla.Context().forward(dq, dk, dv, dm, blocks=4)


def test_wrap_refuses_what_is_not_a_queue():
    with pytest.raises(mhla.InvalidArgument, match="pyopencl.CommandQueue, not int"):
        mhla.Context.wrap(3)
