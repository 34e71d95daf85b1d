"""cute-04 tests: Swizzle<B,M,S> equals pycute's on every offset; the learner's shared-memory layout is a
bijection onto the tile, keeps 16-byte vectors whole, and serves row and column reads in the minimum number
of wavefronts under the bank model of the README (the plain row-major layout does not).

Bank model (the one the course's CUDA emulator uses, pytest_hpccourse/runtimes/cuda/README.md): 32 banks of 4-byte
words, bank = (byte address / 4) % 32; a warp's 16-byte accesses are served in 4 phases of 8 threads
(128 bytes each); a phase costs as many wavefronts as the largest number of DISTINCT words that fall into
one bank (threads reading the same word share it). The minimum is 1 wavefront per phase, 4 per warp.
"""

import operator
import random
from collections import defaultdict

import pycute
import pytest

# ---------------------------------------------------------------------------------------------------------
# Part 1: the functor against pycute (nvidia-cutlass 4.2.0.0, pycute/swizzle.py)


def swizzle_params():
    """(B, M, S) with B in 0..4, M in 0..5, |S| from max(B, 1) to B + 4, both signs; S = 0 only with B = 0."""
    out = []
    for b in range(5):
        for m in range(6):
            if b == 0:
                out.append((0, m, 0))
            for s in range(max(b, 1), b + 5):
                out += [(b, m, s), (b, m, -s)]
    return out


def pycute_swizzle(b, m, s):
    if s == 0:  # pycute's shiftr/shiftl recurse forever on a zero shift; CuTe's C++ Swizzle<0,M,0> is the identity
        return lambda x: x
    return pycute.Swizzle(b, m, s)


@pytest.mark.points(1)
def test_masks_are_cutes(lesson):
    sw = lesson.load("swizzle.py")
    for b, m, s in swizzle_params():
        mine, ref = sw.Swizzle(b, m, s), pycute.Swizzle(b, m, s) if s else None
        want_y = ref.yyy_msk if ref else 0
        want_z = ref.zzz_msk if ref else 0
        assert (mine.yyy_msk, mine.zzz_msk) == (want_y, want_z), (
            f"Swizzle({b},{m},{s}): (yyy_msk, zzz_msk) = ({mine.yyy_msk:#b}, {mine.zzz_msk:#b}), "
            f"CuTe has ({want_y:#b}, {want_z:#b})")


@pytest.mark.points(1)
def test_documented_examples(lesson):
    """The examples in the comments of include/cute/swizzle.hpp (make_swizzle) and the fp16 8x64 atom."""
    sw = lesson.load("swizzle.py")
    a = sw.Swizzle(1, 2, 1)  # make_swizzle<0b1000, 0b0100>() -> Swizzle<1,2,1>
    assert (a.yyy_msk, a.zzz_msk) == (0b1000, 0b0100)
    c = sw.Swizzle(2, 1, 5)  # make_swizzle<0b11000000, 0b00000110>() -> Swizzle<2,1,5>
    assert (c.yyy_msk, c.zzz_msk) == (0b11000000, 0b110)
    assert c(0b11000000) == 0b11000110 and c(0b01000010) == 0b01000000
    n = sw.Swizzle(2, 1, -5)  # negative shift: YYY is the LOW mask and is moved up
    assert (n.yyy_msk, n.zzz_msk) == (0b110, 0b11000000)
    assert n(0b110) == 0b11000110
    s333 = sw.Swizzle(3, 3, 3)  # fp16 8x64 K-major atom: element (1, 0) lives at 64 ^ 8
    assert [s333(64 * r) for r in range(8)] == [64 * r + 8 * r for r in range(8)]
    assert s333(7) == 7 and s333(64 * 8) == 64 * 8  # the M low bits and rows beyond the atom are untouched


