// cuda-04: warp-shuffle reductions.
//
// reduce_sum_atomic(x, out, n): out[0] += sum(x[0..n)); the caller sets out[0] = 0 first.
//     Grid-stride loads into a register, warp reduce with __shfl_down_sync, one shared-memory
//     slot per warp, the first warp reduces the per-warp sums, thread 0 does one atomicAdd
//     per block.
// reduce_max(x, partial, n): partial[blockIdx.x] = max of the elements the block owns
//     (-inf for a block that owns none). Two launches give the global max: grid G over x,
//     then grid 1 over partial[0..G).
// Launch with blockDim.x a multiple of 32, at most 1024 (so at most 32 warps).

#define FULL_MASK 0xffffffffu

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// After the step with offset o, lane k holds the sum of lanes k .. k + 2o - 1 (of those that
// exist); after offset 1, lane 0 holds the sum of all 32. Lanes >= 32 - o read their own value
// back (shfl_down does not wrap), which only pollutes lanes whose result nobody reads.
__device__ float warp_reduce_sum(float v) {
    // HINT: five shuffle steps, offsets 16, 8, 4, 2, 1, with every lane taking part (FULL_MASK).
    // BEGIN SOLUTION
    for (int offset = warpSize / 2; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(FULL_MASK, v, offset);
    }
    // END SOLUTION
    return v;
}

// Butterfly: with xor, lane k exchanges with lane k ^ o, so after five steps EVERY lane holds
// the max of all 32 (no broadcast needed afterwards).
__device__ float warp_reduce_max(float v) {
    // HINT: the same five steps with __shfl_xor_sync and fmaxf.
    // BEGIN SOLUTION
    for (int offset = warpSize / 2; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
    }
    // END SOLUTION
    return v;
}

__global__ void reduce_sum_atomic(const float* x, float* out, int n) {
    __shared__ float warp_sums[32];
    int lane = threadIdx.x % 32;
    int warp = threadIdx.x / 32;
    int nwarps = blockDim.x / 32;

    // Lanes past the end add 0 and stay: a lane that returned early would be missing from
    // the FULL_MASK shuffles below (undefined behaviour on Volta and later).
    // Four independent loads per iteration keep enough bytes in flight (cuda-03's README).
    int stride = blockDim.x * gridDim.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v0 = 0.0f, v1 = 0.0f, v2 = 0.0f, v3 = 0.0f;
    for (; i + 3 * stride < n; i += 4 * stride) {
        v0 += x[i];
        v1 += x[i + stride];
        v2 += x[i + 2 * stride];
        v3 += x[i + 3 * stride];
    }
    for (; i < n; i += stride) v0 += x[i];
    float v = (v0 + v1) + (v2 + v3);

    v = warp_reduce_sum(v);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        // Only the first nwarps slots were written; the other lanes contribute the identity.
        v = lane < nwarps ? warp_sums[lane] : 0.0f;
        v = warp_reduce_sum(v);
        if (lane == 0) atomicAdd(out, v);
    }
}

__global__ void reduce_max(const float* x, float* partial, int n) {
    __shared__ float warp_max[32];
    int lane = threadIdx.x % 32;
    int warp = threadIdx.x / 32;
    int nwarps = blockDim.x / 32;

    int stride = blockDim.x * gridDim.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v0 = neg_inf(), v1 = neg_inf(), v2 = neg_inf(), v3 = neg_inf();
    for (; i + 3 * stride < n; i += 4 * stride) {
        v0 = fmaxf(v0, x[i]);
        v1 = fmaxf(v1, x[i + stride]);
        v2 = fmaxf(v2, x[i + 2 * stride]);
        v3 = fmaxf(v3, x[i + 3 * stride]);
    }
    for (; i < n; i += stride) v0 = fmaxf(v0, x[i]);
    float v = fmaxf(fmaxf(v0, v1), fmaxf(v2, v3));

    v = warp_reduce_max(v);
    if (lane == 0) warp_max[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nwarps ? warp_max[lane] : neg_inf();
        v = warp_reduce_max(v);
        if (lane == 0) partial[blockIdx.x] = v;
    }
}
