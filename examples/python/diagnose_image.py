#!/usr/bin/env python3
"""Writes q.npy and k.npy for `mhla diagnose` from a structured input: a 32x32 synthetic image (a
smooth pattern, a disc and a bar), each token's features its 3x3 neighbourhood and 7 positional
terms, projected to 2 heads of Dk = 16 by fixed random matrices (seed 0), as a vision
transformer's first layer would see it. The README's `mhla diagnose` example runs it.

usage: diagnose_image.py [OUTDIR]
"""
import os
import sys

import numpy as np


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    rng = np.random.default_rng(0)
    side, heads, dk = 32, 2, 16
    y, x = np.mgrid[0:side, 0:side] / side
    img = (np.sin(6 * x) * np.cos(4 * y) + 2.0 * (((x - 0.3) ** 2 + (y - 0.6) ** 2) < 0.04)
           + 1.5 * ((np.abs(x - 0.7) < 0.1) & (np.abs(y - 0.3) < 0.15)))
    pad = np.pad(img, 1, mode="edge")
    patches = np.stack([pad[1 + dy:1 + dy + side, 1 + dx:1 + dx + side] for dy in (-1, 0, 1) for dx in (-1, 0, 1)],
                       -1).reshape(side * side, 9)
    pos = [np.sin(np.pi * f * c.reshape(-1, 1)) for c in (x, y) for f in (1, 2, 3)] + [np.ones((side * side, 1))]
    feats = np.concatenate([patches] + pos, 1)  # [N, 16]
    proj = lambda: np.stack([feats @ rng.standard_normal((16, dk)) * 0.7 for _ in range(heads)], 1)[None]
    q, k = proj().astype(np.float32), proj().astype(np.float32)  # [1, N, H, Dk]
    np.save(os.path.join(out, "q.npy"), q)
    np.save(os.path.join(out, "k.npy"), k)
    print("wrote q.npy, k.npy: [1, %d, %d, %d] (a %dx%d image)" % (side * side, heads, dk, side, side))


if __name__ == "__main__":
    main()
