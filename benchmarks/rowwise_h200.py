"""Sweep of the cuda-07 (online softmax) and cuda-08 (LayerNorm) reference kernels on a CUDA GPU:
launch shapes and the compile-time register cache, at 65536 x 4096 fp32, against the measured copy
bandwidth. Reports registers and local-memory (spill) bytes per thread of each build.

Run on the GPU machine from the repository root:   python3 benchmarks/rowwise_h200.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import cupy as cp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_h200 import bench_copy, device_info, load, rel_err, time_ms  # noqa: E402

f32, i32 = cp.float32, cp.int32


def main() -> int:
    info = device_info()
    sms = info["sms"]
    copy = bench_copy()
    print(f"{info['name']}: {sms} SMs, copy {copy / 1e3:.2f} TB/s")
    rng = cp.random.default_rng(7)
    rows, cols = 65536, 4096
    nbytes = 8 * rows * cols
    rows_out = []

    x = rng.standard_normal((rows, cols), dtype=f32) * 4
    y = cp.full_like(x, cp.nan)
    picked = cp.concatenate([cp.arange(0, rows, 257), cp.asarray([rows - 1])])
    ref = x[picked].astype(cp.float64)
    ref = cp.exp(ref - ref.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    for cache in (0, 32):
        defines = (f"CACHE={cache}",) if cache else ("CACHE=1",)  # CACHE=1: rows of 4096 take the streaming path
        k = load("07-online-softmax/softmax.cu", ["softmax_rows"], defines).get_function("softmax_rows")
        for warps in (1, 2, 4, 8):
            for grid in (rows // warps, sms * 4, sms * 8, sms * 16):
                y.fill(cp.nan)
                launch = lambda k=k, g=grid, w=warps: k((g,), (32, w), (x, y, i32(rows), i32(cols)))  # noqa: E731
                launch()
                ok = "NaN" if bool(cp.isnan(y).any()) else f"{rel_err(y[picked], ref):.1e}"
                ms = time_ms(launch)
                rows_out.append(("cuda-07", f"CACHE={cache or 1} warps/block={warps} grid={grid}",
                                 getattr(k, "num_regs", -1), getattr(k, "local_size_bytes", -1), ms, nbytes / (ms * 1e-3) / 1e9, ok))
    del x, y

    x = rng.standard_normal((rows, cols), dtype=f32) * 2 + 1
    g = (1 + 0.1 * rng.standard_normal(cols, dtype=f32)).astype(f32)
    be = (0.1 * rng.standard_normal(cols, dtype=f32)).astype(f32)
    y = cp.full_like(x, cp.nan)
    mu, rs = cp.empty(rows, dtype=f32), cp.empty(rows, dtype=f32)
    xr = x[:256].astype(cp.float64)
    mr = xr.mean(axis=1, keepdims=True)
    ref = (xr - mr) / cp.sqrt(((xr - mr) ** 2).mean(axis=1, keepdims=True) + 1e-5) * g + be
    for cache in (0, 4, 8, 16):
        defines = (f"CACHE={cache}",) if cache else ("CACHE=1",)
        k = load("08-layernorm/layernorm.cu", ["layernorm_fwd"], defines).get_function("layernorm_fwd")
        for threads in (128, 256, 512, 1024):
            if cache and 4 * cache * threads < cols:
                continue
            y.fill(cp.nan)
            launch = lambda k=k, t=threads: k((rows,), (t,), (x, g, be, y, mu, rs, i32(rows), i32(cols), f32(1e-5)))  # noqa: E731
            try:
                launch()
            except cp.cuda.driver.CUDADriverError as exc:  # e.g. too many registers for 1024 threads
                rows_out.append(("cuda-08", f"CACHE={cache or 1} threads={threads}", getattr(k, "num_regs", -1),
                                 getattr(k, "local_size_bytes", -1), float("nan"), float("nan"), str(exc)[:40]))
                continue
            ok = "NaN" if bool(cp.isnan(y).any()) else f"{rel_err(y[:256], ref):.1e}"
            ms = time_ms(launch)
            rows_out.append(("cuda-08", f"CACHE={cache or 1} threads={threads}", getattr(k, "num_regs", -1),
                             getattr(k, "local_size_bytes", -1), ms, nbytes / (ms * 1e-3) / 1e9, ok))

    print("| lesson | variant | regs | local B | ms | GB/s | vs copy | rel err |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for lesson, variant, regs, local, ms, gbs, ok in rows_out:
        print(f"| {lesson} | {variant} | {regs} | {local} | {ms:.3f} | {gbs:.0f} | {100 * gbs / copy:.1f}% | {ok} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
