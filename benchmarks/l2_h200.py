"""Read bandwidth by working-set size on a GPU: where the L2 plateau ends and HBM begins.

    python3 benchmarks/l2_h200.py        # on a machine with a CUDA GPU and CuPy

A CuPy kernel reads a float4 buffer of the given size with a grid-stride loop (8 loads in flight per
thread, 132 x 8 blocks of 256 threads) and writes one sum per thread (so the reads cannot be dropped);
each launch reads the whole buffer `reps` times (about 2 GB per launch, so launch overhead is negligible),
each pass rotated so no load repeats the previous pass's address order, through `ld.global.cg` (cached in
L2 only, not in the 256 KB L1 of each SM). Working sets below the L2 size (60 MiB on the H200) are served
from L2; the median of 20 launches after 3 warm-ups is reported.
"""

from __future__ import annotations

import statistics
import sys

import cupy as cp

SRC = r"""
extern "C" __global__ void read_sum(const float4* __restrict__ x, long n4, int reps, float* out) {
    float s = 0.0f;
    long stride = (long)gridDim.x * blockDim.x;
    long t = (long)blockIdx.x * blockDim.x + threadIdx.x;
    for (int r = 0; r < reps; ++r) {
        long shift = (long)r * 4099 % n4;  // each pass starts elsewhere: no load repeats an earlier one
        for (long i = t; i < n4; i += 8 * stride) {
            float4 v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) {  // 8 independent 16-byte loads in flight per thread
                long j = i + u * stride;
                long idx = j + shift < n4 ? j + shift : j + shift - n4;
                v[u] = j < n4 ? __ldcg(x + idx) : make_float4(0.f, 0.f, 0.f, 0.f);  // .cg: L2, not L1
            }
#pragma unroll
            for (int u = 0; u < 8; ++u) s += (v[u].x + v[u].y) + (v[u].z + v[u].w);
        }
    }
    out[t] = s;
}
"""


def main() -> int:
    k = cp.RawModule(code=SRC).get_function("read_sum")
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    grid, block = sms * 8, 256
    out = cp.empty(grid * block, dtype=cp.float32)
    print("| working set | read bandwidth (TB/s) | ms per pass |")
    print("|---:|---:|---:|")
    for mib in (4, 8, 16, 24, 32, 40, 48, 64, 96, 256, 1024):
        x = cp.random.standard_normal(mib * (1 << 20) // 4, dtype=cp.float32)
        n4 = x.size // 4
        reps = max(1, (2 << 30) // x.nbytes)
        args = (x, cp.int64(n4), cp.int32(reps), out)
        for _ in range(3):
            k((grid,), (block,), args)
        times = []
        for _ in range(20):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            k((grid,), (block,), args)
            b.record()
            b.synchronize()
            times.append(cp.cuda.get_elapsed_time(a, b))
        ms = statistics.median(times)
        print(f"| {mib} MiB | {reps * x.nbytes / ms / 1e9:.2f} | {ms / reps:.4f} |", flush=True)
        del x
    return 0


if __name__ == "__main__":
    sys.exit(main())
