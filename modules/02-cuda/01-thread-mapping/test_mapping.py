"""cuda-01 tests: every element written exactly once, for any size and any grid.

Reference: one IEEE-754 fp32 addition is correctly rounded on the GPU, on the CPU emulator and in
numpy alike, so the expected output is `np.float32(a) + np.float32(b)` bit for bit (tolerance 0).
Outputs are poisoned with NaN before each launch: an element the kernel forgets stays NaN.
"""

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

SIZES = [1, 31, 33, 1000, 4099]  # 1 element, just under / over one warp, non-multiples of any block


def _blocks(n, per_block):
    return max(1, (n + per_block - 1) // per_block)


def _vec_add(mod, rng, n, grid, block):
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    c = np.full(n, np.nan, dtype=np.float32)
    mod.vec_add[grid, block, 0](a, b, c, n)
    return a + b, c


def _bias_add(mod, rng, rows, cols, block):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    bias = rng.standard_normal(cols).astype(np.float32)
    y = np.full((rows, cols), np.nan, dtype=np.float32)
    grid = (_blocks(cols, block[0]), _blocks(rows, block[1]))
    mod.bias_add_2d[grid, block, 0](x, bias, y, rows, cols)
    return x + bias[None, :], y


@pytest.mark.points(2)
def test_vec_add_one_thread_per_element(lesson):
    """Grid just large enough: ceil(n / 128) blocks of 128 threads; the last block sticks out."""
    mod = cuda.load(lesson.path("mapping.cu"))
    rng = np.random.default_rng(101)
    for n in SIZES:
        want, got = _vec_add(mod, rng, n, _blocks(n, 128), 128)
        np.testing.assert_array_equal(got, want, err_msg=f"n={n}, grid={_blocks(n, 128)}, block=128")


@pytest.mark.points(2)
def test_vec_add_grid_stride(lesson):
    """Grids far smaller (and larger) than n / blockDim: only a grid-stride loop covers every element."""
    mod = cuda.load(lesson.path("mapping.cu"))
    rng = np.random.default_rng(102)
    for n, grid, block in [(4099, 3, 64), (1000, 1, 32), (33, 2, 32), (31, 40, 32)]:
        want, got = _vec_add(mod, rng, n, grid, block)
        np.testing.assert_array_equal(got, want, err_msg=f"n={n}, grid={grid}, block={block}")


@pytest.mark.points(2)
def test_bias_add_2d_odd_shapes(lesson):
    mod = cuda.load(lesson.path("mapping.cu"))
    rng = np.random.default_rng(103)
    for rows, cols in [(1, 1), (3, 33), (33, 31), (67, 130), (5, 1000)]:
        for block in [(32, 8), (16, 16)]:
            want, got = _bias_add(mod, rng, rows, cols, block)
            np.testing.assert_array_equal(got, want, err_msg=f"shape=({rows}, {cols}), block={block}")


@pytest.mark.points(2)
def test_checked_mode(lesson):
    """Thread orders forward / reverse / random, race and out-of-bounds builds, on small inputs."""
    mod = cuda.load(lesson.path("mapping.cu"))
    rng = np.random.default_rng(104)

    n = 77
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    c = np.full(n, np.nan, dtype=np.float32)
    out = cuda.check(mod.vec_add, (2, 32, 0), (a, b, c, n))
    np.testing.assert_array_equal(out.outputs[2], a + b)

    rows, cols = 9, 37
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    bias = rng.standard_normal(cols).astype(np.float32)
    y = np.full((rows, cols), np.nan, dtype=np.float32)
    out = cuda.check(mod.bias_add_2d, ((2, 3), (32, 4), 0), (x, bias, y, rows, cols))
    np.testing.assert_array_equal(out.outputs[2], x + bias[None, :])
