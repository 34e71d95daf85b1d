// cuda-10: register-blocked, float4-vectorized, double-buffered SGEMM, C = A @ B.
//
// A is M x K, B is K x N, C is M x N, all row-major fp32, any M, N, K >= 1.
// A block computes a BM x BN tile of C and walks K in tiles of BK. Each of its
// NTHREADS = (BM / TM) * (BN / TN) threads accumulates a TM x TN micro-tile of C in registers:
// per k it reads TM values of A and TN values of B from shared memory into registers and does
// TM * TN FMAs with them (an outer product), instead of one shared-memory read per FMA (cuda-09).
// The K-tiles go through two shared-memory buffers: tile t + 1 is loaded from global memory while
// the block multiplies tile t, so one __syncthreads() per K-tile is enough.
//
// Launch: block NTHREADS (1-D), grid (ceil(N / BN), ceil(M / BM)); block (bx, by) computes
// C[by*BM .. by*BM+BM-1][bx*BN .. bx*BN+BN-1]. The tests compile this file with other tile sizes
// through -D (see README): write the kernel in terms of the macros.

#ifndef BM
#define BM 64  // rows of C per block
#endif
#ifndef BN
#define BN 64  // columns of C per block
#endif
#ifndef BK
#define BK 16  // K per tile
#endif
#ifndef TM
#define TM 4  // rows of C per thread
#endif
#ifndef TN
#define TN 4  // columns of C per thread
#endif

#define NTHREADS ((BM / TM) * (BN / TN))
#define A_LOADS (BM * BK / 4 / NTHREADS)  // float4s of each A tile one thread loads
#define B_LOADS (BK * BN / 4 / NTHREADS)  // float4s of each B tile one thread loads

static_assert(BM % TM == 0 && BN % TN == 0 && TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "tile shapes");
static_assert(A_LOADS * NTHREADS * 4 == BM * BK && B_LOADS * NTHREADS * 4 == BK * BN,
              "every thread loads the same number of float4s of each tile");

// p[row][col .. col+3] of a rows x cols row-major matrix (col is a multiple of 4), with 0 for the
// elements outside the matrix. A 16-byte (float4) load needs a 16-byte-aligned address: a GPU stops
// the kernel with "misaligned address" otherwise (the tests make the emulator check it too).
__device__ __forceinline__ float4 load4(const float* p, int rows, int cols, int row, int col) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    // HINT: in-bounds rows only; one float4 load when all four columns exist and the address is 16-byte aligned (it is exactly when cols % 4 == 0, since col % 4 == 0 and the base is 256-byte aligned), else one float per column that exists
    // BEGIN SOLUTION
    if (row < rows) {
        const float* q = p + (size_t)row * cols + col;
        if (cols % 4 == 0 && col + 3 < cols) {
            v = *reinterpret_cast<const float4*>(q);  // LDG.128
        } else {  // rows not 16-byte aligned, or the last partial float4 of a row
            if (col + 0 < cols) v.x = q[0];
            if (col + 1 < cols) v.y = q[1];
            if (col + 2 < cols) v.z = q[2];
            if (col + 3 < cols) v.w = q[3];
        }
    }
    // END SOLUTION
    return v;
}

// This thread's float4s of the A tile A[row0 .. row0+BM-1][k0 .. k0+BK-1]: float4 f of the tile is
// row f / (BK/4), columns 4 * (f % (BK/4)) .. +3; consecutive threads read consecutive addresses.
__device__ __forceinline__ void fetch_a(const float* A, int M, int K, int row0, int k0, float4 (&ra)[A_LOADS]) {
#pragma unroll
    for (int l = 0; l < A_LOADS; ++l) {
        int f = threadIdx.x + l * NTHREADS;
        ra[l] = load4(A, M, K, row0 + f / (BK / 4), k0 + f % (BK / 4) * 4);
    }
}

// This thread's float4s of the B tile B[k0 .. k0+BK-1][col0 .. col0+BN-1]: float4 f is row
// f / (BN/4), columns 4 * (f % (BN/4)) .. +3.
__device__ __forceinline__ void fetch_b(const float* B, int K, int N, int k0, int col0, float4 (&rb)[B_LOADS]) {
#pragma unroll
    for (int l = 0; l < B_LOADS; ++l) {
        int f = threadIdx.x + l * NTHREADS;
        rb[l] = load4(B, K, N, k0 + f / (BN / 4), col0 + f % (BN / 4) * 4);
    }
}

