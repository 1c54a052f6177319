#!/usr/bin/env python3
"""Checks `ufp4 quantize` E2M1 RTNE with the block scale fixed to 1 against ml_dtypes' float4_e2m1fn
cast on a million random values (plus exact ties, signed zeros and tiny values).
Usage: tests/compare_ml_dtypes.py BUILD_DIR [cpu|cuda]. Exit 1 on any in-range mismatch."""
import os
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np

build = sys.argv[1] if len(sys.argv) > 1 else "build"
device = sys.argv[2] if len(sys.argv) > 2 else "auto"
rng = np.random.default_rng(2026)
n = 1 << 20
x = rng.uniform(-7.0, 7.0, n).astype(np.float32)
ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=np.float32)
special = np.concatenate([ties, -ties, np.array([0.0, -0.0, 6.0, -6.0, 1e-30, -1e-30, 0.2499999, 0.2500001], np.float32)])
x[: special.size] = special
x[special.size : special.size + 4096] = rng.normal(0, 0.3, 4096).astype(np.float32)  # small magnitudes
x = x.reshape(-1, 16)

with tempfile.TemporaryDirectory() as d:
    np.save(os.path.join(d, "x.npy"), x)
    cmd = [os.path.join(build, "ufp4"), "-q", "quantize", "--grid", "e2m1", "--scale", "unit", "--rounding", "rtne",
           "--device", device, "--in", os.path.join(d, "x.npy"), "--out", os.path.join(d, "y.npy")]
    subprocess.run(cmd, check=True)
    y = np.load(os.path.join(d, "y.npy"))

ref = x.astype(ml_dtypes.float4_e2m1fn).astype(np.float32)
in_range = np.abs(x) <= 6.0
same = y.view(np.uint32) == ref.view(np.uint32)  # bitwise: signed zeros must agree too
bad = in_range & ~same
print(f"ml_dtypes {ml_dtypes.__version__}, device {device}: {x.size} values, {in_range.sum()} within [-6, 6]")
print(f"  in range: {bad.sum()} bitwise mismatches")
over = ~in_range
print(f"  beyond +-6 ({over.sum()} values): ufp4 saturates to +-6; ml_dtypes gives "
      f"{np.unique(ref[over]).tolist()} -> {'same' if np.all(same[over]) else 'different'}")
if bad.any():
    i = np.flatnonzero(bad.ravel())[:10]
    print("  first mismatches (x, ufp4, ml_dtypes):", list(zip(x.ravel()[i], y.ravel()[i], ref.ravel()[i])))
    sys.exit(1)
print("PASS: ufp4 E2M1 RTNE == ml_dtypes float4_e2m1fn on every in-range value")
