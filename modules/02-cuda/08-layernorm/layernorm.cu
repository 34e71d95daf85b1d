// cuda-08: fused LayerNorm (Welford) and RMSNorm forward, one block per row.
//
// layernorm_fwd(x, gamma, beta, y, mean, rstd, rows, cols, eps):
//     mu = mean(x[r]), var = mean((x[r] - mu)^2)  (biased, as torch.nn.LayerNorm),
//     rstd = 1 / sqrt(var + eps), y[r] = (x[r] - mu) * rstd * gamma + beta;
//     mean[r] and rstd[r] are saved for the backward pass.
// rmsnorm_fwd(x, gamma, y, rows, cols, eps): y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * gamma.
// Launch: grid = rows, block = T threads (a multiple of 32, at most 1024).
// One read of x to get the statistics, one more to normalize (it is usually still in L1/L2),
// one write of y: the kernel is memory-bound, and fusing everything into one launch is the win.
// The tests count the reads of x: a separate pass for the mean and another for the variance is
// one read too many. Solution regions: welford_merge's body and the two kernels' bodies.

#define FULL_MASK 0xffffffffu
#ifndef LOADS
#define LOADS 4  // elements each thread loads per iteration (loads in flight); benchmarks/cuda_h200.py sweeps it
#endif
#ifndef CACHE
#define CACHE 8  // float4 registers per thread for a row kept in registers: 32 floats per thread
#endif

// A Welford state: count, mean and M2 = sum of squared deviations from the mean.
struct Welford {
    float n;
    float mean;
    float m2;
};

// Merge two states into one that describes the union of their values (used by warp_welford and
// by the merge across warps).
__device__ __forceinline__ Welford welford_merge(Welford a, Welford b) {
    Welford r = {0.0f, 0.0f, 0.0f};
    // HINT: Chan, Golub and LeVeque's parallel formula; an empty part (n = 0) must not divide by zero.
    // BEGIN SOLUTION
    // The correction term delta^2 * na * nb / n accounts for the two parts having different means.
    r.n = a.n + b.n;
    if (r.n == 0.0f) return a;  // both empty
    float delta = b.mean - a.mean;
    float wb = b.n / r.n;
    r.mean = a.mean + delta * wb;
    r.m2 = a.m2 + b.m2 + delta * delta * a.n * wb;
    // END SOLUTION
    return r;
}

__device__ __forceinline__ Welford warp_welford(Welford w) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        Welford o;
        o.n = __shfl_xor_sync(FULL_MASK, w.n, offset);
        o.mean = __shfl_xor_sync(FULL_MASK, w.mean, offset);
        o.m2 = __shfl_xor_sync(FULL_MASK, w.m2, offset);
        w = welford_merge(w, o);
    }
    return w;
}

