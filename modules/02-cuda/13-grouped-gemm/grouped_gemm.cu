// cuda-13: MoE grouped GEMM over contiguous per-expert segments (DeepGEMM's "contiguous" layout).
//
// X is T x K (fp32, row-major): the tokens routed to the experts, already permuted so that expert
// e's tokens are the rows offsets[e] .. offsets[e+1]-1 (offsets has E+1 entries, offsets[0] = 0,
// offsets[E] = T; an expert may receive no token: offsets[e] == offsets[e+1]).
// W is E x K x N: expert e's weight matrix W_e (K x N, row-major) starts at W + e*K*N.
// Y is T x N: Y[r] = X[r] @ W_e for every row r of expert e's segment.
//
// Work unit: a tile of BM rows x BN columns of Y that lies inside ONE expert's segment (the last
// tile of a segment is partial). Expert e has ceil(n_e / BM) * ceil(N / BN) tiles, n_e its token
// count, and an empty expert has none. gemm_tile below computes one tile; the kernel's job is the
// tile scheduler: which block computes which tile.
//
// Launch: block (16, 16), a 1-D grid of any size G (persistent: G may be smaller or larger than
// the number of tiles), dynamic shared memory (E + 1) * sizeof(int) that the scheduler may use.
// block_tiles[b] (G ints, zeroed by the caller) counts the tiles block b computed: gemm_tile
// increments it, so the caller can audit the schedule: every tile computed exactly once, and no
// block computes more than ceil(tiles / G) of them (a balanced persistent grid).

#define BM 16
#define BN 16
#define BK 16

// One BM x BN tile of Y: rows row0 .. min(row0 + BM, row_end) - 1, columns col0 .. min(col0 + BN, N) - 1,
// computed as X[rows, :] @ We[:, cols] with the shared-memory tiling of cuda-09. Rows at or past
// row_end belong to another expert (or lie past T): they are neither read nor written.
// Every thread of the block must call it with the same arguments (it holds barriers).
__device__ void gemm_tile(const float* X, const float* We, float* Y, int row0, int row_end, int col0,
                          int N, int K, int* block_tiles) {
    __shared__ float Xs[BM][BK];
    __shared__ float Ws[BK][BN];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = row0 + ty, col = col0 + tx;
    const bool row_in = row < row_end;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += BK) {
        Xs[ty][tx] = (row_in && k0 + tx < K) ? X[(size_t)row * K + k0 + tx] : 0.0f;
        Ws[ty][tx] = (k0 + ty < K && col < N) ? We[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < BK; ++k) acc += Xs[ty][k] * Ws[k][tx];
        __syncthreads();
    }
    if (row_in && col < N) Y[(size_t)row * N + col] = acc;
    if (tx == 0 && ty == 0) block_tiles[blockIdx.x] += 1;
}

// A plain (non-grouped) GEMM Y = X @ W of M x K by K x N, one tile per block: grid ceil(M/BM) * ceil(N/BN).
// The tests run it once per expert (the "loop of matmuls" a grouped GEMM replaces) and expect the
// grouped kernel to give bit-identical rows: grouping changes who computes a tile, not the arithmetic.
__global__ void gemm_dense(const float* X, const float* W, float* Y, int* block_tiles, int M, int N, int K) {
    const int n_tiles = (N + BN - 1) / BN;
    const int t = blockIdx.x;
    gemm_tile(X, W, Y, (t / n_tiles) * BM, M, (t % n_tiles) * BN, N, K, block_tiles);
}

__global__ void grouped_gemm(const float* X, const float* W, const int* offsets, float* Y, int* block_tiles,
                             int E, int N, int K) {
    const int n_tiles = (N + BN - 1) / BN;  // column tiles: the same for every expert
    // HINT: all experts' tiles form one flat sequence (expert e: ceil(n_e/BM) * n_tiles, an empty expert none); each goes to exactly one block, none gets more than ceil(total / gridDim.x) (e.g. block b: b, b + G, b + 2G, ...).
    // BEGIN SOLUTION
    int t = blockIdx.x;  // this block's next tile in the flat order
    int first = 0;       // flat index of expert e's first tile
    for (int e = 0; e < E; ++e) {
        const int begin = offsets[e], end = offsets[e + 1];
        const int count = (end - begin + BM - 1) / BM * n_tiles;  // 0 for an expert without tokens
        // t only grows, so one forward walk over the experts visits each of this block's tiles once
        for (; t < first + count; t += gridDim.x) {
            const int local = t - first;
            const int mt = local / n_tiles, nt = local % n_tiles;
            gemm_tile(X, W + (size_t)e * K * N, Y, begin + mt * BM, end, nt * BN, N, K, block_tiles);
        }
        first += count;
    }
    // END SOLUTION
}
