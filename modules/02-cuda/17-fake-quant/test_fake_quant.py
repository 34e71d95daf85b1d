"""cuda-17 tests: per-channel fake quantization (forward), its STE backward, and the LSQ gradients.

References.
- Forward and STE backward: `_torch_rule`, a numpy transcription of torch's CPU kernel
  (aten/src/ATen/native/quantized/cpu/kernels/QuantizedOpKernels.cpp, int32 zero point), done in the same
  float32 operations: inv_s = float(1 / s), p = float(x * inv_s), code = z + rint(p) (round half to even),
  y = float((clamp(code) - z) * s) (exact integer times s, one rounding), mask = qmin <= code <= qmax.
  Every rounding is IEEE round-to-nearest, so the kernel must match it bit for bit: outputs are compared
  for exact equality (no tolerance). `test_against_torch` checks the kernels against torch itself
  (torch.fake_quantize_per_channel_affine, its autograd, and torch._fake_quantize_learnable_per_channel_affine)
  where torch is installed; the transcription was checked against torch 2.13 on all these inputs.
- The boundary cases (`test_clamp_boundary`) are written out by hand from the definition, not computed.
- LSQ: float64 numpy over the same codes. dscale / dzero are sums of outer * inner terms in float32 (per-thread
  partial sums of ceil(n / T) terms, then 10 shuffle levels), so they carry about D * 2^-24 of relative rounding
  with D = ceil(n / T) + 10 (we allow 8 D 2^-24 of the sum of |terms|), plus the rounding of each in-range term
  round(x/s) - x/s, which is computed from x * inv_s (or from (q - z) s - x, as torch does): a few ulps of |x / s|
  per element (we allow 4 * 2^-24 * sum |dy| (|x/s| + 1)). Every wrong region or sign moves a sum by O(|dy|).
Outputs are poisoned with NaN before every launch. Sizes are not multiples of any block, C goes above 256,
and the channel axis sits first (outer = 1), last (inner = 1) and in the middle.
"""

import math

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

F32 = np.float32
U = 2.0**-24
RANGES = [(-128, 127), (0, 255), (-8, 7), (0, 15), (-127, 127)]


def _src(lesson):
    return lesson.path("fake_quant.cu")


# ------------------------------------------------------------------------------------------------ references


def _torch_rule(x, s, z, qmin, qmax):
    """x: (outer, C, inner) float32; s: (C,) float32; z: (C,) int32. Returns code, y, mask as torch's CPU kernel."""
    inv = (F32(1.0) / s).astype(F32)[None, :, None]
    p = (x * inv).astype(F32)  # float32 product, correctly rounded
    code = z.astype(F32)[None, :, None] + np.rint(p)  # round half to even, then the integer zero point
    q = np.clip(code, F32(qmin), F32(qmax))
    y = ((q - z.astype(F32)[None, :, None]) * s[None, :, None]).astype(F32)
    mask = (code >= qmin) & (code <= qmax)
    return code, y, mask


def _lsq_ref(x, dy, s, z, qmin, qmax, g):
    """float64 LSQ gradients over the codes of _torch_rule: dscale[c], dzero[c], and the sums of |terms| for tolerances."""
    code, _y, mask = _torch_rule(x, s, z, qmin, qmax)
    z64, s64 = z.astype(np.float64)[None, :, None], s.astype(np.float64)[None, :, None]
    xs = x.astype(np.float64) / s64
    rounded = code.astype(np.float64) - z64
    term_s = np.where(mask, rounded - xs, np.where(code < qmin, qmin - z64, qmax - z64))
    term_z = np.where(mask, 0.0, -s64)
    d = dy.astype(np.float64)
    sums = lambda a: a.sum(axis=(0, 2))
    return (g * sums(d * term_s), g * sums(d * term_z), g * sums(np.abs(d * term_s)),
            g * sums(np.abs(d * term_z)), g * sums(np.abs(d) * (np.abs(xs) + 1.0)))


# ------------------------------------------------------------------------------------------------ inputs


