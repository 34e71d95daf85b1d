// Kernels whose global-memory traffic and atomics are known exactly (emulator counters) and
// the __activemask() misuse the random order must expose.
#define FULL_MASK 0xffffffffu

// y = 2x: every element of x read once, every element of y written once.
__global__ void scale_once(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}

// y = x + x read through two loads of the same address (volatile: the compiler keeps both).
__global__ void scale_twice(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const volatile float* p = x;
        float a = p[i];
        float b = p[i];
        y[i] = a + b;
    }
}

// float4 loads: one thread-level load of 16 bytes per 4 elements.
__global__ void copy4(const float4* x, float4* y, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) y[i] = x[i];
}

// One global atomic per element (no privatization).
__global__ void hist_global(const int* data, int n, unsigned* bins) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) atomicAdd(&bins[data[i]], 1u);
}

// Privatized: shared atomics per element, one global atomic per non-empty bin and block.
__global__ void hist_private(const int* data, int n, unsigned* bins, int nbins) {
    extern __shared__ unsigned h[];
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) h[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) atomicAdd(&h[data[i]], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < nbins; b += blockDim.x)
        if (h[b]) atomicAdd(&bins[b], h[b]);
}

// A full-warp sum that takes its shuffle mask from __activemask(): wrong (the lanes of a warp need
// not be converged when it is called), and caught only when they are not.
__global__ void warp_sum_activemask(const float* x, float* out) {
    float v = x[blockIdx.x * 32 + threadIdx.x];
    unsigned m = __activemask();
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(m, v, o);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
}

// The same with FULL_MASK: correct in every order.
__global__ void warp_sum_full(const float* x, float* out) {
    float v = x[blockIdx.x * 32 + threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL_MASK, v, o);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
}

// Correct use of __activemask(): warp-aggregated increment among the lanes that are converged
// (whatever subset that is), leader = lowest lane of the mask.
__global__ void aggregated_count(int* counter, unsigned* masks) {
    unsigned m = __activemask();
    masks[blockIdx.x * blockDim.x + threadIdx.x] = m;
    int leader = __ffs(m) - 1;
    int rank = __popc(m & ((1u << (threadIdx.x % 32)) - 1u));
    int base = 0;
    if (threadIdx.x % 32 == leader) base = atomicAdd(counter, __popc(m));
    base = __shfl_sync(m, base, leader);
    (void)rank;
}
