"""cuda-02 tests: the tiled transpose is exact on odd shapes, race-free, and free of bank conflicts.

A transpose only moves bits, so the expected output is `x.T` exactly (tolerance 0). The output is
poisoned with NaN first: an element no thread writes stays NaN.
"""

import numpy as np
import pytest

from pytest_hpccourse import cuda

TILE, ROWS_PER_PASS = 32, 8
SHAPES = [(1, 1), (1, 37), (33, 31), (65, 130), (100, 47), (32, 64)]


def _launch(rows, cols):
    grid = ((cols + TILE - 1) // TILE, (rows + TILE - 1) // TILE)
    return grid, (TILE, ROWS_PER_PASS), 0


def _inputs(rng, rows, cols):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = np.full((cols, rows), np.nan, dtype=np.float32)
    return x, out


@pytest.mark.points(2)
def test_tiled_transpose_odd_shapes(lesson):
    mod = cuda.load(lesson.path("transpose.cu"))
    rng = np.random.default_rng(201)
    for rows, cols in SHAPES:
        x, out = _inputs(rng, rows, cols)
        grid, block, smem = _launch(rows, cols)
        mod.transpose_tiled[grid, block, smem](x, out, rows, cols)
        np.testing.assert_array_equal(out, x.T, err_msg=f"shape=({rows}, {cols})")


@pytest.mark.points(1)
def test_checked_mode(lesson):
    """Forward / reverse / random thread order, race build (a missing barrier shows here), ASan build."""
    mod = cuda.load(lesson.path("transpose.cu"))
    rng = np.random.default_rng(202)
    for rows, cols in [(37, 45), (3, 70)]:
        x, out = _inputs(rng, rows, cols)
        res = cuda.check(mod.transpose_tiled, _launch(rows, cols), (x, out, rows, cols))
        np.testing.assert_array_equal(res.outputs[1], x.T, err_msg=f"shape=({rows}, {cols})")


@pytest.mark.points(1)
def test_shared_memory_conflict_free(lesson):
    """Every shared-memory warp access of the tiled kernel is served in one wavefront.

    Without the padding column, the read tile[threadIdx.x][threadIdx.y + j] of a warp hits one
    bank 32 times (a 32-way conflict).
    """
    # Bank statistics come from the CPU emulator's checked build, also on a GPU machine.
    mod = cuda.load(lesson.path("transpose.cu"), backend="cpu", banks=True)
    rng = np.random.default_rng(203)
    rows, cols = 64, 96
    x, out = _inputs(rng, rows, cols)
    grid, block, smem = _launch(rows, cols)
    kernel = mod.transpose_tiled
    kernel[grid, block, smem](x, out, rows, cols)
    np.testing.assert_array_equal(out, x.T)
    stats = kernel.stats
    assert stats["smem_accesses"] > 0, "the kernel never touched shared memory"
    assert stats["bank_conflicts"] == 0, (
        f"{stats['bank_conflicts']} extra shared-memory wavefronts from bank conflicts "
        f"(by source line: {stats['bank_conflicts_by_line']})")
