"""GPU side (needs CuPy and a GPU, not MLIR): run the PTX that make_ptx.py wrote and compare with numpy.

Each kernel is loaded with CuPy's RawModule and launched as `gpu.launch_func` would: every memref argument
expanded to (allocated ptr, aligned ptr, offset, sizes..., strides...) unless the kernel takes bare pointers.
The output starts as NaN; the reference is relu(A @ B + bias) in float64 with mlir-08's tolerance.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cupy as cp
import numpy as np

OUT = Path("benchmarks/mlir08_gpu/out")


def args_for(dev: list, n_params: int) -> list:
    if n_params == len(dev):
        return dev
    args: list = []
    for x in dev:
        strides = [s // x.itemsize for s in x.strides]
        args += [x, x, np.int64(0), *map(np.int64, x.shape), *map(np.int64, strides)]
    assert n_params == len(args), f"kernel takes {n_params} parameters, expected {len(args)} or {len(dev)}"
    return args


def main() -> int:
    rng = np.random.default_rng(2026)
    bad_total = 0
    for c in json.loads((OUT / "cases.json").read_text()):
        m, n, k = c["shape"]
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        bias = rng.standard_normal(n).astype(np.float32)
        kernel = cp.RawModule(path=str(OUT / c["ptx"])).get_function(c["name"])
        dev = [cp.asarray(x) for x in (a, b, bias)] + [cp.full((m, n), cp.nan, dtype=cp.float32)]
        kernel(tuple(c["grid"]), tuple(c["launch_block"]), tuple(args_for(dev, c["n_params"])))
        cp.cuda.runtime.deviceSynchronize()
        got = cp.asnumpy(dev[3])
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        want = np.maximum(a64 @ b64 + bias, 0.0)
        tol = 4 * (k + 2) * 2.0**-24 * (np.abs(a64) @ np.abs(b64) + np.abs(bias)) + 1e-30
        bad = int((~(np.abs(got - want) <= tol)).sum())
        bad_total += bad
        print(f"shape {c['shape']} block {c['block']} grid {c['grid']} x {c['launch_block']}: {c['name']}, "
              f"{c['n_params']} params, bad={bad}")
    print("ALL OK" if bad_total == 0 else f"FAILED: {bad_total} elements")
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main())
