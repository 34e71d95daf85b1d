// cuda-05: prefix sum (scan) of int32, Blelloch's work-efficient block scan plus
// scan-then-propagate across blocks.
//
// block_scan(in, out, block_sums, n, inclusive):
//     block b scans its chunk in[b*m .. b*m + m) with m = 2 * blockDim.x (blockDim.x a power
//     of two; dynamic shared memory m * sizeof(int)); writes the chunk's exclusive scan
//     (inclusive != 0: inclusive scan) to out, and the chunk total to block_sums[b].
// add_block_offsets(out, offsets, n): adds offsets[b] to every element of chunk b.
// A whole array of n <= m * m elements takes three launches:
//     block_scan(x, y, sums, n, inc) with G = ceil(n / m) blocks,
//     block_scan(sums, offs, total, G, 0) with one block (exclusive scan of the chunk totals),
//     add_block_offsets(y, offs, n) with G blocks.

__global__ void block_scan(const int* in, int* out, int* block_sums, int n, int inclusive) {
    extern __shared__ int temp[];
    int tid = threadIdx.x;
    int m = 2 * blockDim.x;        // elements per block
    int base = blockIdx.x * m;     // first element of this block's chunk
    int ai = tid;                  // each thread owns two elements, blockDim.x apart, so the
    int bi = tid + blockDim.x;     // loads of a warp are consecutive (coalesced)

    // Past the end: pad with 0, the identity of +, so the tree needs no bounds checks.
    temp[ai] = base + ai < n ? in[base + ai] : 0;
    temp[bi] = base + bi < n ? in[base + bi] : 0;

    // HINT: up-sweep builds partial sums in place (a balanced tree), the root is saved and cleared, the down-sweep pushes prefixes down.
    // BEGIN SOLUTION
    // Up-sweep (reduce). At the level where `offset` = 2^k, thread tid < d combines the two
    // subtrees ending at a and b; afterwards temp[j * 2^(k+1) + 2^(k+1) - 1] holds the sum of
    // that 2^(k+1)-wide segment. Total work: m - 1 additions.
    int offset = 1;
    for (int d = m >> 1; d > 0; d >>= 1) {
        __syncthreads();           // the previous level (or the loads) must be complete
        if (tid < d) {
            int a = offset * (2 * tid + 1) - 1;  // last element of the left subtree
            int b = offset * (2 * tid + 2) - 1;  // last element of the right subtree
            temp[b] += temp[a];
        }
        offset <<= 1;
    }

    // The root holds the chunk total. Replacing it by 0 (the identity) turns the down-sweep's
    // output into the EXCLUSIVE scan.
    if (tid == 0) {
        block_sums[blockIdx.x] = temp[m - 1];
        temp[m - 1] = 0;
    }

    // Down-sweep. Each node passes its value (the sum of everything left of its subtree) to its
    // left child, and (that value + the left child's old sum) to its right child.
    for (int d = 1; d < m; d <<= 1) {
        offset >>= 1;
        __syncthreads();           // the level above must be complete
        if (tid < d) {
            int a = offset * (2 * tid + 1) - 1;
            int b = offset * (2 * tid + 2) - 1;
            int t = temp[a];
            temp[a] = temp[b];
            temp[b] += t;
        }
    }
    __syncthreads();

    // Inclusive = exclusive + own element.
    if (base + ai < n) out[base + ai] = temp[ai] + (inclusive ? in[base + ai] : 0);
    if (base + bi < n) out[base + bi] = temp[bi] + (inclusive ? in[base + bi] : 0);
    // END SOLUTION
}

__global__ void add_block_offsets(int* out, const int* offsets, int n) {
    int m = 2 * blockDim.x;
    int base = blockIdx.x * m;
    int add = offsets[blockIdx.x];  // sum of all chunks before this one
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        if (base + i < n) out[base + i] += add;
    }
}
