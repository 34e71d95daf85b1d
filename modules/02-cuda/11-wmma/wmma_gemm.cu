// cuda-11: tensor-core GEMM with WMMA, C = A · Wᵀ (the layout of torch.nn.Linear: y = x Wᵀ).
//
// A is M x K half, row-major; W is N x K half, row-major, so Wᵀ (K x N) is column-major and is
// WMMA's matrix_b with wmma::col_major; C is M x N float, row-major. A product of two halves is
// exact in fp32, and the K products of a dot product are summed in fp32 ("fp32 accumulate").
//
// Launch: block 128 threads = 4 warps, grid (ceil(N / 32), ceil(M / 32)). Block (bx, by) owns the
// 32 x 32 tile of C whose top-left element is C[by*32][bx*32]; warp w owns its 16 x 16 sub-tile
// (w / 2, w % 2). K is walked in steps of 16: the block stages the 32 x 16 slice of A and the
// 32 x 16 slice of W in shared memory (zeros outside the matrices), then every warp issues one
// 16x16x16 mma_sync. M, N, K need not be multiples of anything.
//
// WMMA's rules for load_matrix_sync / store_matrix_sync (CUDA C++ Programming Guide, "Warp Matrix
// Functions"): the pointer is 256-bit (32-byte) aligned and ldm is a multiple of 16 bytes. A row of
// A or W in global memory starts at an arbitrary 2-byte offset when K is odd, so fragments are
// loaded only from the padded shared tiles below, never straight from A, W or C.

#include <mma.h>
using namespace nvcuda;

#define BM 32    // rows of C per block
#define BN 32    // columns of C per block
#define BK 16    // K per step = the K of one WMMA tile
#define SKEW 8   // halves of padding per shared row: 48-byte rows, ldm still a multiple of 16 bytes
#define CSKEW 4  // floats of padding per row of the C staging tile

// The obviously-correct scalar version, for comparison: one thread per element of C, K fp32 FMAs
// on the CUDA cores, every operand read from global memory. No tensor core is involved.
__global__ void gemm_naive(const half* A, const half* W, float* C, int M, int N, int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += __half2float(A[row * K + k]) * __half2float(W[col * K + k]);
    C[row * N + col] = acc;
}

__global__ void wmma_gemm(const half* A, const half* W, float* C, int M, int N, int K) {
    __shared__ __align__(32) half As[BM][BK + SKEW];    // As[r][k] = A[row0 + r][k0 + k]
    __shared__ __align__(32) half Ws[BN][BK + SKEW];    // Ws[c][k] = W[col0 + c][k0 + k]
    __shared__ __align__(32) float Cs[BM][BN + CSKEW];  // the block's C tile before the guarded copy-out
    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int wm = warp / 2, wn = warp % 2;  // this warp's 16 x 16 sub-tile of the block's 32 x 32
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;

    // HINT: per 16-step of K: stage the A and W slices (zeros outside M, N, K), barrier, each warp loads two fragments from shared memory and does one mma_sync, barrier; at the end fragment -> Cs -> guarded copy into C. No early return: all 32 lanes call every WMMA function.
    // BEGIN SOLUTION
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);

    for (int k0 = 0; k0 < K; k0 += BK) {
        // 128 threads stage 2 x 32 x 16 halves; consecutive threads read consecutive k of one row.
        // Zeros outside the matrices add nothing to the dot products (the edge tiles and the K tail).
        for (int i = tid; i < BM * BK; i += blockDim.x) {
            int r = i / BK, k = i % BK;
            As[r][k] = (row0 + r < M && k0 + k < K) ? A[(row0 + r) * K + k0 + k] : __float2half(0.0f);
            Ws[r][k] = (col0 + r < N && k0 + k < K) ? W[(col0 + r) * K + k0 + k] : __float2half(0.0f);
        }
        __syncthreads();  // both tiles are complete before any warp loads a fragment

        wmma::load_matrix_sync(a, &As[wm * 16][0], BK + SKEW);
        wmma::load_matrix_sync(b, &Ws[wn * 16][0], BK + SKEW);
        wmma::mma_sync(acc, a, b, acc);
        __syncthreads();  // every warp has loaded its fragments before the next step overwrites the tiles
    }

    // C's rows start at arbitrary offsets (N is odd in general): stage the tile, copy it out guarded.
    wmma::store_matrix_sync(&Cs[wm * 16][wn * 16], acc, BN + CSKEW, wmma::mem_row_major);
    __syncthreads();  // the four warps' sub-tiles are in Cs before anyone reads a neighbour's
    for (int i = tid; i < BM * BN; i += blockDim.x) {
        int r = i / BN, c = i % BN;
        if (row0 + r < M && col0 + c < N) C[(row0 + r) * N + col0 + c] = Cs[r][c];
    }
    // END SOLUTION
}
