// cuda-04: warp-shuffle reductions.
//
// reduce_sum_atomic(x, out, n): out[0] += sum(x[0..n)); the caller sets out[0] first (any value).
//     Each thread folds its grid-stride share into a register, the block combines its threads'
//     values with warp shuffles (one shared-memory slot per warp in between), and the block adds
//     its total to out[0] with exactly one atomicAdd.
// reduce_max(x, partial, n): partial[blockIdx.x] = max of the elements the block owns
//     (-inf for a block that owns none). Two launches give the global max: grid G over x,
//     then grid 1 over partial[0..G).
// Launch with blockDim.x a multiple of 32, at most 1024 (so at most 32 warps).

#define FULL_MASK 0xffffffffu

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// Grid-stride fold of this thread's share of x: element i, i + stride, i + 2*stride, ...
// Four independent loads per iteration keep enough bytes in flight (cuda-03's README).
// A thread that owns no element gets the identity: 0 for the sum, -inf for the max.
__device__ float thread_sum(const float* x, int n) {
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
    return (v0 + v1) + (v2 + v3);
}

__device__ float thread_max(const float* x, int n) {
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
    return fmaxf(fmaxf(v0, v1), fmaxf(v2, v3));
}

// Returns, in lane 0, the sum of the 32 lanes' v (other lanes: partial sums nobody reads).
__device__ float warp_reduce_sum(float v) {
    // HINT: five register exchanges, each halving the distance; all 32 lanes take part in every one.
    // BEGIN SOLUTION
    // After the step with offset o, lane k holds the sum of lanes k .. k + 2o - 1 (of those that
    // exist). Lanes >= 32 - o read their own value back (shfl_down does not wrap), which only
    // pollutes lanes whose result nobody reads.
    for (int offset = warpSize / 2; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(FULL_MASK, v, offset);
    }
    // END SOLUTION
    return v;
}

// Returns, in EVERY lane, the max of the 32 lanes' v.
__device__ float warp_reduce_max(float v) {
    // HINT: a butterfly: lane k pairs with lane k ^ o, so no broadcast is needed afterwards.
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

    // HINT: thread value -> warp total (one slot per warp) -> block total in the first warp -> one atomicAdd per block. Every lane stays alive for the shuffles; slots past nwarps count as the identity.
    // BEGIN SOLUTION
    // No early exit: a lane that owns no element still carries 0 into the FULL_MASK shuffles
    // (a lane that returned would be missing from them: undefined behaviour on Volta and later).
    float v = thread_sum(x, n);
    v = warp_reduce_sum(v);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();  // every warp's slot is written before the first warp reads them
    if (warp == 0) {
        // Only the first nwarps slots were written; the other lanes contribute the identity.
        v = lane < nwarps ? warp_sums[lane] : 0.0f;
        v = warp_reduce_sum(v);
        if (lane == 0) atomicAdd(out, v);  // one atomic per block, not per warp or per element
    }
    // END SOLUTION
}

__global__ void reduce_max(const float* x, float* partial, int n) {
    __shared__ float warp_max[32];
    int lane = threadIdx.x % 32;
    int warp = threadIdx.x / 32;
    int nwarps = blockDim.x / 32;

    // HINT: the same two levels as the sum, with max's identity wherever a lane has nothing to contribute; one plain store per block.
    // BEGIN SOLUTION
    float v = thread_max(x, n);
    v = warp_reduce_max(v);
    if (lane == 0) warp_max[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nwarps ? warp_max[lane] : neg_inf();
        v = warp_reduce_max(v);
        if (lane == 0) partial[blockIdx.x] = v;
    }
    // END SOLUTION
}