@pytest.mark.points(2)
def test_swizzle_equals_pycute_on_all_offsets(lesson):
    sw = lesson.load("swizzle.py")
    rng = random.Random(4)
    for b, m, s in swizzle_params():
        mine, ref = sw.Swizzle(b, m, s), pycute_swizzle(b, m, s)
        span = 1 << (b + m + abs(s))  # size(): the block the swizzle permutes
        offsets = list(range(min(2 * span, 2048))) + [rng.randrange(1 << 26) for _ in range(64)]
        for x in offsets:
            got = mine(x)
            assert got == ref(x), f"Swizzle({b},{m},{s})({x}) = {got}, pycute gives {ref(x)}"


@pytest.mark.points(1)
def test_invalid_parameters_raise(lesson):
    sw = lesson.load("swizzle.py")
    for b, m, s in [(3, 3, 2), (3, 3, -2), (1, 0, 0), (-1, 3, 3), (2, -1, 3)]:
        with pytest.raises(ValueError):
            sw.Swizzle(b, m, s)
    for b, m, s in [(3, 0, -3), (0, 0, 0), (0, 4, 3), (4, 0, 4)]:  # |S| == B and B == 0 are allowed
        sw.Swizzle(b, m, s)


# ---------------------------------------------------------------------------------------------------------
# Part 2: the shared-memory layout under the bank model

BANKS, WORD, VEC, PHASE = 32, 4, 16, 8  # 32 banks x 4 B; 16-byte vectors; 8 threads per phase (128 B)


def phase_wavefronts(offsets_by_thread, elem_bytes):
    """Wavefronts of one phase: each thread's list of element offsets -> max distinct words in a bank."""
    words_in_bank = defaultdict(set)
    for offsets in offsets_by_thread:
        for o in offsets:
            for byte in range(o * elem_bytes, (o + 1) * elem_bytes, min(WORD, elem_bytes)):
                word = byte // WORD
                words_in_bank[word % BANKS].add(word)
    return max(len(w) for w in words_in_bank.values())


def offset_table(layout, rows, row_elems):
    """L(r, c) for the whole tile, as Python ints (any integral type is accepted)."""
    try:
        return [[operator.index(layout(r, c)) for c in range(row_elems)] for r in range(rows)]
    except TypeError as e:
        raise AssertionError(f"L(r, c) must return an integer element offset: {e}") from e


def vector(table, r, v, per_vec):
    return table[r][v * per_vec:(v + 1) * per_vec]


