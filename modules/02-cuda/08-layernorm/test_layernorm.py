"""cuda-08 tests: fused LayerNorm (Welford) and RMSNorm forward, one block per row.

Reference: float64 numpy on the float32 inputs (biased variance, as torch.nn.LayerNorm).
Tolerances. With T threads, each per-thread Welford state absorbs ceil(cols/T) values and then
goes through 10 merges (5 shuffle steps in the warp, 5 across warps), so the statistics carry a
relative rounding error of about D * 2^-24 with D = ceil(cols/T) + 10 (Welford's update and Chan's
merge are backward stable: Chan, Golub & LeVeque 1983). y = (x - mu) * rstd * g + b inherits that
plus a few roundings and rsqrtf's 2 ulp: we allow 8 * D * 2^-24 relative to max|y| (plain data).
Large-mean data (mean 1e4, std 1): the mean is only known to a few ulp(1e4) ~ 1e-3, and y, whose
scale is 1, inherits that absolutely; we allow 2e-2. The textbook E[x^2] - E[x]^2 is off by O(1)
or NaN there (ulp(1e8) = 8). Outputs, mean and rstd are poisoned with NaN before each launch.
"""

import math

import numpy as np
import pytest

from pytest_hpccourse import cuda

U = 2.0**-24
EPS = 1e-5


def _ln_ref(x, g, b):
    x = x.astype(np.float64)
    mu = x.mean(axis=1)
    var = ((x - mu[:, None]) ** 2).mean(axis=1)
    rstd = 1.0 / np.sqrt(var + EPS)
    return (x - mu[:, None]) * rstd[:, None] * g.astype(np.float64) + b.astype(np.float64), mu, rstd


def _rms_ref(x, g):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + EPS) * g.astype(np.float64)


def _ln(mod, x, g, b, block):
    rows, cols = x.shape
    y = np.full_like(x, np.nan)
    mean = np.full(rows, np.nan, dtype=np.float32)
    rstd = np.full(rows, np.nan, dtype=np.float32)
    mod.layernorm_fwd[rows, block, 0](x, g, b, y, mean, rstd, rows, cols, EPS)
    return y, mean, rstd


def _params(rng, cols):
    g = (1.0 + 0.1 * rng.standard_normal(cols)).astype(np.float32)
    b = (0.1 * rng.standard_normal(cols)).astype(np.float32)
    return g, b


def _close(got, want, tol, what):
    assert not np.isnan(got).any(), f"{what}: NaN in output"
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    assert err <= tol, f"{what}: max abs error {err:.3g} > tolerance {tol:.3g}"


@pytest.mark.points(2)
def test_layernorm_shapes(lesson):
    mod = cuda.load(lesson.path("layernorm.cu"))
    rng = np.random.default_rng(801)
    for rows, cols in [(1, 1), (3, 31), (5, 33), (4, 1000), (2, 4099), (17, 128)]:
        for block in (64, 128, 256):
            x = (rng.standard_normal((rows, cols)) * 2 + 0.5).astype(np.float32)
            g, b = _params(rng, cols)
            y, mean, rstd = _ln(mod, x, g, b, block)
            ry, rmu, rrstd = _ln_ref(x, g, b)
            d = math.ceil(cols / block) + 10
            what = f"shape=({rows}, {cols}), T={block}"
            _close(y, ry, 8 * d * U * max(1.0, float(np.abs(ry).max())), what + ": y")
            _close(mean, rmu, 8 * d * U * float(np.abs(x).max()) + 1e-30, what + ": mean")
            np.testing.assert_allclose(rstd, rrstd, rtol=8 * d * U, err_msg=what + ": rstd")


@pytest.mark.points(1)
def test_layernorm_large_mean_is_stable(lesson):
    """mean 1e4, std 1: Welford keeps the variance; E[x^2] - E[x]^2 in fp32 loses it entirely."""
    mod = cuda.load(lesson.path("layernorm.cu"))
    rng = np.random.default_rng(802)
    rows, cols = 8, 1000
    x = (1e4 + rng.standard_normal((rows, cols))).astype(np.float32)
    g, b = _params(rng, cols)
    y, mean, rstd = _ln(mod, x, g, b, 128)
    ry, rmu, rrstd = _ln_ref(x, g, b)
    _close(y, ry, 2e-2, "large-mean y")
    _close(mean, rmu, 2e-2, "large-mean mean")
    np.testing.assert_allclose(rstd, rrstd, rtol=2e-2, err_msg="large-mean rstd")


@pytest.mark.points(1)
def test_rmsnorm(lesson):
    mod = cuda.load(lesson.path("layernorm.cu"))
    rng = np.random.default_rng(803)
    for rows, cols in [(1, 1), (3, 31), (5, 33), (4, 1000), (2, 4099)]:
        x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
        g, _ = _params(rng, cols)
        y = np.full_like(x, np.nan)
        mod.rmsnorm_fwd[rows, 128, 0](x, g, y, rows, cols, EPS)
        ry = _rms_ref(x, g)
        d = math.ceil(cols / 128) + 10
        _close(y, ry, 8 * d * U * float(np.abs(ry).max()), f"rmsnorm shape=({rows}, {cols})")


@pytest.mark.points(1)
def test_checked_mode(lesson):
    """fwd / rev / random thread order + race build + ASan build on small rows."""
    mod = cuda.load(lesson.path("layernorm.cu"))
    rng = np.random.default_rng(804)
    rows, cols = 3, 45
    x = (rng.standard_normal((rows, cols)) + 3).astype(np.float32)
    g, b = _params(rng, cols)
    nan = lambda *s: np.full(s, np.nan, dtype=np.float32)  # noqa: E731
    res = cuda.check(mod.layernorm_fwd, (rows, 64, 0),
                     (x, g, b, nan(rows, cols), nan(rows), nan(rows), rows, cols, EPS))
    ry, rmu, rrstd = _ln_ref(x, g, b)
    tol = 8 * 12 * U * 8
    _close(res.outputs[3], ry, tol, "checked layernorm y")
    _close(res.outputs[4], rmu, tol, "checked layernorm mean")
    res = cuda.check(mod.rmsnorm_fwd, (rows, 64, 0), (x, g, nan(rows, cols), rows, cols, EPS))
    _close(res.outputs[2], _rms_ref(x, g), tol, "checked rmsnorm y")
