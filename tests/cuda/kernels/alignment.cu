// Vector and WMMA accesses at aligned and misaligned addresses (tests/test_cuda_alignment.py).
// A GPU stops the kernel with "misaligned address" on every misaligned one; the emulator must too.
#include <mma.h>
using namespace nvcuda;

// y[i] = sum of the float4 that starts at float `off` + 4 i of x: aligned when off % 4 == 0
__global__ void sum4(const float* x, float* y, int off, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 v = reinterpret_cast<const float4*>(x + off)[i];  // @sum4
    y[i] = v.x + v.y + v.z + v.w;
}

// the float4 at float `off` + 4 i of y = (x[i], 2 x[i], 3 x[i], 4 x[i])
__global__ void store4(const float* x, float* y, int off, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float a = x[i];
    reinterpret_cast<float4*>(y + off)[i] = make_float4(a, 2.0f * a, 3.0f * a, 4.0f * a);  // @store4
}

// float2 loads at float `off` + 2 i: aligned when off is even (8-byte alignment is enough)
__global__ void sum2(const float* x, float* y, int off, int n2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n2) return;
    float2 v = reinterpret_cast<const float2*>(x + off)[i];  // @sum2
    y[i] = v.x * v.y;
}

// __ldg of a float4 (the emulator's __ldg is a template in its header: the error must still name this file)
__global__ void ldg4(const float* x, float* y, int off, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 v = __ldg(reinterpret_cast<const float4*>(x + off) + i);  // @ldg4
    y[i] = v.x - v.w;
}

// shared memory: stage 64 floats, then each of 16 threads reads a float4 at float `off` + 4 t of the tile
__global__ void smem4(const float* x, float* y, int off) {
    __shared__ __align__(16) float tile[80];
    int t = threadIdx.x;
    tile[t] = x[t];
    if (t < 16) tile[64 + t] = 0.0f;
    __syncthreads();
    if (t < 16) {
        float4 v = *reinterpret_cast<const float4*>(&tile[off + 4 * t]);  // @smem4
        y[t] = v.x + v.y + v.z + v.w;
    }
}

// shared memory store of a float4 at float `off` + 4 t, then read back as floats
__global__ void smem_store4(const float* x, float* y, int off) {
    __shared__ __align__(16) float tile[80];
    int t = threadIdx.x;
    if (t < 16) reinterpret_cast<float4*>(&tile[off])[t] = make_float4(x[t], x[t], x[t], x[t]);  // @smem_store4
    __syncthreads();
    if (t < 16) y[t] = tile[off + 4 * t + 3];
}

// one 16x16x16 WMMA: C[16 x 16] (ldc floats per row) = A[16 x 16] (lda halves per row, starting `aoff` halves
// into A) times B[16 x 16] (row-major, 16 per row); one warp
__global__ void wmma_one(const half* A, const half* B, float* C, int aoff, int lda, int ldc) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(a, A + aoff, lda);  // @wmma_load
    wmma::load_matrix_sync(b, B, 16);
    wmma::mma_sync(acc, a, b, acc);
    wmma::store_matrix_sync(C, acc, ldc, wmma::mem_row_major);  // @wmma_store
}

// the same through shared memory: A staged into an __align__(32) tile, fragment loaded `soff` halves into it
__global__ void wmma_smem(const half* A, const half* B, float* C, int soff) {
    __shared__ __align__(32) half As[16 * 16 + 16];
    for (int i = threadIdx.x; i < 16 * 16; i += 32) As[soff + i] = A[i];
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(a, As + soff, 16);  // @wmma_smem_load
    wmma::load_matrix_sync(b, B, 16);
    wmma::mma_sync(acc, a, b, acc);
    wmma::store_matrix_sync(C, acc, 16, wmma::mem_row_major);
}

// Where the emulator puts things: out[0..2] = addresses of the two argument buffers and of a 32-byte aligned
// shared array modulo 256, out[3] = a float4 local passed by reference to a function that is not inlined
// (the fibers' stacks keep the ABI's 16-byte alignment), out[4] = the address of a 32-byte aligned local mod 32
__device__ __noinline__ float hsum(const float4& v) { return v.x + v.y + v.z + v.w; }
__global__ void where(const float* a, const double* b, long long* out) {
    __shared__ __align__(32) half hs[48];
    __align__(32) float local[8];
    hs[threadIdx.x] = __float2half(1.0f);
    for (int i = 0; i < 8; i++) local[i] = a[i];
    float4 v = make_float4(a[0], a[1], a[2], a[3]);
    if (threadIdx.x == 0) {
        out[0] = (long long)((unsigned long long)a % 256);
        out[1] = (long long)((unsigned long long)b % 256);
        out[2] = (long long)((unsigned long long)hs % 256 % 32);
        out[3] = (long long)hsum(v);
        out[4] = (long long)((unsigned long long)local % 32) + (long long)local[7] * 0;
    }
}
