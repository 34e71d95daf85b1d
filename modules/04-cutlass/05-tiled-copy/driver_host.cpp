// cute-05 host driver (given; do not edit): runs tiled_copy.hpp on host memory and prints what every thread did.
//
//   driver_host CFG:M:N:LD ...     CFG is A (BM=32, BN=128, 128 threads) or B (BM=24, BN=32, 64 threads)
//
// Output, per configuration:   config CFG BM BN T bits=<bits per copy of the atom> tiler=<TM>,<TN> V=<values>
//                              layout <the TiledCopy's TV layout>          tv <tv(i) for i in [0, T*V)>
// per case (src row-major M x N with leading dimension LD, every element = its index r*N + c):
//   case CFG M N LD
//   writes <off thread value> ...   every element each thread wrote (dst offset, global thread id, value), found
//                                   by scanning the whole poisoned dst after each thread: also writes outside M x N
//   instr <thread dst_off src_off> ...  every 128-bit copy the TiledCopy's atom executed (the same TV layout with a
//                                   counting atom); "instr none" when the atom does not move 128 bits
// Global thread id = (bm * grid_n + bn) * T + tid. Offsets count floats from the buffer start; the buffers hold
// every tile a CTA covers (rows up to grid_m * BM, plus BN floats past the last row), so a missing predicate
// writes into poisoned memory that is scanned, never outside the allocation.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "tiled_copy.hpp"

using namespace cute;

// A 128-bit copy that logs itself: same traits as UniversalCopy<uint128_t>.
struct LoggedCopy128 {
  using SRegisters = uint128_t[1];
  using DRegisters = uint128_t[1];
  static inline int thread = 0;
  static inline std::vector<long> log;  // thread, dst address, src address (bytes)
  static void copy(uint128_t const& src, uint128_t& dst) {
    log.insert(log.end(), {long(thread), long(reinterpret_cast<std::uintptr_t>(&dst)),
                           long(reinterpret_cast<std::uintptr_t>(&src))});
    dst = src;
  }
};
template <>
struct cute::Copy_Traits<LoggedCopy128> : cute::Copy_Traits<cute::UniversalCopy<cute::uint128_t>> {};

constexpr float kPoison = -1.0e9f;

template <int BM, int BN, int T, class TC>
void print_config(char cfg, TC const& tc) {
  constexpr int bits = int(sizeof_bits_v<typename TC::ValType>) * TC::NumValSrc;  // a TiledCopy is its atom
  auto tv = typename TC::TiledLayout_TV{};
  using Tiler = typename TC::Tiler_MN;
  std::printf("config %c %d %d %d bits=%d tiler=%d,%d V=%d\nlayout ", cfg, BM, BN, T, bits,
              int(size<0>(Tiler{})), int(size<1>(Tiler{})), int(size<1>(tv)));
  print(tv);
  std::printf("\ntv");
  for (int i = 0; i < int(size(tv)); ++i) std::printf(" %d", int(tv(i)));
  std::printf("\n");
}

template <int BM, int BN, int T, class TC>
void run_case(char cfg, TC const& tc, int M, int N, int ld) {
  int gm = (M + BM - 1) / BM, gn = (N + BN - 1) / BN;
  size_t len = size_t(gm) * BM * ld + size_t(gn) * BN;
  // 16-byte aligned buffers, as cudaMalloc's (256-byte) are: a 128-bit access needs it.
  std::vector<uint128_t> src_store((len + 3) / 4 + 1), dst_store((len + 3) / 4 + 1);
  float* src_buf = reinterpret_cast<float*>(src_store.data());
  float* dst_buf = reinterpret_cast<float*>(dst_store.data());
  for (size_t i = 0; i < len; ++i) src_buf[i] = -1.0f - float(i);  // outside M x N: negative, never a valid value
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c) src_buf[size_t(r) * ld + c] = float(r * N + c);
  for (size_t i = 0; i < len; ++i) dst_buf[i] = kPoison;
  auto layout = make_layout(make_shape(M, N), make_stride(ld, Int<1>{}));
  Tensor src = make_tensor(make_gmem_ptr(src_buf), layout);
  Tensor dst = make_tensor(make_gmem_ptr(dst_buf), layout);
  std::printf("case %c %d %d %d\nwrites", cfg, M, N, ld);
  for (int bm = 0; bm < gm; ++bm)
    for (int bn = 0; bn < gn; ++bn)
      for (int tid = 0; tid < T; ++tid) {
        lesson::copy_tile<BM, BN>(tc, src, dst, bm, bn, tid);
        long gtid = long(bm * gn + bn) * T + tid;
        for (size_t i = 0; i < len; ++i) {  // what this thread wrote; re-poison it for the next thread
          if (dst_buf[i] != kPoison) {
            std::printf(" %zu %ld %.0f", i, gtid, double(dst_buf[i]));
            dst_buf[i] = kPoison;
          }
        }
      }
  std::printf("\ninstr");
  if constexpr (int(sizeof_bits_v<typename TC::ValType>) * TC::NumValSrc == 128) {
    using Logged = TiledCopy<Copy_Atom<LoggedCopy128, float>, typename TC::TiledLayout_TV, typename TC::Tiler_MN>;
    LoggedCopy128::log.clear();
    for (int bm = 0; bm < gm; ++bm)
      for (int bn = 0; bn < gn; ++bn)
        for (int tid = 0; tid < T; ++tid) {
          LoggedCopy128::thread = (bm * gn + bn) * T + tid;
          lesson::copy_tile<BM, BN>(Logged{}, src, dst, bm, bn, tid);
        }
    auto base = long(reinterpret_cast<std::uintptr_t>(dst_buf)), sbase = long(reinterpret_cast<std::uintptr_t>(src_buf));
    auto& log = LoggedCopy128::log;
    for (size_t i = 0; i < log.size(); i += 3)  // byte addresses -> float offsets
      std::printf(" %ld %ld %ld", log[i], (log[i + 1] - base) / 4, (log[i + 2] - sbase) / 4);
  } else {
    std::printf(" none");
  }
  std::printf("\n");
}

template <int BM, int BN, int T>
void run_config(char cfg, std::vector<std::array<int, 3>> const& cases) {
  using TC = decltype(lesson::make_tile_copy<BM, BN, T>());
  if constexpr (std::is_void_v<TC>) {
    std::printf("todo %c make_tile_copy returns nothing yet\n", cfg);
  } else {
    TC tc = lesson::make_tile_copy<BM, BN, T>();
    print_config<BM, BN, T>(cfg, tc);
    for (auto const& c : cases) run_case<BM, BN, T>(cfg, tc, c[0], c[1], c[2]);
  }
}

int main(int argc, char** argv) {
  std::vector<std::array<int, 3>> a, b;
  for (int i = 1; i < argc; ++i) {
    char cfg = 0;
    int m = 0, n = 0, ld = 0;
    if (std::sscanf(argv[i], "%c:%d:%d:%d", &cfg, &m, &n, &ld) != 4 || n % 4 || ld % 4 || ld < n || m < 1) {
      std::fprintf(stderr, "bad case %s (want CFG:M:N:LD, N and LD multiples of 4, LD >= N)\n", argv[i]);
      return 2;
    }
    (cfg == 'A' ? a : b).push_back({m, n, ld});
  }
  run_config<32, 128, 128>('A', a);
  run_config<24, 32, 64>('B', b);
  return 0;
}
