"""cuda-13 tests: MoE grouped GEMM over contiguous per-expert segments, Y[seg_e] = X[seg_e] @ W_e.

Reference: a loop of per-expert float64 matmuls of the float32 inputs. Tolerance, element-wise: a dot
product of K terms accumulated in fp32 has |error| <= gamma_K * (|x| @ |w|), gamma_K ~= K * 2^-24 (Higham,
"Accuracy and Stability of Numerical Algorithms", 2nd ed., 3.1); we allow 2 * K * 2^-24 * (|x| @ |w|).
Y is poisoned with NaN before every launch. Expert sizes include 0 (first, last and several middle
experts), 1, exact multiples of the 16-row tile, one more than a multiple, and one huge expert; grids
are smaller than, equal to and larger than the number of tiles (persistent scheduling).

The schedule itself is audited through block_tiles (gemm_tile counts each block's tiles): every tile
exactly once in total, and no block more than ceil(tiles / grid) of them. Which weights each tile
reads is counted by the emulator's race build (same grade on a CPU and a GPU box).
"""

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

BM = BN = 16
U = 2.0**-24
BLOCK = (16, 16)


def _offsets(counts):
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)


def _num_tiles(counts, n):
    return int(sum(-(-int(c) // BM) for c in counts)) * (-(-n // BN))


def _inputs(rng, counts, n, k):
    t = int(sum(counts))
    x = rng.standard_normal((max(t, 1), k)).astype(np.float32)  # the runtime needs non-empty buffers
    w = rng.standard_normal((len(counts), k, n)).astype(np.float32)
    return x, w, _offsets(counts)


def _run(mod, x, w, offs, n, k, grid):
    e = len(offs) - 1
    y = np.full((x.shape[0], n), np.nan, dtype=np.float32)
    block_tiles = np.zeros(grid, dtype=np.int32)
    mod.grouped_gemm[grid, BLOCK, (e + 1) * 4](x, w, offs, y, block_tiles, e, n, k)
    return y, block_tiles


def _check(y, x, w, offs, what):
    k = x.shape[1]
    for e in range(len(offs) - 1):
        a, b = int(offs[e]), int(offs[e + 1])
        if a == b:
            continue
        x64, w64 = x[a:b].astype(np.float64), w[e].astype(np.float64)
        want = x64 @ w64
        bound = 2 * k * U * (np.abs(x64) @ np.abs(w64)) + 1e-30
        got = y[a:b]
        if np.isnan(got).any():
            i, j = (int(v) for v in np.argwhere(np.isnan(got))[0])
            raise AssertionError(f"{what}: expert {e} (rows {a}..{b - 1}): {int(np.isnan(got).sum())} elements never "
                                 f"written (NaN), e.g. Y[{a + i}][{j}]: a tile was not computed")
        bad = np.abs(got - want) > bound
        if bad.any():
            i, j = (int(v) for v in np.argwhere(bad)[0])
            raise AssertionError(f"{what}: expert {e} (rows {a}..{b - 1}): {int(bad.sum())} elements differ from "
                                 f"X[seg] @ W[{e}], e.g. Y[{a + i}][{j}] = {got[i, j]!r}, want {want[i, j]!r}")


# (name, expert token counts, N, K)
CASES = [
    ("mixed", [0, 0, 1, 17, 0, 200, 5, 16, 33, 0], 37, 29),   # first, last and middle experts empty; 1; 16; 17; huge
    ("one expert", [0, 0, 0, 50, 0], 16, 16),                 # exact column and K tiles, one non-empty expert
    ("tiny", [3, 0, 1], 1, 1),                                # N = 1, K = 1
    ("all ones", [1] * 20, 5, 40),                            # twenty single-token experts, K over 3 tiles
]


def _many_experts(rng):
    """70 experts (above a 64-entry table), about half of them empty, sizes 1..40."""
    counts = rng.integers(1, 41, 70)
    counts[rng.random(70) < 0.5] = 0
    counts[0] = counts[-1] = 0
    counts[7] = 1
    return [int(c) for c in counts]


@pytest.mark.points(2)
def test_grouped_results(lesson):
    """Every expert's rows equal X[seg] @ W_e (float64 reference, fp32 bound) for grids of 1 block, a few
    blocks, one block per tile and more blocks than tiles; with no token at all nothing is computed."""
    mod = cuda.load(lesson.path("grouped_gemm.cu"))
    rng = np.random.default_rng(1301)
    cases = CASES + [("70 experts", _many_experts(rng), 20, 45)]
    for name, counts, n, k in cases:
        x, w, offs = _inputs(rng, counts, n, k)
        tiles = _num_tiles(counts, n)
        for grid in sorted({1, 7, tiles, tiles + 9}):
            y, _ = _run(mod, x, w, offs, n, k, grid)
            _check(y, x, w, offs, f"{name} (counts {counts}, N={n}, K={k}, grid={grid})")
    # every expert empty (T = 0; the buffers hold one dummy row): no tile is computed, Y is not written
    for counts, grid in (([0] * 5, 3), ([0], 1)):
        x, w, offs = _inputs(rng, counts, 19, 21)
        y, block_tiles = _run(mod, x, w, offs, 19, 21, grid)
        assert np.isnan(y).all() and (block_tiles == 0).all(), (
            f"counts {counts}: no expert has a token, yet Y was written or tiles were computed: {block_tiles}")


@pytest.mark.points(1)
def test_each_expert_matches_its_own_gemm(lesson):
    """The loop of matmuls a grouped GEMM replaces: gemm_dense on each expert's rows alone. The grouped result
    must be bit-identical (same tile code, same summation order: grouping only decides who computes a tile)."""
    mod = cuda.load(lesson.path("grouped_gemm.cu"))
    rng = np.random.default_rng(1303)
    counts, n, k = [2, 0, 31, 1, 0, 47, 16, 0], 35, 33
    x, w, offs = _inputs(rng, counts, n, k)
    y, _ = _run(mod, x, w, offs, n, k, 6)
    for e, c in enumerate(counts):
        if c == 0:
            continue
        a, b = int(offs[e]), int(offs[e + 1])
        ye = np.full((c, n), np.nan, dtype=np.float32)
        tiles = _num_tiles([c], n)
        mod.gemm_dense[tiles, BLOCK](np.ascontiguousarray(x[a:b]), w[e], ye, np.zeros(tiles, np.int32), c, n, k)
        assert np.array_equal(y[a:b], ye), (
            f"expert {e} (rows {a}..{b - 1}): the grouped result differs from gemm_dense on that expert alone in "
            f"{int((y[a:b] != ye).sum())} elements (NaN = never written)")


# Schedules a persistent grid must balance: many small experts (fewer tiles each than the grid), one
# big expert among small ones, and grids that are not divisors of the tile count.
BALANCE_CASES = [
    ([5, 0, 9, 3, 0, 12, 1, 7, 0, 16, 2, 8], 40, 5, (4, 7, 11)),
    ([150, 1, 1, 1, 1, 1, 1, 1, 1, 0], 33, 5, (3, 5, 8)),
    ([0, 20, 40, 0, 33, 1, 64, 17], 48, 3, (6, 9, 13)),
]


@pytest.mark.points(1)
def test_persistent_schedule_is_balanced(lesson):
    """Every tile is computed exactly once (sum of block_tiles = number of tiles) and no block computes more
    than ceil(tiles / grid) of them: the flat tile sequence of all experts is dealt out evenly. Restarting the
    deal at block 0 for every expert, or dealing a padded E x max_tiles space, overloads some blocks."""
    mod = cuda.load(lesson.path("grouped_gemm.cu"))
    rng = np.random.default_rng(1304)
    for counts, n, k, grids in BALANCE_CASES:
        x, w, offs = _inputs(rng, counts, n, k)
        tiles = _num_tiles(counts, n)
        for grid in grids:
            y, block_tiles = _run(mod, x, w, offs, n, k, grid)
            what = f"counts {counts}, N={n}, grid={grid}: {tiles} tiles"
            _check(y, x, w, offs, what)
            assert block_tiles.sum() == tiles, (
                f"{what}, but the blocks computed {int(block_tiles.sum())} tiles in all (each tile exactly once)")
            limit = -(-tiles // grid)
            assert block_tiles.max() <= limit, (
                f"{what}: block {int(block_tiles.argmax())} computed {int(block_tiles.max())} tiles, more than "
                f"ceil({tiles}/{grid}) = {limit}; tiles per block: {block_tiles.tolist()}")


@pytest.mark.points(1)
def test_blocks_touch_only_their_experts_weights(lesson):
    """Counted in the emulator's race build: a tile of expert e reads W_e only, so every element of W_e is
    read once per row tile of e (ceil(n_e / 16) times) and an empty expert's weights are never read; every
    X element is read once per column tile and every Y element stored once. A tile that straddles two
    experts, or a block that runs every expert's weights over its rows, reads more."""
    mod = cuda.load(lesson.path("grouped_gemm.cu"), backend="cpu", build="race")
    rng = np.random.default_rng(1305)
    counts, n, k, grid = [0, 7, 30, 0, 1, 18, 0, 45, 0], 21, 19, 5
    x, w, offs = _inputs(rng, counts, n, k)
    kernel = mod.grouped_gemm
    e = len(counts)
    y = np.full((x.shape[0], n), np.nan, dtype=np.float32)
    block_tiles = np.zeros(grid, dtype=np.int32)
    kernel[grid, BLOCK, (e + 1) * 4](x, w, offs, y, block_tiles, e, n, k)
    _check(y, x, w, offs, f"counts {counts}")
    m_tiles = np.array([-(-c // BM) for c in counts])
    wc = cuda.gmem_counters(kernel.stats, "W")
    want_loads = int((m_tiles * k * n).sum())
    assert wc["loads"] <= want_loads and wc["max_reads_per_byte"] <= m_tiles.max(), (
        f"W: {wc['loads']} element loads (some byte read {wc['max_reads_per_byte']} times); one pass over W_e per "
        f"row tile of expert e is {want_loads} loads (at most {m_tiles.max()} reads of a byte): tiles read weights "
        f"of experts their rows do not belong to")
    used = int((np.array(counts) > 0).sum()) * k * n * 4
    assert wc["bytes_read"] == used, (
        f"W: {wc['bytes_read']} distinct bytes read; the {int((np.array(counts) > 0).sum())} experts with tokens "
        f"hold {used} bytes: the weights of an expert without tokens must not be read")
    xc = cuda.gmem_counters(kernel.stats, "X")
    n_tiles = -(-n // BN)
    assert xc["max_reads_per_byte"] <= n_tiles and xc["loads"] <= sum(counts) * k * n_tiles, (
        f"X: {xc['loads']} loads, some byte read {xc['max_reads_per_byte']} times; one read per column tile "
        f"is {sum(counts) * k * n_tiles} loads")
    yc = cuda.gmem_counters(kernel.stats, "Y")
    assert yc["stores"] == sum(counts) * n, (
        f"Y: {yc['stores']} stores for {sum(counts) * n} elements: some tile was computed more than once")


@pytest.mark.points(1)
def test_checked_mode(lesson):
    """fwd / rev / random block and thread order + race build + ASan build, persistent grid smaller than the
    tile count: two blocks writing the same rows (a tile past its expert's end) or a read past X show up here."""
    mod = cuda.load(lesson.path("grouped_gemm.cu"))
    rng = np.random.default_rng(1306)
    counts, n, k, grid = [0, 9, 1, 0, 20, 0], 19, 18, 3
    x, w, offs = _inputs(rng, counts, n, k)
    e = len(counts)
    y = np.full((x.shape[0], n), np.nan, dtype=np.float32)
    res = cuda.check(mod.grouped_gemm, (grid, BLOCK, (e + 1) * 4),
                     (x, w, offs, y, np.zeros(grid, np.int32), e, n, k))
    _check(res.outputs[3], x, w, offs, f"checked mode, counts {counts}")
