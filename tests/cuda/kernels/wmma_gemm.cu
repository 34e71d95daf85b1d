// Tensor Core GEMM with WMMA: one warp per 16x16 tile of C; A row-major (M x K), B column-major.
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;

__global__ void wmma_gemm(const half* __restrict__ A, const half* __restrict__ B, float* __restrict__ C,
                          int M, int N, int K) {
    const int warp_m = (blockIdx.y * blockDim.y + threadIdx.y);
    const int warp_n = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (warp_m * 16 >= M || warp_n * 16 >= N) return;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(a, A + warp_m * 16 * K + k, K);
        wmma::load_matrix_sync(b, B + warp_n * 16 * K + k, K);
        wmma::mma_sync(acc, a, b, acc);
    }
    for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= 0.5f;
    wmma::store_matrix_sync(C + warp_m * 16 * N + warp_n * 16, acc, N, wmma::mem_row_major);
}
