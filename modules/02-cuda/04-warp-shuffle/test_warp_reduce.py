"""cuda-04 tests: warp-shuffle sum (one atomicAdd per block) and two-pass max.

Blocks of 1, 3, 4, 8 and 32 warps (the contract: blockDim.x a multiple of 32, at most 1024).

Sum reference: float64 sum of the float32 inputs. out[0] starts at a random offset c (not 0), so
the kernel must ADD to it: expected c + sum(x). Tolerance: every term passes through at most
D = ceil(n / (G*T)) + 2 + 5 + 5 + G fp32 additions (grid-stride loop into four accumulators and
their combination, two 5-step shuffle trees, and the chain of G atomicAdds in whatever order they land), so |error| <= ~D * 2^-24 * (|c| + sum|x|);
we allow twice that.
Max reference: np.max; a max involves no rounding, so the comparison is exact. Partial maxima are
poisoned with NaN before the first launch.
"""

import hashlib
import math
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

U = 2.0**-24
SIZES = (1, 31, 33, 1000, 4099, 20000)

# Test instrumentation, prepended to a copy of the learner's file: every atomicAdd also adds 1 to
# the element right after its target, so out[1] counts the atomics of a launch. Plain CUDA, so it
# counts the same on the GPU and on the emulator.
_COUNT_ATOMICS = """
template <typename T>
__device__ __forceinline__ T hpccourse_counted_atomic_add(T* address, T val) {
    atomicAdd(address + 1, T(1));
    return atomicAdd(address, val);
}
#define atomicAdd(address, val) hpccourse_counted_atomic_add(address, val)
"""


def _sum(mod, x, block, grid, c):
    out = np.array([c], dtype=np.float32)
    mod.reduce_sum_atomic[grid, block, 0](x, out, x.size)
    return out[0]


def _check_sum(got, x, c, block, grid, what):
    depth = math.ceil(x.size / (grid * block)) + 2 + 10 + grid
    want = float(c) + float(x.astype(np.float64).sum())
    tol = 2 * depth * U * (abs(float(c)) + float(np.abs(x.astype(np.float64)).sum()))
    assert abs(float(got) - want) <= tol, f"{what}: got {got!r}, want {want!r} (tolerance {tol:.3g})"


def _max(mod, x, block, grid):
    partial = np.full(grid, np.nan, dtype=np.float32)
    out = np.full(1, np.nan, dtype=np.float32)
    mod.reduce_max[grid, block, 0](x, partial, x.size)
    mod.reduce_max[1, block, 0](partial, out, grid)
    return out[0]


def _counted_copy(source: Path, tmp_path: Path) -> Path:
    """The learner's file with the atomic counter in front, at a path named by its content, so the
    emulator's build cache (keyed by path and source) reuses the build across runs."""
    text = _COUNT_ATOMICS + source.read_text()
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / "hpccourse-cuda04"
    folder.mkdir(exist_ok=True)
    path = folder / f"warp_reduce_counted_{digest}.cu"
    if not path.exists():  # same content under the same name: concurrent writers agree
        staged = tmp_path / path.name
        staged.write_text(text)
        os.replace(staged, path)
    return path


@pytest.mark.points(2)
def test_sum_sizes_and_block_shapes(lesson):
    """Blocks of 3, 4 and 8 warps (not only powers of two), capped grids, n not a multiple of anything."""
    mod = cuda.load(lesson.path("warp_reduce.cu"))
    rng = np.random.default_rng(401)
    for block in (96, 128, 256):
        for n in SIZES:
            x = rng.standard_normal(n).astype(np.float32)
            grid = min(8, -(-n // block))
            c = np.float32(rng.uniform(-4, 4))
            got = _sum(mod, x, block, grid, c)
            _check_sum(got, x, c, block, grid, f"n={n}, T={block}, G={grid}")


@pytest.mark.points(1)
def test_one_atomic_per_block(lesson, tmp_path: Path):
    """The block combines its warps on chip and then adds to out[0] once: at most G atomics, not one
    per warp (G * T / 32) or per element. Also covers the smallest (1 warp) and largest (32 warps) blocks."""
    mod = cuda.load(_counted_copy(lesson.path("warp_reduce.cu"), tmp_path))
    rng = np.random.default_rng(404)
    for block, grid, n in ((32, 3, 1000), (1024, 2, 5000), (256, 5, 777)):
        x = rng.standard_normal(n).astype(np.float32)
        c = np.float32(rng.uniform(-4, 4))
        out = np.array([c, 0.0], dtype=np.float32)
        mod.reduce_sum_atomic[grid, block, 0](x, out, n)
        _check_sum(out[0], x, c, block, grid, f"n={n}, T={block}, G={grid}")
        assert 1 <= out[1] <= grid, (
            f"n={n}, T={block}, G={grid}: {int(out[1])} atomicAdd calls; the block must combine its "
            f"{block // 32} warps first and add its total once (at most {grid} atomics)")


@pytest.mark.points(1)
def test_max_including_all_negative(lesson):
    """All-negative data (the identity must be -inf, not 0), large values, and blocks that own nothing."""
    mod = cuda.load(lesson.path("warp_reduce.cu"))
    rng = np.random.default_rng(402)
    cases = []
    for n in SIZES:
        cases.append(rng.standard_normal(n).astype(np.float32))
        cases.append((-np.abs(rng.standard_normal(n)) - 1.0).astype(np.float32))
    cases.append((rng.standard_normal(777) * 1e30).astype(np.float32))
    for x in cases:
        for block, grid in ((128, 8), (64, 40), (32, 3)):  # 40 x 64 threads > n for small n: idle blocks
            got = _max(mod, x, block, grid)
            assert got == x.max(), f"n={x.size}, T={block}, G={grid}: got {got!r}, want {x.max()!r}"


@pytest.mark.points(1)
def test_checked_mode(lesson):
    """fwd / rev / random thread order + race build + ASan build, on a partial last warp."""
    mod = cuda.load(lesson.path("warp_reduce.cu"))
    rng = np.random.default_rng(403)
    n, block, grid = 250, 96, 2
    x = rng.standard_normal(n).astype(np.float32)
    c = np.float32(0.75)
    res = cuda.check(mod.reduce_sum_atomic, (grid, block, 0), (x, np.array([c], dtype=np.float32), n))
    _check_sum(res.outputs[1][0], x, c, block, grid, "checked sum")

    partial = np.full(grid, np.nan, dtype=np.float32)
    res = cuda.check(mod.reduce_max, (grid, block, 0), (x, partial, n))
    want = [x[np.r_[b * block:min((b + 1) * block, n), (b + grid) * block:min((b + grid + 1) * block, n)]].max()
            for b in range(grid)]
    np.testing.assert_array_equal(res.outputs[1], np.array(want, dtype=np.float32))