def _qparams(rng, C, qmin, qmax, tiny_huge=True):
    """Per-channel scales spread over 1e-6 .. 1e3 (log-uniform) and zero points anywhere in [qmin, qmax]."""
    lo, hi = (-6.0, 3.0) if tiny_huge else (-2.0, 0.5)
    s = (10.0 ** rng.uniform(lo, hi, C)).astype(F32)
    z = rng.integers(qmin, qmax + 1, C).astype(np.int32)
    z[rng.random(C) < 0.25] = (qmin + qmax + 1) // 2  # many near the middle, as for symmetric-ish weights
    z = np.clip(z, qmin, qmax).astype(np.int32)
    return s, z


def _values(rng, shape, s, z, qmin, qmax):
    """x whose codes x/s + z spread over [qmin - 30% of the range, qmax + 30%]: in range, clamped on both sides,
    and landing on the bounds. A tenth sit exactly on grid points (k - z) * s."""
    outer, C, inner = shape
    r = qmax - qmin
    u = rng.uniform(qmin - 0.3 * r - 1, qmax + 0.3 * r + 1, shape)
    on_grid = rng.random(shape) < 0.1
    u = np.where(on_grid, np.round(u), u)
    x = ((u - z[None, :, None]) * s.astype(np.float64)[None, :, None]).astype(F32)
    x[x == 0] = F32(0.25) * s[np.nonzero(x == 0)[1]]  # no exact zeros (outputs are tested on non-trivial values)
    return x


def _nan(*shape):
    return np.full(shape, np.nan, dtype=F32)


def _first_mismatch(got, want, x, s, z, what):
    bad = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    if not bad.any():
        return
    idx = np.unravel_index(int(np.argmax(bad)), got.shape)
    c = idx[1]
    p = F32(x[idx] * (F32(1.0) / s[c]))
    pytest.fail(
        f"{what}: {int(bad.sum())} of {got.size} elements differ; first at (o, c, j) = {tuple(int(i) for i in idx)}: "
        f"x = {x[idx]!r}, s = {s[c]!r}, z = {int(z[c])}, x * float(1/s) = {p!r}: got {got[idx]!r}, want {want[idx]!r}"
        + (" (NaN: never written)" if np.isnan(got[idx]) else ""))


def _fwd(mod, x, s, z, qmin, qmax, grid, block):
    outer, C, inner = x.shape
    y = _nan(outer, C, inner)
    mod.fake_quant_fwd[grid, block](x, s, z, y, outer, C, inner, qmin, qmax)
    return y


def _bwd(mod, x, dy, s, z, qmin, qmax, grid, block):
    outer, C, inner = x.shape
    dx = _nan(outer, C, inner)
    mod.fake_quant_bwd[grid, block](x, dy, s, z, dx, outer, C, inner, qmin, qmax)
    return dx


def _grad(rng, shape):
    """Upstream gradients: nonzero, mixed signs and sizes."""
    g = rng.standard_normal(shape).astype(F32)
    g[np.abs(g) < 1e-3] = F32(0.5)
    return g


SHAPES = [(1, 1, 1), (3, 5, 77), (1, 37, 1000), (5, 300, 3), (200, 7, 1), (2, 1, 513)]
LAUNCHES = [(1, 32), (3, 50), (None, 256), (2, 1024)]  # None: enough blocks for one element per thread


# ------------------------------------------------------------------------------------------------ tests