def row_read_phases(table, per_vec):
    """cp.async / ld.shared.v4 along K: the tile's 16-byte vectors in row-major order, 8 per phase."""
    vecs = [(r, v) for r in range(len(table)) for v in range(len(table[0]) // per_vec)]
    for i in range(0, len(vecs), PHASE):
        yield [vector(table, r, v, per_vec) for r, v in vecs[i:i + PHASE]]


def column_read_phases(table, per_vec):
    """ldmatrix: a phase reads vector column v of 8 consecutive rows (one 8x8 b16 matrix, rows 16 B each)."""
    for r0 in range(0, len(table), PHASE):
        for v in range(len(table[0]) // per_vec):
            yield [vector(table, r, v, per_vec) for r in range(r0, r0 + PHASE)]


def row_major(rows, row_elems):
    return lambda r, c: r * row_elems + c


# The contract: every element size, every power-of-two row width from one vector to 1 KiB, rows % 8 == 0
# (24 rows, not a power of two, up to 256-byte rows; 8 rows for the widest ones to keep the run short).
CONTRACT = [(rows, row_bytes // e, e) for e in (1, 2, 4, 8) for row_bytes in (16, 32, 64, 128, 256, 512, 1024)
            for rows in ((8, 24) if row_bytes <= 256 else (8,))]
NAMED = [(64, 64, 2), (8, 64, 2), (128, 32, 4)]  # the lesson's 64x64 fp16 tile, its 8x64 atom, a 128x32 fp32 tile


def tiles():
    return NAMED + CONTRACT


@pytest.mark.points(1)
def test_layout_is_a_bijection_onto_the_tile(lesson):
    sw = lesson.load("swizzle.py")
    for rows, row_elems, e in tiles():
        table = offset_table(sw.smem_layout(rows, row_elems, e), rows, row_elems)
        flat = sorted(o for row in table for o in row)
        assert flat == list(range(rows * row_elems)), (
            f"{rows}x{row_elems} tile of {e}-byte elements: the offsets are not a permutation of "
            f"0..{rows * row_elems - 1} (padding or a swizzle that leaves the tile)")


@pytest.mark.points(1)
def test_16_byte_vectors_stay_contiguous_and_aligned(lesson):
    sw = lesson.load("swizzle.py")
    for rows, row_elems, e in tiles():
        per_vec = VEC // e
        table = offset_table(sw.smem_layout(rows, row_elems, e), rows, row_elems)
        for r in range(rows):
            for v in range(row_elems // per_vec):
                offs = vector(table, r, v, per_vec)
                assert offs == list(range(offs[0], offs[0] + per_vec)) and offs[0] % per_vec == 0, (
                    f"{rows}x{row_elems} tile of {e}-byte elements: the 16-byte vector (row {r}, vector {v}) "
                    f"lands at offsets {offs}, not one aligned 16-byte vector")


def check_reads(sw, phases_of, what):
    for rows, row_elems, e in tiles():
        per_vec = VEC // e
        table = offset_table(sw.smem_layout(rows, row_elems, e), rows, row_elems)
        for i, phase in enumerate(phases_of(table, per_vec)):
            w = phase_wavefronts(phase, e)
            assert w == 1, (
                f"{rows}x{row_elems} tile of {e}-byte elements, {what} phase {i}: {w} wavefronts, minimum 1 "
                f"(vector offsets {[p[0] for p in phase]})")


@pytest.mark.points(1)
def test_row_reads_take_one_wavefront_per_phase(lesson):
    check_reads(lesson.load("swizzle.py"), row_read_phases, "row read")


@pytest.mark.points(2)
def test_column_reads_take_one_wavefront_per_phase(lesson):
    sw = lesson.load("swizzle.py")
    # The model first: CUTLASS's own byte-address swizzles reach the minimum, and without a swizzle the
    # column reads of rows of 32 B or more do not.
    for b, row_bytes in [(1, 32), (2, 64), (3, 128)]:
        gmma = pycute.Swizzle(b, 4, 3)
        table = [[gmma(r * row_bytes + c) for c in range(row_bytes)] for r in range(16)]
        assert all(phase_wavefronts(p, 1) == 1 for p in column_read_phases(table, VEC)), "bank model broken"
    for rows, row_elems, e in tiles():
        if row_elems * e >= 32:
            plain = offset_table(row_major(rows, row_elems), rows, row_elems)
            assert max(phase_wavefronts(p, e) for p in column_read_phases(plain, VEC // e)) > 1
    check_reads(sw, column_read_phases, "column read (ldmatrix)")


@pytest.mark.points(1)
def test_ldmatrix_x4_on_the_64x64_fp16_tile_takes_4_wavefronts(lesson):
    """The lesson's worked example: ldmatrix.x4 of the 16x16 block at (row 16, col 16) of a 64x64 fp16 tile:
    four 8x8 matrices (rows 16-23 / 24-31 x cols 16-23 / 24-31), one phase each."""
    sw = lesson.load("swizzle.py")

    def x4(table):
        return sum(phase_wavefronts([vector(table, r, v, 8) for r in range(r0, r0 + 8)], 2)
                   for r0 in (16, 24) for v in (2, 3))

    assert x4(offset_table(row_major(64, 64), 64, 64)) == 32  # unswizzled: 8-way conflict in every phase
    got = x4(offset_table(sw.smem_layout(64, 64, 2), 64, 64))
    assert got == 4, f"ldmatrix.x4 takes {got} wavefronts, the minimum is 4"
