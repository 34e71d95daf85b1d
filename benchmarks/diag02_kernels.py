"""diag-02: the kernels whose Nsight Compute metrics the lesson classifies (run under ncu by diag02_record_ncu.sh).

    python benchmarks/diag02_kernels.py CASE        # CASE: copy | gemm | tiny | occ | transpose | tail | all

Each case launches its kernel twice (a warm-up, then the launch ncu profiles with --launch-skip 1 --launch-count 1)
and checks the result on the host side, so a profile is never of a kernel that computed garbage.
Needs an NVIDIA GPU, CuPy (the custom kernels, compiled by NVRTC) and torch (the cuBLAS bf16 GEMM).
Sizes are for an H200 (132 SMs, 228 KB shared memory per SM; docs/hardware.md).
"""

import json
import sys

import cupy as cp
import numpy as np

SRC = r"""
extern "C" __global__ void copy_f32(const float4* __restrict__ x, float4* __restrict__ y, unsigned long n4) {
    unsigned long i = blockIdx.x * (unsigned long)blockDim.x + threadIdx.x;
    if (i < n4) y[i] = x[i];
}

extern "C" __global__ void tiny_add(float* x, int n) {        // one block of 32 threads: pure launch latency
    int i = threadIdx.x;
    if (i < n) x[i] = x[i] + 1.0f;
}

// 200 KB of dynamic shared memory per block: one block per SM; a dependent streaming loop (no unrolling) so that
// 8 warps per SM cannot keep enough bytes in flight.
extern "C" __global__ void smem_hog(const float4* __restrict__ x, float* __restrict__ out, unsigned long n4) {
    extern __shared__ float4 buf[];
    float acc = 0.0f;
    unsigned long stride = (unsigned long)gridDim.x * blockDim.x;
    #pragma unroll 1
    for (unsigned long i = blockIdx.x * (unsigned long)blockDim.x + threadIdx.x; i < n4; i += stride) {
        buf[threadIdx.x] = x[i];
        float4 v = buf[threadIdx.x];
        acc += v.x + v.y + v.z + v.w;
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// 32x32 tile, block (32, 8), no padding: the column read tile[threadIdx.x][...] is a 32-way bank conflict.
extern "C" __global__ void transpose_naive(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ float tile[32][32];
    int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x; y = blockIdx.x * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8) out[(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}

// FMA chain, 1024 threads per block (2 blocks per SM at <= 32 registers): 280 blocks = 1.06 waves on 132 SMs.
extern "C" __global__ void fma_tail(float* out, int iters) {
    float a = threadIdx.x * 1e-3f, b = 0.999f, c = 1e-4f;
    for (int k = 0; k < iters; ++k) a = fmaf(a, b, c);
    out[blockIdx.x * blockDim.x + threadIdx.x] = a;
}
"""
MOD = cp.RawModule(code=SRC, options=("-std=c++17",))
SMEM_HOG_BYTES = 200 * 1024


def twice(launch):
    for _ in range(2):
        launch()
    cp.cuda.Device().synchronize()


def copy():
    n4 = 2**26                                               # 2**28 floats = 1 GiB
    x = cp.arange(n4 * 4, dtype=cp.float32).reshape(-1, 4)
    y = cp.full_like(x, -1.0)
    twice(lambda: MOD.get_function("copy_f32")((n4 // 256,), (256,), (x, y, cp.uint64(n4))))
    assert bool((y == x).all())


def gemm():
    import torch
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = None
    for _ in range(2):
        c = a @ b
    torch.cuda.synchronize()
    ref = a[:64].float() @ b.float()
    assert torch.allclose(c[:64].float(), ref, rtol=2e-2, atol=1.0)
    print(json.dumps({"gemm_flops": 2 * n**3, "m": n, "n": n, "k": n, "dtype": "bfloat16"}))


def tiny():
    x = cp.zeros(32, dtype=cp.float32)
    twice(lambda: MOD.get_function("tiny_add")((1,), (32,), (x, np.int32(32))))
    assert bool((x == 2.0).all())


def occ():
    f = MOD.get_function("smem_hog")
    f.max_dynamic_shared_size_bytes = SMEM_HOG_BYTES
    n4, grid = 2**26, 1320                                   # 1 GiB; 10 waves of one block per SM
    x = cp.ones((n4, 4), dtype=cp.float32)
    out = cp.full(grid * 256, -1.0, dtype=cp.float32)
    twice(lambda: f((grid,), (256,), (x, out, cp.uint64(n4)), shared_mem=SMEM_HOG_BYTES))
    assert float(out.astype(cp.float64).sum()) == 4.0 * n4


def transpose():
    n = 8192
    a = cp.arange(n * n, dtype=cp.float32).reshape(n, n)
    t = cp.full_like(a, -1.0)
    twice(lambda: MOD.get_function("transpose_naive")((n // 32, n // 32), (32, 8), (a, t, np.int32(n))))
    assert bool((t == a.T).all())


def tail():
    grid, iters = 280, 4096
    out = cp.full(grid * 1024, -1.0, dtype=cp.float32)
    twice(lambda: MOD.get_function("fma_tail")((grid,), (1024,), (out, np.int32(iters))))
    assert bool(cp.isfinite(out).all()) and float(out.min()) >= 0.0


CASES = {"copy": copy, "gemm": gemm, "tiny": tiny, "occ": occ, "transpose": transpose, "tail": tail}

if __name__ == "__main__":
    names = list(CASES) if sys.argv[1:] == ["all"] else sys.argv[1:]
    for name in names:
        CASES[name]()
