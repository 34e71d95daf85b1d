"""Bandwidth / throughput of the module-02 reference kernels (cuda-01..17) on a CUDA GPU.

Run on the GPU machine from the repository root:
    python3 benchmarks/cuda_h200.py [--out DIR] [--only cuda-10,cuda-11]

What it does
- Reads the device's properties (name, SM count, L2 size, memory) from the CUDA runtime through
  CuPy and, when PyTorch is present, from PyTorch too, and prints both: the L2 size is read off the
  device, not assumed.
- Measures the device-to-device copy bandwidth itself (cudaMemcpyAsync of 2 GiB, bytes read +
  bytes written over time): every memory-bound kernel is reported against that number.
- Compiles each lesson's REFERENCE .cu (the file in modules/02-cuda, solution regions included)
  with NVRTC through cupy.RawModule (the include paths and -D defines of the course's GPU backend),
  checks each kernel once against a reference (CuPy / NumPy / PyTorch; outputs poisoned first),
  then times it: 3 warm-up launches, then 25 timed launches (fewer for the slow GEMMs), each
  between its own pair of CUDA events; the median is reported. Inputs are random, never zeros, and
  >= several hundred MB (several times the L2) where a kernel is memory-bound.
- Bytes are the minimum each kernel must move through DRAM (each input read once, each output
  written once); GEMMs are reported in TFLOP/s next to PyTorch (cuBLAS) in the same precision
  (fp32 with TF32 off), or next to the loop they replace. Each section says its formula.
- --only runs some lessons (comma-separated ids, e.g. cuda-07,cuda-10); the copy is always measured.
  One function per lesson (bench_cuda01, ...), each taking its sizes as keyword arguments.
Prints a Markdown table last; with --out writes the same data as JSON and the table as .md.
Exits 1 when a check reports WRONG or a section raised (ERROR).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ROOT / "modules" / "02-cuda"
WARMUP, REPS = 3, 25
GiB = 1 << 30
f32, i32, f64 = np.float32, np.int32, np.float64


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def cuda_include() -> str | None:
    """The CUDA toolkit's include folder (for <mma.h>, <cuda_fp8.h>): the course's GPU backend's lookup."""
    from pytest_hpccourse.runtimes.cuda.gpu import _cuda_include

    return _cuda_include()


def load(rel: str, names: list[str], defines: tuple[str, ...] = (), extra: str = "") -> cp.RawModule:
    """NVRTC-compile a lesson's .cu (plus `extra` source appended: the benchmark's own helper kernels,
    extern "C"), with -D for each of `defines` ("NAME=VALUE")."""
    path = LESSONS / rel
    src = path.read_text() + extra
    inc = cuda_include()
    options = ("-std=c++17", f"-I{path.parent}", *((f"-I{inc}",) if inc else ()), *(f"-D{d}" for d in defines))
    mod = cp.RawModule(code=src, options=options, name_expressions=names)
    mod.compile()
    return mod


def time_ms(fn, warmup: int = WARMUP, reps: int = REPS, stream=None) -> float:
    """Median over `reps` of the time between two CUDA events around one call of `fn`."""
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(reps):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        fn()
        stop.record(stream)
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def latency_ms(fn, sync, warmup: int = 20, reps: int = 200) -> float:
    """Median host time of one call plus `sync()`: what a caller waiting for the result sees."""
    for _ in range(warmup):
        fn()
        sync()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def device_info() -> dict:
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    info = {
        "name": props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"]),
        "sms": int(props["multiProcessorCount"]),
        "l2_bytes_cudart": int(props["l2CacheSize"]),
        "global_mem_bytes": int(props["totalGlobalMem"]),
        "smem_per_sm": int(props.get("sharedMemPerMultiprocessor", 0)),
        "smem_per_block_optin": int(props.get("sharedMemPerBlockOptin", 0)),
        "cc": f"{props['major']}.{props['minor']}",
        "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
    }
    try:
        import torch

        tp = torch.cuda.get_device_properties(0)
        info["l2_bytes_torch"] = int(getattr(tp, "L2_cache_size", 0))
        info["torch"] = torch.__version__
    except Exception as exc:  # torch missing or without CUDA: the CuPy reading stands alone
        info["torch"] = f"unavailable ({exc.__class__.__name__})"
    return info


def rel_err(got, want) -> float:
    got = cp.asarray(got, dtype=cp.float64)
    want = cp.asarray(want, dtype=cp.float64)
    return float(cp.linalg.norm(got - want) / max(float(cp.linalg.norm(want)), 1e-300))


def torch_mod():
    try:
        import torch

        return torch if torch.cuda.is_available() else None
    except Exception:
        return None


def as_torch(a):
    """A torch view of a CuPy array (no copy, through __cuda_array_interface__)."""
    return torch_mod().as_tensor(a, device="cuda")


def rel_check(got, want, tol: float) -> str:
    """"rel=..." (relative 2-norm error), marked WRONG above `tol` (far above each kernel's fp32 rounding)."""
    err = rel_err(got, want)
    return f"rel={err:.1e}" if err <= tol else f"WRONG (rel={err:.1e})"


def nan_or(check: str, *arrays) -> str:
    """`check`, unless an output still holds NaN (an element never written)."""
    return "WRONG (NaN)" if any(bool(cp.isnan(a).any()) for a in arrays) else check


def torch_matmul_ms(A, B, reps: int = REPS):
    """torch.matmul(A, B) in A's precision (TF32 off for fp32): (median ms, result), or (None, None)."""
    torch = torch_mod()
    if torch is None:
        return None, None
    torch.backends.cuda.matmul.allow_tf32 = False
    At, Bt = as_torch(A), as_torch(B)
    out = torch.matmul(At, Bt)
    return time_ms(lambda: torch.matmul(At, Bt), reps=reps), out


class Bench:
    def __init__(self, copy_bw: float):
        self.copy_bw = copy_bw
        self.rows: list[dict] = []

    def add(self, lesson, kernel, shape, ms, check, *, nbytes=None, flops=None, ref_ms=None, ref="", note=""):
        """One row: bytes -> GB/s and % of the copy; flops -> TFLOP/s; ref_ms -> ref_ms / ms (vs `ref`)."""
        row = {"lesson": lesson, "kernel": kernel, "shape": shape, "ms": ms, "check": check, "note": note}
        text = f"  {lesson} {kernel:<40} {shape:<18} {ms:9.4f} ms"
        if nbytes:
            gbs = nbytes / (ms * 1e-3) / 1e9
            row.update({"bytes": nbytes, "GB/s": gbs, "pct_copy": 100.0 * gbs / self.copy_bw})
            text += f"  {gbs:8.0f} GB/s  {100 * gbs / self.copy_bw:5.1f}% of copy"
        if flops:
            row.update({"flops": flops, "TFLOP/s": flops / (ms * 1e-3) / 1e12})
            text += f"  {row['TFLOP/s']:7.2f} TFLOP/s"
        if ref_ms:
            row.update({"ratio_vs_ref": ref_ms / ms, "ref": ref})
            text += f"  {100 * ref_ms / ms:6.1f}% of {ref}"
        self.rows.append(row)
        print(f"{text}  [{check}]" + (f"  ({note})" if note else ""), flush=True)

    def bw(self, lesson, kernel, shape, ms, nbytes, check, note=""):
        self.add(lesson, kernel, shape, ms, check, nbytes=nbytes, note=note)


@dataclass
class Ctx:
    info: dict

    @property
    def sms(self) -> int:
        return self.info["sms"]

    def rng(self, lesson: int):
        """One seeded generator per lesson, so --only does not change a lesson's inputs."""
        return cp.random.default_rng(2026 + lesson)


def bench_copy() -> float:
    n = 2 * GiB
    src = cp.random.randint(0, 255, n, dtype=cp.uint8)
    dst = cp.empty_like(src)
    ms = time_ms(lambda: cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, n,
                                                     cp.cuda.runtime.memcpyDeviceToDevice, 0))
    assert bool((dst[:: 1 << 20] == src[:: 1 << 20]).all())
    del src, dst
    return 2 * n / (ms * 1e-3) / 1e9  # GB/s, read + write


