// Shared-memory tree reduction: one partial sum per block.
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

template <typename T>
__global__ void scale(T* y, T alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * y[i];
}
