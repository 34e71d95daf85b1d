"""Figures for the CUDA C emulator (pytest_hpccourse.runtimes.cuda), printed as a small report.

    python benchmarks/cuda_emulator.py            # everything
    python benchmarks/cuda_emulator.py --quick    # smaller sizes

1. compile time of each tests/cuda/kernels/*.cu in the fast / race / asan builds (a fresh cache;
   the runtime objects, built once per variant, reported separately), and of the `nvcc -c` check;
2. the emulator vs numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1) on the same shared-memory tree
   reduction (`pip install numba` first; skipped when numba is missing);
3. the slowdown of the race build (with and without bank counting) and the ASan build;
4. fiber switching: the hand-written x86-64 context switch vs ucontext.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
KERNELS = ROOT / "tests" / "cuda" / "kernels"


def best(fn, repeat=3):
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def compile_times(files):
    from pytest_hpccourse.runtimes.cuda import cpu

    print("== 1. compile time (g++ " + cpu.toolchain_id().split("|")[0] + ", fresh cache) ==")
    for v in cpu.VARIANTS:
        t = time.perf_counter()
        cpu.runtime_object(v)
        print(f"  runtime object, {v:5s} build: {time.perf_counter() - t:5.2f} s  (once per machine, cached)")
    rows = []
    for f in files:
        row = [f.name]
        for v in cpu.VARIANTS:
            t = time.perf_counter()
            cpu.build(f, v, nvcc_check=False)
            row.append(time.perf_counter() - t)
        rows.append(row)
    print(f"  {'file':16s} {'fast':>7s} {'race':>7s} {'asan':>7s}   (seconds: rewrite + g++ + link + describe)")
    for r in rows:
        print(f"  {r[0]:16s} {r[1]:7.2f} {r[2]:7.2f} {r[3]:7.2f}")
    for i, v in enumerate(cpu.VARIANTS, 1):
        col = [r[i] for r in rows]
        print(f"  {v:5s}: median {statistics.median(col):.2f} s, max {max(col):.2f} s")
    nvcc = shutil.which("nvcc")
    if nvcc:
        ts = []
        with tempfile.TemporaryDirectory() as d:
            for f in files:
                t = time.perf_counter()
                subprocess.run([nvcc, "-c", "-x", "cu", "-std=c++17", "-arch=sm_80", "-w", str(f), "-o",
                                os.path.join(d, "x.o")], capture_output=True)
                ts.append(time.perf_counter() - t)
        print(f"  nvcc -c check (runs concurrently with g++, cached by content): median {statistics.median(ts):.2f} s, "
              f"max {max(ts):.2f} s")
    print()


NUMBA_SRC = textwrap.dedent("""
    import sys, time
    import numpy as np
    from numba import cuda, float32

    @cuda.jit
    def block_sum(x, out, n):
        s = cuda.shared.array(256, float32)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * cuda.blockDim.x + tid
        s[tid] = x[i] if i < n else 0.0
        cuda.syncthreads()
        stride = cuda.blockDim.x // 2
        while stride > 0:
            if tid < stride:
                s[tid] += s[tid + stride]
            cuda.syncthreads()
            stride //= 2
        if tid == 0:
            out[cuda.blockIdx.x] = s[0]

    n = int(sys.argv[1])
    x = np.random.default_rng(0).random(n).astype(np.float32)
    out = np.zeros(n // 256, np.float32)
    block_sum[1, 256](x[:256], out[:1], 256)             # warm-up
    t = time.perf_counter()
    block_sum[n // 256, 256](x, out, n)
    dt = time.perf_counter() - t
    assert abs(out.sum() - x.sum()) < 1e-2 * n
    print(dt)
""")


def vs_numba(sizes):
    from pytest_hpccourse.runtimes import cuda

    print("== 2. emulator vs numba's CUDA simulator: shared-memory tree reduction, 256 threads/block ==")
    try:
        import numba  # noqa: F401
    except ImportError:
        print("  numba is not installed (pip install numba): skipped\n")
        return
    mod = cuda.load(KERNELS / "reduce.cu", backend="cpu")
    for n in sizes:
        x = np.random.default_rng(0).random(n).astype(np.float32)
        out = np.zeros(n // 256, np.float32)
        emu = best(lambda: mod.block_sum[n // 256, 256, 1024](x, out, n))
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        r = subprocess.run([sys.executable, "-c", NUMBA_SRC, str(n)], capture_output=True, text=True, env=env)
        if r.returncode:
            print("  numba simulator failed:", r.stderr[-500:])
            return
        sim = float(r.stdout.strip().splitlines()[-1])
        print(f"  n = {n:>8d} ({n // 256:>5d} blocks): emulator {emu * 1e3:8.1f} ms (incl. ~5 ms process start), "
              f"numba simulator {sim * 1e3:9.1f} ms  ->  {sim / emu:6.0f}x faster")
    print()


def slowdowns(n):
    from pytest_hpccourse.runtimes import cuda

    print(f"== 3. checked builds: wall time of one launch (n = {n}, best of 3) ==")
    x = np.random.default_rng(0).random(n).astype(np.float32)
    a = np.random.default_rng(1).random((256, 256)).astype(np.float32)
    cases = [
        ("smem tree reduction", KERNELS / "reduce.cu", "block_sum", lambda m, k: k[n // 256, 256, 1024](
            x, np.zeros(n // 256, np.float32), n)),
        ("tiled SGEMM 256^3", KERNELS / "sgemm.cu", "sgemm_tiled", lambda m, k: k[(16, 16), (16, 16)](
            a, a, np.zeros_like(a), 256, 256, 256)),
    ]
    for label, path, name, call in cases:
        times = {}
        for build, banks in (("fast", False), ("race", False), ("race", True), ("asan", False)):
            mod = cuda.load(path, backend="cpu", build=build, banks=banks)
            k = getattr(mod, name)
            times[(build, banks)] = best(lambda: call(mod, k))
        base = times[("fast", False)]
        print(f"  {label:20s} fast {base * 1e3:7.1f} ms | race {times[('race', False)] * 1e3:7.1f} ms "
              f"({times[('race', False)] / base:4.1f}x) | race+banks {times[('race', True)] * 1e3:7.1f} ms "
              f"({times[('race', True)] / base:4.1f}x) | asan {times[('asan', False)] * 1e3:7.1f} ms "
              f"({times[('asan', False)] / base:4.1f}x)")
    print()


def fibers(n):
    from pytest_hpccourse.runtimes import cuda

    print(f"== 4. fiber switch: x86-64 assembly vs ucontext (smem reduction, n = {n}) ==")
    x = np.random.default_rng(0).random(n).astype(np.float32)
    res = {}
    old = os.environ.get("HPCCOURSE_CUDA_CXXFLAGS")
    try:
        for label, flags in (("asm", ""), ("ucontext", "-DHPC_USE_UCONTEXT=1")):
            os.environ["HPCCOURSE_CUDA_CXXFLAGS"] = flags
            mod = cuda.load(KERNELS / "reduce.cu", backend="cpu", nvcc_check=False)
            out = np.zeros(n // 256, np.float32)
            t = best(lambda: mod.block_sum[n // 256, 256, 1024](x, out, n))
            sw = mod.block_sum.stats["switches"]
            res[label] = t
            print(f"  {label:9s} {t * 1e3:8.1f} ms for {sw} fiber resumptions ({t / sw * 1e9:5.0f} ns each, "
                  f"kernel work included)")
    finally:
        if old is None:
            os.environ.pop("HPCCOURSE_CUDA_CXXFLAGS", None)
        else:
            os.environ["HPCCOURSE_CUDA_CXXFLAGS"] = old
    print(f"  assembly switch is {res['ucontext'] / res['asm']:.0f}x faster\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--keep-cache", action="store_true", help="use the normal cache (compile times then measure hits)")
    ap.add_argument("--only", choices=["compile", "numba", "checked", "fibers"])
    args = ap.parse_args()
    tmp = None
    if not args.keep_cache:
        tmp = tempfile.mkdtemp(prefix="hpccourse-bench-cache-")
        os.environ["HPCCOURSE_CACHE"] = tmp
    os.environ.setdefault("HPCCOURSE_CUDA_NVCC", "0")
    try:
        files = sorted(p for p in KERNELS.glob("*.cu"))
        if args.only in (None, "compile"):
            compile_times(files)
        if args.only in (None, "numba"):
            vs_numba([1 << 12, 1 << 14] if args.quick else [1 << 12, 1 << 14, 1 << 16])
        if args.only in (None, "checked"):
            slowdowns(1 << 16 if args.quick else 1 << 18)
        if args.only in (None, "fibers"):
            fibers(1 << 18 if args.quick else 1 << 20)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
