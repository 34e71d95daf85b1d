// cute-06: who holds what in mma.sync.m16n8k16 (f16 A/B, f32 C/D), and a CTA tile of C partitioned by a TiledMMA.
//
// Contract (README.md):
//   a_frag_coord(lane, i), i in [0, 8):  (row m, col k) of A (16 x 16, M x K) held by `lane` as its i-th half
//   b_frag_coord(lane, i), i in [0, 4):  (row k, col n) of B (16 x 8,  K x N) held by `lane` as its i-th half
//   c_frag_coord(lane, i), i in [0, 4):  (row m, col n) of C and D (16 x 8) held by `lane` as its i-th float
//       (the PTX ISA's "Matrix Fragments for mma.m16n8k16 with floating point type"; lane = %laneid)
//   make_cta_mma<MmaOp>():  a TiledMMA of 2 x 2 warps over the 16x8x16 atom MmaOp, permuted to a 32 x 32 x 16 tile
//   cta_gemm(mma, gA, gB, gC, tid):  C += A * B^T for one CTA tile (A: BM x BK, B: BN x BK, C: BM x BN), thread tid's
//       part, through mma's partitions of A, B and C.
// MmaOp is SM80_16x8x16_F32F16F16F32_TN in a kernel (driver_gpu.cu, the real mma.sync); on the host driver_host.cpp
// passes an emulation with the same CuTe traits that runs the 32 lanes of a warp as threads.
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm80.hpp>

namespace lesson {
using namespace cute;

CUTE_HOST_DEVICE cute::tuple<int, int> a_frag_coord(int lane, int i) {
  int row = -1, col = -1;
  // HINT: groupID and threadID_in_group split the lane into 8 groups of 4; A's halves come in pairs along k,
  // HINT: a0..a3 cover k in [0, 8) and a4..a7 k in [8, 16); the second pair of each four is 8 rows further down.
  // BEGIN SOLUTION
  int group = lane >> 2;                    // groupID: lanes 4g..4g+3 share row g
  int tig = lane % 4;                       // threadID_in_group: which pair of columns
  row = group + 8 * ((i >> 1) & 1);         // a2, a3, a6, a7: rows 8..15
  col = 2 * tig + (i & 1) + 8 * (i >> 2);   // a4..a7: columns 8..15
  // END SOLUTION
  return cute::make_tuple(row, col);
}

CUTE_HOST_DEVICE cute::tuple<int, int> b_frag_coord(int lane, int i) {
  int row = -1, col = -1;
  // HINT: B is K x N (16 x 8): a lane's halves run down k (rows) in pairs, b2 and b3 8 rows further; n is fixed per lane.
  // BEGIN SOLUTION
  int group = lane >> 2;
  int tig = lane % 4;
  row = 2 * tig + (i & 1) + 8 * (i >> 1);   // k: b2, b3 in rows 8..15
  col = group;                              // n = groupID
  // END SOLUTION
  return cute::make_tuple(row, col);
}

CUTE_HOST_DEVICE cute::tuple<int, int> c_frag_coord(int lane, int i) {
  int row = -1, col = -1;
  // HINT: C is M x N (16 x 8): a lane holds a pair of neighbouring columns in two rows, 8 apart.
  // BEGIN SOLUTION
  int group = lane >> 2;
  int tig = lane % 4;
  row = group + 8 * (i >> 1);               // c2, c3: rows 8..15
  col = 2 * tig + (i & 1);
  // END SOLUTION
  return cute::make_tuple(row, col);
}

// Two halves in one 32-bit register, the lower index in the lower 16 bits (as mma.sync's .f16x2 operands).
CUTE_HOST_DEVICE uint32_t pack_half2(half_t lo, half_t hi) {
  return uint32_t(lo.raw()) | (uint32_t(hi.raw()) << 16);
}

// One warp computes D = A * B + C for a single 16x8x16 atom with the fragments placed by the three maps above.
// A: 16 x 16 row-major, B: 16 x 8 row-major (K x N), C and D: 16 x 8 row-major. Given; not part of the task.
template <class MmaOp>
CUTE_HOST_DEVICE void warp_mma_16x8x16(half_t const* A, half_t const* B, float const* C, float* D, int lane) {
  uint32_t a[4], b[2];
  float c[4], d[4];
  auto at = [](half_t const* X, cute::tuple<int, int> rc, int rows, int cols) {  // 0 outside the matrix
    int r = get<0>(rc), c = get<1>(rc);
    return (r >= 0 && r < rows && c >= 0 && c < cols) ? X[r * cols + c] : half_t(0);
  };
  for (int r = 0; r < 4; ++r)
    a[r] = pack_half2(at(A, a_frag_coord(lane, 2 * r), 16, 16), at(A, a_frag_coord(lane, 2 * r + 1), 16, 16));
  for (int r = 0; r < 2; ++r)
    b[r] = pack_half2(at(B, b_frag_coord(lane, 2 * r), 16, 8), at(B, b_frag_coord(lane, 2 * r + 1), 16, 8));
  for (int i = 0; i < 4; ++i) {
    int m = get<0>(c_frag_coord(lane, i)), n = get<1>(c_frag_coord(lane, i));
    c[i] = (m >= 0 && m < 16 && n >= 0 && n < 8) ? C[m * 8 + n] : 0.0f;
  }
  MmaOp::fma(d[0], d[1], d[2], d[3], a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], c[2], c[3]);
  for (int i = 0; i < 4; ++i) {
    int m = get<0>(c_frag_coord(lane, i)), n = get<1>(c_frag_coord(lane, i));
    if (m >= 0 && m < 16 && n >= 0 && n < 8) D[m * 8 + n] = d[i];  // a position outside C is dropped
  }
}

template <class MmaOp>
CUTE_HOST_DEVICE auto make_cta_mma() {
  // HINT: make_tiled_mma(atom, warp layout (2, 2, 1), permutation tile (32, 32, 16)); 128 threads; return it.
  // BEGIN SOLUTION
  return make_tiled_mma(MMA_Atom<MmaOp>{}, Layout<Shape<_2, _2, _1>>{}, Tile<_32, _32, _16>{});
  // END SOLUTION
}

template <class TiledMma, class TensorA, class TensorB, class TensorC>
CUTE_HOST_DEVICE void cta_gemm(TiledMma const& mma, TensorA gA, TensorB gB, TensorC gC, int tid) {
  // HINT: this thread's slice of mma partitions A (MMA, MMA_M, MMA_K), B (MMA, MMA_N, MMA_K) and C (MMA, MMA_M, MMA_N);
  // HINT: load them into register fragments of the same partition, run gemm over every k, store C back.
  // BEGIN SOLUTION
  auto thr_mma = mma.get_slice(tid);
  Tensor tCgA = thr_mma.partition_A(gA);            // (MMA, MMA_M, MMA_K) views of global memory
  Tensor tCgB = thr_mma.partition_B(gB);            // (MMA, MMA_N, MMA_K)
  Tensor tCgC = thr_mma.partition_C(gC);            // (MMA, MMA_M, MMA_N)
  Tensor tCrA = thr_mma.partition_fragment_A(gA);   // the same shapes, in registers
  Tensor tCrB = thr_mma.partition_fragment_B(gB);
  Tensor tCrC = thr_mma.partition_fragment_C(gC);
  copy(tCgA, tCrA);
  copy(tCgB, tCrB);
  copy(tCgC, tCrC);                                 // C += ...: start from the old C
  gemm(mma, tCrA, tCrB, tCrC);                      // one mma.sync per (m, n, k) atom
  copy(tCrC, tCgC);
  // END SOLUTION
}

}  // namespace lesson
