"""mhla.diagnose and `mhla diagnose` against NumPy computations written here: the three attention
matrices built with NumPy, their singular values (np.linalg.svd), numerical rank and mean row
entropy; the paper's rank bounds on random inputs; the CLI's table, JSON, SVG and refusals."""
import json
import os
import subprocess

import numpy as np
import pytest

import mhla
from conftest import phi


def numpy_matrices(q, k, mixing, blocks_of, causal=False, fm="relu-eps", scale=1.0):
    """Softmax, linear and MHLA attention matrices of head 0, batch 0 (BNHD), rows normalised."""
    Q, K = q[0, :, 0].astype(np.float64), k[0, :, 0].astype(np.float64)
    n, d = Q.shape
    mask = np.tril(np.ones((n, n))) if causal else np.ones((n, n))
    logits = np.where(mask > 0, Q @ K.T / np.sqrt(d), -np.inf)
    sm = np.exp(logits - logits.max(1, keepdims=True))
    dots = (scale * phi(Q, fm)) @ phi(K, fm).T * mask
    mh = dots * mixing.astype(np.float64)[np.ix_(blocks_of, blocks_of)]
    return [a / np.abs(a).sum(1, keepdims=True) for a in (sm, dots, mh)]


def numpy_stats(a, rtol):
    sv = np.linalg.svd(a, compute_uv=False)
    p = np.abs(a)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(p > 0, p * np.log(p), 0).sum(1).mean()
    return sv, int(np.sum(sv > rtol * sv[0])), ent


