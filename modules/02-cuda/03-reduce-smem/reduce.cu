// cuda-03: shared-memory tree reduction (sum), two passes over the grid.
//
// reduce_sum(in, partial, n): block b writes partial[b] = sum of the elements it owns.
// Pass 1: grid G, block T (a power of two, 32 <= T <= 1024: any of 32, 64, ..., 1024),
//         dynamic shared memory T * sizeof(float):
//         partial[0..G) from in[0..n).
// Pass 2: grid 1, same block: out[0] = sum of partial[0..G).
// Each thread first sums a grid-stride slice of the input in a register (so G can be small,
// e.g. a few blocks per SM, whatever n is), then the block combines its T values in shared
// memory with a tree of log2(T) steps.

__global__ void reduce_sum(const float* in, float* partial, int n) {
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;

    // Grid-stride accumulation in registers: the loads of one warp are consecutive -> coalesced.
    // Four independent loads per iteration (four accumulators): a thread keeps 4 loads in flight
    // instead of 1, which is what it takes to cover DRAM latency at full bandwidth (Little's law:
    // bytes in flight = bandwidth x latency; see the README). The tail goes one element at a time.
    int stride = blockDim.x * gridDim.x;
    int i = blockIdx.x * blockDim.x + tid;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (; i + 3 * stride < n; i += 4 * stride) {
        s0 += in[i];
        s1 += in[i + stride];
        s2 += in[i + 2 * stride];
        s3 += in[i + 3 * stride];
    }
    for (; i < n; i += stride) s0 += in[i];
    sdata[tid] = (s0 + s1) + (s2 + s3);
    __syncthreads();

    // HINT: sequential addressing: halve the active range each step; thread tid adds the element s places above it.
    // BEGIN SOLUTION
    // Sequential addressing: the active threads are the contiguous range [0, s), so whole warps
    // either work or sit idle (no divergence inside a warp until s < 32), and lane k touches
    // sdata[k] and sdata[k + s], consecutive words -> no bank conflicts.
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) {
            sdata[tid] += sdata[tid + s];
        }
        // The next step reads what other threads wrote in this one.
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = sdata[0];
    // END SOLUTION
}
