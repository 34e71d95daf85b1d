// cuda-06: histogram with shared-memory privatization.
//
// histogram(data, n, bins, nbins): bins[v] += number of i with data[i] == v, for values in
// [0, nbins). The caller zeroes bins first. Dynamic shared memory: nbins * sizeof(unsigned int).
// Each block counts into its own private copy in shared memory (fast on-chip atomics, contention
// only among the block's own threads), then adds its copy to the global bins with one
// atomicAdd per non-empty bin, instead of one global atomic per input element.

__global__ void histogram(const int* data, int n, unsigned int* bins, int nbins) {
    extern __shared__ unsigned int hist[];

    // HINT: three phases separated by barriers: zero the private copy, count with shared atomics, merge with global atomics.
    // BEGIN SOLUTION
    // Phase 1: zero the private histogram (nbins need not be a multiple of blockDim.x).
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) hist[b] = 0;
    __syncthreads();  // no thread may count into a bin another thread has not zeroed yet

    // Phase 2: count. Several threads of the block may hit the same bin in the same cycle,
    // so the increment must be atomic (a read-modify-write on shared memory). Grid-stride, four
    // elements per iteration: the four loads are issued before the atomics, so they are in flight
    // together (the compiler does not move a load across an atomic on its own).
    int stride = blockDim.x * gridDim.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        int v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = data[i + u * stride];
#pragma unroll
        for (int u = 0; u < 4; ++u) atomicAdd(&hist[v[u]], 1u);
    }
    for (; i < n; i += stride) atomicAdd(&hist[data[i]], 1u);  // the tail, one at a time
    __syncthreads();  // the private histogram is complete only when every thread is done

    // Phase 3: merge. Other blocks add to the same global bins concurrently -> atomic.
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) {
        unsigned int c = hist[b];
        if (c != 0) atomicAdd(&bins[b], c);
    }
    // END SOLUTION
}
