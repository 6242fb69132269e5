"""The wheel as a user without root meets it (tests/integration/wheel_check.sh runs this in a fresh
virtual environment without system site packages): `import mhla` from that environment, the
libraries it loaded from inside the wheel, and a forward and a backward against the library's
double-precision reference, with the first call's and a later call's time."""
import os
import sys
import time

import numpy as np

import mhla

here = os.path.dirname(mhla.__file__)
print("mhla %s from %s" % (mhla.version(), here))
assert here.startswith(sys.prefix), "mhla imported from outside the environment: %s" % here
for name in ("torch", "pyopencl"):  # the optional interfaces are absent here, and must stay optional
    try:  # (pocl-binary-distribution leaves a bare pyopencl/ folder: a namespace, not the package)
        if getattr(__import__(name), "__file__", None):
            print("note: %s is importable in this environment" % name)
    except ImportError:
        pass
with open("/proc/self/maps") as f:
    loaded = sorted({line.split()[-1] for line in f if "mhla" in line and ".so" in line})
print("loaded:", ", ".join(os.path.relpath(p, os.path.dirname(here)) for p in loaded))
assert any("mhla.libs/libOpenCL" in p for p in loaded), "the wheel's own ICD loader was not used"

rng = np.random.default_rng(7)
q, k, v = (rng.standard_normal((1, 256, 2, 32)).astype(np.float32) for _ in range(3))
mixing = mhla.init_mixing("paper", 4)
dout = rng.standard_normal(v.shape).astype(np.float32)
t0 = time.perf_counter()
ctx = mhla.Context()
t1 = time.perf_counter()
out = ctx.forward(q, k, v, mixing, blocks=4)
t2 = time.perf_counter()
later = []
for _ in range(5):
    t = time.perf_counter()
    ctx.forward(q, k, v, mixing, blocks=4)
    later.append(time.perf_counter() - t)
print("device: %s" % ctx.device_name)
print("time: context %.1f ms, first forward %.1f ms (builds or loads the kernels), later forwards %.2f ms (median of 5)"
      % ((t1 - t0) * 1e3, (t2 - t1) * 1e3, sorted(later)[2] * 1e3))
failed = []
err = mhla.max_rel_err(out, mhla.reference_forward(q, k, v, mixing, blocks=4))
print("forward  max rel err %.2e (tolerance %.0e)" % (err, mhla.tolerance("f32", 256)))
if not err <= mhla.tolerance("f32", 256):
    failed.append("forward")
got = ctx.backward(q, k, v, mixing, dout, blocks=4)
ref = mhla.reference_backward(q, k, v, mixing, dout, blocks=4)
tol = mhla.tolerance("f32", 256, backward=True)
for name, g, r in zip(("dq", "dk", "dv", "dmixing"), got, ref):
    err = mhla.max_rel_err(g, r)
    print("%-8s max rel err %.2e (tolerance %.0e)" % (name, err, tol))
    if not err <= tol:
        failed.append(name)
print("wheel_check: %s" % ("FAILED: " + ", ".join(failed) if failed else "passed"))
sys.exit(1 if failed else 0)
