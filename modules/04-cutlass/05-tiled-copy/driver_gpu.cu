// cute-05 GPU driver (given; do not edit): the same copy_tile in a kernel, one CTA per tile, one thread per tid.
//
//   driver_gpu CFG:M:N:LD ...     (as driver_host.cpp)
//
// Per case: "gpu CFG M N LD wrong=<valid elements not equal to the source> outside=<elements outside M x N that
// changed>". Then the bandwidth of an 8192 x 8192 copy with the learner's TiledCopy and with the same TV layout
// around a 32-bit atom ("perf ..."), for the README's comparison; not graded.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include <cuda_runtime.h>

#include "tiled_copy.hpp"

using namespace cute;

#define CHECK(call)                                                                              \
  do {                                                                                           \
    cudaError_t err_ = (call);                                                                   \
    if (err_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

constexpr float kPoison = -1.0e9f;

template <int BM, int BN, class TC>
__global__ void copy_kernel(float const* src, float* dst, int M, int N, int ld) {
  auto layout = make_layout(make_shape(M, N), make_stride(ld, Int<1>{}));
  Tensor s = make_tensor(make_gmem_ptr(src), layout);
  Tensor d = make_tensor(make_gmem_ptr(dst), layout);
  lesson::copy_tile<BM, BN>(TC{}, s, d, int(blockIdx.x), int(blockIdx.y), int(threadIdx.x));
}

template <int BM, int BN, int T, class TC>
void run_case(char cfg, int M, int N, int ld) {
  int gm = (M + BM - 1) / BM, gn = (N + BN - 1) / BN;
  size_t len = size_t(gm) * BM * ld + size_t(gn) * BN;
  std::vector<float> src(len), dst(len, kPoison);
  for (size_t i = 0; i < len; ++i) src[i] = -1.0f - float(i);
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c) src[size_t(r) * ld + c] = float(r * N + c);
  float *d_src, *d_dst;
  CHECK(cudaMalloc(&d_src, len * sizeof(float)));
  CHECK(cudaMalloc(&d_dst, len * sizeof(float)));
  CHECK(cudaMemcpy(d_src, src.data(), len * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_dst, dst.data(), len * sizeof(float), cudaMemcpyHostToDevice));
  copy_kernel<BM, BN, TC><<<dim3(gm, gn), T>>>(d_src, d_dst, M, N, ld);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(dst.data(), d_dst, len * sizeof(float), cudaMemcpyDeviceToHost));
  long wrong = 0, outside = 0;
  for (size_t i = 0; i < len; ++i) {
    int r = int(i / ld), c = int(i % ld);
    bool valid = r < M && c < N;
    if (valid && dst[i] != float(r * N + c)) ++wrong;
    if (!valid && dst[i] != kPoison) ++outside;
  }
  std::printf("gpu %c %d %d %d wrong=%ld outside=%ld\n", cfg, M, N, ld, wrong, outside);
  CHECK(cudaFree(d_src));
  CHECK(cudaFree(d_dst));
}

template <int BM, int BN, int T, class TC>
double bandwidth(float const* src, float* dst, int n) {
  dim3 grid(n / BM, n / BN);
  copy_kernel<BM, BN, TC><<<grid, T>>>(src, dst, n, n, n);  // warm-up
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  const int reps = 20;
  CHECK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) copy_kernel<BM, BN, TC><<<grid, T>>>(src, dst, n, n, n);
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  return 2.0 * sizeof(float) * double(n) * n * reps / (ms * 1e-3) / 1e9;  // read + write bytes
}

template <int BM, int BN, int T>
void run_config(char cfg, std::vector<std::array<int, 3>> const& cases) {
  using TC = decltype(lesson::make_tile_copy<BM, BN, T>());
  if constexpr (std::is_void_v<TC>) {
    std::printf("todo %c make_tile_copy returns nothing yet\n", cfg);
  } else {
    for (auto const& c : cases) run_case<BM, BN, T, TC>(cfg, c[0], c[1], c[2]);
    using Scalar = TiledCopy<Copy_Atom<UniversalCopy<float>, float>, typename TC::TiledLayout_TV, typename TC::Tiler_MN>;
    const int n = 8192;
    float *s, *d;
    CHECK(cudaMalloc(&s, size_t(n) * n * sizeof(float)));
    CHECK(cudaMalloc(&d, size_t(n) * n * sizeof(float)));
    CHECK(cudaMemset(s, 0, size_t(n) * n * sizeof(float)));
    double vec = bandwidth<BM, BN, T, TC>(s, d, n), scalar = bandwidth<BM, BN, T, Scalar>(s, d, n);
    std::printf("perf %c n=%d yours_GBps=%.0f same_tv_32bit_atom_GBps=%.0f\n", cfg, n, vec, scalar);
    CHECK(cudaFree(s));
    CHECK(cudaFree(d));
  }
}

int main(int argc, char** argv) {
  std::vector<std::array<int, 3>> a, b;
  for (int i = 1; i < argc; ++i) {
    char cfg = 0;
    int m = 0, n = 0, ld = 0;
    if (std::sscanf(argv[i], "%c:%d:%d:%d", &cfg, &m, &n, &ld) != 4 || n % 4 || ld % 4 || ld < n || m < 1) {
      std::fprintf(stderr, "bad case %s\n", argv[i]);
      return 2;
    }
    (cfg == 'A' ? a : b).push_back({m, n, ld});
  }
  run_config<32, 128, 128>('A', a);
  run_config<24, 32, 64>('B', b);
  return 0;
}
