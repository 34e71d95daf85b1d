// cuda-12: block-scaled FP8 GEMM as DeepGEMM does it.
//
// Activations X (M x K, fp32) are quantized per 1 x 128 group: one fp32 scale per row and 128-column
// block, sa[m][kb] = max(amax, 1e-4) / 448, A = e4m3(X / sa). Weights W (N x K, "NT": both operands
// K-major, as DeepGEMM's gemm_fp8_fp8_bf16_nt) are quantized offline per 128 x 128 block: sb[nb][kb].
// The GEMM computes, in fp32,
//     C[m][n] = sum over k-blocks kb of  sa[m][kb] * sb[n / 128][kb] * (sum over k in kb of A[m][k] * B[n][k]).
// Hopper's FP8 tensor cores keep their accumulator at about 14 significant bits, so DeepGEMM lets them
// sum one 128-wide k-block (4 WGMMA k-steps), then multiplies that partial sum by the two scales and
// adds it to an fp32 register on the CUDA cores: "promotion". `mma_fp8_k32` below is the course's
// model of one tensor-core k-step (README: "张量核心累加器的模型").
//
// Layouts (row-major): A M x K, B N x K (e4m3 bytes); sa M x KB, sb ceil(N/128) x KB, KB = ceil(K/128);
// C M x N fp32. K need not be a multiple of 128 here (DeepGEMM requires it): the last k-block is
// partial and the tile loader fills the missing columns with zeros.
#include <cuda_fp8.h>

#define BLOCK_K 128          // scale granularity along K, and the promotion interval
#define MMA_K 32             // one FP8 WGMMA k-step
#define TILE 16              // the GEMM's thread block computes a TILE x TILE tile of C
#define FP8_E4M3_MAX 448.0f  // largest finite e4m3 value
#define AMAX_FLOOR 1e-4f     // a group's amax is at least this (an all-zero group gets a finite scale)

// ---------------------------------------------------------------- the tensor-core model (given)

// The FP8 tensor core's accumulator keeps 13 explicit mantissa bits (1 sign, 8 exponent, 13 mantissa:
// "FP22"); the bits below are chopped (round toward zero).
__device__ __forceinline__ float fp22_chop(float x) { return __uint_as_float(__float_as_uint(x) & 0xFFFFFC00u); }

// One k-step of an FP8 MMA for one output element: acc + sum_{j < 32} a[j] * b[j], the products exact
// (e4m3 x e4m3 has at most 8 significant bits), the result held in the FP22 accumulator.
__device__ float mma_fp8_k32(float acc, const __nv_fp8_e4m3* a, const __nv_fp8_e4m3* b) {
    float sum = 0.0f;
    for (int j = 0; j < MMA_K; ++j) sum += float(a[j]) * float(b[j]);
    return fp22_chop(acc + sum);
}

// Stage rows [row0, row0 + TILE) x columns [k0, k0 + BLOCK_K) of an R x K e4m3 matrix in shared memory,
// zeros outside the matrix (they add nothing to a dot product). Every thread of the block takes part;
// consecutive threads copy consecutive bytes (coalesced). Rows are padded by 4 bytes so that the 16
// rows a warp reads at one k start in 16 different banks.
__device__ void load_tile(__nv_fp8_e4m3 (*tile)[BLOCK_K + 4], const __nv_fp8_e4m3* g, int row0, int R, int k0, int K) {
    __nv_fp8_e4m3 zero;
    zero.__x = 0;
    for (int i = threadIdx.y * TILE + threadIdx.x; i < TILE * BLOCK_K; i += TILE * TILE) {
        int r = i / BLOCK_K, c = i % BLOCK_K;
        tile[r][c] = (row0 + r < R && k0 + c < K) ? g[(size_t)(row0 + r) * K + k0 + c] : zero;
    }
}

// ---------------------------------------------------------------- 1 x 128 activation quantization

