// cute-05: copy one CTA tile of a row-major float matrix with 128-bit vector accesses, through a CuTe TiledCopy.
//
// Contract (README.md):
//   make_tile_copy<BM, BN, kThreads>()  a TiledCopy whose atom moves 128 bits (4 floats) per copy; threads
//                                       row-major over a (kThreads / (BN/4)) x (BN/4) grid, each owning 1 x 4
//                                       contiguous floats per step; the tiler it covers repeats over BM x BN.
//   copy_tile<BM, BN>(tc, src, dst, bm, bn, tid)
//                                       thread `tid` of CTA (bm, bn) copies its part of tile (bm, bn) of
//                                       src (M x N, row-major, N % 4 == 0) to dst; elements outside M x N are
//                                       neither read nor written.
// The same functions run on the host (driver_host.cpp loops over every thread of every CTA) and in a kernel
// (driver_gpu.cu): CuTe's algorithms are CUTE_HOST_DEVICE.
#pragma once

#include <cute/tensor.hpp>

namespace lesson {
using namespace cute;

constexpr int kVec = 4;  // floats per 128-bit access

template <int BM, int BN, int kThreads>
CUTE_HOST_DEVICE auto make_tile_copy() {
  static_assert(BN % kVec == 0 && kThreads % (BN / kVec) == 0, "a row of vectors must fit the threads");
  static_assert(BM % (kThreads / (BN / kVec)) == 0, "the thread rows must tile BM");
  // HINT: make_tiled_copy(atom, thr_layout, val_layout); the atom is Copy_Atom<UniversalCopy<uint128_t>, float>;
  // HINT: thr_layout is (kThreads / (BN/kVec), BN/kVec) with consecutive tids along a row (N is contiguous);
  // HINT: val_layout is (1, kVec). Return the TiledCopy.
  // BEGIN SOLUTION
  constexpr int kThrN = BN / kVec;         // threads across one row of the tile
  constexpr int kThrM = kThreads / kThrN;  // thread rows per step
  auto thr_layout = make_layout(make_shape(Int<kThrM>{}, Int<kThrN>{}), LayoutRight{});  // tid -> (m, n), n fastest
  auto val_layout = make_layout(make_shape(Int<1>{}, Int<kVec>{}));                       // 1 x 4 floats per thread
  return make_tiled_copy(Copy_Atom<UniversalCopy<uint128_t>, float>{}, thr_layout, val_layout);
  // END SOLUTION
}

template <int BM, int BN, class TiledCopy, class SrcTensor, class DstTensor>
CUTE_HOST_DEVICE void copy_tile(TiledCopy const& tiled_copy, SrcTensor src, DstTensor dst, int bm, int bn, int tid) {
  auto cta_tile = make_shape(Int<BM>{}, Int<BN>{});
  // HINT: local_tile the CTA's (BM, BN) block out of src, dst and an identity tensor of shape(src) (its elements
  // HINT: are (m, n) coordinates); get_slice(tid); partition_S / partition_D / partition_S; keep a copy only where
  // HINT: elem_less(coordinate, shape(src)); copy_if(tiled_copy, predicate, ...). Shapes: ((V), CPY_M, CPY_N).
  // BEGIN SOLUTION
  Tensor gS = local_tile(src, cta_tile, make_coord(bm, bn));                                  // (BM, BN)
  Tensor gD = local_tile(dst, cta_tile, make_coord(bm, bn));                                  // (BM, BN)
  Tensor cS = local_tile(make_identity_tensor(shape(src)), cta_tile, make_coord(bm, bn));   // (BM, BN) -> (m, n)
  auto thr_copy = tiled_copy.get_slice(tid);
  Tensor tS = thr_copy.partition_S(gS);   // ((4), CPY_M, CPY_N)
  Tensor tD = thr_copy.partition_D(gD);
  Tensor tC = thr_copy.partition_S(cS);   // the same partition of the coordinates
  Tensor pred = make_tensor<bool>(shape(tC));
  for (int i = 0; i < size(pred); ++i) {
    pred(i) = elem_less(tC(i), shape(src));  // inside M x N; a vector is all in or all out since N % 4 == 0
  }
  copy_if(tiled_copy, pred, tS, tD);
  // END SOLUTION
}

}  // namespace lesson