// The A tile is stored transposed, As[k][m]: the TM values of A one thread needs for one k are then
// contiguous (one float4 shared-memory load per 4 of them), like the TN values of Bs[k][n].
__device__ __forceinline__ void stash_a(float (&As)[BK][BM], const float4 (&ra)[A_LOADS]) {
#pragma unroll
    for (int l = 0; l < A_LOADS; ++l) {
        int f = threadIdx.x + l * NTHREADS;
        int m = f / (BK / 4), k = f % (BK / 4) * 4;
        As[k + 0][m] = ra[l].x;
        As[k + 1][m] = ra[l].y;
        As[k + 2][m] = ra[l].z;
        As[k + 3][m] = ra[l].w;
    }
}

__device__ __forceinline__ void stash_b(float (&Bs)[BK][BN], const float4 (&rb)[B_LOADS]) {
#pragma unroll
    for (int l = 0; l < B_LOADS; ++l) {
        int f = threadIdx.x + l * NTHREADS;
        *reinterpret_cast<float4*>(&Bs[f / (BN / 4)][f % (BN / 4) * 4]) = rb[l];
    }
}

__global__ void __launch_bounds__(NTHREADS) sgemm_reg_tiled(const float* A, const float* B, float* C, int M, int N,
                                                             int K) {
    __shared__ __align__(16) float As[2][BK][BM];  // two buffers of each tile
    __shared__ __align__(16) float Bs[2][BK][BN];
    const int tr = threadIdx.x / (BN / TN);  // this thread's micro-tile: rows tr*TM .. tr*TM+TM-1 of the block tile
    const int tc = threadIdx.x % (BN / TN);  // and columns tc*TN .. tc*TN+TN-1
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int ntiles = (K + BK - 1) / BK;
    float acc[TM][TN] = {};                   // C[row0 + tr*TM + i][col0 + tc*TN + j], in registers
    float4 ra[A_LOADS], rb[B_LOADS];          // the next K-tile on its way from global memory

    // HINT: tile 0 into buffer 0, then one barrier. Iteration t reads buffer t & 1: start the global loads of tile t + 1 (into ra, rb) first, then per k copy TM values of As and TN of Bs into two register arrays and do the TM x TN FMAs from them, then stash tile t + 1 into the other buffer, then ONE barrier. Last, write the micro-tile, skipping rows >= M and columns >= N.
    // BEGIN SOLUTION
    fetch_a(A, M, K, row0, 0, ra);
    fetch_b(B, K, N, 0, col0, rb);
    stash_a(As[0], ra);
    stash_b(Bs[0], rb);
    __syncthreads();  // tile 0 is complete before anyone multiplies with it

    for (int t = 0; t < ntiles; ++t) {
        const int cur = t & 1;
        const bool more = t + 1 < ntiles;
        if (more) {  // issue the next tile's global loads first: their latency hides behind the FMAs below
            fetch_a(A, M, K, row0, (t + 1) * BK, ra);
            fetch_b(B, K, N, (t + 1) * BK, col0, rb);
        }
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];  // register fragments: column k of this thread's As rows, row k of its Bs columns
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                float4 v = *reinterpret_cast<const float4*>(&As[cur][k][tr * TM + i]);  // LDS.128
                a[i] = v.x, a[i + 1] = v.y, a[i + 2] = v.z, a[i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                float4 v = *reinterpret_cast<const float4*>(&Bs[cur][k][tc * TN + j]);
                b[j] = v.x, b[j + 1] = v.y, b[j + 2] = v.z, b[j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);  // TM*TN FMAs, TM+TN loads
        }
        if (more) {  // the other buffer was last read in iteration t - 1, which ended with a barrier
            stash_a(As[cur ^ 1], ra);
            stash_b(Bs[cur ^ 1], rb);
        }
        __syncthreads();  // tile t + 1 is complete, and nobody still reads buffer cur when t + 2 overwrites it
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + tr * TM + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = col0 + tc * TN + j;
            if (row < M && col < N) C[(size_t)row * N + col] = acc[i][j];
        }
    }
    // END SOLUTION
}