// One warp per group: grid (KB, M), block 32. Lane l owns columns kb*128 + l + 32*i, i = 0..3.
// Writes sa[m][kb] = max(amax, 1e-4) / 448 and q[m][k] = e4m3 of x[m][k] * 448 / max(amax, 1e-4)
// (round to nearest even, saturating) for every k < K of the group.
__global__ void quantize_1x128(const float* __restrict__ x, __nv_fp8_storage_t* __restrict__ q,
                               float* __restrict__ sa, int M, int K) {
    const int m = blockIdx.y, kb = blockIdx.x, lane = threadIdx.x;
    const int KB = (K + BLOCK_K - 1) / BLOCK_K;
    const float* row = x + (size_t)m * K;
    __nv_fp8_storage_t* qrow = q + (size_t)m * K;
    // HINT: amax = max |x| over the group's (up to) 128 columns, known to all 32 lanes after a warp reduction;
    // HINT: columns >= K do not exist (neither read nor written); an all-zero group still gets a finite scale.
    // BEGIN SOLUTION
    float v[BLOCK_K / 32];
    float amax = 0.0f;
    for (int i = 0; i < BLOCK_K / 32; ++i) {
        const int k = kb * BLOCK_K + 32 * i + lane;
        v[i] = k < K ? row[k] : 0.0f;
        amax = fmaxf(amax, fabsf(v[i]));
    }
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    amax = fmaxf(amax, AMAX_FLOOR);
    if (lane == 0) sa[m * KB + kb] = amax / FP8_E4M3_MAX;
    const float inv = FP8_E4M3_MAX / amax;  // DeepGEMM's per_token_cast_to_fp8 multiplies by 448 / amax
    for (int i = 0; i < BLOCK_K / 32; ++i) {
        const int k = kb * BLOCK_K + 32 * i + lane;
        if (k < K) qrow[k] = __nv_cvt_float_to_fp8(v[i] * inv, __NV_SATFINITE, __NV_E4M3);
    }
    // END SOLUTION
}

// ---------------------------------------------------------------- the block-scaled GEMM

// C = (A, sa) x (B, sb)^T. Block (TILE, TILE): thread (tx, ty) owns C[m][n], m = by*TILE + ty,
// n = bx*TILE + tx; grid (ceil(N/TILE), ceil(M/TILE)).
__global__ void fp8_gemm_nt(const __nv_fp8_e4m3* __restrict__ A, const float* __restrict__ sa,
                            const __nv_fp8_e4m3* __restrict__ B, const float* __restrict__ sb,
                            float* __restrict__ C, int M, int N, int K) {
    __shared__ __nv_fp8_e4m3 As[TILE][BLOCK_K + 4];
    __shared__ __nv_fp8_e4m3 Bs[TILE][BLOCK_K + 4];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int m = blockIdx.y * TILE + ty, n = blockIdx.x * TILE + tx;
    // HINT: per k-block: stage As and Bs; the tensor-core accumulator starts at 0 and takes BLOCK_K / MMA_K k-steps;
    // HINT: then one fp32 update with the row's activation scale and the weight block's scale (promotion).
    // HINT: Threads outside C still stage tiles and reach every barrier, but read no scale and write nothing.
    // BEGIN SOLUTION
    const int KB = (K + BLOCK_K - 1) / BLOCK_K;  // k-blocks: columns of sa and sb
    float acc = 0.0f;                            // fp32 accumulator (CUDA-core registers)
    for (int kb = 0; kb < KB; ++kb) {
        load_tile(As, A, blockIdx.y * TILE, M, kb * BLOCK_K, K);
        load_tile(Bs, B, blockIdx.x * TILE, N, kb * BLOCK_K, K);
        __syncthreads();  // both tiles complete before any k-step reads them
        float partial = 0.0f;  // the tensor core's FP22 accumulator, restarted every k-block
        for (int k = 0; k < BLOCK_K; k += MMA_K) partial = mma_fp8_k32(partial, &As[ty][k], &Bs[tx][k]);
        if (m < M && n < N) acc += partial * (sa[m * KB + kb] * sb[(n / BLOCK_K) * KB + kb]);  // promotion
        __syncthreads();  // every k-step is done before the next k-block overwrites the tiles
    }
    if (m < M && n < N) C[(size_t)m * N + n] = acc;
    // END SOLUTION
}
