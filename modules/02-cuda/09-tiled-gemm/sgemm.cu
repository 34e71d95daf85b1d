// cuda-09: shared-memory tiled SGEMM, C = A @ B.
//
// A is M x K, B is K x N, C is M x N, all row-major fp32.
// Launch: block (TILE, TILE) = (16, 16), grid (ceil(N / TILE), ceil(M / TILE)); thread (tx, ty)
// of block (bx, by) computes C[by*TILE + ty][bx*TILE + tx].
// The K dimension is walked in tiles of TILE: the block stages a TILE x TILE tile of A and one
// of B in shared memory, and every element staged is then used TILE times from shared memory
// instead of being read TILE times from global memory.

#define TILE 16

// The obviously-correct version, for comparison: every thread reads a full row of A and a full
// column of B from global memory (2K loads for 2K flops: 1/4 flop per byte).
__global__ void sgemm_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
    C[row * N + col] = acc;
}

__global__ void sgemm_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;  // row of C (and of A) this thread computes
    int col = blockIdx.x * TILE + tx;  // column of C (and of B)

    // HINT: per K-tile: load one element of A and one of B per thread (0 outside the matrix), barrier, TILE multiply-adds, barrier.
    // BEGIN SOLUTION
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        // Thread (tx, ty) loads A[row][k0 + tx] and B[k0 + ty][col]: consecutive tx ->
        // consecutive addresses in both, so both loads are coalesced. Out-of-range elements
        // become 0, which adds nothing to the dot product (handles M, N, K not multiples of TILE).
        As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
        __syncthreads();  // the tiles are complete before anyone reads them

        // As[ty][k] is the same word for the whole warp row (broadcast); Bs[k][tx] is 16
        // consecutive words (no bank conflict).
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();  // everyone is done with these tiles before the next loads overwrite them
    }
    if (row < M && col < N) C[row * N + col] = acc;
    // END SOLUTION
}
