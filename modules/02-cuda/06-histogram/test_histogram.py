"""cuda-06 tests: privatized histogram, exact counts (integers: tolerance 0).

The global bins start at random values (not 0), so the kernel must ADD its counts; the reference is
start + np.bincount(data). A kernel that writes nothing leaves the random start values and fails.
Bin counts go above 1024 (a private copy hard-coded to 1024 or 256 bins overflows) and are not
multiples of the block size. The technique itself is checked with the emulator's traffic counters:
at most one global atomicAdd per (block, bin), and every input element read from global memory once.
"""

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda


def _run(mod, data, nbins, block, grid):
    rng = np.random.default_rng(data.size * 7 + nbins)
    start = rng.integers(0, 1000, nbins).astype(np.uint32)
    bins = start.copy()
    mod.histogram[grid, block, nbins * 4](data, data.size, bins, nbins)
    return bins, start + np.bincount(data, minlength=nbins).astype(np.uint32)


@pytest.mark.points(2)
def test_uniform_sizes_and_bin_counts(lesson):
    """nbins 1, 100, 257, 1000, 1500, 4099 (none a multiple of the block; two above 1024); n from 1 to
    20000; blocks of 32 to 1024 threads; grids capped at 8 blocks."""
    mod = cuda.load(lesson.path("histogram.cu"))
    rng = np.random.default_rng(601)
    for nbins in (1, 100, 257, 1000, 1500, 4099):
        for n in (1, 33, 4099, 20000):
            data = rng.integers(0, nbins, n).astype(np.int32)
            for block in (64, 256):
                grid = min(8, -(-n // block))
                got, want = _run(mod, data, nbins, block, grid)
                np.testing.assert_array_equal(got, want, err_msg=f"nbins={nbins}, n={n}, T={block}, G={grid}")
    for nbins, block in ((1500, 1024), (2053, 32)):  # the largest and the smallest block
        data = rng.integers(0, nbins, 7001).astype(np.int32)
        got, want = _run(mod, data, nbins, block, 3)
        np.testing.assert_array_equal(got, want, err_msg=f"nbins={nbins}, n=7001, T={block}, G=3")


@pytest.mark.points(1)
def test_skewed_data(lesson):
    """90% of the values in one bin (heavy contention on one shared-memory word), the rest Zipf-like."""
    mod = cuda.load(lesson.path("histogram.cu"))
    rng = np.random.default_rng(602)
    nbins, n = 256, 30000
    data = np.where(rng.random(n) < 0.9, 17, np.minimum(rng.zipf(1.5, n), nbins - 1)).astype(np.int32)
    got, want = _run(mod, data, nbins, 128, 8)
    np.testing.assert_array_equal(got, want)
    data = np.full(5000, nbins - 1, dtype=np.int32)  # every element in the last bin
    got, want = _run(mod, data, nbins, 128, 4)
    np.testing.assert_array_equal(got, want)


@pytest.mark.points(2)
def test_privatized_global_atomics(lesson):
    """Privatization, counted: the emulator's race build counts every global atomic of the launch.
    One global atomicAdd per input element (no private copy) makes 6000 here; the merge of a private
    copy makes at most blocks x nbins = 4 x 1030. Each input element is also read exactly once.
    The counters exist only in the emulator, so this test runs there on every machine (same grade
    on a CPU and a GPU box)."""
    mod = cuda.load(lesson.path("histogram.cu"), backend="cpu", build="race")
    rng = np.random.default_rng(604)
    nbins, n, block, grid = 1030, 6000, 128, 4
    data = rng.integers(0, nbins, n).astype(np.int32)
    start = rng.integers(0, 1000, nbins).astype(np.uint32)
    bins = start.copy()
    kernel = mod.histogram
    kernel[grid, block, nbins * 4](data, n, bins, nbins)
    np.testing.assert_array_equal(bins, start + np.bincount(data, minlength=nbins).astype(np.uint32))
    stats = kernel.stats
    assert stats["gmem_atomics"] <= grid * nbins, (
        f"{stats['gmem_atomics']} global atomic operations for {n} elements, {grid} blocks and {nbins} bins: "
        f"count into a private histogram in shared memory and merge it with at most one global atomic per "
        f"(block, bin) (at most {grid * nbins})")
    d = cuda.gmem_counters(stats, "data")
    assert d["bytes_read"] == data.nbytes and d["max_reads_per_byte"] == 1, (
        f"every input element must be read from global memory exactly once: {d['bytes_read']} of "
        f"{data.nbytes} bytes read, some byte {d['max_reads_per_byte']} times")


@pytest.mark.points(1)
def test_checked_mode(lesson):
    """Race build: non-atomic shared increments, non-atomic merges into global bins shared by blocks,
    and a missing barrier after zeroing all show up here; plus fwd / rev / random order and ASan."""
    mod = cuda.load(lesson.path("histogram.cu"))
    rng = np.random.default_rng(603)
    nbins, n, block, grid = 37, 1100, 64, 2  # 4 * 128 < n: the batched loop and the tail both run
    data = np.where(rng.random(n) < 0.5, 5, rng.integers(0, nbins, n)).astype(np.int32)
    start = rng.integers(0, 1000, nbins).astype(np.uint32)
    res = cuda.check(mod.histogram, (grid, block, nbins * 4), (data, n, start.copy(), nbins))
    np.testing.assert_array_equal(res.outputs[2], start + np.bincount(data, minlength=nbins).astype(np.uint32))
