// Reductions: shared-memory tree, warp-shuffle, and a templated scale kernel.
#include <cuda_runtime.h>

__global__ void block_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
    extern __shared__ float s[];
    const int tid = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (tid < stride) s[tid] += s[tid + stride];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

// One atomicAdd per block: warp shuffles, then the first warp reduces the per-warp sums.
__global__ void shuffle_sum(const float* __restrict__ x, float* __restrict__ total, int n) {
    __shared__ float warp_sums[32];
    const int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += x[i];
    v = warp_sum(v);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (blockDim.x + warpSize - 1) / warpSize ? warp_sums[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) atomicAdd(total, v);
    }
}

template <typename T>
__global__ void scale(T* y, T alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * y[i];
}

template <int BLOCK>
__global__ void static_block_sum(const float* x, double* out, int n) {
    __shared__ double s[BLOCK];
    int tid = threadIdx.x;
    int i = blockIdx.x * BLOCK + tid;
    s[tid] = i < n ? (double)x[i] : 0.0;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride /= 2) {
        if (tid < stride) s[tid] += s[tid + stride];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}
