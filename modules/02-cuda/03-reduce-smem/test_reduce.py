"""cuda-03 tests: two-pass shared-memory sum reduction.

Reference: the float64 sum of the same float32 inputs. Tolerance: in a summation tree of depth D
(every input goes through at most D fp32 additions) the rounding error is bounded by
gamma_D * sum|x_i| with gamma_D ~= D * u, u = 2^-24 (Higham, "Accuracy and Stability of Numerical
Algorithms", 2nd ed., section 4.2). Here D = (grid-stride loop length) + 2 (the four
accumulators combined) + log2(T) in pass 1, plus ceil(G / T) + 2 + log2(T) in pass 2; we allow
2 * D * u * sum|x|. That is tight enough that dropping or
double-counting any single input (|x| ~ 1) fails.
Partial sums and the result are poisoned with NaN before the launches.
Block sizes: the contract allows every power of two from 32 to 1024, and every one of them is run
(a tree that unrolls its last warp assuming T >= 64 reads past sdata at T = 32).
"""

import math

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

U = 2.0**-24


def _two_pass(mod, x, block, grid):
    n = x.size
    partial = np.full(grid, np.nan, dtype=np.float32)
    out = np.full(1, np.nan, dtype=np.float32)
    mod.reduce_sum[grid, block, block * 4](x, partial, n)
    mod.reduce_sum[1, block, block * 4](partial, out, grid)
    return partial, out[0]


def _tolerance(x, block, grid):
    n = x.size
    depth = math.ceil(n / (grid * block)) + 2 + 2 * int(math.log2(block)) + math.ceil(grid / block) + 2
    return 2 * depth * U * float(np.abs(x.astype(np.float64)).sum()) + 1e-30


def _check_sum(got, x, block, grid, what):
    want = float(x.astype(np.float64).sum())
    tol = _tolerance(x, block, grid)
    assert abs(float(got) - want) <= tol, f"{what}: got {got!r}, want {want!r} (tolerance {tol:.3g})"


@pytest.mark.points(2)
def test_two_pass_sum_sizes(lesson):
    """n not a multiple of anything; grid = ceil(n / T) capped at 16 blocks (grid-stride beyond)."""
    mod = cuda.load(lesson.path("reduce.cu"))
    rng = np.random.default_rng(301)
    for block in (32, 64, 256):
        for n in (1, 31, 33, 1000, 4099, 20000):
            x = rng.standard_normal(n).astype(np.float32)
            grid = min(16, -(-n // block))
            partial, total = _two_pass(mod, x, block, grid)
            for b in range(grid):  # each block's partial sum, from the elements it owns
                mine = x[np.concatenate([np.arange(s, min(s + block, n)) for s in range(b * block, n, grid * block)])]
                _check_sum(partial[b], mine, block, grid, f"n={n}, T={block}: partial[{b}]")
            _check_sum(total, x, block, grid, f"n={n}, T={block}, G={grid}: total")


@pytest.mark.points(1)
def test_every_block_size(lesson):
    """Every block size the contract allows, 32 (one warp: the tree runs inside a single warp) to 1024.

    Run in the emulator's race build, whose shared-memory bounds check sees a read past the T floats
    of `sdata` (a fast build might read harmless bytes there; a GPU reads another block's data)."""
    mod = cuda.load(lesson.path("reduce.cu"))
    rng = np.random.default_rng(305)
    for block in (32, 64, 128, 256, 512, 1024):
        n = 2 * block + block // 2 + 7  # the second block owns a partial slice
        x = rng.standard_normal(n).astype(np.float32)
        grid = 2
        partial = np.full(grid, np.nan, dtype=np.float32)
        partial = cuda.check(mod.reduce_sum, (grid, block, block * 4), (x, partial, n),
                             orders=(), race=True, asan=False).outputs[1]
        out = np.full(1, np.nan, dtype=np.float32)
        total = cuda.check(mod.reduce_sum, (1, block, block * 4), (partial, out, grid),
                           orders=(), race=True, asan=False).outputs[1][0]
        for b in range(grid):
            mine = x[np.concatenate([np.arange(s, min(s + block, n)) for s in range(b * block, n, grid * block)])]
            _check_sum(partial[b], mine, block, grid, f"T={block}: partial[{b}]")
        _check_sum(total, x, block, grid, f"n={n}, T={block}, G={grid}: total")


@pytest.mark.points(1)
def test_large_values_and_cancellation(lesson):
    """Values spanning many magnitudes with cancelling signs: the tree must still add every term once."""
    mod = cuda.load(lesson.path("reduce.cu"))
    rng = np.random.default_rng(302)
    n, block, grid = 5000, 128, 8
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32)
    _, total = _two_pass(mod, x, block, grid)
    _check_sum(total, x, block, grid, "mixed magnitudes")


@pytest.mark.points(1)
def test_checked_mode(lesson):
    """fwd / rev / random thread order + race build (a missing __syncthreads shows here) + ASan build."""
    mod = cuda.load(lesson.path("reduce.cu"))
    rng = np.random.default_rng(303)
    n, block, grid = 300, 32, 3  # one warp per block: the smallest block of the contract
    x = rng.standard_normal(n).astype(np.float32)
    partial = np.full(grid, np.nan, dtype=np.float32)
    res = cuda.check(mod.reduce_sum, (grid, block, block * 4), (x, partial, n))
    partial = res.outputs[1]
    out = np.full(1, np.nan, dtype=np.float32)
    res = cuda.check(mod.reduce_sum, (1, block, block * 4), (partial, out, grid))
    _check_sum(res.outputs[1][0], x, block, grid, "checked mode total")


@pytest.mark.points(1)
def test_sequential_addressing_is_conflict_free(lesson):
    """Sequential addressing: lane k touches sdata[k] and sdata[k + s] -> every warp access is one wavefront.

    Interleaved addressing with index = 2*s*tid makes lane k touch word 2*s*k: 2-, 4-, 8-, 16-way conflicts.
    """
    # Bank statistics come from the CPU emulator's checked build, also on a GPU machine.
    mod = cuda.load(lesson.path("reduce.cu"), backend="cpu", banks=True)
    rng = np.random.default_rng(304)
    n, block, grid = 2048, 256, 2
    x = rng.standard_normal(n).astype(np.float32)
    partial = np.full(grid, np.nan, dtype=np.float32)
    kernel = mod.reduce_sum
    kernel[grid, block, block * 4](x, partial, n)
    for b in range(grid):
        mine = x[np.concatenate([np.arange(s, s + block) for s in range(b * block, n, grid * block)])]
        _check_sum(partial[b], mine, block, grid, f"partial[{b}]")
    stats = kernel.stats
    assert stats["bank_conflicts"] == 0, (
        f"{stats['bank_conflicts']} extra shared-memory wavefronts from bank conflicts "
        f"(by source line: {stats['bank_conflicts_by_line']})")
