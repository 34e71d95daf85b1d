"""The emulator's traffic counters (global loads per argument, global and shared atomics) and the
random-order semantics of __activemask().

The counters exist only in the emulator's race build, so these tests force the CPU backend (as a
lesson test that asserts them must, to grade the same on a CPU and a GPU machine)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

KERNELS = Path(__file__).parent / "kernels"
pytestmark = pytest.mark.skipif(not cuda.emulator_available(), reason="no C++ compiler for the CUDA emulator")


@pytest.fixture(scope="module")
def race():
    return cuda.load(KERNELS / "counters.cu", backend="cpu", build="race")


def test_each_element_read_once_is_counted_exactly(race):
    n = 1000
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    k = race.scale_once
    k[4, 256](x, y, n)
    np.testing.assert_array_equal(y, 2 * x)
    st = k.stats
    xs = cuda.gmem_counters(st, "x")
    assert xs == {"bytes": 4 * n, "elem": 4, "loads": n, "load_bytes": 4 * n, "bytes_read": 4 * n,
                  "max_reads_per_byte": 1, "stores": 0, "store_bytes": 0, "atomics": 0,
                  # 31 full warps (4 sectors each) and one of 8 lanes (32 bytes: 1 sector)
                  "load_requests": 32, "load_sectors": 31 * 4 + 1, "store_requests": 0, "store_sectors": 0}
    ys = cuda.gmem_counters(st, "y")
    assert ys["loads"] == 0 and ys["stores"] == n and ys["store_bytes"] == 4 * n
    assert st["gmem_loads"] == n and st["gmem_load_bytes"] == 4 * n and st["gmem_stores"] == n
    assert st["gmem_atomics"] == 0 and st["smem_atomics"] == 0


def test_reading_twice_doubles_the_loads(race):
    n = 300
    x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    k = race.scale_twice
    k[2, 256](x, y, n)
    np.testing.assert_allclose(y, 2 * x, rtol=1e-7)
    xs = cuda.gmem_counters(k.stats, "x")
    assert xs["loads"] == 2 * n and xs["load_bytes"] == 8 * n
    assert xs["bytes_read"] == 4 * n and xs["max_reads_per_byte"] == 2


def test_vector_loads_count_once_with_their_width(race):
    n4 = 50
    x = np.random.default_rng(3).standard_normal(4 * n4).astype(np.float32)
    y = np.full(4 * n4, np.nan, np.float32)
    k = race.copy4
    k[1, 64](x, y, n4)
    np.testing.assert_array_equal(y, x)
    xs = cuda.gmem_counters(k.stats, "x")
    assert xs["loads"] == n4 and xs["load_bytes"] == 16 * n4 and xs["max_reads_per_byte"] == 1


def test_global_and_shared_atomics_are_counted(race):
    rng = np.random.default_rng(4)
    nbins, n, grid, block = 37, 3000, 3, 128
    data = rng.integers(0, nbins, n).astype(np.int32)
    want = np.bincount(data, minlength=nbins).astype(np.uint32)
    bins = np.zeros(nbins, np.uint32)
    k = race.hist_global
    k[grid, block](data, n, bins)
    np.testing.assert_array_equal(bins, want)
    assert k.stats["gmem_atomics"] == n and k.stats["smem_atomics"] == 0
    assert cuda.gmem_counters(k.stats, "bins")["atomics"] == n
    bins = np.zeros(nbins, np.uint32)
    res = cuda.check(race.hist_private, (grid, block, nbins * 4), (data, n, bins, nbins), orders=(), asan=False)
    np.testing.assert_array_equal(res.outputs[2], want)
    assert res.smem_atomics == n
    assert 0 < res.gmem_atomics <= grid * nbins
    assert res.gmem("data")["loads"] == n and res.gmem("data")["max_reads_per_byte"] == 1


def test_counters_need_the_race_build():
    fast = cuda.load(KERNELS / "counters.cu", backend="cpu")
    n = 10
    x, y = np.ones(n, np.float32), np.zeros(n, np.float32)
    k = fast.scale_once
    k[1, 32](x, y, n)
    assert "gmem_loads" not in k.stats
    with pytest.raises(KeyError, match="race build"):
        cuda.gmem_counters(k.stats, "x")


def test_activemask_as_a_full_warp_shuffle_mask_is_caught_in_random_order():
    mod = cuda.load(KERNELS / "counters.cu", backend="cpu")
    warps = 8
    x = np.random.default_rng(5).standard_normal(32 * warps).astype(np.float32)
    want = x.reshape(warps, 32).astype(np.float64).sum(axis=1)
    # thread 0 first: every lane reaches __activemask() before any is resolved, the sum is right
    out = np.full(warps, np.nan, np.float32)
    mod.warp_sum_activemask.launch(warps, 32, x, out, order="fwd")
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    # random order: some warps see a partial mask and sum only part of their lanes
    wrong_seeds = 0
    for seed in range(4):
        out = np.full(warps, np.nan, np.float32)
        mod.warp_sum_activemask.launch(warps, 32, x, out, order="rand", seed=seed)
        wrong_seeds += not np.allclose(out, want, rtol=1e-5, atol=1e-5)
    assert wrong_seeds >= 3
    with pytest.raises(cuda.CudaOrderDependenceError):
        cuda.check(mod.warp_sum_activemask, (warps, 32), (x, np.full(warps, np.nan, np.float32)), race=False, asan=False)
    # FULL_MASK is right in every order
    res = cuda.check(mod.warp_sum_full, (warps, 32), (x, np.full(warps, np.nan, np.float32)), race=False, asan=False)
    np.testing.assert_allclose(res.outputs[1], want, rtol=1e-5, atol=1e-5)


def test_activemask_in_random_order_is_reproducible_and_names_converged_lanes():
    mod = cuda.load(KERNELS / "counters.cu", backend="cpu")
    warps = 4

    def masks(seed: int) -> np.ndarray:
        counter = np.zeros(1, np.int32)
        m = np.zeros(32 * warps, np.uint32)
        mod.aggregated_count.launch(warps, 32, counter, m, order="rand", seed=seed)
        assert counter[0] == 32 * warps   # warp aggregation over the converged lanes counts every lane once
        return m

    a, b = masks(7), masks(7)
    np.testing.assert_array_equal(a, b)   # the same seed gives the same split
    assert (a != 0xFFFFFFFF).any()        # and some lanes saw a partial mask
    for t, m in enumerate(a):
        m = int(m)
        assert m >> (t % 32) & 1, "a lane's own bit is always in its __activemask()"
        for lane in range(32):        # lanes named in a mask got exactly that mask
            if m >> lane & 1:
                assert int(a[t - t % 32 + lane]) == m
