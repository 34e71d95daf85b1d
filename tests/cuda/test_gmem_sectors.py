"""Global-memory sectors per warp-level request (coalescing) in the emulator's race build.

A warp-level request is the accesses of one warp's lanes at one instruction (each lane's k-th
execution of it); its cost is the number of distinct 32-byte sectors those lanes touch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

KERNELS = Path(__file__).parent / "kernels"
pytestmark = pytest.mark.skipif(not cuda.emulator_available(), reason="no C++ compiler for the CUDA emulator")


@pytest.fixture(scope="module")
def race():
    return cuda.load(KERNELS / "sectors.cu", backend="cpu", build="race")


def test_coalesced_copy_is_four_sectors_per_request(race):
    n = 2048
    x = np.random.default_rng(11).standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    k = race.copy
    k[8, 256](x, y, n)
    np.testing.assert_array_equal(y, x)
    st = k.stats
    assert st["gmem_load_requests"] == n // 32 and st["gmem_load_sectors"] == 4 * (n // 32)
    assert st["gmem_store_requests"] == n // 32 and st["gmem_store_sectors"] == 4 * (n // 32)
    xs, ys = cuda.gmem_counters(st, "x"), cuda.gmem_counters(st, "y")
    assert (xs["load_requests"], xs["load_sectors"], xs["store_requests"], xs["store_sectors"]) == (64, 256, 0, 0)
    assert (ys["load_requests"], ys["load_sectors"], ys["store_requests"], ys["store_sectors"]) == (0, 0, 64, 256)


def test_column_write_is_one_sector_per_lane(race):
    n, stride = 256, 32
    x = np.random.default_rng(12).standard_normal(n).astype(np.float32)
    y = np.full(n * stride, np.nan, np.float32)
    k = race.column_write
    k[2, 128](x, y, n, stride)
    np.testing.assert_array_equal(y[::stride], x)
    ys = cuda.gmem_counters(k.stats, "y")
    assert ys["store_requests"] == n // 32 and ys["store_sectors"] == 32 * (n // 32)
    xs = cuda.gmem_counters(k.stats, "x")
    assert xs["load_sectors"] == 4 * xs["load_requests"] == 4 * (n // 32)


def test_float4_is_sixteen_sectors_per_request(race):
    n4 = 256
    x = np.random.default_rng(13).standard_normal(4 * n4).astype(np.float32)
    y = np.full(4 * n4, np.nan, np.float32)
    k = race.copy4
    k[2, 128](x, y, n4)
    np.testing.assert_array_equal(y, x)
    st = k.stats
    assert st["gmem_load_requests"] == n4 // 32 and st["gmem_load_sectors"] == 16 * (n4 // 32)
    assert st["gmem_store_requests"] == n4 // 32 and st["gmem_store_sectors"] == 16 * (n4 // 32)


def test_partial_warps(race):
    # n = 100 with blocks of 48 threads: block 0 has warps of 32 and 16 lanes, block 1 the same,
    # block 2 one warp of 4 active lanes (elements 96..99) out of 32, and one warp with none.
    n = 100
    x = np.random.default_rng(14).standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    k = race.copy
    k[3, 48](x, y, n)
    np.testing.assert_array_equal(y, x)
    xs = cuda.gmem_counters(k.stats, "x")
    # block 0: lanes 0..31 -> bytes 0..127 (4 sectors); lanes 32..47 -> bytes 128..191 (2)
    # block 1: elements 48..79 -> bytes 192..319 (sectors 6..9: 4); 80..95 -> bytes 320..383 (2)
    # block 2: elements 96..99 -> bytes 384..399 (1)
    assert xs["load_requests"] == 5 and xs["load_sectors"] == 4 + 2 + 4 + 2 + 1
    assert k.stats["gmem_store_requests"] == 5 and k.stats["gmem_store_sectors"] == 13


def test_unaligned_warp_spans_five_sectors(race):
    # blocks of 40 threads: the second block's first warp starts at byte 160, mid-sector
    n = 80
    x = np.random.default_rng(15).standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    k = race.copy
    k[2, 40](x, y, n)
    np.testing.assert_array_equal(y, x)
    xs = cuda.gmem_counters(k.stats, "x")
    # block 0: 0..31 (4), 32..39 (bytes 128..159: 1); block 1: 40..71 (bytes 160..287: 4), 72..79 (288..319: 1)
    assert xs["load_requests"] == 4 and xs["load_sectors"] == 4 + 1 + 4 + 1


def test_broadcast_is_one_sector(race):
    n = 128
    x = np.random.default_rng(16).standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    k = race.broadcast
    k[2, 64](x, y, n)
    np.testing.assert_array_equal(y, np.repeat(x[:2], 64))
    xs = cuda.gmem_counters(k.stats, "x")
    assert xs["load_requests"] == 4 and xs["load_sectors"] == 4


def test_counters_come_from_check_too():
    mod = cuda.load(KERNELS / "sectors.cu", backend="cpu")
    n, stride = 64, 33
    x = np.random.default_rng(17).standard_normal(n).astype(np.float32)
    y = np.full(n * stride, np.nan, np.float32)
    r = cuda.check(mod.column_write, (1, 64), (x, y, n, stride), orders=(), asan=False)
    assert r.stats["gmem_store_requests"] == 2 and r.stats["gmem_store_sectors"] == 64
    assert r.gmem("y")["store_sectors"] == 64
