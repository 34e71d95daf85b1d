"""cuda-11 tests: WMMA tensor-core GEMM, C = A @ W.T, A (M x K) and W (N x K) half, C float.

Reference: float64 matmul of the same fp16 values (the inputs are generated in fp16, so nothing is
rounded on the way in). A product of two halves (11-bit significands) is exact in fp32, so the only
error is the fp32 accumulation of K products. Sequential round-to-nearest gives
|error| <= (K - 1) * 2^-24 * (|A| @ |W|.T) (Higham, "Accuracy and Stability of Numerical
Algorithms", 2nd ed., 3.1); tensor cores align and truncate inside each block of products instead
of rounding (Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ
CS 2021). We allow 2 * K * 2^-24 * (|A| @ |W|.T) element-wise; on the H200 the reference kernel's
worst element reached 0.12 * K * 2^-24 * (|A| @ |W|.T) (K up to 4099, inputs of one sign).
An fp16 accumulator or fp16 output (2^-12 relative per rounding) breaks this bound on inputs of one
sign, and overflows past 65504 on the large-value case. C is poisoned with NaN.
"""

import math

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

BM = BN = 32
THREADS = 128
U = 2.0**-24


def _launch(m, n):
    return ((n + BN - 1) // BN, (m + BM - 1) // BM), THREADS, 0


def _inputs(rng, m, n, k, kind="normal"):
    if kind == "normal":
        a, w = rng.standard_normal((m, k)), rng.standard_normal((n, k))
    elif kind == "positive":  # all products >= 0: |C| = |A| @ |W|.T, no cancellation to hide rounding in
        a, w = rng.uniform(0.0, 4.0, (m, k)), rng.uniform(0.0, 4.0, (n, k))
    else:  # "large": |a|, |w| up to 256, products up to 65536, most sums far beyond fp16's 65504
        a, w = rng.uniform(-256.0, 256.0, (m, k)), rng.uniform(-256.0, 256.0, (n, k))
    return a.astype(np.float16), w.astype(np.float16), np.full((m, n), np.nan, dtype=np.float32)


def _check(c, a, w, what):
    k = a.shape[1]
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    want = a64 @ w64.T
    bound = 2 * k * U * (np.abs(a64) @ np.abs(w64).T) + 1e-30
    assert not np.isnan(c).any(), (f"{what}: NaN in C at {np.argwhere(np.isnan(c))[0].tolist()} "
                                   f"(an element was never written, or a NaN was read)")
    bad = np.abs(c.astype(np.float64) - want) > bound
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {c.size} elements outside the fp32-accumulation bound "
                             f"2*K*2^-24*(|A||W|^T), e.g. C{list(i)} = {c[i]!r}, want {want[i]!r} "
                             f"(bound {bound[i]:.3g})")


@pytest.mark.points(3)
def test_wmma_gemm_shapes(lesson):
    """M, N, K not multiples of 16 or 32 (partial tiles in every dimension), K = 1, K = 16, 1x1x1, one tile exactly."""
    mod = cuda.load(lesson.path("wmma_gemm.cu"))
    rng = np.random.default_rng(1101)
    for m, n, k in [(33, 47, 29), (1, 1, 1), (16, 16, 16), (20, 35, 1), (48, 17, 16), (100, 70, 130), (5, 64, 200),
                    (64, 3, 33)]:
        a, w, c = _inputs(rng, m, n, k)
        mod.wmma_gemm[_launch(m, n)](a, w, c, m, n, k)
        _check(c, a, w, f"M={m}, N={n}, K={k}")


@pytest.mark.points(1)
def test_accumulates_in_fp32(lesson):
    """Inputs of one sign (rounding cannot cancel) with K = 300, and large values whose sums overflow fp16."""
    mod = cuda.load(lesson.path("wmma_gemm.cu"))
    rng = np.random.default_rng(1102)
    for m, n, k, kind in [(24, 40, 300, "positive"), (40, 24, 48, "large")]:
        a, w, c = _inputs(rng, m, n, k, kind)
        mod.wmma_gemm[_launch(m, n)](a, w, c, m, n, k)
        _check(c, a, w, f"{kind} inputs, M={m}, N={n}, K={k}")


@pytest.mark.points(1)
def test_checked_mode(lesson):
    """fwd / rev / random thread order + race build (both barriers of the K loop, the one before the copy-out) + ASan (edge loads)."""
    mod = cuda.load(lesson.path("wmma_gemm.cu"))
    rng = np.random.default_rng(1103)
    m, n, k = 40, 37, 45
    a, w, c = _inputs(rng, m, n, k)
    res = cuda.check(mod.wmma_gemm, _launch(m, n), (a, w, c, m, n, k), rtol=1e-4, atol=1e-3)
    _check(res.outputs[2], a, w, "checked mode")


@pytest.mark.points(3)
def test_uses_tensor_cores(lesson):
    """The product runs on WMMA: at least one 16x16x16 mma_sync per (16x16 tile of C, 16-step of K), and every
    element of A and W is read from global memory at most once per 16-wide tile of the other operand."""
    # the counters exist only in the emulator's race build: force it, so the grade is the same on a GPU box
    mod = cuda.load(lesson.path("wmma_gemm.cu"), backend="cpu", build="race")
    kern = mod.wmma_gemm
    rng = np.random.default_rng(1104)
    m, n, k = 33, 47, 29
    a, w, c = _inputs(rng, m, n, k)
    kern[_launch(m, n)](a, w, c, m, n, k)
    _check(c, a, w, "counter run")
    need = math.ceil(m / 16) * math.ceil(n / 16) * math.ceil(k / 16)
    mmas = kern.stats["warp_ops"]
    assert mmas >= need, (f"{mmas} warp-level WMMA operations for M={m}, N={n}, K={k}; the tensor-core path needs at "
                          f"least {need} mma_sync (one per 16x16 tile of C per 16-step of K, edge tiles and the K tail "
                          f"included): the product (or part of it) was computed with scalar FMAs")
    for name, other in (("A", n), ("W", m)):
        g = cuda.gmem_counters(kern.stats, name)
        buf = a if name == "A" else w
        assert g["bytes_read"] == buf.nbytes, f"{name}: {g['bytes_read']} of {buf.nbytes} bytes read"
        limit = math.ceil(other / 16)
        assert g["max_reads_per_byte"] <= limit, (
            f"{name}: an element is read {g['max_reads_per_byte']} times from global memory; staged tiles read it at "
            f"most {limit} times (once per 16-wide tile of the other operand) — a per-element dot product reads it "
            f"{other} times")
