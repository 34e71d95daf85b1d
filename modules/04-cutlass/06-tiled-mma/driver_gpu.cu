// cute-06 GPU driver (given; do not edit): the functions of mma_fragments.hpp with the real mma.sync.
//
// Kernel 1: one warp runs warp_mma_16x8x16<SM80_16x8x16_F32F16F16F32_TN> (your maps place the fragments).
// Kernel 2: one CTA of size(make_cta_mma()) threads runs cta_gemm on a 64x64x32 tile (gemm() issues mma.sync).
// Output: the "warpA..warpD", "tiled", "layoutC", "tvC", "gemm", "gA..gD" and "outside" lines of driver_host.cpp,
// with the same inputs (multiples of 1/8, so D must equal A*B + C exactly).
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include <cuda_runtime.h>

#include "mma_fragments.hpp"

using namespace cute;
using Sm80 = SM80_16x8x16_F32F16F16F32_TN;

#define CHECK(call)                                                                              \
  do {                                                                                           \
    cudaError_t err_ = (call);                                                                   \
    if (err_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

static uint32_t mix(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
  return x;
}
static float value(uint32_t seed, int i) { return float(int(mix(seed * 7919u + uint32_t(i)) % 17) - 8) / 8.0f; }

static void print_rows(char const* tag, float const* x, int rows, int cols, int ld) {
  std::printf("%s", tag);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) std::printf(" %.9g", double(x[r * ld + c]));
  std::printf("\n");
}

template <class T>
static T* to_device(std::vector<T> const& h) {
  T* d = nullptr;
  CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
  CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

__global__ void warp_kernel(half_t const* A, half_t const* B, float const* C, float* D) {
  lesson::warp_mma_16x8x16<Sm80>(A, B, C, D, int(threadIdx.x));
}

constexpr int BM = 64, BN = 64, BK = 32, LDA = 40, LDB = 40, LDC = 72;

template <class TiledMma>
__global__ void cta_kernel(half_t const* A, half_t const* B, float* D) {
  Tensor gA = make_tensor(make_gmem_ptr(A), make_layout(make_shape(Int<BM>{}, Int<BK>{}), make_stride(LDA, Int<1>{})));
  Tensor gB = make_tensor(make_gmem_ptr(B), make_layout(make_shape(Int<BN>{}, Int<BK>{}), make_stride(LDB, Int<1>{})));
  Tensor gD = make_tensor(make_gmem_ptr(D), make_layout(make_shape(Int<BM>{}, Int<BN>{}), make_stride(LDC, Int<1>{})));
  lesson::cta_gemm(TiledMma{}, gA, gB, gD, int(threadIdx.x));
}

static void warp_mma() {
  std::vector<half_t> A(256), B(128);
  std::vector<float> C(128), D(128, -1.0e9f);
  for (int i = 0; i < 256; ++i) A[i] = half_t(value(1, i));
  for (int i = 0; i < 128; ++i) B[i] = half_t(value(2, i)), C[i] = value(3, i);
  half_t *dA = to_device(A), *dB = to_device(B);
  float *dC = to_device(C), *dD = to_device(D);
  warp_kernel<<<1, 32>>>(dA, dB, dC, dD);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(D.data(), dD, D.size() * sizeof(float), cudaMemcpyDeviceToHost));
  std::vector<float> Af(A.begin(), A.end()), Bf(B.begin(), B.end());
  print_rows("warpA", Af.data(), 16, 16, 16);
  print_rows("warpB", Bf.data(), 16, 8, 8);
  print_rows("warpC", C.data(), 16, 8, 8);
  print_rows("warpD", D.data(), 16, 8, 8);
}

template <class TiledMma>
static void cta_gemm(TiledMma const& mma) {
  int threads = int(size(mma));
  std::printf("tiled tile=%d,%d,%d threads=%d\nlayoutC ", int(tile_size<0>(mma)), int(tile_size<1>(mma)),
              int(tile_size<2>(mma)), threads);
  auto tv = mma.get_layoutC_TV();
  print(tv);
  std::printf("\ntvC");
  for (int i = 0; i < int(size(tv)); ++i) std::printf(" %d", int(tv(i)));
  std::printf("\n");
  std::vector<half_t> A(BM * LDA), B(BN * LDB);
  std::vector<float> C(BM * LDC), D;
  for (size_t i = 0; i < A.size(); ++i) A[i] = half_t(value(4, int(i)));
  for (size_t i = 0; i < B.size(); ++i) B[i] = half_t(value(5, int(i)));
  for (size_t i = 0; i < C.size(); ++i) C[i] = value(6, int(i));
  half_t *dA = to_device(A), *dB = to_device(B);
  float* dD = to_device(C);
  cta_kernel<TiledMma><<<1, threads>>>(dA, dB, dD);
  CHECK(cudaGetLastError());
  D.resize(C.size());
  CHECK(cudaMemcpy(D.data(), dD, D.size() * sizeof(float), cudaMemcpyDeviceToHost));
  std::vector<float> Af(A.begin(), A.end()), Bf(B.begin(), B.end());
  std::printf("gemm %d %d %d\n", BM, BN, BK);
  print_rows("gA", Af.data(), BM, BK, LDA);
  print_rows("gB", Bf.data(), BN, BK, LDB);
  print_rows("gC", C.data(), BM, BN, LDC);
  print_rows("gD", D.data(), BM, BN, LDC);
  long outside = 0;
  for (int r = 0; r < BM; ++r)
    for (int c = BN; c < LDC; ++c) outside += D[r * LDC + c] != C[r * LDC + c];
  std::printf("outside %ld\n", outside);
}

int main() {
  warp_mma();
  using Tiled = decltype(lesson::make_cta_mma<Sm80>());
  if constexpr (std::is_void_v<Tiled>) {
    std::printf("todo make_cta_mma returns nothing yet\n");
  } else {
    cta_gemm(lesson::make_cta_mma<Sm80>());
  }
  return 0;
}