# ---- cuda-01: vec_add, grid-stride, grid = SMs x 8 blocks of 256 -------------------------------
def bench_cuda01(b: Bench, ctx: Ctx, n: int = 1 << 28, side: int = 16384):
    rng, sms = ctx.rng(1), ctx.sms
    m = load("01-thread-mapping/mapping.cu", ["vec_add", "bias_add_2d"])
    x, y = rng.standard_normal(n, dtype=f32), rng.standard_normal(n, dtype=f32)
    z = cp.full(n, cp.nan, dtype=f32)
    k = m.get_function("vec_add")
    launch = lambda: k((sms * 8,), (256,), (x, y, z, i32(n)))
    launch()
    ok = bool(cp.array_equal(z, x + y))
    b.bw("cuda-01", "vec_add", f"2^{n.bit_length() - 1}", time_ms(launch), 12 * n, "exact" if ok else "WRONG")
    rows_, cols_ = side, side
    xb = x[: rows_ * cols_].reshape(rows_, cols_)
    bias = rng.standard_normal(cols_, dtype=f32)
    yb = z[: rows_ * cols_].reshape(rows_, cols_)
    yb.fill(cp.nan)
    k = m.get_function("bias_add_2d")
    launch = lambda: k((cols_ // 32, rows_ // 8), (32, 8), (xb, bias, yb, i32(rows_), i32(cols_)))
    launch()
    ok = bool(cp.array_equal(yb, xb + bias[None, :]))
    b.bw("cuda-01", "bias_add_2d", f"{rows_}x{cols_}", time_ms(launch), 8 * rows_ * cols_, "exact" if ok else "WRONG")


# ---- cuda-02: transpose ----------------------------------------------------------------------
def bench_cuda02(b: Bench, ctx: Ctx, side: int = 16384):
    rng = ctx.rng(2)
    m = load("02-transpose/transpose.cu", ["transpose_tiled", "transpose_naive"])
    r, c = side, side
    a = rng.standard_normal((r, c), dtype=f32)
    o = cp.full((c, r), cp.nan, dtype=f32)
    for name in ("transpose_tiled", "transpose_naive"):
        k = m.get_function(name)
        launch = lambda k=k: k((c // 32, r // 32), (32, 8), (a, o, i32(r), i32(c)))
        o.fill(cp.nan)
        launch()
        ok = bool(cp.array_equal(o, a.T))
        b.bw("cuda-02", name, f"{r}x{c}", time_ms(launch), 8 * r * c, "exact" if ok else "WRONG")
    if torch_mod():
        at = as_torch(a)
        b.bw("cuda-02", "torch .t().contiguous()", f"{r}x{c}", time_ms(lambda: at.t().contiguous()), 8 * r * c, "-",
             "PyTorch, for reference")


# ---- cuda-03 / 04: reductions ----------------------------------------------------------------
def bench_cuda03_04(b: Bench, ctx: Ctx, n: int = 1 << 28):
    rng, sms = ctx.rng(3), ctx.sms
    x = rng.standard_normal(n, dtype=f32)
    want = float(cp.sum(x, dtype=cp.float64))
    G, T = sms * 8, 256
    m = load("03-reduce-smem/reduce.cu", ["reduce_sum"])
    k = m.get_function("reduce_sum")
    part = cp.empty(G, dtype=f32)
    out = cp.full(1, cp.nan, dtype=f32)
    shape = f"2^{n.bit_length() - 1}"

    def two_pass():
        k((G,), (T,), (x, part, i32(n)), shared_mem=T * 4)
        k((1,), (T,), (part, out, i32(G)), shared_mem=T * 4)

    two_pass()
    err = abs(float(out[0]) - want) / float(cp.abs(x).sum())
    b.bw("cuda-03", "reduce_sum x2 passes", shape, time_ms(two_pass), 4 * n, f"err/sum(abs x)={err:.1e}")

    m = load("04-warp-shuffle/warp_reduce.cu", ["reduce_sum_atomic", "reduce_max"])
    ks, km = m.get_function("reduce_sum_atomic"), m.get_function("reduce_max")

    def atomic_sum():
        out.fill(0)
        ks((G,), (T,), (x, out, i32(n)))

    atomic_sum()
    err = abs(float(out[0]) - want) / float(cp.abs(x).sum())
    b.bw("cuda-04", "reduce_sum_atomic", shape, time_ms(atomic_sum), 4 * n, f"err/sum(abs x)={err:.1e}",
         "includes a 4-byte memset per run")

    def two_pass_max():
        km((G,), (T,), (x, part, i32(n)))
        km((1,), (T,), (part, out, i32(G)))

    out.fill(cp.nan)
    two_pass_max()
    ok = float(out[0]) == float(x.max())
    b.bw("cuda-04", "reduce_max x2 passes", shape, time_ms(two_pass_max), 4 * n, "exact" if ok else "WRONG")
    if torch_mod():
        xt = as_torch(x)
        b.bw("cuda-03", "torch.sum", shape, time_ms(lambda: xt.sum()), 4 * n, "-", "PyTorch, for reference")


# ---- cuda-05: scan (three levels of block_scan + propagate) ------------------------------------
def bench_cuda05(b: Bench, ctx: Ctx, n: int = 1 << 28):
    rng = ctx.rng(5)
    m = load("05-scan/scan.cu", ["block_scan", "add_block_offsets"])
    kscan, kadd = m.get_function("block_scan"), m.get_function("add_block_offsets")
    T = 512
    M = 2 * T
    xi = rng.integers(-100, 101, n, dtype=cp.int64).astype(i32)
    yi = cp.full(n, -7, dtype=i32)
    levels = []  # (size, sums, offs) per level
    size = n
    while size > M:
        g = -(-size // M)
        levels.append((size, cp.empty(g, dtype=i32), cp.empty(g, dtype=i32)))
        size = g
    top_total = cp.empty(1, dtype=i32)

    def scan_all():
        src, dst = xi, yi
        for lvl, (size, sums, offs) in enumerate(levels):
            kscan((sums.size,), (T,), (src, dst, sums, i32(size), i32(1 if lvl == 0 else 0)), shared_mem=M * 4)
            src, dst = sums, offs
        kscan((1,), (T,), (src, dst, top_total, i32(src.size), i32(0)), shared_mem=M * 4)
        for lvl in range(len(levels) - 1, -1, -1):
            size, sums, offs = levels[lvl]
            target = yi if lvl == 0 else levels[lvl - 1][2]
            kadd((sums.size,), (T,), (target, offs, i32(size)))

    scan_all()
    ok = bool(cp.array_equal(yi, cp.cumsum(xi, dtype=cp.int64).astype(i32)))
    shape = f"2^{n.bit_length() - 1} int32"
    b.bw("cuda-05", "scan (3 kernels/level)", shape, time_ms(scan_all), 8 * n, "exact" if ok else "WRONG",
         "minimum bytes 8n; this pipeline moves 16n")
    torch = torch_mod()
    if torch:
        xt = as_torch(xi)
        b.bw("cuda-05", "torch.cumsum (CUB)", shape, time_ms(lambda: xt.cumsum(0, dtype=torch.int32)),
             8 * n, "-", "PyTorch, for reference")


# ---- cuda-06: histogram ----------------------------------------------------------------------
def bench_cuda06(b: Bench, ctx: Ctx, n: int = 1 << 28, nb: int = 256):
    rng, sms = ctx.rng(6), ctx.sms
    m = load("06-histogram/histogram.cu", ["histogram"])
    k = m.get_function("histogram")
    bins = cp.zeros(nb, dtype=cp.uint32)
    for label, data in (("uniform", rng.integers(0, nb, n, dtype=cp.int64).astype(i32)),
                        ("90% one bin", cp.where(rng.random(n) < 0.9, 17,
                                                 rng.integers(0, nb, n, dtype=cp.int64)).astype(i32))):
        def hist(data=data):
            bins.fill(0)
            k((sms * 8,), (256,), (data, i32(n), bins, i32(nb)), shared_mem=nb * 4)

        hist()
        ok = bool(cp.array_equal(bins, cp.bincount(data, minlength=nb).astype(cp.uint32)))
        b.bw("cuda-06", f"histogram {label}", f"2^{n.bit_length() - 1}, {nb} bins", time_ms(hist), 4 * n,
             "exact" if ok else "WRONG")
        del data


# ---- cuda-07: online softmax -----------------------------------------------------------------
def bench_cuda07(b: Bench, ctx: Ctx, rows: int = 65536, cols: int = 4096):
    # Two shapes: cols = 4096 takes the register path (each lane keeps its 128 floats in registers, x is
    # read once); cols = 4100 (> 128 * CACHE) takes the streaming path (online update, x read twice: the
    # second read hits L2 only when few rows are in flight). One row per warp (grid = rows / 4) and a
    # grid of 8 blocks per SM (the kernel loops over rows).
    rng, sms = ctx.rng(7), ctx.sms
    for n, loads_list, path in ((cols, (8,), "registers"), (cols + 4, (4, 8, 16), "streaming")):
        xs = rng.standard_normal((rows, n), dtype=f32) * 4
        ys = cp.full_like(xs, cp.nan)
        picked = cp.concatenate([cp.arange(0, rows, 257), cp.asarray([rows - 1])])  # rows spread out, the last too
        ref = xs[picked].astype(cp.float64)
        ref = cp.exp(ref - ref.max(axis=1, keepdims=True))
        ref /= ref.sum(axis=1, keepdims=True)
        for loads in loads_list:
            k = load("07-online-softmax/softmax.cu", ["softmax_rows"], (f"LOADS={loads}",)).get_function("softmax_rows")
            for blocks_per_sm in (None, 8):
                grid = rows // 4 if blocks_per_sm is None else sms * blocks_per_sm
                ys.fill(cp.nan)
                launch = lambda k=k, grid=grid: k((grid,), (32, 4), (xs, ys, i32(rows), i32(n)))
                launch()
                check = nan_or(rel_check(ys[picked], ref, 1e-5), ys)
                label = "1 row/warp" if blocks_per_sm is None else f"{blocks_per_sm} blocks/SM"
                note = "x read once" if path == "registers" else "bytes = read + write once (2nd read hits cache)"
                b.bw("cuda-07", f"softmax_rows ({path}) LOADS={loads}, {label}", f"{rows}x{n}", time_ms(launch),
                     8 * rows * n, check, note)
        if torch_mod():
            xt = as_torch(xs)
            b.bw("cuda-07", "torch.softmax", f"{rows}x{n}", time_ms(lambda: xt.softmax(-1)), 8 * rows * n, "-",
                 "PyTorch, for reference")
        del xs, ys


# ---- cuda-08: LayerNorm / RMSNorm ------------------------------------------------------------
def bench_cuda08(b: Bench, ctx: Ctx, rows: int = 65536, cols: int = 4096):
    rng = ctx.rng(8)
    xl = rng.standard_normal((rows, cols), dtype=f32) * 2 + 1
    g = (1 + 0.1 * rng.standard_normal(cols, dtype=f32)).astype(f32)
    be = (0.1 * rng.standard_normal(cols, dtype=f32)).astype(f32)
    yl = cp.full_like(xl, cp.nan)
    mu, rs = cp.empty(rows, dtype=f32), cp.empty(rows, dtype=f32)
    eps = f32(1e-5)
    xr = xl[:256].astype(cp.float64)
    mr = xr.mean(axis=1, keepdims=True)
    ref = (xr - mr) / cp.sqrt(((xr - mr) ** 2).mean(axis=1, keepdims=True) + 1e-5) * g + be
    nbytes = 8 * rows * cols
    for loads in (4, 8, 16):
        m = load("08-layernorm/layernorm.cu", ["layernorm_fwd", "rmsnorm_fwd"], (f"LOADS={loads}",))
        kln = m.get_function("layernorm_fwd")
        for threads in (128, 256):
            yl.fill(cp.nan)
            launch = lambda: kln((rows,), (threads,), (xl, g, be, yl, mu, rs, i32(rows), i32(cols), eps))
            launch()
            check = nan_or(rel_check(yl[:256], ref, 1e-5), yl)
            b.bw("cuda-08", f"layernorm_fwd LOADS={loads}, {threads} threads", f"{rows}x{cols}", time_ms(launch),
                 nbytes, check)
    krms = m.get_function("rmsnorm_fwd")  # rmsnorm_fwd does not use LOADS: any of the modules above will do
    yl.fill(cp.nan)
    launch = lambda: krms((rows,), (256,), (xl, g, yl, i32(rows), i32(cols), eps))
    launch()
    ref = xr / cp.sqrt((xr * xr).mean(axis=1, keepdims=True) + 1e-5) * g
    b.bw("cuda-08", "rmsnorm_fwd", f"{rows}x{cols}", time_ms(launch), nbytes,
         nan_or(rel_check(yl[:256], ref, 1e-5), yl))
    torch = torch_mod()
    if torch:
        xt, gt, bt = as_torch(xl), as_torch(g), as_torch(be)
        f = torch.nn.functional
        b.bw("cuda-08", "torch layer_norm", f"{rows}x{cols}", time_ms(lambda: f.layer_norm(xt, (cols,), gt, bt, 1e-5)),
             nbytes, "-", "PyTorch, for reference")
        if hasattr(f, "rms_norm"):
            b.bw("cuda-08", "torch rms_norm", f"{rows}x{cols}", time_ms(lambda: f.rms_norm(xt, (cols,), gt, 1e-5)),
                 nbytes, "-", "PyTorch, for reference")


# ---- cuda-09: SGEMM vs torch.matmul (fp32, TF32 off) -----------------------------------------
def bench_cuda09(b: Bench, ctx: Ctx, S: int = 4096):
    rng = ctx.rng(9)
    m = load("09-tiled-gemm/sgemm.cu", ["sgemm_tiled", "sgemm_naive"])
    A = rng.standard_normal((S, S), dtype=f32)
    B = rng.standard_normal((S, S), dtype=f32)
    C = cp.full((S, S), cp.nan, dtype=f32)
    flops = 2 * S**3
    ref = A[:64].astype(cp.float64) @ B.astype(cp.float64)
    torch_ms, _ = torch_matmul_ms(A, B, reps=10)
    for name in ("sgemm_tiled", "sgemm_naive"):
        k = m.get_function(name)
        launch = lambda k=k: k((S // 16, S // 16), (16, 16), (A, B, C, i32(S), i32(S), i32(S)))
        C.fill(cp.nan)
        launch()
        check = nan_or(rel_check(C[:64], ref, 1e-4), C)
        b.add("cuda-09", name, f"{S}^3", time_ms(launch, reps=10), check, flops=flops, ref_ms=torch_ms,
              ref="torch.matmul")
    if torch_ms:
        b.add("cuda-09", "torch.matmul fp32 (TF32 off)", f"{S}^3", torch_ms, "-", flops=flops)


# ---- cuda-10: register-blocked, float4, double-buffered SGEMM vs torch.matmul (fp32, TF32 off) ---
# Default tiles and the 128 x 128 x 8, 8 x 8 configuration the lesson's README measured (73 % of
# cuBLAS at 4096^3; the course target is >= 70 %). At 4095^3 K and N are not multiples of 4, so
# every load of A and B takes the scalar path. FLOPs = 2 M N K.
CUDA10_TILES = (dict(BM=64, BN=64, BK=16, TM=4, TN=4), dict(BM=128, BN=128, BK=8, TM=8, TN=8))


def bench_cuda10(b: Bench, ctx: Ctx, sizes: tuple[int, ...] = (4096, 4095)):
    rng = ctx.rng(10)
    kernels = []
    for cfg in CUDA10_TILES:
        mod = load("10-register-gemm/sgemm.cu", ["sgemm_reg_tiled"], tuple(f"{n}={v}" for n, v in cfg.items()))
        kernels.append((cfg, mod.get_function("sgemm_reg_tiled")))
    for S in sizes:
        A = rng.standard_normal((S, S), dtype=f32)
        B = rng.standard_normal((S, S), dtype=f32)
        C = cp.full((S, S), cp.nan, dtype=f32)
        flops = 2 * S**3
        ref = A[:64].astype(cp.float64) @ B.astype(cp.float64)
        torch_ms, ct = torch_matmul_ms(A, B)
        for cfg, k in kernels:
            threads = (cfg["BM"] // cfg["TM"]) * (cfg["BN"] // cfg["TN"])
            grid = (cdiv(S, cfg["BN"]), cdiv(S, cfg["BM"]))
            launch = lambda k=k, grid=grid, threads=threads: k(grid, (threads,), (A, B, C, i32(S), i32(S), i32(S)))
            C.fill(cp.nan)
            launch()
            check = nan_or(rel_check(C[:64], ref, 1e-4), C)
            note = f"{k.num_regs} regs, {k.local_size_bytes} B local"
            if ct is not None:
                diff = float((as_torch(C) - ct).abs().max())
                note += ", bitwise equal to torch.matmul" if diff == 0 else f", max |C - torch.matmul| = {diff:.1e}"
            label = f"sgemm_reg_tiled {cfg['BM']}x{cfg['BN']}x{cfg['BK']}, {cfg['TM']}x{cfg['TN']}"
            b.add("cuda-10", label, f"{S}^3", time_ms(launch), check, flops=flops, ref_ms=torch_ms,
                  ref="torch.matmul", note=note)
        if torch_ms:
            b.add("cuda-10", "torch.matmul fp32 (TF32 off)", f"{S}^3", torch_ms, "-", flops=flops)


# ---- cuda-11: WMMA tensor-core GEMM (half in, fp32 out) vs torch fp16 matmul ------------------
# C = A @ W^T, A M x K and W N x K half, C fp32; FLOPs = 2 M N K. torch: a @ w.T in fp16 (cuBLAS,
# fp16 output). gemm_naive (scalar FMAs on the CUDA cores) takes ~150 ms at 4096^3: 1 + 3 launches.
def bench_cuda11(b: Bench, ctx: Ctx, S: int = 4096):
    rng = ctx.rng(11)
    m = load("11-wmma/wmma_gemm.cu", ["wmma_gemm", "gemm_naive"])
    A = rng.standard_normal((S, S), dtype=f32).astype(cp.float16)
    W = rng.standard_normal((S, S), dtype=f32).astype(cp.float16)
    C = cp.full((S, S), cp.nan, dtype=f32)
    flops = 2 * S**3
    ref = A[:64].astype(cp.float64) @ W.astype(cp.float64).T
    torch_ms = None
    torch = torch_mod()
    if torch:
        at, wt = as_torch(A), as_torch(W)
        at @ wt.T
        torch_ms = time_ms(lambda: at @ wt.T)
    for name, grid, block, warmup, reps in (("wmma_gemm", (cdiv(S, 32), cdiv(S, 32)), (128,), WARMUP, REPS),
                                            ("gemm_naive", (cdiv(S, 16), cdiv(S, 16)), (16, 16), 0, 3)):
        k = m.get_function(name)
        launch = lambda k=k, grid=grid, block=block: k(grid, block, (A, W, C, i32(S), i32(S), i32(S)))
        C.fill(cp.nan)
        launch()
        check = nan_or(rel_check(C[:64], ref, 1e-4), C)
        b.add("cuda-11", name, f"{S}^3", time_ms(launch, warmup=warmup, reps=reps), check, flops=flops,
              ref_ms=torch_ms, ref="torch fp16 matmul")
    if torch_ms:
        b.add("cuda-11", "torch fp16 a @ w.T (cuBLAS)", f"{S}^3", torch_ms, "-", flops=flops)


# ---- cuda-12: 1 x 128 activation quantization + block-scaled FP8 GEMM ------------------------
# The GEMM is the lesson's model of DeepGEMM's (tensor-core k-steps emulated by scalar FMAs with an
# FP22 chop, promotion every 128), so it runs on the CUDA cores: FLOPs = 2 M N K, reported next to
# torch._scaled_mm on the same e4m3 operands (per-tensor scales, real FP8 tensor cores). Weights are
# quantized per 128 x 128 block by the helper kernel below (the tests' numpy rule: e4m3(w * (448 /
# amax))). Quantization bytes = 4 M K (x) + M K (codes) + 4 M ceil(K / 128) (scales).
CUDA12_HELPERS = r"""
extern "C" __global__ void bench_quantize_128x128(const float* w, const float* amax, unsigned char* q, int N, int K) {
    const int KB = (K + BLOCK_K - 1) / BLOCK_K;
    const long long n_all = (long long)N * K;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n_all; i += (long long)gridDim.x * blockDim.x) {
        const int n = (int)(i / K), k = (int)(i % K);
        q[i] = __nv_cvt_float_to_fp8(w[i] * (FP8_E4M3_MAX / amax[(n / BLOCK_K) * KB + k / BLOCK_K]), __NV_SATFINITE, __NV_E4M3);
    }
}
"""


def e4m3_table() -> np.ndarray:
    """Code -> value of OCP E4M3FN (bias 7, no inf, 0x7F / 0xFF NaN), as the lesson's tests decode it."""
    c = np.arange(256)
    e, m = (c >> 3) & 0xF, c & 0x7
    mag = np.where(e == 0, m * 2.0**-9, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    v = np.where(c & 0x80, -mag, mag)
    v[(c & 0x7F) == 0x7F] = np.nan
    return v


def bench_cuda12(b: Bench, ctx: Ctx, M: int = 4096, N: int = 7168, K: int = 4096, qrows: int = 32768,
                 qcols: int = 7168):
    rng, sms = ctx.rng(12), ctx.sms
    assert N % 128 == 0 and K % 128 == 0 and qcols % 128 == 0, "the references reshape into 128-wide blocks"
    m = load("12-fp8-gemm/fp8_gemm.cu", ["quantize_1x128", "fp8_gemm_nt"], extra=CUDA12_HELPERS)
    kq, kg, kw = (m.get_function(n) for n in ("quantize_1x128", "fp8_gemm_nt", "bench_quantize_128x128"))
    lut = cp.asarray(e4m3_table())

    # quantization bandwidth, on activations of qrows tokens x qcols channels
    R, Kq = qrows, qcols
    KBq = Kq // 128
    xq = rng.standard_normal((R, Kq), dtype=f32)
    xq[:, ::97] *= 30  # outlier channels: the groups' scales differ
    qq = cp.full((R, Kq), 0x7F, dtype=cp.uint8)  # 0x7F: e4m3 NaN
    sq = cp.full((R, KBq), cp.nan, dtype=f32)
    quant = lambda: kq((KBq, R), (32,), (xq, qq, sq, i32(R), i32(Kq)))
    quant()
    amax = cp.maximum(cp.abs(xq).reshape(R, KBq, 128).max(axis=2), f32(1e-4))
    ok_scales = bool(cp.array_equal(sq, amax / f32(448)))
    v = xq[:256] * cp.repeat(f32(448) / amax[:256], 128, axis=1)  # x * 448 / amax, in fp32 as the kernel
    got = lut[qq[:256]]
    worst = float(cp.max(cp.abs(got - v) / (2.0**-4 * cp.abs(v) + 2.0**-10)))  # half an e4m3 spacing
    check = "WRONG (scales)" if not ok_scales else f"scales exact, code err/half-ulp={worst:.2f}"
    if not worst <= 1.0:
        check = f"WRONG (codes: err/half-ulp={worst:.2f})"
    b.bw("cuda-12", "quantize_1x128", f"{R}x{Kq}", time_ms(quant), 5 * R * Kq + 4 * R * KBq, check,
         "bytes = 4 B read + 1 B written per element + scales")
    del xq, qq, sq, amax, v, got

    # the GEMM: C (M x N, fp32) = (A, sa) x (B, sb)^T
    KB, NB = K // 128, N // 128
    x = rng.standard_normal((M, K), dtype=f32)
    x[:, ::97] *= 30
    qa = cp.full((M, K), 0x7F, dtype=cp.uint8)
    sa = cp.full((M, KB), cp.nan, dtype=f32)
    kq((KB, M), (32,), (x, qa, sa, i32(M), i32(K)))
    w = rng.standard_normal((N, K), dtype=f32) * f32(0.05)
    mag = cp.exp(rng.random((NB, KB), dtype=f32) * f32(math.log(100.0)) + f32(math.log(0.2))).astype(f32)
    w *= cp.repeat(cp.repeat(mag, 128, axis=0), 128, axis=1)  # every 128 x 128 block has its own scale
    amax_b = cp.maximum(cp.abs(w).reshape(NB, 128, KB, 128).max(axis=(1, 3)), f32(1e-4)).astype(f32)
    sb = (amax_b / f32(448)).astype(f32)
    qb = cp.full((N, K), 0x7F, dtype=cp.uint8)
    kw((sms * 8,), (256,), (w, amax_b, qb, i32(N), i32(K)))
    C = cp.full((M, N), cp.nan, dtype=f32)
    gemm = lambda: kg((cdiv(N, 16), cdiv(M, 16)), (16, 16), (qa, sa, qb, sb, C, i32(M), i32(N), i32(K)))
    gemm()
    rows = cp.concatenate([cp.arange(32), cp.asarray([M - 1])])
    a64 = lut[qa[rows]] * cp.repeat(sa[rows].astype(cp.float64), 128, axis=1)
    b64 = lut[qb] * cp.repeat(cp.repeat(sb.astype(cp.float64), 128, axis=0), 128, axis=1)
    want = a64 @ b64.T
    bound = (4 * 2.0**-13 + (KB + 64) * 2.0**-24) * (cp.abs(a64) @ cp.abs(b64).T) + 1e-30
    worst = float(cp.max(cp.abs(C[rows] - want) / bound))
    check = nan_or(f"err/bound={worst:.2f} (33 rows)" if worst <= 1.0 else f"WRONG (err/bound={worst:.2f})", C)
    del a64, b64, want, bound
    flops = 2 * M * N * K
    torch_ms = None
    torch = torch_mod()
    if torch:
        try:
            qa_t, qb_t = as_torch(qa).view(torch.float8_e4m3fn), as_torch(qb).view(torch.float8_e4m3fn)
            one = torch.ones((), device="cuda", dtype=torch.float32)
            mm = lambda: torch._scaled_mm(qa_t, qb_t.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            mm()
            torch_ms = time_ms(mm)
        except Exception as exc:  # an older torch, or no FP8 GEMM for this device
            print(f"  torch._scaled_mm unavailable: {exc.__class__.__name__}: {exc}", flush=True)
    b.add("cuda-12", "fp8_gemm_nt (CUDA-core model)", f"{M}x{N}x{K}", time_ms(gemm, warmup=1, reps=5), check,
          flops=flops, ref_ms=torch_ms, ref="torch._scaled_mm", note="block scales 1x128 / 128x128, promotion per 128")
    if torch_ms:
        b.add("cuda-12", "torch._scaled_mm fp8 (per-tensor scales)", f"{M}x{N}x{K}", torch_ms, "-", flops=flops,
              note="cuBLASLt FP8 tensor cores, bf16 out, for reference")


# ---- cuda-13: MoE grouped GEMM over contiguous per-expert segments ----------------------------
# The README's configuration: numpy default_rng(13), expert token counts ~ Multinomial(T,
# Dirichlet(0.3)), K = N = 1024, fp32; prefill E = 64, T = 8192 and decode-like E = 256, T = 2048
# (drawn in this order, so the counts are the README's). FLOPs = 2 T K N. The loop of gemm_dense
# launches (one per non-empty expert; host-side sync for the counts not timed) is the reference.
def bench_cuda13(b: Bench, ctx: Ctx, configs=(("prefill", 64, 8192), ("decode-like", 256, 2048)), K: int = 1024,
                 N: int = 1024, seed: int = 13):
    sms = ctx.sms
    m = load("13-grouped-gemm/grouped_gemm.cu", ["grouped_gemm", "gemm_dense"])
    kg, kd = m.get_function("grouped_gemm"), m.get_function("gemm_dense")
    rng = np.random.default_rng(seed)
    for label, E, T in configs:
        counts = rng.multinomial(T, rng.dirichlet(np.full(E, 0.3)))
        offs = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        X = cp.asarray(rng.standard_normal((T, K), dtype=np.float32))
        W = cp.asarray(rng.standard_normal((E, K, N), dtype=np.float32))
        d_offs = cp.asarray(offs)
        n_tiles = cdiv(N, 16)
        tiles = sum(cdiv(int(c), 16) for c in counts) * n_tiles
        flops = 2 * T * K * N
        shape = f"E={E} T={T} K={K} N={N}"
        print(f"  cuda-13 {label}: {shape}, {int((counts == 0).sum())} empty experts, max n_e = {int(counts.max())}, "
              f"{tiles} tiles", flush=True)
        Y = cp.full((T, N), cp.nan, dtype=f32)
        segs = [(int(offs[e]), int(counts[e]), e) for e in range(E) if counts[e] > 0]
        bts = cp.zeros(max(cdiv(c, 16) * n_tiles for _, c, _ in segs), dtype=i32)

        def loop():
            for a, c, e in segs:
                kd((cdiv(c, 16) * n_tiles,), (16, 16), (X[a:a + c], W[e], Y[a:a + c], bts, i32(c), i32(N), i32(K)))

        loop()
        y_loop = Y.copy()
        sample = segs[:: max(1, len(segs) // 8)]
        worst = max(rel_err(y_loop[a:a + c], X[a:a + c].astype(cp.float64) @ W[e].astype(cp.float64))
                    for a, c, e in sample)
        loop_check = f"rel={worst:.1e} ({len(sample)} experts)" if worst <= 1e-4 else f"WRONG (rel={worst:.1e})"
        loop_check = nan_or(loop_check, y_loop)
        loop_ms = time_ms(loop)
        for name, G in ((f"grouped_gemm persistent G={sms * 8}", sms * 8), ("grouped_gemm G=tiles", tiles)):
            bt = cp.zeros(G, dtype=i32)
            launch = lambda G=G, bt=bt: kg((G,), (16, 16), (X, W, d_offs, Y, bt, i32(E), i32(N), i32(K)),
                                           shared_mem=(E + 1) * 4)
            Y.fill(cp.nan)
            launch()
            done, most = int(bt.sum()), int(bt.max())
            if bool(cp.isnan(Y).any()):
                check = "WRONG (NaN)"
            elif not bool(cp.array_equal(Y, y_loop)):
                check = "WRONG (differs from the per-expert gemm_dense)"
            elif done != tiles or most > cdiv(tiles, G):
                check = f"WRONG (schedule: {done} of {tiles} tiles, a block did {most} > ceil(tiles / G))"
            else:
                check = "bit-equal to the loop, schedule balanced"
            b.add("cuda-13", name, shape, time_ms(launch), check, flops=flops, ref_ms=loop_ms, ref="per-expert loop")
        b.add("cuda-13", f"loop of gemm_dense ({len(segs)} launches)", shape, loop_ms, loop_check, flops=flops)
        del X, W, Y, y_loop


# ---- cuda-14: MoE dispatch / combine layout ---------------------------------------------------
# The README's DeepSeek-V3 shape: T = 4096 tokens, top-8 of E = 256 experts (uniform, distinct, no
# dropped slot), H = 7168 fp32, tiles of B = 256 slots. Bytes of permute = 4 H (T + N): every token
# row read once (it is read k times, the repeats hit the cache), every dispatched row written once;
# combine reads the N expert-output rows and writes T rows, the same count. N = T k slots.
def bench_cuda14(b: Bench, ctx: Ctx, T: int = 4096, k: int = 8, E: int = 256, H: int = 7168, B: int = 256):
    rng = ctx.rng(14)
    m = load("14-moe-dispatch/moe_layout.cu", ["moe_count", "moe_offsets", "moe_permute", "moe_combine"])
    kc, ko, kp, kcomb = (m.get_function(n) for n in ("moe_count", "moe_offsets", "moe_permute", "moe_combine"))
    nrng = np.random.default_rng(1400)
    idx = np.argsort(nrng.random((T, E)), axis=1)[:, :k].astype(np.int32)  # k distinct experts per token
    S = N = T * k
    G = cdiv(S, B)
    flat = idx.ravel()
    bc_ref = np.zeros((G, E), np.int32)
    np.add.at(bc_ref, (np.arange(S) // B, flat), 1)
    offs_ref = np.concatenate([[0], np.cumsum(np.bincount(flat, minlength=E))]).astype(np.int32)
    boffs_ref = (offs_ref[:-1][None, :] + np.cumsum(bc_ref, axis=0) - bc_ref).astype(np.int32)
    src_ref = np.argsort(flat, kind="stable").astype(np.int32)  # the stable layout: slot order inside an expert
    pos_ref = np.empty(S, np.int32)
    pos_ref[src_ref] = np.arange(S, dtype=np.int32)

    d_idx = cp.asarray(idx)
    X = rng.standard_normal((T, H), dtype=f32)
    bc = cp.full((G, E), -7, dtype=i32)
    counts, offsets, boffs = cp.full(E, -7, dtype=i32), cp.full(E + 1, -7, dtype=i32), cp.full((G, E), -7, dtype=i32)
    perm = cp.full((N, H), cp.nan, dtype=f32)
    pos, src = cp.full(S, -7, dtype=i32), cp.full(N, -7, dtype=i32)
    count = lambda: kc((G,), (B,), (d_idx, i32(S), i32(E), bc), shared_mem=E * 4)
    offsets_k = lambda: ko((1,), (256,), (bc, i32(G), i32(E), counts, offsets, boffs), shared_mem=E * 4)
    permute = lambda: kp((G,), (B,), (X, d_idx, boffs, i32(S), i32(k), i32(H), i32(E), perm, pos, src),
                         shared_mem=((B // 32) * E + B) * 4)
    count()
    offsets_k()
    permute()
    layout_ok = (np.array_equal(cp.asnumpy(bc), bc_ref) and np.array_equal(cp.asnumpy(offsets), offs_ref)
                 and np.array_equal(cp.asnumpy(boffs), boffs_ref) and np.array_equal(cp.asnumpy(pos), pos_ref)
                 and np.array_equal(cp.asnumpy(src), src_ref))
    rows_ok = bool(cp.array_equal(perm.view(cp.uint32), X[cp.asarray(src_ref // k)].view(cp.uint32)))
    layout = "layout exact" if layout_ok else "WRONG (layout)"
    shape = f"T={T} k={k} E={E} H={H}"
    nbytes = 4 * H * (T + N)
    b.add("cuda-14", f"moe_count (B={B})", shape, time_ms(count), layout, note="latency-bound: 128 KB of routing")
    b.add("cuda-14", "moe_offsets (1 block of 256)", shape, time_ms(offsets_k), layout)
    b.bw("cuda-14", f"moe_permute (B={B})", shape, time_ms(permute), nbytes,
         layout if not layout_ok else ("rows bit-exact" if rows_ok else "WRONG (rows)"), "bytes = 4 H (T + N)")
    b.bw("cuda-14", "count + offsets + permute", shape, time_ms(lambda: (count(), offsets_k(), permute())), nbytes,
         layout)
    rows = cp.asarray(src_ref // k)
    b.bw("cuda-14", "CuPy take(X, src // k) (gather)", shape, time_ms(lambda: cp.take(X, rows, axis=0, out=perm)),
         nbytes, "-", "CuPy, for reference")
    del perm

    Y = rng.standard_normal((N, H), dtype=f32)
    wts = (rng.random((T, k), dtype=f32) + f32(0.1)).astype(f32)
    out = cp.full((T, H), cp.nan, dtype=f32)
    want = (wts[:64, :, None].astype(cp.float64) * Y[pos[: 64 * k]].reshape(64, k, H).astype(cp.float64)).sum(axis=1)
    for cb in (128, 256):
        combine = lambda cb=cb: kcomb((T,), (cb,), (Y, pos, wts, i32(k), i32(H), out))
        out.fill(cp.nan)
        combine()
        b.bw("cuda-14", f"moe_combine ({cb} threads)", shape, time_ms(combine), nbytes,
             nan_or(rel_check(out[:64], want, 1e-5), out), "bytes = 4 H (N + T)")


# ---- cuda-15: fused flow-matching solver vs a launch per step ---------------------------------
# The README's setup: block 256, grid = min(ceil(n / 256), SMs x 8); x0 ~ N(0, 1), mu ~ U(-1, 1),
# sigma ~ U(0.5, 2); N = 10 steps. "Per-step" is the benchmark's own one-step kernel (below: reads
# x, mu, sigma and writes x back, 16 B per element per step) launched N times after a copy x0 -> x.
# Fused bytes = 16 n (x0, mu, sigma read, x1 written); per-step bytes = 8 n + 16 n N. One action
# chunk (50 x 32) is launch-bound: its rows give the latency (call + synchronize, host clock) too.
CUDA15_HELPERS = r"""
extern "C" __global__ void bench_flow_step(float* x, const float* mu, const float* sigma, int n, float t, float dt,
                                           int method) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float m = mu[i], s = sigma[i], xi = x[i];
        const float v0 = velocity(xi, t, m, s);
        if (method == HEUN) {
            const float p = xi + dt * v0;
            x[i] = xi + 0.5f * dt * (v0 + velocity(p, t + dt, m, s));
        } else {
            x[i] = xi + dt * v0;
        }
    }
}
"""


def _flow_reference(x0, mu, sigma, steps: int, method: int):
    """The lesson's Euler / Heun recurrence in float64 (CuPy)."""
    def velocity(x, t, m, s):
        u = 1.0 - t
        return (t * s * s - u) / (u * u + t * t * s * s) * (x - t * m) + m

    x, m, s = (a.astype(cp.float64) for a in (x0, mu, sigma))
    dt = 1.0 / steps
    for kk in range(steps):
        t = kk * dt
        v0 = velocity(x, t, m, s)
        x = x + 0.5 * dt * (v0 + velocity(x + dt * v0, t + dt, m, s)) if method else x + dt * v0
    return x


def bench_cuda15(b: Bench, ctx: Ctx, steps: int = 10, chunks: tuple[int, ...] = (1, 4096)):
    rng, sms = ctx.rng(15), ctx.sms
    m = load("15-flow-matching/flow_solver.cu", ["flow_solve"], extra=CUDA15_HELPERS)
    fused_k, step_k = m.get_function("flow_solve"), m.get_function("bench_flow_step")
    dev = cp.cuda.Device()
    for nc in chunks:
        n = nc * 50 * 32
        x0 = rng.standard_normal(n, dtype=f32)
        mu = rng.random(n, dtype=f32) * 2 - 1
        sg = rng.random(n, dtype=f32) * f32(1.5) + f32(0.5)
        x1, xs = cp.full(n, cp.nan, dtype=f32), cp.full(n, cp.nan, dtype=f32)
        block, grid = 256, min(cdiv(n, 256), sms * 8)
        shape = f"{nc}x50x32"
        dt = 1.0 / steps
        for method, mname in ((0, "Euler"), (1, "Heun")):
            fused = lambda method=method: fused_k((grid,), (block,), (x0, mu, sg, x1, i32(n), i32(steps), i32(method)))

            def per_step(stream_ptr=0, method=method):
                cp.cuda.runtime.memcpyAsync(xs.data.ptr, x0.data.ptr, 4 * n, cp.cuda.runtime.memcpyDeviceToDevice,
                                            stream_ptr)
                for kk in range(steps):
                    step_k((grid,), (block,), (xs, mu, sg, i32(n), f32(kk * dt), f32(dt), i32(method)))

            x1.fill(cp.nan)
            xs.fill(cp.nan)
            fused()
            per_step()
            ref = _flow_reference(x0, mu, sg, steps, method)
            bound = 4 * (steps + 8) * 2.0**-24 * (1 + cp.abs(ref) + 2 * cp.abs(x0) + cp.abs(mu))
            worst = float(cp.max(cp.abs(x1 - ref) / bound))
            diff = float(cp.max(cp.abs(x1 - xs)))
            check = f"err/bound={worst:.2f}, max|fused - per-step|={diff:.1e}" if worst <= 1 else \
                f"WRONG (err/bound={worst:.2f})"
            check = nan_or(check, x1, xs)
            graph_ms = graph_lat = None
            graph_check = check
            stepped = xs.copy()
            xs.fill(cp.nan)
            stream = cp.cuda.Stream(non_blocking=True)
            try:  # the per-step sequence captured once into a CUDA graph and replayed
                dev.synchronize()
                with stream:
                    stream.begin_capture()
                    per_step(stream.ptr)
                    graph = stream.end_capture()
                    graph_ms = time_ms(lambda: graph.launch(stream), stream=stream)
                    if nc == 1:
                        graph_lat = latency_ms(lambda: graph.launch(stream), stream.synchronize)
                stream.synchronize()
                if not bool(cp.array_equal(xs, stepped)):
                    graph_check = "WRONG (the graph's x differs from the per-step launches')"
            except Exception as exc:
                print(f"  CUDA graph of the per-step launches unavailable: {exc.__class__.__name__}: {exc}",
                      flush=True)
                if stream.is_capturing():  # leave no stream capturing: it would break every later launch
                    stream.end_capture()
            step_ms, fused_ms = time_ms(per_step), time_ms(fused)
            big = nc > 1
            b.add("cuda-15", f"flow_solve fused, {mname} N={steps}", shape, fused_ms, check,
                  nbytes=16 * n if big else None, ref_ms=step_ms, ref="per-step")
            b.add("cuda-15", f"per-step launches, {mname} N={steps}", shape, step_ms, check,
                  nbytes=(8 + 16 * steps) * n if big else None, note=f"1 copy + {steps} launches")
            if graph_ms:
                b.add("cuda-15", f"per-step as a CUDA graph, {mname} N={steps}", shape, graph_ms, graph_check,
                      nbytes=(8 + 16 * steps) * n if big else None)
            if not big:
                f_lat, s_lat = latency_ms(fused, dev.synchronize), latency_ms(per_step, dev.synchronize)
                b.add("cuda-15", f"latency fused, {mname} N={steps}", shape, f_lat, check, ref_ms=s_lat, ref="per-step",
                      note="call + synchronize, host clock")
                b.add("cuda-15", f"latency per-step, {mname} N={steps}", shape, s_lat, check,
                      note="call + synchronize, host clock")
                if graph_lat:
                    b.add("cuda-15", f"latency CUDA graph, {mname} N={steps}", shape, graph_lat, graph_check,
                          note="launch + synchronize, host clock")


# ---- cuda-16: point-cloud voxelization with a GPU hash table ----------------------------------
# P points (x, y, z, point index as a float: exact below 2^24, so stored rows can be traced) in
# clusters around random centres, some outside the range and some NaN, on a 0.1 x 0.1 x 0.2 m grid
# of 1024 x 1024 x 40 voxels; capacity = the power of two >= 2 x the voxel count (load factor
# <= 1/2), max_voxels = the voxel count, max_points = 32. Two cloud shapes: 2^14 clusters (~1 M
# voxels, a 25 MB table that fits the L2, hot voxels of a few hundred points) and 2^17 clusters
# (~4 M voxels, a 100 MB table that does not). Bytes: insert 4 F P (points) + 8 P (slot,
# rank); assign 8 cap (keys, counts) + 4 V (ids) + 16 V (coors, num_points); scatter 8 P + 2 x 4 F
# x stored points (read + write). Table atomics and the table_vals gather (L2) are not counted.
def bench_cuda16(b: Bench, ctx: Ctx, P: int = 1 << 24, clusters: tuple[int, ...] = (1 << 14, 1 << 17),
                 max_points: int = 32, dims: tuple[int, int, int] = (1024, 1024, 40), block: int = 256):
    rng = ctx.rng(16)
    m = load("16-voxelize/voxelize.cu", ["voxel_insert", "voxel_assign", "voxel_scatter"])
    kernels = tuple(m.get_function(n) for n in ("voxel_insert", "voxel_assign", "voxel_scatter"))
    for nc in clusters:
        _voxelize_case(b, kernels, rng, P, nc, max_points, dims, block)
        free_memory()


def _voxelize_case(b: Bench, kernels, rng, P: int, clusters: int, max_points: int, dims: tuple[int, int, int],
                   block: int):
    kins, kasg, ksct = kernels
    nx, ny, nz = dims
    sizes = (0.1, 0.1, 0.2)
    mins = (-0.05 * nx, -0.05 * ny, -5.0)
    F = 4
    # voxel units: cluster centres a little beyond the range on every side, points ~ N(centre, 0.7 voxel)
    cen = rng.random((clusters, 3), dtype=f32) * (cp.asarray(dims, dtype=f32) + 4) - 2
    u = cen[rng.integers(0, clusters, P, dtype=cp.int64)] + rng.standard_normal((P, 3), dtype=f32) * f32(0.7)
    pts = cp.empty((P, F), dtype=f32)
    pts[:, :3] = cp.asarray(mins, dtype=f32) + u * cp.asarray(sizes, dtype=f32)
    pts[:, 3] = cp.arange(P, dtype=f32)
    pts[::1009, 0] = cp.nan
    del cen, u
    # the reference voxel of every point: the kernel's fp32 formula, applied by CuPy
    fl = [cp.floor((pts[:, a] - f32(mins[a])) / f32(sizes[a])) for a in range(3)]
    inside = (fl[0] >= 0) & (fl[0] < nx) & (fl[1] >= 0) & (fl[1] < ny) & (fl[2] >= 0) & (fl[2] < nz)
    keys_ref = ((fl[2][inside].astype(cp.int64) * ny + fl[1][inside].astype(cp.int64)) * nx
                + fl[0][inside].astype(cp.int64))
    ref_counts = cp.bincount(keys_ref, minlength=nx * ny * nz)
    V, kept = int(cp.count_nonzero(ref_counts)), int(keys_ref.size)
    stored_ref = int(cp.minimum(ref_counts, max_points).sum())
    del fl, inside, keys_ref
    cap = 1 << max(1, (2 * V - 1).bit_length())
    max_voxels = V
    shape = f"P=2^{P.bit_length() - 1} V={V}"
    print(f"  cuda-16: {P} points in {clusters} clusters, {kept} inside, {V} voxels, capacity {cap} "
          f"({12 * cap / 1e6:.0f} MB of table), {stored_ref} stored", flush=True)

    keys, cnts = cp.empty(cap, dtype=i32), cp.empty(cap, dtype=i32)
    slot, rank = cp.full(P, -7, dtype=i32), cp.full(P, -7, dtype=i32)
    vals, nvox = cp.full(cap, -7, dtype=i32), cp.zeros(1, dtype=i32)
    coors, nump = cp.full((max_voxels, 3), -7, dtype=i32), cp.full(max_voxels, -7, dtype=i32)
    voxels = cp.full((max_voxels, max_points, F), cp.nan, dtype=f32)
    scalars = (f32(mins[0]), f32(mins[1]), f32(mins[2]), f32(sizes[0]), f32(sizes[1]), f32(sizes[2]),
               i32(nx), i32(ny), i32(nz))

    def insert():
        keys.fill(-1)  # EMPTY_KEY
        cnts.fill(0)
        kins((cdiv(P, block),), (block,), (pts, i32(P), i32(F), *scalars, keys, cnts, i32(cap), slot, rank))

    def assign():
        nvox.fill(0)
        kasg((cdiv(cap, block),), (block,), (keys, cnts, i32(cap), i32(nx), i32(ny), i32(max_voxels),
                                             i32(max_points), vals, nvox, coors, nump))

    scatter = lambda: ksct((cdiv(P, block),), (block,), (pts, i32(P), i32(F), slot, rank, vals, i32(max_voxels),
                                                          i32(max_points), voxels))
    insert()
    assign()
    scatter()
    # canonical checks (which voxel gets which id, and which points of a full voxel are kept, vary)
    problems = []
    occ = keys != -1
    if int(nvox[0]) != V or int(occ.sum()) != V:
        problems.append(f"{int(nvox[0])} ids / {int(occ.sum())} occupied slots for {V} voxels")
    elif not bool(cp.array_equal(cnts[occ], ref_counts[keys[occ]].astype(i32))):
        problems.append("table counts")
    key_of = (coors[:, 0].astype(cp.int64) * ny + coors[:, 1]) * nx + coors[:, 2]
    if not problems and not (bool((coors >= 0).all()) and int(cp.unique(key_of).size) == V
                             and bool(cp.array_equal(nump, cp.minimum(ref_counts[key_of], max_points).astype(i32)))):
        problems.append("coors / num_points")
    if not problems:
        used = (cp.arange(max_points)[None, :] < nump[:, None]).ravel()  # (voxel, row) pairs holding a point
        vid = cp.nonzero(used)[0] // max_points
        rows_ = voxels.reshape(-1, F)[used]
        idx = rows_[:, 3].astype(cp.int64)
        if rows_.shape[0] != stored_ref or bool(cp.isnan(rows_).any()) or int(cp.unique(idx).size) != stored_ref:
            problems.append("stored rows (count, NaN or a point twice)")
        elif not bool(cp.array_equal(rows_, pts[idx])):
            problems.append("stored rows are not copies of their points")
        else:
            vox = [cp.floor((rows_[:, a] - f32(mins[a])) / f32(sizes[a])).astype(i32) for a in range(3)]
            if not all(bool(cp.array_equal(vox[a], coors[vid, 2 - a])) for a in range(3)):
                problems.append("a stored point is not in its voxel")
    check = "canonical form exact" if not problems else "WRONG (" + "; ".join(problems) + ")"

    ins_ms, asg_ms, sct_ms = time_ms(insert), time_ms(assign), time_ms(scatter)
    ins_b, asg_b, sct_b = 4 * F * P + 8 * P, 8 * cap + 20 * V, 8 * P + 8 * F * stored_ref
    b.bw("cuda-16", f"voxel_insert (block {block})", shape, ins_ms, ins_b, check,
         f"{12 * cap / 1e6:.0f} MB table; time incl. its reset (8 x {cap} B); bytes = 4 F P + 8 P")
    b.bw("cuda-16", "voxel_assign", shape, asg_ms, asg_b, check, "bytes = 8 cap + 20 V")
    b.bw("cuda-16", "voxel_scatter", shape, sct_ms, sct_b, check, "bytes = 8 P + 8 F stored")
    b.bw("cuda-16", "insert + assign + scatter", shape, time_ms(lambda: (insert(), assign(), scatter())),
         ins_b + asg_b + sct_b, check)


# ---- cuda-17: per-channel fake quantization (QAT): forward, STE backward, LSQ backward ---------
# A C x K fp32 weight, axis 0 (outer = 1, inner = K), int8 range [-128, 127], per-channel zero
# points in [-10, 10] and scales amax / 200 (~1-2 % of the elements clamped). Bytes: fwd 8 n (x read, y
# written), bwd 12 n (x, dy read, dx written), lsq_bwd 12 n (+ 8 C). Grid-stride kernels run SMs
# x 8 blocks of 256; lsq_bwd one block of 256 per channel. torch's CUDA fake_quantize_per_channel_affine
# (it adds z before rounding, so its bits differ; it also writes a mask) is timed for reference.
def bench_cuda17(b: Bench, ctx: Ctx, C: int = 16384, K: int = 16384, qmin: int = -128, qmax: int = 127):
    rng, sms = ctx.rng(17), ctx.sms
    m = load("17-fake-quant/fake_quant.cu", ["fake_quant_fwd", "fake_quant_bwd", "lsq_bwd"])
    kf, kb, kl = (m.get_function(n) for n in ("fake_quant_fwd", "fake_quant_bwd", "lsq_bwd"))
    n = C * K
    outer, inner = 1, K
    x = rng.standard_normal((C, K), dtype=f32) * (rng.random((C, 1), dtype=f32) + f32(0.2))
    z = rng.integers(-10, 11, C, dtype=cp.int64).astype(i32)
    s = (cp.abs(x).max(axis=1) / f32(200)).astype(f32)  # amax / 200: |x| beyond ~0.6 amax gets clamped
    dy = rng.standard_normal((C, K), dtype=f32)
    y, dx = cp.full((C, K), cp.nan, dtype=f32), cp.full((C, K), cp.nan, dtype=f32)
    ds, dz = cp.full(C, cp.nan, dtype=f32), cp.full(C, cp.nan, dtype=f32)
    g = f32(1.0 / math.sqrt(n * qmax))  # LSQ's gradient scale
    # references, in the kernel's fp32 arithmetic: code = z + rint(x * fl(1 / s)), clamp, back
    inv = (f32(1) / s)[:, None]
    zf = z.astype(f32)[:, None]
    code = zf + cp.rint(x * inv)
    inr = (code >= qmin) & (code <= qmax)
    y_ref = (cp.minimum(cp.maximum(code, f32(qmin)), f32(qmax)) - zf) * s[:, None]
    dx_ref = cp.where(inr, dy, f32(0))
    grid, shape = sms * 8, f"{C}x{K} axis 0"
    args = (i32(outer), i32(C), i32(inner), i32(qmin), i32(qmax))
    fwd = lambda: kf((grid,), (256,), (x, s, z, y, *args))
    bwd = lambda: kb((grid,), (256,), (x, dy, s, z, dx, *args))
    lsq = lambda: kl((C,), (256,), (x, dy, s, z, dx, ds, dz, *args, g))
    fwd()
    b.bw("cuda-17", "fake_quant_fwd", shape, time_ms(fwd), 8 * n,
         "exact" if bool(cp.array_equal(y, y_ref)) else "WRONG", f"{100 * (1 - float(inr.mean())):.2f}% clamped")
    bwd()
    b.bw("cuda-17", "fake_quant_bwd (STE mask)", shape, time_ms(bwd), 12 * n,
         "exact" if bool(cp.array_equal(dx, dx_ref)) else "WRONG")
    dx.fill(cp.nan)
    lsq()
    c64 = code[:64].astype(cp.float64)
    x64, dy64, z64 = x[:64].astype(cp.float64), dy[:64].astype(cp.float64), z[:64, None].astype(cp.float64)
    inr64 = inr[:64]
    term_s = cp.where(inr64, (c64 - z64) - x64 * inv[:64].astype(cp.float64),
                      cp.where(c64 < qmin, qmin - z64, qmax - z64))
    ds_ref = float(g) * (dy64 * term_s).sum(axis=1)
    dz_ref = float(g) * (dy64 * cp.where(inr64, 0.0, -s[:64, None].astype(cp.float64))).sum(axis=1)
    check = (f"dx exact, dscale {rel_check(ds[:64], ds_ref, 1e-3)}, dzero {rel_check(dz[:64], dz_ref, 1e-3)}"
             if bool(cp.array_equal(dx, dx_ref)) else "WRONG (dx)")
    b.bw("cuda-17", "lsq_bwd (1 block / channel)", shape, time_ms(lsq), 12 * n + 8 * C, nan_or(check, ds, dz))
    torch = torch_mod()
    if torch:
        xt, st, zt = as_torch(x), as_torch(s), as_torch(z)
        fq = lambda: torch.fake_quantize_per_channel_affine(xt, st, zt, 0, qmin, qmax)
        b.bw("cuda-17", "torch fake_quantize_per_channel_affine", shape, time_ms(fq), 8 * n, "-",
             "PyTorch, for reference (bytes counted as 8 n; it writes a mask too)")


SECTIONS = [
    (("cuda-01",), bench_cuda01),
    (("cuda-02",), bench_cuda02),
    (("cuda-03", "cuda-04"), bench_cuda03_04),
    (("cuda-05",), bench_cuda05),
    (("cuda-06",), bench_cuda06),
    (("cuda-07",), bench_cuda07),
    (("cuda-08",), bench_cuda08),
    (("cuda-09",), bench_cuda09),
    (("cuda-10",), bench_cuda10),
    (("cuda-11",), bench_cuda11),
    (("cuda-12",), bench_cuda12),
    (("cuda-13",), bench_cuda13),
    (("cuda-14",), bench_cuda14),
    (("cuda-15",), bench_cuda15),
    (("cuda-16",), bench_cuda16),
    (("cuda-17",), bench_cuda17),
]


def table(info: dict, copy_bw: float, rows: list[dict]) -> str:
    l2 = info["l2_bytes_cudart"] / 1e6
    l2t = info.get("l2_bytes_torch")
    lines = [
        f"Device: {info['name']} (CC {info['cc']}), {info['sms']} SMs, L2 {l2:.1f} MB (cudaDeviceProp.l2CacheSize)"
        + (f", PyTorch L2_cache_size {l2t / 1e6:.1f} MB" if l2t else "")
        + f", {info['global_mem_bytes'] / GiB:.1f} GiB; measured D2D copy {copy_bw / 1e3:.2f} TB/s (read + write).",
        "",
        "| lesson | kernel | shape | time (ms) | achieved | vs copy | vs reference | check | note |",
        "|---|---|---|---:|---:|---:|---:|---|---|",
    ]
    for row in rows:
        achieved = (f"{row['GB/s'] / 1e3:.2f} TB/s" if "GB/s" in row else
                    f"{row['TFLOP/s']:.2f} TFLOP/s" if "TFLOP/s" in row else "-")
        vs_copy = f"{row['pct_copy']:.1f}%" if "pct_copy" in row else "-"
        vs_ref = f"{100 * row['ratio_vs_ref']:.1f}% of {row['ref']}" if "ratio_vs_ref" in row else "-"
        lines.append(f"| {row['lesson']} | {row['kernel']} | {row['shape']} | {row['ms']:.4g} | {achieved} | "
                     f"{vs_copy} | {vs_ref} | {row['check']} | {row.get('note', '')} |")
    return "\n".join(lines)


def free_memory() -> None:
    cp.get_default_memory_pool().free_all_blocks()
    torch = torch_mod()
    if torch:
        torch.cuda.empty_cache()


def main() -> int:
    ids = [i for ids_, _ in SECTIONS for i in ids_]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="folder for cuda_h200.json and cuda_h200.md")
    ap.add_argument("--only", default="", help=f"comma-separated lesson ids (default: all of {ids[0]}..{ids[-1]})")
    args = ap.parse_args()
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - set(ids)
    if unknown:
        ap.error(f"unknown lesson id(s) {', '.join(sorted(unknown))}; known: {', '.join(ids)}")

    info = device_info()
    print("device:", json.dumps(info), flush=True)
    ctx = Ctx(info)
    copy_bw = bench_copy()
    print(f"device-to-device copy: {copy_bw:.0f} GB/s (read + write)", flush=True)
    b = Bench(copy_bw)
    for lesson_ids, fn in SECTIONS:
        if only and not only & set(lesson_ids):
            continue
        t0 = time.perf_counter()
        print(f"[{', '.join(lesson_ids)}]", flush=True)
        try:
            fn(b, ctx)
        except Exception as exc:
            traceback.print_exc()
            b.rows.append({"lesson": lesson_ids[0], "kernel": fn.__name__, "shape": "-", "ms": float("nan"),
                           "check": f"ERROR: {exc.__class__.__name__}: {str(exc)[:200]}", "note": ""})
        free_memory()
        print(f"[{', '.join(lesson_ids)}] {time.perf_counter() - t0:.1f} s", flush=True)

    md = table(info, copy_bw, b.rows)
    print("\n" + md, flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cuda_h200.json").write_text(json.dumps({"device": info, "copy_GBps": copy_bw, "rows": b.rows},
                                                            indent=1, default=float))
        (args.out / "cuda_h200.md").write_text(md + "\n")
    bad = [r for r in b.rows if "WRONG" in str(r["check"]) or str(r["check"]).startswith("ERROR")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
