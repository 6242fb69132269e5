#!/usr/bin/env python3
"""A tiny vision transformer trained on scikit-learn's bundled 8x8 digits (no download) with three
attention cores on the same OpenCL device: softmax, linear attention (MHLA with M = 1) and MHLA
(2x2 blocks over the 4x4 patch grid), same seeds, same data order, same steps.

Every core's forward runs in libmhla on the device (MHLA_DEVICE, else the first GPU, else PoCL's
CPU device); the MHLA and linear cores' backward is mhla_backward, the softmax core's backward is
PyTorch's on the host (the library has no softmax backward: softmax is the baseline).

Each core trains once per seed (--seeds, default 3: model initialisation and data order), so that
the table's spread says how much of a difference between cores is seed noise.

usage: digits.py [--epochs N] [--batch N] [--seeds N] [--json FILE]
"""
import argparse
import json
import statistics
import time

import numpy as np
import torch
from sklearn.datasets import load_digits

import mhla
import mhla.torch as mt

GRID, PATCH, DIM, HEADS, LAYERS = (4, 4), 2, 32, 2, 2


class Block(torch.nn.Module):
    def __init__(self, core):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(DIM), torch.nn.LayerNorm(DIM)
        self.qkv, self.proj = torch.nn.Linear(DIM, 3 * DIM), torch.nn.Linear(DIM, DIM)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(DIM, 2 * DIM), torch.nn.GELU(), torch.nn.Linear(2 * DIM, DIM))
        self.core = core

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, n, 3, HEADS, DIM // HEADS).unbind(2)  # [B, N, H, D] each
        x = x + self.proj(self.core(q, k, v).reshape(b, n, DIM))
        return x + self.mlp(self.norm2(x))


class ViT(torch.nn.Module):
    def __init__(self, make_core):
        super().__init__()
        self.embed = torch.nn.Linear(PATCH * PATCH, DIM)
        self.pos = torch.nn.Parameter(torch.zeros(1, GRID[0] * GRID[1], DIM))
        self.blocks = torch.nn.ModuleList([Block(make_core()) for _ in range(LAYERS)])
        self.head = torch.nn.Linear(DIM, 10)

    def forward(self, img):  # img [B, 8, 8] -> 16 tokens of 2x2 pixels, raster order
        b = img.shape[0]
        x = img.reshape(b, GRID[0], PATCH, GRID[1], PATCH).permute(0, 1, 3, 2, 4).reshape(b, -1, PATCH * PATCH)
        x = self.embed(x) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(x.mean(1))


def run(name, make_core, data, epochs, batch, seed=0):
    (xtr, ytr), (xte, yte) = data
    torch.manual_seed(seed)
    model = ViT(make_core)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-2)
    order = torch.Generator().manual_seed(seed)
    rows = []
    for epoch in range(epochs):
        model.train()
        t0 = time.perf_counter()
        perm = torch.randperm(len(xtr), generator=order)
        for i in range(0, len(xtr), batch):
            idx = perm[i:i + batch]
            loss = torch.nn.functional.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        train_s = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            acc = sum((model(xte[i:i + 256]).argmax(1) == yte[i:i + 256]).sum().item()
                      for i in range(0, len(xte), 256)) / len(xte)
        rows.append({"epoch": epoch + 1, "loss": loss.item(), "test_acc": acc, "epoch_s": train_s})
        print("%-8s seed %d epoch %2d  loss %.3f  test accuracy %.3f  %.2f s"
              % (name, seed, epoch + 1, loss.item(), acc, train_s), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--json")
    a = ap.parse_args()
    digits = load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(1))
    test, train = perm[:360], perm[360:]
    data = ((x[train], y[train]), (x[test], y[test]))
    ctx = mt.default_context()
    print("device: %s; %d train / %d test images, 16 tokens of 2x2 pixels, %d layers, %d heads of %d"
          % (ctx.device_name, len(train), len(test), LAYERS, HEADS, DIM // HEADS))
    cores = {
        "softmax": lambda: mt.SoftmaxAttention(context=ctx),
        "linear": lambda: mt.MHLA((1, 1), grid=GRID, context=ctx),
        "mhla": lambda: mt.MHLA((2, 2), grid=GRID, context=ctx),
    }
    results = {name: [run(name, make, data, a.epochs, a.batch, seed) for seed in range(a.seeds)]
               for name, make in cores.items()}
    print("\n| core | final test accuracy, mean of %d seeds (min-max) | best epoch, mean | median s/epoch (min-max) |"
          % a.seeds)
    print("|---|---|---|---|")
    for name, runs in results.items():
        final = [rows[-1]["test_acc"] for rows in runs]
        best = [max(r["test_acc"] for r in rows) for rows in runs]
        times = [r["epoch_s"] for rows in runs for r in rows[1:]]  # the first epoch builds kernels
        times = times or [rows[0]["epoch_s"] for rows in runs]
        print("| %s | %.3f (%.3f-%.3f) | %.3f | %.3f (%.3f-%.3f) |"
              % (name, statistics.mean(final), min(final), max(final), statistics.mean(best),
                 statistics.median(times), min(times), max(times)))
    if a.json:
        with open(a.json + ".tmp", "w") as f:
            json.dump({"device": ctx.device_name, "results": results}, f, indent=1)
        import os
        os.replace(a.json + ".tmp", a.json)


if __name__ == "__main__":
    main()
