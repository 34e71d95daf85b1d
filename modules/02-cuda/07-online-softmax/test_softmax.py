"""cuda-07 tests: one-pass (online) row softmax, one warp per row.

Reference: float64 softmax of the float32 inputs (max subtracted, exact identity).
Tolerance, per element, relative to the reference value: each lane's running sum d takes
ceil(cols/32) fp32 additions and multiplications (<= 1 rounding each, 2^-24), the lane merge 5
more; expf is accurate to 2 ulp on the GPU (CUDA C++ Programming Guide, "Mathematical Functions")
and the output adds one expf, one reciprocal and one multiply. So
    |y - ref| <= (2 * (ceil(cols/32) + 5) * 2^-24 + 8 * 2^-23) * ref  (+ 1e-30 absolute),
well under 1e-4 for these sizes and far below any real bug (a forgotten rescale is off by factors).
Outputs are poisoned with NaN before each launch. The emulator's load counters check that x is read
at most twice per element (the online method), not three times (max, then sum, then normalize).
"""

import math

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

WARPS = 4  # rows per block


def _launch(rows):
    return (max(1, -(-rows // WARPS)), (32, WARPS), 0)


def _ref(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _check(y, x, what):
    _rows, cols = x.shape
    ref = _ref(x)
    rtol = 2 * (math.ceil(cols / 32) + 5) * 2.0**-24 + 8 * 2.0**-23
    assert not np.isnan(y).any(), f"{what}: NaN in output (unwritten element or exp(-inf - -inf))"
    np.testing.assert_allclose(y, ref, rtol=rtol, atol=1e-30, err_msg=what)


def _run(mod, x):
    rows, cols = x.shape
    y = np.full_like(x, np.nan)
    mod.softmax_rows[_launch(rows)](x, y, rows, cols)
    return y


@pytest.mark.points(2)
def test_random_rows(lesson):
    """Row lengths below, at and above one warp, and not multiples of 32; rows not a multiple of WARPS."""
    mod = cuda.load(lesson.path("softmax.cu"))
    rng = np.random.default_rng(701)
    for rows, cols in [(1, 1), (3, 5), (7, 31), (9, 33), (5, 1000), (3, 4099), (41, 64)]:
        x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
        _check(_run(mod, x), x, f"shape=({rows}, {cols})")


@pytest.mark.points(1)
def test_masked_rows(lesson):
    """Causal mask (row r keeps columns <= r) and a row whose first 40 entries are -inf:
    many lanes see only -inf, and exp(-inf - (-inf)) must never be evaluated."""
    mod = cuda.load(lesson.path("softmax.cu"))
    rng = np.random.default_rng(702)
    rows, cols = 45, 70
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[np.triu_indices(rows, k=1, m=cols)] = -np.inf
    x[44, :40] = -np.inf
    _check(_run(mod, x), x, "causal mask")


@pytest.mark.points(1)
def test_large_values(lesson):
    """Values near 1e4 (exp would overflow without the running max) and a row whose max comes last
    (the running sum must be rescaled every time the max grows)."""
    mod = cuda.load(lesson.path("softmax.cu"))
    rng = np.random.default_rng(703)
    x = (rng.standard_normal((6, 300)) * 20 + 1e4).astype(np.float32)
    x[1] = np.linspace(-50, 90, 300, dtype=np.float32)  # increasing: the max changes at every element
    x[2, :] = 88.0
    x[2, 150] = 89.0  # exp(89) overflows fp32 on its own
    _check(_run(mod, x), x, "large values")


@pytest.mark.points(1)
def test_fewer_warps_than_rows(lesson):
    """A grid of 2 blocks (8 warps) for 37 rows: every warp loops over several rows (the grid-stride
    launch the benchmark uses to keep the rows in flight inside L2), each row starting from a fresh state."""
    mod = cuda.load(lesson.path("softmax.cu"))
    rng = np.random.default_rng(705)
    rows, cols = 37, 300
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    x[::5] += 40.0  # rows with a much larger max: a state carried over from the previous row would show
    y = np.full_like(x, np.nan)
    mod.softmax_rows[2, (32, WARPS), 0](x, y, rows, cols)
    _check(y, x, "grid of 2 blocks")


@pytest.mark.points(2)
def test_reads_x_at_most_twice(lesson):
    """The point of the online merge, counted: the emulator's race build counts, per byte of x, how
    many thread-level loads read it. The online softmax reads each element twice (pass 1 for (m, d),
    pass 2 to normalize); the max / sum / normalize formulation reads it three times. The counters
    exist only in the emulator, so this test runs there on every machine (same grade on CPU and GPU)."""
    mod = cuda.load(lesson.path("softmax.cu"), backend="cpu", build="race")
    rng = np.random.default_rng(706)
    rows, cols = 6, 700  # 700 is not a multiple of 32 * LOADS
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    y = np.full_like(x, np.nan)
    kernel = mod.softmax_rows
    kernel[_launch(rows)](x, y, rows, cols)
    _check(y, x, "race build")
    c = cuda.gmem_counters(kernel.stats, "x")
    assert c["bytes_read"] == x.nbytes, f"only {c['bytes_read']} of the {x.nbytes} bytes of x were read"
    assert c["max_reads_per_byte"] <= 2 and c["load_bytes"] <= 2 * x.nbytes, (
        f"x is read {c['load_bytes'] / x.nbytes:.2f} times per element (some element {c['max_reads_per_byte']} "
        f"times): the online softmax needs 2 reads (one pass for the running (max, sum), one to normalize), "
        f"a max / sum / normalize softmax needs 3")


@pytest.mark.points(1)
def test_checked_mode(lesson):
    """fwd / rev / random thread order + race build + ASan build; 6 rows in blocks of 4 warps
    (the last block has two idle warps)."""
    mod = cuda.load(lesson.path("softmax.cu"))
    rng = np.random.default_rng(704)
    rows, cols = 6, 45
    x = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    x[3, 10:] = -np.inf
    res = cuda.check(mod.softmax_rows, _launch(rows), (x, np.full_like(x, np.nan), rows, cols))
    _check(res.outputs[1], x, "checked mode")
