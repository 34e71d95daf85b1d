"""cuda-05 tests: Blelloch block scan + scan-then-propagate, on int32 (exact: tolerance 0).

Reference: np.cumsum in int64 (inputs are chosen so that no prefix overflows int32). Outputs and block sums
are poisoned with a sentinel (0x7EADBEEF) before each launch.
"""

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

POISON = 0x7EADBEEF


def _scan(mod, x, block, inclusive):
    """Scan of any n <= (2*block)^2: block scans, one-block scan of the chunk totals, propagate."""
    n, m = x.size, 2 * block
    grid = max(1, -(-n // m))
    assert grid <= m, "two levels cover n <= (2*block)^2"
    out = np.full(n, POISON, dtype=np.int32)
    sums = np.full(grid, POISON, dtype=np.int32)
    offs = np.full(grid, POISON, dtype=np.int32)
    total = np.full(1, POISON, dtype=np.int32)
    mod.block_scan[grid, block, m * 4](x, out, sums, n, int(inclusive))
    mod.block_scan[1, block, m * 4](sums, offs, total, grid, 0)
    mod.add_block_offsets[grid, block, 0](out, offs, n)
    return out, sums, total[0]


def _want(x, inclusive):
    inc = np.cumsum(x.astype(np.int64))
    return inc if inclusive else inc - x


@pytest.mark.points(2)
@pytest.mark.parametrize("inclusive", [True, False], ids=["inclusive", "exclusive"])
def test_scan_sizes(lesson, inclusive):
    mod = cuda.load(lesson.path("scan.cu"))
    rng = np.random.default_rng(501 + inclusive)
    for n, block in [(1, 32), (31, 32), (33, 16), (1000, 64), (4099, 128), (100_000, 256)]:
        x = rng.integers(-1000, 1001, n).astype(np.int32)
        out, sums, total = _scan(mod, x, block, inclusive)
        np.testing.assert_array_equal(out, _want(x, inclusive), err_msg=f"n={n}, T={block}")
        m = 2 * block
        chunk_totals = [int(x[i:i + m].astype(np.int64).sum()) for i in range(0, n, m)]
        np.testing.assert_array_equal(sums, chunk_totals, err_msg=f"block_sums, n={n}, T={block}")
        assert total == x.astype(np.int64).sum(), f"grand total, n={n}, T={block}"


@pytest.mark.points(1)
def test_skewed_values(lesson):
    """A single huge element and runs of zeros and negatives: the scan is a function of position, not value."""
    mod = cuda.load(lesson.path("scan.cu"))
    rng = np.random.default_rng(503)
    n, block = 3000, 64
    x = np.zeros(n, dtype=np.int32)
    x[rng.integers(0, n, 40)] = rng.integers(-100000, 100000, 40)
    x[1234] = 1_000_000
    for inclusive in (True, False):
        out, _, _ = _scan(mod, x, block, inclusive)
        np.testing.assert_array_equal(out, _want(x, inclusive), err_msg=f"inclusive={inclusive}")


@pytest.mark.points(1)
def test_values_above_2_pow_24(lesson):
    """Odd values of magnitude 2^24..2^25 with prefixes up to ~3.5e8: exact only in integer arithmetic
    (a scan routed through float32, which has a 24-bit significand, rounds them)."""
    mod = cuda.load(lesson.path("scan.cu"))
    rng = np.random.default_rng(505)
    n, block = 600, 64  # 5 chunks of 128, the last one partial
    x = (rng.integers(2**23, 2**24, n) * 2 + 1) * rng.choice([-1, 1], n)
    assert np.abs(np.cumsum(x)).max() < 2**31 - 1, "the test input itself must fit int32"
    x = x.astype(np.int32)
    for inclusive in (True, False):
        out, sums, total = _scan(mod, x, block, inclusive)
        np.testing.assert_array_equal(out, _want(x, inclusive), err_msg=f"inclusive={inclusive}")
        chunk_totals = [int(x[i:i + 2 * block].astype(np.int64).sum()) for i in range(0, n, 2 * block)]
        np.testing.assert_array_equal(sums, chunk_totals, err_msg="block_sums")
        assert total == x.astype(np.int64).sum(), "grand total"


@pytest.mark.points(1)
def test_checked_mode(lesson):
    """fwd / rev / random thread order + race build (a missing barrier between tree levels shows here) + ASan."""
    mod = cuda.load(lesson.path("scan.cu"))
    rng = np.random.default_rng(504)
    n, block = 150, 32  # 3 chunks of 64, the last one partial
    x = rng.integers(-50, 51, n).astype(np.int32)
    grid = 3
    out = np.full(n, POISON, dtype=np.int32)
    sums = np.full(grid, POISON, dtype=np.int32)
    res = cuda.check(mod.block_scan, (grid, block, 2 * block * 4), (x, out, sums, n, 1))
    out, sums = res.outputs[1], res.outputs[2]
    for c in range(grid):  # each chunk scanned on its own
        chunk = x[c * 64:(c + 1) * 64]
        np.testing.assert_array_equal(out[c * 64:(c + 1) * 64], np.cumsum(chunk), err_msg=f"chunk {c}")
        assert sums[c] == chunk.sum()
    offs = np.full(grid, POISON, dtype=np.int32)
    total = np.full(1, POISON, dtype=np.int32)
    res = cuda.check(mod.block_scan, (1, block, 2 * block * 4), (sums, offs, total, grid, 0))
    np.testing.assert_array_equal(res.outputs[1], np.cumsum(sums) - sums)
