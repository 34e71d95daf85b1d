// Planted bugs: each kernel has exactly one classic CUDA mistake.
#include <cuda_runtime.h>

// 1. barrier removed inside the reduction loop
__global__ void reduce_no_barrier(const float* x, float* out, int n) {
    __shared__ float s[256];
    int tid = threadIdx.x, i = blockIdx.x * blockDim.x + tid;
    s[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (tid < stride) s[tid] += s[tid + stride];
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}

// 2. neighbour read without a barrier
__global__ void neighbour_no_barrier(const float* x, float* y, int n) {
    __shared__ float s[256];
    int tid = threadIdx.x, i = blockIdx.x * blockDim.x + tid;
    s[tid] = i < n ? x[i] : 0.0f;
    float left = tid > 0 ? s[tid - 1] : 0.0f;
    if (i < n) y[i] = s[tid] - left;
}

// 3. missing bounds check on the tail
__global__ void saxpy_no_bounds(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = a * x[i] + y[i];
}

// 4. shared-memory overrun (one element past the end)
__global__ void smem_overrun(const float* x, float* y, int n) {
    __shared__ float s[128];
    int tid = threadIdx.x;
    s[tid + 1] = x[blockIdx.x * blockDim.x + tid];
    __syncthreads();
    y[blockIdx.x * blockDim.x + tid] = s[tid];
}

// 5. uninitialised shared read: only half the tile is written
__global__ void smem_uninit(const float* x, float* y, int n) {
    __shared__ float s[64];
    int tid = threadIdx.x;
    if (tid < 32) s[tid] = x[tid];
    __syncthreads();
    y[tid] = s[tid];
}

// 6. non-atomic += across blocks
__global__ void sum_no_atomic(const float* x, float* total, int n) {
    __shared__ float s[128];
    int tid = threadIdx.x, i = blockIdx.x * blockDim.x + tid;
    s[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = 64; stride > 0; stride >>= 1) {
        if (tid < stride) s[tid] += s[tid + stride];
        __syncthreads();
    }
    if (tid == 0) *total += s[0];
}

// 7. shuffle with a full mask while half the warp is parked at a barrier
__global__ void shuffle_deadlock(const float* x, float* y) {
    float v = x[threadIdx.x];
    if (threadIdx.x < 16) {
        v += __shfl_down_sync(0xffffffffu, v, 1);
    } else {
        __syncthreads();
    }
    y[threadIdx.x] = v;
}

// 8. a segfaulting kernel: writes through a pointer that was never allocated
__global__ void wild_pointer(float* y, int n) {
    float* p = (float*)(size_t)(0x10 + 64 * threadIdx.x);
    *p = 1.0f;
    y[threadIdx.x] = 2.0f;
}

// 9. an infinite loop: the stride is never advanced for odd threads
__global__ void infinite_loop(const int* x, int* y, int n) {
    int i = threadIdx.x;
    int step = (i % 2 == 0) ? 1 : 0;
    int acc = 0;
    for (int k = 0; k < n; k += step) acc += x[k];
    y[i] = acc;
}

// legacy warp-synchronous reduction (no __syncwarp): racy under the CUDA programming guide
__global__ void warp_sync_legacy(const float* x, float* out) {
    __shared__ float s[64];
    int tid = threadIdx.x;
    s[tid] = x[tid];
    s[tid + 32] = x[tid + 32];
    volatile float* vs = s;
    vs[tid] += vs[tid + 32];
    vs[tid] += vs[tid + 16];
    vs[tid] += vs[tid + 8];
    vs[tid] += vs[tid + 4];
    vs[tid] += vs[tid + 2];
    vs[tid] += vs[tid + 1];
    if (tid == 0) *out = vs[0];
}

// the same with __syncwarp() between the steps (correct on Volta+)
__global__ void warp_sync_fixed(const float* x, float* out) {
    __shared__ float s[64];
    int tid = threadIdx.x;
    s[tid] = x[tid];
    s[tid + 32] = x[tid + 32];
    __syncwarp();
    for (int off = 32; off > 0; off >>= 1) {
        float v = s[tid] + (tid + off < 64 ? s[tid + off] : 0.0f);
        __syncwarp();
        s[tid] = v;
        __syncwarp();
    }
    if (tid == 0) *out = s[0];
}

// dynamic shared memory smaller than the kernel uses
__global__ void dyn_smem_too_small(const float* x, float* y, int n) {
    extern __shared__ float buf[];
    buf[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}

// integer division by zero and assert
__global__ void divide(const int* a, int* b, int d) {
    b[threadIdx.x] = a[threadIdx.x] / d;
}

// __syncthreads() in a branch that splits the block: two different barriers
__global__ void divergent_barrier(float* x) {
    if (threadIdx.x < 16) {
        x[threadIdx.x] *= 2.0f;
        __syncthreads();
    } else {
        x[threadIdx.x] += 1.0f;
        __syncthreads();
    }
}
