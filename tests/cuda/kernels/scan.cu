// Inclusive scan of each block's slice: warp scans with __shfl_up_sync, then a scan of warp totals.
__global__ void block_scan(const int* __restrict__ in, int* __restrict__ out, int n) {
    __shared__ int warp_tot[32];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int v = i < n ? in[i] : 0;
    for (int d = 1; d < 32; d <<= 1) {
        int up = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d) v += up;
    }
    if (lane == 31) warp_tot[warp] = v;
    __syncthreads();
    if (warp == 0) {
        const int nw = blockDim.x / 32;
        int t = lane < nw ? warp_tot[lane] : 0;
        for (int d = 1; d < 32; d <<= 1) {
            int up = __shfl_up_sync(0xffffffffu, t, d, 32);
            if (lane >= d) t += up;
        }
        if (lane < nw) warp_tot[lane] = t;
    }
    __syncthreads();
    if (warp > 0) v += warp_tot[warp - 1];
    if (i < n) out[i] = v;
}

// Segmented scans of width 8 inside a warp (the `width` argument).
__global__ void scan_width8(const int* in, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? in[i] : 0;
    for (int d = 1; d < 8; d <<= 1) {
        int up = __shfl_up_sync(0xffffffffu, v, d, 8);
        if ((threadIdx.x & 7) >= d) v += up;
    }
    if (i < n) out[i] = v;
}

// Votes: per warp, how many elements are positive, and whether all/any are.
__global__ void warp_votes(const float* x, unsigned* ballots, int* counts, int* flags, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    bool p = i < n && x[i] > 0.0f;
    unsigned b = __ballot_sync(0xffffffffu, p);
    int all = __all_sync(0xffffffffu, p), any = __any_sync(0xffffffffu, p);
    if ((threadIdx.x & 31) == 0) {
        int w = i / 32;
        ballots[w] = b;
        counts[w] = __popc(b);
        flags[w] = all * 2 + any;
    }
}
