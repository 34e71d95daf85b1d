// 256-bin histogram: privatised in shared memory with atomics, merged with global atomics.
__global__ void histogram(const unsigned char* __restrict__ data, unsigned int* __restrict__ bins, int n) {
    __shared__ unsigned int local[256];
    for (int b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&local[data[i]], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
        if (local[b]) atomicAdd(&bins[b], local[b]);
}

// float atomics and atomicMax/Min/CAS/Exch on ints
__global__ void atomics_mix(const int* v, int n, float* fsum, int* imax, int* imin, int* exch, int* cas_count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    atomicAdd(fsum, (float)v[i] * 0.5f);
    atomicMax(imax, v[i]);
    atomicMin(imin, v[i]);
    atomicExch(exch, 7);
    int old = *cas_count, assumed;
    do {
        assumed = old;
        old = atomicCAS(cas_count, assumed, assumed + 1);
    } while (old != assumed);
}
