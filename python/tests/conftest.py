"""Shared fixtures: one context on the device MHLA_DEVICE names (the test command sets the PoCL
pthread device), seeded inputs, and the NumPy formulas of docs/spec.md the tests compare against."""
import os

import numpy as np
import pytest

import mhla

# The library's own buffers start as NaN, as in the C tests: a kernel reading an element nothing
# wrote fails here too, whatever the device's fresh memory holds (read each time a buffer is made).
os.environ.setdefault("MHLA_POISON_WORKSPACE", "1")


@pytest.fixture(scope="session")
def ctx():
    c = mhla.Context()
    print("device:", c.device_name, "package:", mhla.__file__)
    yield c
    c.close()


@pytest.fixture
def rng():
    return np.random.default_rng(20261126)


def rand(rng, shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def qkv(rng, b=1, n=64, h=2, dk=8, dv=8, layout="bnhd"):
    shape = (lambda d: (b, n, h, d)) if layout == "bnhd" else (lambda d: (b, h, n, d))
    return rand(rng, shape(dk)), rand(rng, shape(dk)), rand(rng, shape(dv))


def phi(x, fm, feature_eps=1e-6):
    x = x.astype(np.float64)
    if fm == "relu":
        return np.maximum(x, 0)
    if fm == "relu-eps":
        return np.maximum(x, 0) + feature_eps
    if fm == "elu1":
        return np.where(x > 0, x + 1, np.exp(x))
    return x


def numpy_mhla_1d(q, k, v, mixing, m, normalizer="paper", fm="relu-eps", scale=1.0, eps=1e-6):
    """docs/spec.md "Non-causal MHLA" on a 1D grid of M equal blocks, BNHD, in float64."""
    b, n, h, dk = q.shape
    nb = n // m
    qt, kt = scale * phi(q, fm), phi(k, fm)
    v = v.astype(np.float64)
    mc = mixing.astype(np.float64)
    out = np.empty(v.shape)
    for bi in range(b):
        for hi in range(h):
            S = np.stack([kt[bi, j * nb:(j + 1) * nb, hi].T @ v[bi, j * nb:(j + 1) * nb, hi] for j in range(m)])
            z = np.stack([kt[bi, j * nb:(j + 1) * nb, hi].sum(0) for j in range(m)])
            St, zt = np.einsum("ij,jab->iab", mc, S), mc @ z
            for i in range(m):
                qq = qt[bi, i * nb:(i + 1) * nb, hi]
                num = qq @ St[i]
                if normalizer == "paper":
                    num = num / (qq @ zt[i] + eps)[:, None]
                out[bi, i * nb:(i + 1) * nb, hi] = num
    return out


def numpy_causal(q, k, v, mixing, chunk, normalizer="none", fm="relu", scale=None, eps=1e-6):
    """docs/spec.md "Causal MHLA", token by token (not the chunk form the kernels use), BNHD, float64."""
    b, n, h, dk = q.shape
    scale = dk ** -0.5 if scale is None else scale
    qt, kt, v = scale * phi(q, fm), phi(k, fm), v.astype(np.float64)
    mc = mixing.astype(np.float64)
    out = np.empty(v.shape)
    for bi in range(b):
        for hi in range(h):
            for t in range(n):
                i = t // chunk
                num = np.zeros(v.shape[-1])
                den = 0.0
                for s in range(t + 1):
                    w = mc[i, s // chunk] * (qt[bi, t, hi] @ kt[bi, s, hi])
                    num += w * v[bi, s, hi]
                    den += w
                out[bi, t, hi] = num / (den + eps) if normalizer == "paper" else num
    return out


def rel(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert np.all(np.isfinite(got)), "non-finite output"
    return float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))
