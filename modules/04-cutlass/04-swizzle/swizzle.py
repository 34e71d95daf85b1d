"""cute-04: CuTe's Swizzle<B,M,S> functor and a bank-conflict-free shared-memory tile.

A swizzle is a function on integer offsets (CUTLASS v4.2.0 `include/cute/swizzle.hpp`):

    0bxxxxxxxxxxxxxxxYYYxxxxxxxZZZxxxx
                                  ^--^  M = MBase: the M low bits never change
                     ^-^       ^-^      B = BBits: width of the YYY and ZZZ masks
                       ^---------^      S = SShift: distance from YYY down to ZZZ (negative: ZZZ is above YYY)

    swizzle(x) = x ^ shiftr(x & yyy_msk, S)       # ZZZ ^= YYY; shiftr by a negative S shifts left

`smem_layout` lays a K-major (row-major) tile into shared memory so that 16-byte vector accesses
(`ld.shared.v4`, `cp.async` 16 B, `ldmatrix` rows) are free of bank conflicts both along a row and
down a column of the tile.
"""

from __future__ import annotations

import pycute


class Swizzle:
    """CuTe's Swizzle<bits, base, shift>: offset -> offset ^ shiftr(offset & yyy_msk, shift).

    Attributes (as in swizzle.hpp): bits, base, shift, yyy_msk (the B source bits) and zzz_msk (the B bits
    that get flipped). Requires bits >= 0, base >= 0 and |shift| >= bits, else ValueError."""

    def __init__(self, bits: int, base: int, shift: int):
        self.bits, self.base, self.shift = bits, base, shift
        ### HINT: check the three preconditions first; each mask is B consecutive ones, one starting at bit M and one |S| away from it
        ### BEGIN SOLUTION
        if bits < 0 or base < 0 or abs(shift) < bits:
            raise ValueError(f"Swizzle<{bits},{base},{shift}> needs B >= 0, M >= 0 and |S| >= B")
        bit_msk = (1 << bits) - 1
        self.yyy_msk = bit_msk << (base + max(0, shift))  # source bits: the upper mask
        self.zzz_msk = bit_msk << (base - min(0, shift))  # target bits: |S| below (S > 0) or above (S < 0) YYY
        ### END SOLUTION

    def __call__(self, offset: int) -> int:
        ### HINT: YYY itself is never modified, which makes the function its own inverse
        ### BEGIN SOLUTION
        yyy = offset & self.yyy_msk
        moved = yyy >> self.shift if self.shift >= 0 else yyy << -self.shift  # CuTe's shiftr
        return offset ^ moved
        ### END SOLUTION

    def __repr__(self) -> str:
        return f"Swizzle({self.bits},{self.base},{self.shift})"


def smem_layout(rows: int, row_elems: int, elem_bytes: int):
    """Shared-memory layout of a K-major tile of `rows` x `row_elems` elements of `elem_bytes` bytes.

    Returns a callable L with L(r, c) -> int: the element offset of tile element (r, c) in shared memory.
    Contract: rows is a multiple of 8; elem_bytes in {1, 2, 4, 8}; the row size row_elems * elem_bytes is a
    power of two from 16 to 1024 bytes. The result must
      - be a bijection from the tile onto range(rows * row_elems) (no padding),
      - keep every aligned 16-byte vector of a row contiguous and 16-byte aligned,
      - serve every phase (8 threads, one 16-byte vector each) of a row read or a column read in ONE
        wavefront (README: the bank model). The plain row-major layout fails the column reads.
    A pycute.ComposedLayout(Swizzle(...), 0, pycute.Layout(...)) is such a callable."""
    ### HINT: a 16-byte vector = 2^M elements; a 128-byte line of all 32 banks = 8 vectors; YYY = the row bits that pick a line
    ### BEGIN SOLUTION
    row_bytes = row_elems * elem_bytes
    vecs_per_row = row_bytes // 16
    m = (16 // elem_bytes).bit_length() - 1  # log2(elements per 16-byte vector): vectors stay whole
    log_vecs = vecs_per_row.bit_length() - 1  # log2(16-byte vectors per row)
    b = min(3, log_vecs)  # at most 8 vectors fill a 128-byte bank line
    s = max(3, log_vecs)  # YYY starts where the 128-byte line index starts
    row_major = pycute.Layout((rows, row_elems), (row_elems, 1))
    return pycute.ComposedLayout(Swizzle(b, m, s), 0, row_major)
    ### END SOLUTION