@pytest.mark.parametrize("case", ["1d", "2d", "causal"])
def test_against_numpy(rng, case):
    n, d = 64, 6
    q = rng.standard_normal((1, n, 1, d)).astype(np.float32)
    k = rng.standard_normal((1, n, 1, d)).astype(np.float32)
    if case == "1d":
        mixing, kw = mhla.init_mixing("exp", 4), dict(blocks=4)
        blocks_of = np.arange(n) // 16
    elif case == "2d":
        mixing, kw = mhla.init_mixing("cos", (2, 2)), dict(grid=(8, 8), blocks=(2, 2))
        y, x = np.divmod(np.arange(n), 8)
        blocks_of = (y // 4) * 2 + x // 4
    else:
        mixing, kw = mhla.init_mixing("causal-uniform", 4), dict(causal=True, chunk=16, feature_map="elu1")
        blocks_of = np.arange(n) // 16
    res = mhla.diagnose(q, k, mixing, **kw)
    assert res["rows"] == n and not res["sampled"]
    mats = numpy_matrices(q, k, mixing, blocks_of, causal=case == "causal", fm=kw.get("feature_map", "relu-eps"),
                          scale=d ** -0.5 if case == "causal" else 1.0)
    for a, name in enumerate(res["kinds"]):
        sv, rank, ent = numpy_stats(mats[a], res["rank_rtol"])
        assert res["rank"][0, a] == rank, name
        assert abs(res["entropy"][0, a] - ent) <= 1e-10 * ent, name
        got = res["sigma"][0, a]
        np.testing.assert_allclose(got[:rank], sv[:rank], rtol=1e-6, atol=1e-9 * sv[0], err_msg=name)


def test_rank_bounds_on_random_inputs(rng):
    """rank(A_linear) <= d and rank(A_MHLA) <= sum over blocks of min(n_b, d), both reached here."""
    n, d, m = 128, 4, 8
    q = rng.standard_normal((1, n, 2, d)).astype(np.float32)
    k = rng.standard_normal((1, n, 2, d)).astype(np.float32)
    mixing = mhla.init_mixing("linear", m) + np.float32(0.05)
    res = mhla.diagnose(q, k, mixing, blocks=m, feature_map="elu1")
    assert res["rank_bound"] == (n, d, m * min(n // m, d))
    assert np.all(res["rank"][:, 1] == d)
    assert np.all(res["rank"][:, 2] == m * d)
    assert np.all(res["rank"][:, 0] > m * d)
    assert np.all(res["entropy"][:, 1] > res["entropy"][:, 2])  # linear attention's rows are flatter


def test_sampled_rows_and_refusals(rng):
    q = rng.standard_normal((1, 200, 1, 4)).astype(np.float32)
    m = mhla.init_mixing("paper", 4)
    res = mhla.diagnose(q, q, m, blocks=4, max_rows=50)
    assert res["rows"] == 50 and res["sampled"] and res["sigma"].shape == (1, 3, 50)
    with pytest.raises(mhla.InvalidShape, match="N = 200 tokens is over the limit of 50"):
        mhla.diagnose(q, q, m, blocks=4, max_rows=50, sample=False)
    with pytest.raises(mhla.InvalidArgument, match="kv_blocks= is needed"):  # keys of their own: cross
        mhla.diagnose(q, q[:, :100].copy(), m, blocks=4)
    with pytest.raises(mhla.InvalidArgument, match="rank_rtol"):
        mhla.diagnose(q, q, m, blocks=4, rank_rtol=2.0)


@pytest.fixture
def cli():
    path = os.environ.get("MHLA_CLI")
    if not path:
        pytest.skip("MHLA_CLI (the built `mhla` tool) is not set: scripts/python-suite.sh sets it")
    return path


def test_cli_table_json_svg(cli, rng, tmp_path):
    n, d = 64, 4
    q = rng.standard_normal((1, n, 2, d)).astype(np.float32)
    k = rng.standard_normal((1, n, 2, d)).astype(np.float32)
    np.save(tmp_path / "q.npy", q), np.save(tmp_path / "k.npy", k)
    p = subprocess.run([cli, "diagnose", "--q", "q.npy", "--k", "k.npy", "--grid", "8x8", "--blocks", "2x2",
                        "--init", "paper", "--json", "d.json", "--svg", "d.svg"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "softmax rank" in p.stdout and "\nmean " in p.stdout
    report = json.loads((tmp_path / "d.json").read_text())
    lib = mhla.diagnose(q, k, mhla.init_mixing("paper", (2, 2)), grid=(8, 8), blocks=(2, 2))
    for a, name in enumerate(lib["kinds"]):
        assert report["heads"][1][name]["rank"] == lib["rank"][1, a]
        np.testing.assert_allclose(report["heads"][1][name]["sigma"], lib["sigma"][1, a], rtol=1e-15)
        assert abs(report["mean"][name]["entropy"] - lib["entropy"][:, a].mean()) < 1e-12
    svg = (tmp_path / "d.svg").read_text()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>") and svg.count("<polyline") == 3
    assert sorted(os.listdir(tmp_path)) == ["d.json", "d.svg", "k.npy", "q.npy"]  # no temporary left


def test_cli_refusals(cli, rng, tmp_path):
    q = rng.standard_normal((1, 300, 1, 4)).astype(np.float32)
    np.save(tmp_path / "q.npy", q), np.save(tmp_path / "k.npy", q[:, :100])
    run = lambda *a: subprocess.run([cli, "diagnose", *a], cwd=tmp_path, capture_output=True, text=True)
    p = run("--q", "q.npy", "--k", "q.npy", "--blocks", "3", "--rows", "100", "--no-sample", "--json", "x.json")
    assert p.returncode == 2 and "N = 300 tokens is over the limit of 100" in p.stderr
    assert p.stderr.count("\n") == 1 and not os.path.exists(tmp_path / "x.json")
    p = run("--q", "q.npy", "--k", "k.npy", "--blocks", "3")
    assert p.returncode == 2 and "missing --kv-blocks" in p.stderr
    p = run("--q", "q.npy", "--k", "q.npy", "--blocks", "3", "--rtol", "1.5")
    assert p.returncode == 2 and "--rtol 1.5" in p.stderr
    p = run("--q", "q.npy", "--k", "q.npy", "--blocks", "3", "--check")
    assert p.returncode == 2 and "--check" in p.stderr


def test_cross_attention_and_grouped_heads(rng):
    """Cross-attention's matrices are (query rows) x (key tokens): an 8x8 image attending to 24
    tokens in 3 blocks, two query heads sharing one key head. MHLA's rank stays within its bound,
    M_kv blocks of min(Nb_kv, Dk) directions each."""
    q = rng.standard_normal((1, 64, 2, 4)).astype(np.float32)
    k = rng.standard_normal((1, 24, 1, 4)).astype(np.float32)
    m = rng.uniform(0.1, 1.0, (4, 3)).astype(np.float32)  # (an initializer's rows are equal on these grids)
    res = mhla.diagnose(q, k, m, grid=(8, 8), blocks=(2, 2), kv_blocks=3)
    assert res["n"] == 64 and res["rows"] == 64 and res["sigma"].shape == (2, 3, 64)
    assert res["rank_bound"] == (24, 4, 12)
    assert (res["rank"][:, 2] <= 12).all() and (res["rank"][:, 1] <= 4).all()
    assert (res["sigma"][:, :, 24:] < 1e-6 * res["sigma"][:, :, :1]).all()  # at most 24 keys: rank <= 24
    # the two query heads read the same keys but their own queries: different spectra
    assert not np.allclose(res["sigma"][0], res["sigma"][1])
