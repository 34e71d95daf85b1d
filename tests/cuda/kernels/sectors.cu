// Kernels whose global-memory sectors per warp-level request are known exactly (emulator counters).

// Coalesced: lane i of a warp touches element i of a 128-byte line -> 4 sectors per 32-lane request.
__global__ void copy(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}

// Column write: consecutive lanes write rows `stride` floats apart -> one sector per lane.
__global__ void column_write(const float* x, float* y, int n, int stride) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[(size_t)i * stride] = x[i];
}

// float4: each lane moves 16 bytes, a 32-lane request spans 512 bytes = 16 sectors.
__global__ void copy4(const float4* x, float4* y, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) y[i] = x[i];
}

// Every lane of a warp reads the same element (a broadcast): one sector per request.
__global__ void broadcast(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[blockIdx.x];
}
