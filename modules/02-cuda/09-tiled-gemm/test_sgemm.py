"""cuda-09 tests: shared-memory tiled SGEMM, C = A @ B, row-major fp32.

Reference: float64 matmul of the float32 inputs. Tolerance, element-wise: a dot product of K
terms accumulated in fp32 (with or without FMA) has |error| <= gamma_K * (|A| @ |B|),
gamma_K ~= K * 2^-24 (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., 3.1);
we allow 2 * K * 2^-24 * (|A| @ |B|). C is poisoned with NaN before each launch.
"""

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

TILE = 16
U = 2.0**-24


def _launch(m, n):
    return ((n + TILE - 1) // TILE, (m + TILE - 1) // TILE), (TILE, TILE), 0


def _inputs(rng, m, n, k):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    return a, b, np.full((m, n), np.nan, dtype=np.float32)


def _check(c, a, b, what):
    k = a.shape[1]
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    bound = 2 * k * U * (np.abs(a64) @ np.abs(b64)) + 1e-30
    assert not np.isnan(c).any(), f"{what}: NaN in C (an element was never written)"
    bad = np.abs(c - want) > bound
    assert not bad.any(), (f"{what}: {int(bad.sum())} elements outside the fp32 bound, e.g. C{np.argwhere(bad)[0].tolist()} "
                           f"= {c[tuple(np.argwhere(bad)[0])]!r}, want {want[tuple(np.argwhere(bad)[0])]!r}")


@pytest.mark.points(3)
def test_sgemm_shapes(lesson):
    """M, N, K not multiples of the tile (the last tile of every dimension is partial), plus 1x1x1 and exact tiles."""
    mod = cuda.load(lesson.path("sgemm.cu"))
    rng = np.random.default_rng(901)
    for m, n, k in [(1, 1, 1), (33, 47, 29), (100, 70, 130), (16, 16, 16), (5, 64, 200), (64, 3, 17)]:
        a, b, c = _inputs(rng, m, n, k)
        mod.sgemm_tiled[_launch(m, n)](a, b, c, m, n, k)
        _check(c, a, b, f"M={m}, N={n}, K={k}")


@pytest.mark.points(1)
def test_checked_mode(lesson):
    """fwd / rev / random thread order + race build (both barriers matter) + ASan build (tail loads)."""
    mod = cuda.load(lesson.path("sgemm.cu"))
    rng = np.random.default_rng(902)
    m, n, k = 20, 19, 37
    a, b, c = _inputs(rng, m, n, k)
    res = cuda.check(mod.sgemm_tiled, _launch(m, n), (a, b, c, m, n, k))
    _check(res.outputs[2], a, b, "checked mode")
