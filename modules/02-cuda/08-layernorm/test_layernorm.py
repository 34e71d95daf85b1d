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
Also: every block size the launch allows (32..1024), rows where eps matters (std 1e-3, mean square
~ eps), and the emulator's load counters (x read at most twice per element).
"""

import math

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

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


def _rms(mod, x, g, block):
    rows, cols = x.shape
    y = np.full_like(x, np.nan)
    mod.rmsnorm_fwd[rows, block, 0](x, g, y, rows, cols, EPS)
    return y


@pytest.mark.points(1)
def test_rmsnorm(lesson):
    mod = cuda.load(lesson.path("layernorm.cu"))
    rng = np.random.default_rng(803)
    for rows, cols in [(1, 1), (3, 31), (5, 33), (4, 1000), (2, 4099)]:
        for block in (32, 128, 1024):
            x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
            g, _ = _params(rng, cols)
            ry = _rms_ref(x, g)
            d = math.ceil(cols / block) + 10
            _close(_rms(mod, x, g, block), ry, 8 * d * U * float(np.abs(ry).max()),
                   f"rmsnorm shape=({rows}, {cols}), T={block}")


@pytest.mark.points(1)
def test_every_block_size(lesson):
    """RMSNorm at every block size the launch contract allows (T = 32, 64, ..., 1024), LayerNorm at every
    other one (T = 32, 96, ..., 992) plus 1024: a kernel that assumes 128 or 256 threads, or at least two
    warps, fails at some T."""
    mod = cuda.load(lesson.path("layernorm.cu"))
    rng = np.random.default_rng(805)
    rows, cols = 2, 1100
    for block in range(32, 1025, 32):
        x = (rng.standard_normal((rows, cols)) * 2 + 0.5).astype(np.float32)
        g, b = _params(rng, cols)
        d = math.ceil(cols / block) + 10
        if block % 64 == 32 or block == 1024:
            y, _mean, rstd = _ln(mod, x, g, b, block)
            ry, _rmu, rrstd = _ln_ref(x, g, b)
            _close(y, ry, 8 * d * U * max(1.0, float(np.abs(ry).max())), f"layernorm T={block}: y")
            np.testing.assert_allclose(rstd, rrstd, rtol=8 * d * U, err_msg=f"layernorm T={block}: rstd")
        rr = _rms_ref(x, g)
        _close(_rms(mod, x, g, block), rr, 8 * d * U * float(np.abs(rr).max()), f"rmsnorm T={block}")


@pytest.mark.points(1)
def test_eps_inside_the_square_root(lesson):
    """Rows where eps matters: LayerNorm rows with std 1e-3 (var = 1e-6, a tenth of eps) and RMSNorm
    rows whose mean square is about eps. rstd = 1/sqrt(var + eps) there is 302; 1/(sqrt(var) + eps)
    gives 999 and 1/sqrt(var + eps/cols) 995, off by 3x, while on rows with var ~ 1 both slips hide
    below 1e-5. Each row also has its own scale (rows differ by 10^k), so a shared statistic fails."""
    mod = cuda.load(lesson.path("layernorm.cu"))
    rng = np.random.default_rng(806)
    rows, cols = 6, 777
    scale = np.array([1e-3, 1e-3, 2e-3, 1.0, 5e-4, 1e-3])[:, None]
    x = (rng.standard_normal((rows, cols)) * scale + np.array([0.0, 0.01, -0.02, 0.5, 0.0, 3.0])[:, None])
    x = x.astype(np.float32)
    g, b = _params(rng, cols)
    for block in (64, 256):
        d = math.ceil(cols / block) + 10
        y, _mean, rstd = _ln(mod, x, g, b, block)
        ry, _rmu, rrstd = _ln_ref(x, g, b)
        # row 5 has mean 3 and std 1e-3: its deviations x - mu carry ulp(3) = 2.4e-7 of rounding, i.e.
        # 2.4e-4 relative to the std; the 1e-3 absolute bound on y (scale ~ 0.3) covers that, not a 3x slip
        _close(y, ry, max(8 * d * U * float(np.abs(ry).max()), 1e-3), f"layernorm small std, T={block}: y")
        np.testing.assert_allclose(rstd, rrstd, rtol=1e-3, err_msg=f"layernorm small std, T={block}: rstd")
    xr = (rng.standard_normal((rows, cols)) * math.sqrt(EPS) * np.array([1.0, 0.5, 2.0, 1.0, 0.3, 1.5])[:, None])
    xr = xr.astype(np.float32)  # mean square ~ eps (0.09 eps .. 4 eps)
    for block in (32, 256):
        d = math.ceil(cols / block) + 10
        ry = _rms_ref(xr, g)
        _close(_rms(mod, xr, g, block), ry, 8 * d * U * float(np.abs(ry).max()), f"rmsnorm mean square ~ eps, T={block}")


@pytest.mark.points(2)
def test_reads_x_at_most_twice(lesson):
    """One-pass statistics, counted: the emulator's race build counts, per byte of x, the thread-level
    loads that read it. Welford + Chan reads x twice (statistics, then normalize); a separate pass for
    the mean and one for the variance reads it three times. RMSNorm needs two as well. The counters
    exist only in the emulator, so this test runs there on every machine (same grade on CPU and GPU)."""
    mod = cuda.load(lesson.path("layernorm.cu"), backend="cpu", build="race")
    rng = np.random.default_rng(807)
    rows, cols, block = 3, 1500, 128
    x = (rng.standard_normal((rows, cols)) + 2.0).astype(np.float32)
    g, b = _params(rng, cols)
    nan = lambda *s: np.full(s, np.nan, dtype=np.float32)
    ln = mod.layernorm_fwd
    out = (nan(rows, cols), nan(rows), nan(rows))
    ln[rows, block, 0](x, g, b, *out, rows, cols, EPS)
    ry, _rmu, _rrstd = _ln_ref(x, g, b)
    d = math.ceil(cols / block) + 10
    _close(out[0], ry, 8 * d * U * float(np.abs(ry).max()), "race-build layernorm y")
    rms = mod.rmsnorm_fwd
    yr = nan(rows, cols)
    rms[rows, block, 0](x, g, yr, rows, cols, EPS)
    rr = _rms_ref(x, g)
    _close(yr, rr, 8 * d * U * float(np.abs(rr).max()), "race-build rmsnorm y")
    for name, kernel in (("layernorm_fwd", ln), ("rmsnorm_fwd", rms)):
        c = cuda.gmem_counters(kernel.stats, "x")
        assert c["bytes_read"] == x.nbytes, f"{name}: only {c['bytes_read']} of the {x.nbytes} bytes of x were read"
        assert c["max_reads_per_byte"] <= 2 and c["load_bytes"] <= 2 * x.nbytes, (
            f"{name} reads x {c['load_bytes'] / x.nbytes:.2f} times per element (some element "
            f"{c['max_reads_per_byte']} times): one pass for the statistics (Welford, merged with Chan's "
            f"formula) and one to normalize make 2; a pass for the mean and another for the variance make 3")


@pytest.mark.points(1)
def test_checked_mode(lesson):
    """fwd / rev / random thread order + race build + ASan build on small rows."""
    mod = cuda.load(lesson.path("layernorm.cu"))
    rng = np.random.default_rng(804)
    rows, cols = 3, 45
    x = (rng.standard_normal((rows, cols)) + 3).astype(np.float32)
    g, b = _params(rng, cols)
    nan = lambda *s: np.full(s, np.nan, dtype=np.float32)
    res = cuda.check(mod.layernorm_fwd, (rows, 64, 0),
                     (x, g, b, nan(rows, cols), nan(rows), nan(rows), rows, cols, EPS))
    ry, rmu, _rrstd = _ln_ref(x, g, b)
    tol = 8 * 12 * U * 8
    _close(res.outputs[3], ry, tol, "checked layernorm y")
    _close(res.outputs[4], rmu, tol, "checked layernorm mean")
    res = cuda.check(mod.rmsnorm_fwd, (rows, 64, 0), (x, g, nan(rows, cols), rows, cols, EPS))
    _close(res.outputs[2], _rms_ref(x, g), tol, "checked rmsnorm y")
