#!/usr/bin/env python3
"""`mhla run --mpi` under mpirun -np 1..3 writes the same bytes as `mhla run` on one device
(non-causal with the official normalizer, video blocks in BHND; causal with a partial last chunk; packed
varlen sequences of --cu-seqlens, shards splitting them inside and between sequences; grouped key/value
heads), each
rank reading only its token range; then a bad --out fails on every rank with no file left behind.
Usage: mpi_cli.py MPIRUN_WRAPPER MPIRUN MHLA."""
import os
import random
import struct
import subprocess
import sys
import tempfile

wrapper, mpirun, mhla = sys.argv[1:4]


def save(path, shape, vals):
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % ", ".join(map(str, shape))
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
        f.write(struct.pack("<%df" % len(vals), *vals))


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    return p.returncode


random.seed(3)
failures = 0
with tempfile.TemporaryDirectory() as d:
    cases = {
        # name: (shape [B, N, H, D] or [B, H, N, D], options)
        "official-video-bhnd": ((1, 2, 96, 8), ["--layout", "bhnd", "--grid", "2x6x8", "--blocks", "2x3x2",
                                             "--normalizer", "official"]),
        "causal": ((2, 100, 2, 8), ["--causal", "--chunk", "16"]),
        # 40, 0, 37, 3 and 43 tokens in chunks of 16: 10 chunks (-np 2 and 3 split inside sequences).
        "varlen": ((1, 123, 2, 8), ["--causal", "--chunk", "16", "--cu-seqlens", "CU"]),
        # grouped key/value heads: k and v with 1 head of q's 2 (the exchanged rows: the one head's)
        "gqa": ((2, 64, 2, 8), ["--blocks", "4", "KV1"]),
    }
    cu = os.path.join(d, "cu.npy")
    hdr = "{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }"
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    with open(cu, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
        f.write(struct.pack("<6i", 0, 40, 40, 77, 80, 123))
    for name, (shape, opts) in cases.items():
        kv1 = "KV1" in opts
        opts = [cu if o == "CU" else o for o in opts if o != "KV1"]
        io = []
        for t in "qkv":
            sh = (shape[0], shape[1], 1, shape[3]) if kv1 and t != "q" else shape
            n = sh[0] * sh[1] * sh[2] * sh[3]
            save(os.path.join(d, t + ".npy"), sh, [random.uniform(-1, 1) for _ in range(n)])
            io += ["--" + t, os.path.join(d, t + ".npy")]
        one = os.path.join(d, name + "-one.npy")
        # The run without --mpi under the same wrapper: on the device rank 0 gets (PoCL's first).
        if run([sys.executable, wrapper, mpirun, "1", mhla, "run"] + io + ["--out", one] + opts) != 0:
            failures += 1
            continue
        for ranks in ("1", "2", "3"):
            out = os.path.join(d, "%s-%s.npy" % (name, ranks))
            rc = run([sys.executable, wrapper, mpirun, ranks, mhla, "run", "--mpi"] + io + ["--out", out] + opts)
            same = rc == 0 and open(out, "rb").read() == open(one, "rb").read()
            print("%-18s -np %s: %s" % (name, ranks, "identical to the run without --mpi" if same else "FAIL rc %d" % rc))
            failures += not same
    # An unwritable --out: every rank exits non-zero (none hangs), and nothing is left behind.
    bad = os.path.join(d, "missing-dir", "o.npy")
    rc = run([sys.executable, wrapper, mpirun, "2", mhla, "run", "--mpi"] + io + ["--out", bad, "--causal"])
    print("bad --out -np 2: exit %d" % rc)
    failures += rc == 0 or os.path.exists(os.path.dirname(bad))
sys.exit(1 if failures else 0)
