"""cuda-02 tests: the tiled transpose is exact on odd shapes, race-free, and free of bank conflicts.

A transpose only moves bits, so the expected output is `x.T` exactly (tolerance 0). The output is
poisoned with NaN first: an element no thread writes stays NaN.
"""

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

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


def _per_request(c, kind):
    req, sec = c[f"{kind}_requests"], c[f"{kind}_sectors"]
    return req, sec, (sec / req if req else 0.0)


@pytest.mark.points(2)
def test_global_memory_coalesced(lesson):
    """Every warp's global loads of `in` and stores to `out` touch as few 32-byte sectors as possible.

    A warp of the (32, 8) block moves 32 consecutive floats of one row: 128 bytes, 4 sectors when the
    row segment starts on a sector boundary. A kernel that stages the tile but writes `out` (or reads
    `in`) column-wise makes each of the 32 lanes hit a different row: 32 sectors per request.
    With 45 columns a row is 180 bytes, so most row segments start mid-sector and span 5 sectors;
    that shape allows 5, the multiple-of-32 shape exactly 4.
    """
    # Sector counts come from the CPU emulator's race build, also on a GPU machine.
    mod = cuda.load(lesson.path("transpose.cu"), backend="cpu", build="race")
    rng = np.random.default_rng(204)
    for rows, cols, limit in [(64, 96, 4.0), (67, 45, 5.0)]:
        x, out = _inputs(rng, rows, cols)
        grid, block, smem = _launch(rows, cols)
        kernel = mod.transpose_tiled
        kernel[grid, block, smem](x, out, rows, cols)
        np.testing.assert_array_equal(out, x.T, err_msg=f"shape=({rows}, {cols})")
        stats = kernel.stats
        for name, kind in [("in", "load"), ("out", "store")]:
            req, sec, ratio = _per_request(cuda.gmem_counters(stats, name), kind)
            assert req > 0, f"shape=({rows}, {cols}): no global {kind}s of `{name}`"
            assert ratio <= limit, (
                f"shape=({rows}, {cols}): global {kind}s of `{name}` touch {ratio:.1f} sectors of 32 bytes per warp "
                f"request ({sec} sectors in {req} requests), at most {limit:g} when coalesced: consecutive lanes "
                f"(threadIdx.x) must access consecutive elements of one row of `{name}`")
