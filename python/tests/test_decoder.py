"""mhla.Decoder: step == prefill == the chunk form (docs/spec.md "Causal MHLA": the recurrent form
must give the chunk form's outputs), state bytes round trip, capacity."""
import numpy as np
import pytest

import mhla
from conftest import numpy_causal, qkv


def test_step_prefill_and_chunk_form_agree(ctx, rng):
    q, k, v = qkv(rng, n=40)
    mixing = mhla.init_mixing("causal-uniform", 3)
    chunk_form = ctx.forward(q, k, v, mixing, causal=True, chunk=16)
    ref = numpy_causal(q, k, v, mixing, 16)
    dec = mhla.Decoder(ctx, heads=2, dk=8, dv=8, capacity=48, chunk=16)
    assert dec.mixing_rows == 3 and dec.capacity == 48
    stepped = dec.step(q, k, v, mixing)
    assert dec.position == 40
    dec.reset()
    half = lambda x, a, b: np.ascontiguousarray(x[:, a:b])
    pre = np.concatenate([dec.prefill(half(q, 0, 23), half(k, 0, 23), half(v, 0, 23), mixing),
                          dec.step(half(q, 23, 40), half(k, 23, 40), half(v, 23, 40), mixing)], axis=1)
    for got in (stepped, pre):
        assert mhla.max_rel_err(got, ref) <= 1e-5
        assert mhla.max_rel_err(got, chunk_form.astype(np.float64)) <= 1e-5


def test_default_chunk_is_64(ctx, rng):
    """Without chunk=, the decoder's C is the library's 64, as in Context.forward: the chunk is part
    of the model (Mc's rows are chunks)."""
    dec = mhla.Decoder(ctx, heads=2, dk=8, capacity=150)
    assert dec.mixing_rows == 3  # ceil(150 / 64); C = 128 would give 2
    q, k, v = qkv(rng, n=150)
    mixing = mhla.init_mixing("causal-uniform", 3)
    assert mhla.max_rel_err(dec.prefill(q, k, v, mixing), numpy_causal(q, k, v, mixing, 64)) <= 1e-5


def test_state_round_trip(ctx, rng):
    q, k, v = qkv(rng, n=30)
    mixing = mhla.init_mixing("causal-uniform", 4)
    a = mhla.Decoder(ctx, heads=2, dk=8, capacity=32, chunk=8, mixing_rows=4, normalizer="paper")
    first = lambda x: np.ascontiguousarray(x[:, :21])
    rest = lambda x: np.ascontiguousarray(x[:, 21:])
    a.prefill(first(q), first(k), first(v), mixing)
    state = a.state()
    assert isinstance(state, bytes) and state[:8] == b"MHLADEC\0"
    b = mhla.Decoder(ctx, heads=2, dk=8, capacity=32, chunk=8, mixing_rows=4, normalizer="paper")
    b.load_state(state)
    assert b.position == 21
    np.testing.assert_array_equal(a.step(rest(q), rest(k), rest(v), mixing),
                                  b.step(rest(q), rest(k), rest(v), mixing))
    with pytest.raises(mhla.InvalidArgument, match="magic|header"):
        b.load_state(b"X" * len(state))
    with pytest.raises(mhla.InvalidArgument, match="bytes"):
        b.load_state("not bytes")


def test_capacity_exceeded_leaves_the_decoder_unchanged(ctx, rng):
    dec = mhla.Decoder(ctx, heads=2, dk=8, capacity=16, chunk=8)
    q, k, v = qkv(rng, n=12)
    mixing = mhla.init_mixing("causal-uniform", 2)
    dec.step(q, k, v, mixing)
    with pytest.raises(mhla.CapacityExceeded, match="capacity"):
        dec.step(q, k, v, mixing)
    assert dec.position == 12


def test_decoder_refuses_wrong_shapes(ctx, rng):
    dec = mhla.Decoder(ctx, heads=2, dk=8, capacity=16, chunk=8)
    q, k, v = qkv(rng, n=4, h=3)
    with pytest.raises(mhla.InvalidShape, match="q has shape"):
        dec.step(q, k, v, mhla.init_mixing("causal-uniform", 2))
    q, k, v = qkv(rng, n=4)
    with pytest.raises(mhla.InvalidShape, match="mixing has shape"):
        dec.step(q, k, v, mhla.init_mixing("causal-uniform", 3))
