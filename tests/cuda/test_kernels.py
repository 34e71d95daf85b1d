"""Correct kernels match numpy in every thread order, the race build and the ASan build.

On a GPU machine (backend 'gpu') the same tests run through CuPy first, then the emulator
variants; HPCCOURSE_CUDA=gpu|cpu forces a backend."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

KERNELS = Path(__file__).parent / "kernels"

pytestmark = pytest.mark.skipif(not cuda.available(), reason="no GPU and no C++ compiler for the CUDA emulator")

rng = np.random.default_rng(1234)


def load(name: str, **kw) -> cuda.Module:
    return cuda.load(KERNELS / name, **kw)


@pytest.fixture(scope="module")
def reduce_mod():
    return load("reduce.cu")


def test_smem_tree_reduction(reduce_mod):
    n, block = 1000, 256
    grid = (n + block - 1) // block
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(grid, np.nan, np.float32)
    cuda.check(reduce_mod.block_sum, (grid, block, block * 4), (x, out, n))
    ref = np.add.reduceat(x.astype(np.float64), np.arange(0, n, block))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_static_smem_template_reduction(reduce_mod):
    n = 777
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(7, np.nan)
    cuda.check(reduce_mod["static_block_sum<128>"], (7, 128), (x, out, n))
    np.testing.assert_allclose(out, np.add.reduceat(x.astype(np.float64), np.arange(0, n, 128)), rtol=1e-12)


def test_shuffle_reduction(reduce_mod):
    n = 100_003
    x = rng.random(n).astype(np.float32)
    total = np.zeros(1, np.float32)
    cuda.check(reduce_mod.shuffle_sum, (5, 96), (x, total, n), rtol=1e-5)
    np.testing.assert_allclose(total[0], x.astype(np.float64).sum(), rtol=1e-5)


def test_template_kernel_by_name(reduce_mod):
    y = rng.standard_normal(50).astype(np.float32)
    y64 = rng.standard_normal(50)
    ref, ref64 = y * np.float32(2.5), y64 * -1.5
    reduce_mod["scale<float>"][2, 32](y, 2.5, 50)
    reduce_mod["scale<double>"][(2,), (32, 1, 1)](y64, -1.5, 50)
    np.testing.assert_array_equal(y, ref)
    np.testing.assert_array_equal(y64, ref64)


@pytest.mark.parametrize("M,N,K", [(37, 45, 29), (1, 1, 1), (16, 33, 17)])
def test_tiled_sgemm_odd_shapes(M, N, K):
    mod = load("sgemm.cu")
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    C = np.full((M, N), np.nan, np.float32)
    grid = ((N + 15) // 16, (M + 15) // 16)
    orders = ("fwd", "rev", "rand") if M > 1 else ("fwd",)
    cuda.check(mod.sgemm_tiled, (grid, (16, 16)), (A, B, C, M, N, K), orders=orders, asan=M > 1)
    np.testing.assert_allclose(C, A.astype(np.float64) @ B.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_online_softmax_shfl_xor():
    mod = load("softmax.cu")
    rows, cols = 37, 100
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    x[3] += 1e4          # large values: the online max keeps exp() in range
    x[5, :] = -np.inf
    x[5, 7] = 0.0        # one finite element
    y = np.full_like(x, np.nan)
    cuda.check(mod.softmax_rows, ((rows + 3) // 4, 128), (x, y, rows, cols))
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_scan_shfl_up_and_votes():
    mod = load("scan.cu")
    n, block = 1000, 256
    a = rng.integers(-50, 50, n).astype(np.int32)
    out = np.full(n, -999999, np.int32)
    cuda.check(mod.block_scan, ((n + block - 1) // block, block), (a, out, n))
    ref = np.concatenate([np.cumsum(a[i:i + block]) for i in range(0, n, block)])
    np.testing.assert_array_equal(out, ref)

    out8 = np.full(n, -1, np.int32)
    cuda.check(mod.scan_width8, ((n + 63) // 64, 64), (a, out8, n), orders=("fwd", "rev"), asan=False)
    padded = np.concatenate([a, np.zeros((-n) % 8, np.int32)]).reshape(-1, 8)
    np.testing.assert_array_equal(out8, np.cumsum(padded, axis=1).ravel()[:n])

    x = rng.standard_normal(200).astype(np.float32)
    x[64:96] = 1.0       # a warp of all positives
    x[96:128] = -1.0     # a warp of none
    nw = 224 // 32
    ballots, counts, flags = np.zeros(nw, np.uint32), np.zeros(nw, np.int32), np.zeros(nw, np.int32)
    cuda.check(mod.warp_votes, (1, 224), (x, ballots, counts, flags, 200), race=False, asan=False)
    xp = np.concatenate([x, np.zeros(24, np.float32)]) > 0
    xp[200:] = False
    for w in range(nw):
        bits = xp[32 * w: 32 * w + 32]
        assert ballots[w] == sum(1 << i for i in range(32) if bits[i])
        assert counts[w] == bits.sum()
        assert flags[w] == 2 * bits.all() + bits.any()


def test_atomic_histogram():
    mod = load("histogram.cu")
    n = 10007
    data = rng.integers(0, 256, n).astype(np.uint8)
    data[:500] = 7       # a hot bin
    bins = np.zeros(256, np.uint32)
    cuda.check(mod.histogram, (6, 128), (data, bins, n))
    np.testing.assert_array_equal(bins, np.bincount(data, minlength=256))


def test_int_and_float_atomics():
    mod = load("histogram.cu")
    n = 300
    v = rng.integers(-1000, 1000, n).astype(np.int32)
    fsum, imax, imin = np.zeros(1, np.float32), np.array([-2**31], np.int32), np.array([2**31 - 1], np.int32)
    exch, cas = np.zeros(1, np.int32), np.zeros(1, np.int32)
    cuda.check(mod.atomics_mix, (3, 128), (v, n, fsum, imax, imin, exch, cas))
    assert fsum[0] == pytest.approx(v.sum() * 0.5, rel=1e-6)
    assert (imax[0], imin[0], exch[0], cas[0]) == (v.max(), v.min(), 7, n)


@pytest.mark.parametrize("pad", [0, 1])
def test_dynamic_smem_transpose(pad):
    mod = load("transpose.cu")
    rows, cols = 70, 45
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    out = np.full((cols, rows), np.nan, np.float32)
    grid = ((cols + 31) // 32, (rows + 31) // 32)
    cuda.check(mod[f"transpose<{pad}>"], (grid, (32, 8), 32 * (32 + pad) * 4), (a, out, rows, cols))
    np.testing.assert_array_equal(out, a.T)


def test_bank_conflicts_padded_vs_unpadded():
    mod = load("transpose.cu", backend="cpu")
    n = 64
    a = rng.standard_normal((n, n)).astype(np.float32)
    out_p, out_u = np.zeros_like(a), np.zeros_like(a)
    rp = cuda.check(mod.transpose_static_padded, ((2, 2), (32, 32)), (a, out_p, n), banks=True, asan=False,
                    orders=("fwd",))
    ru = cuda.check(mod.transpose_static_unpadded, ((2, 2), (32, 32)), (a, out_u, n), banks=True, asan=False,
                    orders=("fwd",))
    np.testing.assert_array_equal(out_p, a.T)
    np.testing.assert_array_equal(out_u, a.T)
    assert rp.smem_accesses == ru.smem_accesses == 2 * 4 * 32   # 32 warps x (1 store + 1 load) x 4 blocks
    assert rp.bank_conflicts == 0
    assert ru.bank_conflicts == 4 * 32 * 31                      # every column read is 32-way
    (line, count), = ru.stats["bank_conflicts_by_line"].items()
    assert line.endswith("transpose.cu:38") and count == ru.bank_conflicts
    # the same numbers from a plain launch of a module loaded with banks=True
    mb = load("transpose.cu", backend="cpu", banks=True)
    mb.transpose_static_unpadded[(2, 2), (32, 32)](a, out_u, n)
    assert mb.transpose_static_unpadded.stats["bank_conflicts"] == ru.bank_conflicts


def test_fp16_conversions():
    mod = load("fp16.cu")
    # every half bit pattern -> float
    bits = np.arange(65536, dtype=np.uint16)
    h = bits.view(np.float16)
    f = np.full(65536, -7.0, np.float32)
    cuda.check(mod.from_half, (256, 256), (h, f, 65536), orders=("fwd",), race=False, asan=False)
    ref = h.astype(np.float32)
    assert np.array_equal(np.isnan(f), np.isnan(ref))
    np.testing.assert_array_equal(f[~np.isnan(f)], ref[~np.isnan(ref)])
    # floats -> half: round to nearest even, subnormals, overflow to inf
    x = np.concatenate([rng.standard_normal(4000) * 10.0 ** rng.integers(-9, 6, 4000),
                        [0.0, -0.0, 65504.0, 65519.99, 65520.0, 1e6, -1e6, 2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.01,
                         5.96e-8, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, np.inf, -np.inf]]).astype(np.float32)
    hout = np.zeros(x.size, np.float16)
    cuda.check(mod.to_half, ((x.size + 255) // 256, 256), (x, hout, x.size), orders=("fwd",), race=False)
    with np.errstate(over="ignore"):
        ref16 = x.astype(np.float16)
    np.testing.assert_array_equal(hout.view(np.uint16), ref16.view(np.uint16))
    # half2 fma
    npairs = 301
    xh = rng.standard_normal(2 * npairs).astype(np.float16)
    yh = np.zeros_like(xh)
    cuda.check(mod.haxpb2, (2, 256), (xh, yh, np.float16(1.5), np.float16(-0.25), npairs))
    ref = (np.float32(1.5) * xh.astype(np.float32) + np.float32(-0.25)).astype(np.float16)
    np.testing.assert_allclose(yh.astype(np.float32), ref.astype(np.float32), rtol=1e-3, atol=1e-3)


def test_float4_loads():
    mod = load("fp16.cu")
    n4 = 123
    x = rng.standard_normal(4 * n4).astype(np.float32)
    out = np.full(n4, np.nan, np.float32)
    cuda.check(mod.sumsq4, (1, 128), (x, out, n4))
    np.testing.assert_allclose(out, (x.astype(np.float64).reshape(-1, 4) ** 2).sum(axis=1), rtol=1e-5)


def test_3d_indexing():
    mod = load("index3d.cu")
    nx, ny, nz = 11, 7, 3
    out = np.full((nz, ny, nx, 3), -1, np.int32)
    cuda.check(mod.coords3d, ((3, 2, 2), (4, 4, 2)), (out, nx, ny, nz))
    z, y, x = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    np.testing.assert_array_equal(out, np.stack([x, y, z], axis=-1))
    u = rng.standard_normal((nz + 2, ny, nx)).astype(np.float32)
    v = np.zeros_like(u)
    cuda.check(mod.stencil7, ((3, 2, 3), (4, 4, 2)), (u, v, nx, ny, nz + 2))
    u64 = u.astype(np.float64)
    ref = (u64[1:-1, 1:-1, :-2] + u64[1:-1, 1:-1, 2:] + u64[1:-1, :-2, 1:-1] + u64[1:-1, 2:, 1:-1] +
           u64[:-2, 1:-1, 1:-1] + u64[2:, 1:-1, 1:-1] - 6 * u64[1:-1, 1:-1, 1:-1])
    np.testing.assert_allclose(v[1:-1, 1:-1, 1:-1], ref, rtol=1e-5, atol=1e-5)
    assert not v[0].any() and not v[:, 0].any() and not v[:, :, 0].any()


def test_wmma_gemm():
    mod = load("wmma_gemm.cu")
    M, N, K = 32, 48, 64
    A = rng.standard_normal((M, K)).astype(np.float16)
    Bt = rng.standard_normal((N, K)).astype(np.float16)      # B column-major == B^T row-major
    C = np.full((M, N), np.nan, np.float32)
    cuda.check(mod.wmma_gemm, ((1, 2), (32 * 3, 1)), (A, Bt, C, M, N, K), rtol=1e-4, atol=1e-3)
    ref = 0.5 * A.astype(np.float64) @ Bt.astype(np.float64).T
    np.testing.assert_allclose(C, ref, rtol=1e-3, atol=1e-3)


def test_torch_tensors(reduce_mod):
    torch = pytest.importorskip("torch")
    dev = "cuda" if torch.cuda.is_available() and cuda.backend() == "gpu" else "cpu"
    x = torch.randn(1000, device=dev)
    out = torch.full((4,), float("nan"), device=dev)
    reduce_mod.block_sum[4, 256, 1024](x, out, 1000)
    ref = x.double().reshape(-1)[:1000]
    expect = torch.stack([ref[i:i + 256].sum() for i in range(0, 1000, 256)]).float()
    torch.testing.assert_close(out, expect, rtol=1e-5, atol=1e-5)
    y = torch.arange(64, dtype=torch.float32, device=dev)[::2]       # non-contiguous view
    reduce_mod["scale<float>"][1, 32](y, 3.0, 32)
    torch.testing.assert_close(y, torch.arange(0, 64, 2, dtype=torch.float32, device=dev) * 3)


def test_main_program():
    mod = load("main_prog.cu")
    r = mod.main("500")
    assert r.returncode == 0
    assert "n=500 sum=125000.0" in r.stdout       # sum(i + 0.5) for i < 500
    # a 2048-thread block is refused: CUDA 12 says "invalid configuration argument", CUDA 13 on an H200
    # said "invalid argument"; the emulator gives the former
    assert re.search(r"bad_launch=invalid (configuration )?argument", r.stdout)


def test_intrinsics_and_vector_types():
    mod = load("intrinsics.cu")
    n = 100
    ab = np.stack([rng.random(n) + 0.5, rng.random(n) + 0.5], axis=1).astype(np.float32)
    out = np.full((n, 4), np.nan, np.float32)
    cuda.check(mod.vec_math, (1, 128), (ab, out, n))
    a, b = ab[:, 0].astype(np.float64), ab[:, 1].astype(np.float64)
    ref = np.stack([1 / np.sqrt(a), a / b, np.maximum(a, b), np.clip(b - 1, 0, 1)], axis=1)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)

    v = rng.integers(1, 1 << 20, (n, 4)).astype(np.int32)
    o = np.zeros((n, 2), np.int32)
    cuda.check(mod.int_vectors, (1, 128), (v, o, n))
    clz = np.array([32 - int(y).bit_length() for y in v[:, 1]])
    ffs = np.array([(int(z) & -int(z)).bit_length() for z in v[:, 2]])
    popc = np.array([int(x).bit_count() for x in v[:, 0]])
    np.testing.assert_array_equal(o[:, 0], np.minimum(v[:, 0], v[:, 1]) + np.maximum(v[:, 2], v[:, 3]))
    np.testing.assert_array_equal(o[:, 1], popc + clz + ffs)


def test_warp_votes_match_reduce_activemask():
    mod = load("intrinsics.cu")
    key = rng.integers(0, 4, 32).astype(np.int32)
    active, match, red = np.zeros(32, np.uint32), np.zeros(32, np.uint32), np.zeros(32, np.uint32)
    counts = np.zeros(1, np.int32)
    # fwd/rev only: in the random order __activemask() may name just the lanes that arrived together
    # (test_counters_and_activemask.py covers that)
    cuda.check(mod.warp_misc, (1, 32), (key, active, match, red, counts), orders=("fwd", "rev"))
    assert counts[0] == (key > 2).sum()
    for t in range(32):
        assert match[t] == sum(1 << s for s in range(32) if key[s] == key[t])
    assert (red == key.sum() + 1000 * key.max()).all()
    assert (active[::2] == 0x55555555).all() and (active[1::2] == 0).all()
    out = np.zeros(1, np.int32)
    cuda.check(mod.device_global, (2, 32), (out,))
    assert out[0] == 42