__global__ void layernorm_fwd(const float* x, const float* gamma, const float* beta, float* y,
                              float* mean_out, float* rstd_out, int rows, int cols, float eps) {
    __shared__ Welford warp_states[32];
    __shared__ float s_mean, s_rstd;
    int row = blockIdx.x;
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;

    // HINT: per-thread Welford update over a block-strided slice, then merge states: warp (shuffles) -> block (shared memory).
    // BEGIN SOLUTION
    // Fast path: a row of at most 4 * CACHE * blockDim.x floats starting 16-byte aligned (cols % 4 == 0)
    // is read from global memory ONCE: each thread loads its float4s (block-strided, so a warp reads
    // 512 contiguous bytes per load) into registers, all in flight together. Its Welford state then
    // comes from those registers in two exact register passes (mean, then squared deviations), and
    // the normalize pass reads the registers. Other rows stream through global memory twice.
    Welford w = {0.0f, 0.0f, 0.0f};
    bool in_registers = cols % 4 == 0 && cols <= 4 * CACHE * (int)blockDim.x;
    float4 v4[CACHE];
    int n4 = cols / 4;
    if (in_registers) {
        const float4* xr4 = reinterpret_cast<const float4*>(xr);
        float sum = 0.0f;
#pragma unroll
        for (int u = 0; u < CACHE; ++u) {
            int j = threadIdx.x + u * blockDim.x;  // float4 index in the row
            v4[u] = j < n4 ? xr4[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (j < n4) w.n += 4.0f;
            sum += (v4[u].x + v4[u].y) + (v4[u].z + v4[u].w);
        }
        w.mean = w.n > 0.0f ? sum / w.n : 0.0f;
#pragma unroll
        for (int u = 0; u < CACHE; ++u) {
            int j = threadIdx.x + u * blockDim.x;
            if (j < n4) {
                float a = v4[u].x - w.mean, b = v4[u].y - w.mean, c = v4[u].z - w.mean, e = v4[u].w - w.mean;
                w.m2 += (a * a + b * b) + (c * c + e * e);
            }
        }
    } else {
        // Per-thread Welford: after k values, mean is their mean and m2 the sum of squared
        // deviations, both updated with small numbers (x - mean), never with x^2.
        // LOADS elements per iteration (block-strided, so every warp load is coalesced): the loads are
        // issued back to back and stay in flight together.
        for (int j0 = threadIdx.x; j0 < cols; j0 += LOADS * blockDim.x) {
            float v[LOADS];
#pragma unroll
            for (int u = 0; u < LOADS; ++u) v[u] = j0 + u * blockDim.x < cols ? xr[j0 + u * blockDim.x] : 0.0f;
#pragma unroll
            for (int u = 0; u < LOADS; ++u) {
                if (j0 + u * blockDim.x < cols) {
                    w.n += 1.0f;
                    float delta = v[u] - w.mean;
                    w.mean += delta / w.n;
                    w.m2 += delta * (v[u] - w.mean);  // (x - old mean) * (x - new mean): exact in real arithmetic
                }
            }
        }
    }
    w = warp_welford(w);
    if (lane == 0) warp_states[warp] = w;
    __syncthreads();
    if (warp == 0) {
        Welford e = {0.0f, 0.0f, 0.0f};
        w = lane < nwarps ? warp_states[lane] : e;
        w = warp_welford(w);
        if (lane == 0) {
            float var = w.m2 / w.n;  // biased variance, as LayerNorm uses
            s_mean = w.mean;
            s_rstd = rsqrtf(var + eps);
            mean_out[row] = s_mean;
            rstd_out[row] = s_rstd;
        }
    }
    __syncthreads();  // everyone needs s_mean / s_rstd
    float mu = s_mean, rs = s_rstd;
    if (in_registers) {
        const float4* g4 = reinterpret_cast<const float4*>(gamma);
        const float4* b4 = reinterpret_cast<const float4*>(beta);
        float4* yr4 = reinterpret_cast<float4*>(yr);
#pragma unroll
        for (int u = 0; u < CACHE; ++u) {
            int j = threadIdx.x + u * blockDim.x;
            if (j < n4) {
                float4 v = v4[u], g = g4[j], b = b4[j];
                yr4[j] = make_float4((v.x - mu) * rs * g.x + b.x, (v.y - mu) * rs * g.y + b.y,
                                     (v.z - mu) * rs * g.z + b.z, (v.w - mu) * rs * g.w + b.w);
            }
        }
    } else {
        for (int j0 = threadIdx.x; j0 < cols; j0 += LOADS * blockDim.x) {  // same batching as above
            float v[LOADS];
#pragma unroll
            for (int u = 0; u < LOADS; ++u) v[u] = j0 + u * blockDim.x < cols ? xr[j0 + u * blockDim.x] : 0.0f;
#pragma unroll
            for (int u = 0; u < LOADS; ++u) {
                int j = j0 + u * blockDim.x;
                if (j < cols) yr[j] = (v[u] - mu) * rs * gamma[j] + beta[j];
            }
        }
    }
    // END SOLUTION
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_MASK, v, offset);
    return v;
}

__global__ void rmsnorm_fwd(const float* x, const float* gamma, float* y, int rows, int cols, float eps) {
    __shared__ float warp_sums[32];
    __shared__ float s_scale;
    int row = blockIdx.x;
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;

    // HINT: only a sum of squares is needed: no mean, so no cancellation problem.
    // BEGIN SOLUTION
    float ss = 0.0f;
    for (int j0 = threadIdx.x; j0 < cols; j0 += 4 * blockDim.x) {  // four loads in flight per thread
        float v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = j0 + u * blockDim.x < cols ? xr[j0 + u * blockDim.x] : 0.0f;
        ss += (v[0] * v[0] + v[1] * v[1]) + (v[2] * v[2] + v[3] * v[3]);
    }
    ss = warp_sum(ss);
    if (lane == 0) warp_sums[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        ss = warp_sum(lane < nwarps ? warp_sums[lane] : 0.0f);
        if (lane == 0) s_scale = rsqrtf(ss / cols + eps);
    }
    __syncthreads();
    float sc = s_scale;
    for (int j0 = threadIdx.x; j0 < cols; j0 += 4 * blockDim.x) {
        float v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = j0 + u * blockDim.x < cols ? xr[j0 + u * blockDim.x] : 0.0f;
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            int j = j0 + u * blockDim.x;
            if (j < cols) yr[j] = v[u] * sc * gamma[j];
        }
    }
    // END SOLUTION
}