@pytest.mark.points(2)
def test_forward_bitwise(lesson):
    """Random codes over every region, scales 1e-6 .. 1e3, several quantization ranges, channel axis first, last
    and in the middle, grids smaller and larger than the data: y must equal torch's bit for bit."""
    mod = cuda.load(_src(lesson))
    rng = np.random.default_rng(1701)
    for t, shape in enumerate(SHAPES):
        qmin, qmax = RANGES[t % len(RANGES)]
        s, z = _qparams(rng, shape[1], qmin, qmax)
        x = _values(rng, shape, s, z, qmin, qmax)
        _code, want, _mask = _torch_rule(x, s, z, qmin, qmax)
        for grid, block in LAUNCHES:
            grid = grid or -(-x.size // block)
            got = _fwd(mod, x, s, z, qmin, qmax, grid, block)
            _first_mismatch(got, want, x, s, z, f"forward shape={shape} range=[{qmin}, {qmax}] grid={grid} block={block}")


def _tie_cases(rng):
    """Values next to the half-integer codes: x within +-4 ulps of (k + 1/2) * s for every k across the range.
    With a power-of-two scale x * inv_s is exact, so these are exact ties (round half to even decides); with
    other scales some x * float(1/s) land on k + 1/2 or on the other side of it than x / s does."""
    scales = [2.0**-4, 2.0**-9, 0.5, 4.0, 0.1, 0.3, 0.7, 3e-3, 0.0123, 1.7, 5.3e-5, 37.9]
    k = np.arange(-140, 141, dtype=np.float64) + 0.5
    rows = []
    for sc in scales:
        base = (k * sc).astype(F32)
        rows.append(np.concatenate([(base.view(np.int32) + d).view(F32) for d in range(-4, 5)]))
    x = np.stack(rows)[None, :, :]  # outer = 1, C = len(scales), inner = 281 * 9
    s = np.array(scales, dtype=F32)
    z = np.array([0, 3, -5, 1, -1, 2, 0, 7, -3, 1, 0, -2], dtype=np.int32)
    return x, s, z


@pytest.mark.points(2)
def test_rounding_ties_and_reciprocal(lesson):
    """Ties at .5 round half to even (roundf rounds them away from zero); x is multiplied by the float 1/s
    (x / s rounds differently next to a tie); the zero point is added after rounding. Forward and backward."""
    mod = cuda.load(_src(lesson))
    rng = np.random.default_rng(1702)
    x, s, z = _tie_cases(rng)
    for qmin, qmax in [(-128, 127), (-127, 127)]:
        _code, want, mask = _torch_rule(x, s, z, qmin, qmax)
        got = _fwd(mod, x, s, z, qmin, qmax, 5, 128)
        _first_mismatch(got, want, x, s, z, f"forward next to ties, range=[{qmin}, {qmax}]")
        dy = _grad(rng, x.shape)
        got = _bwd(mod, x, dy, s, z, qmin, qmax, 5, 128)
        _first_mismatch(got, np.where(mask, dy, F32(0)), x, s, z, f"backward next to ties, range=[{qmin}, {qmax}]")


# Codes around the bounds: u = x / s + z on the bounds, a quarter, a half and a whole step outside and inside, and
# far outside. Rounding applies to x / s = u - z, BEFORE the integer zero point is added, so a tie half a step
# outside goes to the even neighbour of u - z: for qmax = 127 and z = 0, 127.5 -> 128 (clamped, no gradient);
# for z = 5, 122.5 -> 122, code 127 (inside, the gradient passes). For qmin = -128 and z = 0, -128.5 -> -128: inside.
BOUNDARY_OFFSETS = [0.0, 0.25, 0.49, 0.5, 0.75, 1.0, 1000.0]


def _boundary_case(qmin, qmax, zs, scales):
    """x on both sides of both bounds for every (scale, zero point); expected y and mask by the scalar rule
    code = z + round_half_even(u - z) (Python's round), written out independently of the numpy transcription."""
    s = np.repeat(np.array(scales, dtype=F32), len(zs))
    z = np.tile(np.array(zs, dtype=np.int32), len(scales))
    us = sorted({qmin - d for d in BOUNDARY_OFFSETS} | {qmin + d for d in BOUNDARY_OFFSETS[:5]}
                | {qmax + d for d in BOUNDARY_OFFSETS} | {qmax - d for d in BOUNDARY_OFFSETS[:5]})
    x = np.empty((1, len(s), len(us)), dtype=F32)
    want_y, want_mask = np.empty_like(x), np.empty(x.shape, dtype=bool)
    for c in range(len(s)):
        for j, u in enumerate(us):
            x[0, c, j] = F32((u - int(z[c])) * float(s[c]))  # exact except for the 0.49 offsets
            code = int(z[c]) + round(float(x[0, c, j]) / float(s[c]))  # s is a power of two: x / s is exact
            want_mask[0, c, j] = qmin <= code <= qmax
            want_y[0, c, j] = F32((min(max(code, qmin), qmax) - int(z[c])) * float(s[c]))
    return x, s, z, want_y, want_mask


@pytest.mark.points(1)
def test_clamp_boundary(lesson):
    """Codes exactly on qmin / qmax pass the gradient; qmin - 1 / qmax + 1 do not; a tie half a step outside goes
    to the even neighbour of x / s (inside or outside depending on the bound's and the zero point's parity).
    Power-of-two scales make x / s and x * (1/s) exact, so every case is exactly what it says."""
    mod = cuda.load(_src(lesson))
    rng = np.random.default_rng(1703)
    for qmin, qmax, zs in [(-128, 127, [0, 5, -128, 127]), (0, 255, [0, 128, 255, 3]), (-8, 6, [0, -8, 6, -3])]:
        x, s, z, want_y, want_mask = _boundary_case(qmin, qmax, zs, [2.0**-3, 1.0, 2.0**5])
        got = _fwd(mod, x, s, z, qmin, qmax, 2, 32)
        _first_mismatch(got, want_y, x, s, z, f"forward at the clamp boundary, range=[{qmin}, {qmax}]")
        dy = _grad(rng, x.shape)
        got = _bwd(mod, x, dy, s, z, qmin, qmax, 2, 32)
        _first_mismatch(got, np.where(want_mask, dy, F32(0)), x, s, z,
                        f"STE mask at the clamp boundary, range=[{qmin}, {qmax}] (codes on the bounds pass the gradient)")
    # codes far outside int32 (|x / s| = 2^31 .. 2^33 and 3e9; a power-of-two scale keeps x * (1/s) exact): they
    # clamp like any other code (torch 2.13's CPU kernel does: x = 3000, s = 1e-6 gives (qmax - z) s, dx = 0); a code
    # held in an int32 overflows
    s = np.array([2.0**-20, 2.0**-20], F32)
    z = np.array([0, 5], np.int32)
    vals = np.array([2.0**11, -(2.0**11), 2.0**12, -(2.0**12), 2.0**13, -(2.0**13), 3000.0, -3000.0], F32)
    x = np.ascontiguousarray(np.broadcast_to(vals, (2, vals.size))[None])  # (outer, C, inner) = (1, 2, 8)
    for qmin, qmax in [(-128, 127), (0, 255)]:
        bound = np.where(x > 0, qmax, qmin) - z[None, :, None]
        want_y = (bound * s.astype(np.float64)[None, :, None]).astype(F32)
        got = _fwd(mod, x, s, z, qmin, qmax, 1, 32)
        _first_mismatch(got, want_y, x, s, z, f"forward with |x / s| >= 2^31 (clamped), range=[{qmin}, {qmax}]")
        dy = _grad(rng, x.shape)
        got = _bwd(mod, x, dy, s, z, qmin, qmax, 1, 32)
        _first_mismatch(got, np.zeros_like(dy), x, s, z, f"STE mask with |x / s| >= 2^31 (clamped: dx = 0), range=[{qmin}, {qmax}]")


@pytest.mark.points(1)
def test_backward_ste(lesson):
    """dx = dy where the unclamped code is inside [qmin, qmax], else 0, on random data of every shape."""
    mod = cuda.load(_src(lesson))
    rng = np.random.default_rng(1704)
    for t, shape in enumerate(SHAPES):
        qmin, qmax = RANGES[(t + 2) % len(RANGES)]
        s, z = _qparams(rng, shape[1], qmin, qmax)
        x = _values(rng, shape, s, z, qmin, qmax)
        dy = _grad(rng, shape)
        _code, _y, mask = _torch_rule(x, s, z, qmin, qmax)
        for grid, block in LAUNCHES[1:3]:
            grid = grid or -(-x.size // block)
            got = _bwd(mod, x, dy, s, z, qmin, qmax, grid, block)
            _first_mismatch(got, np.where(mask, dy, F32(0)), x, s, z,
                            f"STE backward shape={shape} range=[{qmin}, {qmax}] grid={grid} block={block}")


def _lsq(mod, x, dy, s, z, qmin, qmax, g, grid, block):
    outer, C, inner = x.shape
    dx, ds, dz = _nan(outer, C, inner), _nan(C), _nan(C)
    mod.lsq_bwd[grid, block](x, dy, s, z, dx, ds, dz, outer, C, inner, qmin, qmax, g)
    return dx, ds, dz


def _check_lsq(x, dy, s, z, qmin, qmax, g, block, got, what):
    dx, ds, dz = got
    _code, _y, mask = _torch_rule(x, s, z, qmin, qmax)
    _first_mismatch(dx, np.where(mask, dy, F32(0)), x, s, z, what + ": dx")
    rs, rz, abs_s, abs_z, abs_x = _lsq_ref(x, dy, s, z, qmin, qmax, g)
    n = x.shape[0] * x.shape[2]
    depth = math.ceil(n / block) + 10
    for name, got_c, want, tol in (("dscale", ds, rs, 8 * depth * U * abs_s + 4 * U * abs_x),
                                   ("dzero", dz, rz, 8 * depth * U * abs_z)):
        assert not np.isnan(got_c).any(), f"{what}: {name} has NaN (channel {int(np.argmax(np.isnan(got_c)))} never written?)"
        err = np.abs(got_c.astype(np.float64) - want)
        bad = err > tol + 1e-30
        if bad.any():
            c = int(np.argmax(err / (tol + 1e-30)))
            pytest.fail(f"{what}: {name}[{c}] = {got_c[c]!r}, want {want[c]!r} (|error| {err[c]:.3g} > tolerance {tol[c]:.3g}); "
                        f"s = {s[c]!r}, z = {int(z[c])}, {int((~mask[:, c]).sum())} of {n} elements clamped")


@pytest.mark.points(2)
def test_lsq_gradients(lesson):
    """LSQ: dx (the STE mask), dscale and dzero per channel, g = 1 / sqrt(n * qmax) as torch.ao's
    _LearnableFakeQuantize uses it (any g must work: one case uses g = 1). Blocks 32 .. 1024, grids smaller than C."""
    mod = cuda.load(_src(lesson))
    rng = np.random.default_rng(1705)
    cases = [((3, 5, 77), (-128, 127), 64, 5), ((1, 37, 1000), (0, 255), 128, 16), ((5, 300, 3), (-128, 127), 32, 64),
             ((200, 7, 1), (0, 255), 96, 3), ((1, 1, 1), (-8, 7), 32, 1), ((2, 3, 1500), (-8, 7), 1024, 2)]
    for t, (shape, (qmin, qmax), block, grid) in enumerate(cases):
        s, z = _qparams(rng, shape[1], qmin, qmax, tiny_huge=t % 2 == 0)
        x = _values(rng, shape, s, z, qmin, qmax)
        dy = _grad(rng, shape)
        g = 1.0 if t == 3 else 1.0 / math.sqrt(shape[0] * shape[2] * max(qmax, 1))
        got = _lsq(mod, x, dy, s, z, qmin, qmax, g, grid, block)
        _check_lsq(x, dy, s, z, qmin, qmax, g, block, got, f"lsq_bwd shape={shape} range=[{qmin}, {qmax}] grid={grid} block={block}")


@pytest.mark.points(1)
def test_single_pass_and_coalesced(lesson):
    """Counted by the emulator's race build (so the grade is the same on a GPU box): the forward reads each byte of
    x once and writes y once; lsq_bwd reads x and dy once each (dx, dscale and dzero come from one fused pass, not
    a pass for dx and another for the sums) with coalesced requests: a warp's lanes read consecutive elements of
    the channel's rows (at most 5 sectors per request, about n / 32 requests)."""
    mod = cuda.load(_src(lesson), backend="cpu", build="race")
    rng = np.random.default_rng(1706)
    shape, (qmin, qmax) = (2, 5, 1000), (-128, 127)
    s, z = _qparams(rng, shape[1], qmin, qmax, tiny_huge=False)
    x = _values(rng, shape, s, z, qmin, qmax)
    dy = _grad(rng, shape)
    n = x.size
    k = mod.fake_quant_fwd
    y = _nan(*shape)
    k[7, 128](x, s, z, y, *shape, qmin, qmax)
    _first_mismatch(y, _torch_rule(x, s, z, qmin, qmax)[1], x, s, z, "race-build forward")
    cx, cy = cuda.gmem_counters(k.stats, "x"), cuda.gmem_counters(k.stats, "y")
    assert cx["bytes_read"] == x.nbytes and cx["max_reads_per_byte"] == 1, (
        f"fake_quant_fwd reads x {cx['load_bytes'] / x.nbytes:.2f} times per element: one read per element is enough")
    assert cy["stores"] == n, f"fake_quant_fwd stores {cy['stores']} times into y of {n} elements"
    block = 128
    # (2, 5, 1000): long rows; (40, 2, 64): more rows (outer) than a warp has lanes, so lanes that walk the
    # channel's rows (o) instead of its elements within a row (j) touch 32 sectors per request
    shapes = (shape, (40, 2, 64))
    for shape in shapes:
        s, z = _qparams(rng, shape[1], qmin, qmax, tiny_huge=False)
        x = _values(rng, shape, s, z, qmin, qmax)
        dy = _grad(rng, shape)
        n = x.size
        k = mod.lsq_bwd
        dx, ds, dz = _nan(*shape), _nan(shape[1]), _nan(shape[1])
        g = 1.0 / math.sqrt(shape[0] * shape[2] * qmax)
        k[3, block](x, dy, s, z, dx, ds, dz, *shape, qmin, qmax, g)
        _check_lsq(x, dy, s, z, qmin, qmax, g, block, (dx, ds, dz), f"race-build lsq_bwd shape={shape}")
        for name in ("x", "dy"):
            c = cuda.gmem_counters(k.stats, name)
            assert c["bytes_read"] == x.nbytes and c["max_reads_per_byte"] == 1, (
                f"lsq_bwd shape={shape} reads {name} {c['load_bytes'] / x.nbytes:.2f} times per element (some element "
                f"{c['max_reads_per_byte']} times): dx, dscale and dzero come from one pass over x and dy")
            limit = 2 * n // 32 + shape[1] * (block // 32) * shape[0] * 2
            assert c["load_requests"] <= limit and c["load_sectors"] <= 5 * c["load_requests"], (
                f"lsq_bwd shape={shape} reads {name} in {c['load_requests']} warp requests touching {c['load_sectors']} "
                f"sectors (coalesced: at most {limit} requests of at most 5 sectors): the block's threads share the "
                f"channel's elements, consecutive elements of a row to consecutive threads (not one thread doing the "
                f"loop, not a contiguous chunk per thread, not consecutive rows to consecutive threads)")
        assert cuda.gmem_counters(k.stats, "dx")["stores"] == n


@pytest.mark.points(1)
def test_checked_mode(lesson):
    """fwd / rev / random thread and block order, race build and AddressSanitizer build, on small odd shapes."""
    mod = cuda.load(_src(lesson))
    rng = np.random.default_rng(1707)
    shape, (qmin, qmax) = (3, 4, 45), (-128, 127)
    s, z = _qparams(rng, shape[1], qmin, qmax)
    x = _values(rng, shape, s, z, qmin, qmax)
    dy = _grad(rng, shape)
    _code, want, mask = _torch_rule(x, s, z, qmin, qmax)
    r = cuda.check(mod.fake_quant_fwd, (2, 64), (x, s, z, _nan(*shape), *shape, qmin, qmax))
    _first_mismatch(r.outputs[3], want, x, s, z, "checked forward")
    r = cuda.check(mod.fake_quant_bwd, (2, 64), (x, dy, s, z, _nan(*shape), *shape, qmin, qmax))
    _first_mismatch(r.outputs[4], np.where(mask, dy, F32(0)), x, s, z, "checked backward")
    g = 1.0 / math.sqrt(shape[0] * shape[2] * qmax)
    r = cuda.check(mod.lsq_bwd, (3, 64), (x, dy, s, z, _nan(*shape), _nan(shape[1]), _nan(shape[1]), *shape, qmin, qmax, g))
    _check_lsq(x, dy, s, z, qmin, qmax, g, 64, (r.outputs[4], r.outputs[5], r.outputs[6]), "checked lsq_bwd")


@pytest.mark.points(1)
@pytest.mark.requires("torch")
def test_against_torch(lesson):
    """The kernels against torch itself (CPU): fake_quantize_per_channel_affine and its autograd on the tie and
    clamp-boundary cases and on random data (axis = 1 of an (outer, C, inner) tensor, and axis = 0 of a 2-D weight), and _fake_quantize_learnable_per_channel_affine's
    gradients for x, scale and a float zero point (rounded by torch to the int32 zero point the kernel gets)."""
    import torch

    mod = cuda.load(_src(lesson))
    rng = np.random.default_rng(1708)
    # the clamp-boundary and tie cases, forward and autograd, straight against torch
    cases = [(*_tie_cases(rng), -128, 127, "ties")]
    for qmin, qmax, zs in [(-128, 127, [0, 5, -128, 127]), (0, 255, [0, 128, 255, 3])]:
        cases.append((*_boundary_case(qmin, qmax, zs, [2.0**-3, 1.0, 2.0**5])[:3], qmin, qmax, "clamp boundary"))
    for x, s, z, qmin, qmax, name in cases:
        dy = _grad(rng, x.shape)
        xt = torch.from_numpy(x.copy()).requires_grad_()
        yt = torch.fake_quantize_per_channel_affine(xt, torch.from_numpy(s), torch.from_numpy(z), 1, qmin, qmax)
        yt.backward(torch.from_numpy(dy))
        got = _fwd(mod, x, s, z, qmin, qmax, 3, 256)
        _first_mismatch(got, yt.detach().numpy(), x, s, z, f"forward vs torch, {name} cases, range=[{qmin}, {qmax}]")
        got = _bwd(mod, x, dy, s, z, qmin, qmax, 3, 256)
        _first_mismatch(got, xt.grad.numpy(), x, s, z, f"backward vs torch autograd, {name} cases, range=[{qmin}, {qmax}]")
    for shape, (qmin, qmax) in [((3, 37, 77), (-128, 127)), ((1, 300, 33), (0, 255)), ((64, 5, 1), (-128, 127))]:
        s, z = _qparams(rng, shape[1], qmin, qmax)
        x = _values(rng, shape, s, z, qmin, qmax)
        dy = _grad(rng, shape)
        xt = torch.from_numpy(x.copy()).requires_grad_()
        axis = 1
        xin = xt if shape[0] > 1 else xt.reshape(shape[1], shape[2])  # a 2-D weight with axis 0
        if shape[0] == 1:
            axis = 0
        yt = torch.fake_quantize_per_channel_affine(xin, torch.from_numpy(s), torch.from_numpy(z), axis, qmin, qmax)
        yt.backward(torch.from_numpy(dy).reshape(yt.shape))
        want_y = yt.detach().numpy().reshape(shape)
        want_dx = xt.grad.numpy().reshape(shape)
        got = _fwd(mod, x, s, z, qmin, qmax, 9, 128)
        _first_mismatch(got, want_y, x, s, z, f"forward vs torch.fake_quantize_per_channel_affine shape={shape}")
        got = _bwd(mod, x, dy, s, z, qmin, qmax, 9, 128)
        _first_mismatch(got, want_dx, x, s, z, f"backward vs torch autograd shape={shape}")

        zf = (z + rng.uniform(-0.4, 0.4, z.shape)).astype(F32)  # a learnable float zero point; torch rounds it to z
        g = 1.0 / math.sqrt(shape[0] * shape[2] * qmax)
        xt = torch.from_numpy(x.copy()).requires_grad_()
        st = torch.from_numpy(s.copy()).requires_grad_()
        zt = torch.from_numpy(zf).requires_grad_()
        yt = torch._fake_quantize_learnable_per_channel_affine(xt, st, zt, 1, qmin, qmax, g)
        assert np.array_equal(yt.detach().numpy(), want_y), "torch's learnable forward differs from the plain one"
        yt.backward(torch.from_numpy(dy))
        block = 128
        dx, ds, dz = _lsq(mod, x, dy, s, z, qmin, qmax, g, 5, block)
        what = f"lsq_bwd vs torch._fake_quantize_learnable_per_channel_affine shape={shape}"
        _first_mismatch(dx, xt.grad.numpy(), x, s, z, what + ": dx")
        _rs, _rz, abs_s, abs_z, abs_x = _lsq_ref(x, dy, s, z, qmin, qmax, g)
        depth = math.ceil(shape[0] * shape[2] / block) + 10
        # torch sums in float32 too: allow both sides' rounding
        for name, got_c, want, tol in (("dscale", ds, st.grad.numpy(), 16 * depth * U * abs_s + 8 * U * abs_x),
                                       ("dzero", dz, zt.grad.numpy(), 16 * depth * U * abs_z)):
            err = np.abs(got_c.astype(np.float64) - want.astype(np.float64))
            c = int(np.argmax(err - tol))
            assert not np.isnan(got_c).any() and (err <= tol + 1e-30).all(), (
                f"{what}: {name}[{c}] = {got_c[c]!r}, torch {want[c]!r} (tolerance {tol[c]:.3g})")
