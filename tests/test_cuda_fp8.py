"""`<cuda_fp8.h>` in the CUDA runtime: `__nv_fp8_e4m3` / `__nv_fp8_e5m2` and the `__nv_cvt_*` conversions.

The reference is PyTorch's `torch.float8_e4m3fn` / `torch.float8_e5m2` (round to nearest even):
- decoding: every one of the 256 bytes of both formats, through `float(x)` and `__nv_cvt_fp8_to_halfraw`;
- encoding: a dense sweep of floats (every fp8 value, its float neighbours, every midpoint between two
  consecutive fp8 values and its float neighbours, the overflow thresholds, subnormals, +-inf, NaN, random
  floats of every binade), every half and every bfloat16 bit pattern.

CUDA's saturation modes against torch (whose `.to(float8)` beyond max finite is not a stable reference:
torch 2.13's CPU e4m3fn conversion saturates, even +-inf, its e5m2 conversion overflows to inf):
- `__NV_SATFINITE` (and the class constructors) == torch after clamping to +-max finite (448 / 57344);
  +-inf become +-max finite.
- `__NV_NOSAT` == torch where x does not overflow; beyond that e4m3 (no infinity) gives NaN (0x7F | sign)
  for |x| > 464 (448 + half an ulp) and +-inf, e5m2 gives +-inf (0x7C | sign) for |x| >= 61440
  (57344 + half an ulp) and +-inf.
- NaN: torch keeps the sign of a NaN (0x7F | sign); CUDA's float path gives 0x7F for every NaN (checked
  exactly); NaN bytes decode to the positive canonical NaN (half 0x7FFF, float 0x7FFFFFFF).
On a GPU machine the same tests run against the real header through NVRTC, so they also check that the
emulator and CUDA agree.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not cuda.available(), reason="no GPU and no C++ compiler for the CUDA emulator")

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
MAX = {E4M3: 448.0, E5M2: 57344.0}
KIND = {E4M3: 0, E5M2: 1}  # __NV_E4M3, __NV_E5M2

SOURCE = r"""
#include <cuda_fp8.h>

// all four (saturation, interpretation) pairs of __nv_cvt_float_to_fp8, and the class constructors
__global__ void encode_float(const float* x, unsigned char* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[0 * n + i] = __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, __NV_E4M3);
    out[1 * n + i] = __nv_cvt_float_to_fp8(x[i], __NV_NOSAT, __NV_E4M3);
    out[2 * n + i] = __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, __NV_E5M2);
    out[3 * n + i] = __nv_cvt_float_to_fp8(x[i], __NV_NOSAT, __NV_E5M2);
    out[4 * n + i] = __nv_fp8_e4m3(x[i]).__x;
    out[5 * n + i] = __nv_fp8_e5m2(x[i]).__x;
}

__global__ void encode_double(const double* x, unsigned char* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[0 * n + i] = __nv_cvt_double_to_fp8(x[i], __NV_SATFINITE, __NV_E4M3);
    out[1 * n + i] = __nv_cvt_double_to_fp8(x[i], __NV_NOSAT, __NV_E4M3);
    out[2 * n + i] = __nv_cvt_double_to_fp8(x[i], __NV_SATFINITE, __NV_E5M2);
    out[3 * n + i] = __nv_cvt_double_to_fp8(x[i], __NV_NOSAT, __NV_E5M2);
    out[4 * n + i] = __nv_fp8_e4m3(x[i]).__x;
    out[5 * n + i] = __nv_fp8_e5m2(x[i]).__x;
}

// every half / bfloat16 bit pattern through the raw conversions and the class constructors
__global__ void encode_half(const unsigned short* h, unsigned char* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half_raw r;
    r.x = h[i];
    out[0 * n + i] = __nv_cvt_halfraw_to_fp8(r, __NV_SATFINITE, __NV_E4M3);
    out[1 * n + i] = __nv_cvt_halfraw_to_fp8(r, __NV_NOSAT, __NV_E4M3);
    out[2 * n + i] = __nv_cvt_halfraw_to_fp8(r, __NV_SATFINITE, __NV_E5M2);
    out[3 * n + i] = __nv_cvt_halfraw_to_fp8(r, __NV_NOSAT, __NV_E5M2);
    out[4 * n + i] = __nv_fp8_e4m3(__half(r)).__x;
    out[5 * n + i] = __nv_fp8_e5m2(__half(r)).__x;
}

__global__ void encode_bf16(const unsigned short* h, unsigned char* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __nv_bfloat16_raw r;
    r.x = h[i];
    out[0 * n + i] = __nv_cvt_bfloat16raw_to_fp8(r, __NV_SATFINITE, __NV_E4M3);
    out[1 * n + i] = __nv_cvt_bfloat16raw_to_fp8(r, __NV_NOSAT, __NV_E4M3);
    out[2 * n + i] = __nv_cvt_bfloat16raw_to_fp8(r, __NV_SATFINITE, __NV_E5M2);
    out[3 * n + i] = __nv_cvt_bfloat16raw_to_fp8(r, __NV_NOSAT, __NV_E5M2);
    out[4 * n + i] = __nv_fp8_e4m3(__nv_bfloat16(r)).__x;
    out[5 * n + i] = __nv_fp8_e5m2(__nv_bfloat16(r)).__x;
}

// every byte back to float (class operator) and to half (raw conversion)
__global__ void decode(const __nv_fp8_e4m3* a, const __nv_fp8_e5m2* b, float* fa, float* fb,
                       unsigned short* ha, unsigned short* hb, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    fa[i] = float(a[i]);
    fb[i] = static_cast<float>(b[i]);
    ha[i] = __nv_cvt_fp8_to_halfraw(a[i].__x, __NV_E4M3).x;
    hb[i] = __nv_cvt_fp8_to_halfraw(b[i].__x, __NV_E5M2).x;
}

// the vector types: element 0 in the low byte
__global__ void vectors(const float4* x, unsigned* q4, unsigned short* q2, float4* back, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __nv_fp8x4_e4m3 v(x[i]);
    q4[i] = v.__x;
    q2[i] = __nv_fp8x2_e5m2(make_float2(x[i].x, x[i].y)).__x;
    back[i] = float4(v);
}
"""


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    p = tmp_path_factory.mktemp("fp8") / "fp8.cu"
    p.write_text(SOURCE)
    return cuda.load(p)


def _launch(n):
    return ((n + 127) // 128, 128)


def _fp8_values(dtype) -> np.ndarray:
    v = torch.arange(256, dtype=torch.uint8).view(dtype).float().numpy()
    return np.unique(v[np.isfinite(v)])  # sorted, -0 and +0 merge


def sweep() -> np.ndarray:
    """Floats where an fp8 conversion can go wrong, for both formats, plus random floats of every binade."""
    pts = []
    for dt in (E4M3, E5M2):
        v = _fp8_values(dt)
        mids = (v[:-1] + v[1:]) / 2  # exact in fp32: consecutive fp8 values differ in one low bit
        grid = np.concatenate([v, mids])
        pts += [grid, np.nextafter(grid, np.float32(np.inf)), np.nextafter(grid, np.float32(-np.inf))]
    specials = np.array([448, 464, 480, 512, 57344, 61440, 65536, 1e30, np.finfo(np.float32).max, np.inf,
                         2.0 ** -10, 2.0 ** -17, np.finfo(np.float32).tiny, 1e-45, 0.0], np.float32)
    with np.errstate(over="ignore"):
        specials = np.concatenate([specials, np.nextafter(specials, np.float32(np.inf)),
                                   np.nextafter(specials, np.float32(0))])
    rng = np.random.default_rng(8)
    rand = (rng.uniform(1, 2, 20000) * 2.0 ** rng.integers(-24, 20, 20000)).astype(np.float32)
    x = np.concatenate(pts + [specials, rand]).astype(np.float32)
    x = np.concatenate([x, -x])
    return np.unique(x.view(np.uint32)).view(np.float32)  # keeps -0.0 and +0.0 apart


def overflows(x: np.ndarray, dtype) -> np.ndarray:
    """|x| rounds beyond max finite: e4m3 |x| > 464 (448 + half an ulp; 464 itself ties to even 448),
    e5m2 |x| >= 61440 (57344 + half an ulp ties to even, which is 65536 = inf); +-inf included."""
    a = np.abs(x.astype(np.float64))
    return a > 464.0 if dtype == E4M3 else a >= 61440.0


def cuda_bytes(x: np.ndarray, dtype, saturate: bool) -> np.ndarray:
    """What CUDA documents for float32 x (not NaN), built on torch's round-to-nearest-even encoding.

    torch's own `.to(float8)` is used only on [-max, max]: what it does beyond max differs between
    formats and versions (torch 2.13's CPU e4m3fn conversion saturates, even +-inf; its e5m2 conversion
    gives inf). SATFINITE: torch of x clamped to +-max. NOSAT: torch of x where x does not overflow,
    else NaN 0x7F | sign (e4m3, no inf) or +-inf 0x7C | sign (e5m2)."""
    t = torch.from_numpy(np.ascontiguousarray(x, np.float32)).clamp(-MAX[dtype], MAX[dtype])
    b = t.to(dtype).view(torch.uint8).numpy().copy()
    if not saturate:
        over = overflows(x, dtype)
        b[over] = np.where(np.signbit(x[over]), 0x80, 0) | (0x7F if dtype == E4M3 else 0x7C)
    return b


def assert_bytes(got: np.ndarray, want: np.ndarray, x: np.ndarray, what: str) -> None:
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (f"{what}: {bad.size} of {x.size} differ, e.g. x = {x[bad[0]]!r} "
                           f"(bits 0x{np.asarray(x[bad[0]]).view(np.uint32 if x.dtype == np.float32 else np.uint64):x}): "
                           f"got 0x{got[bad[0]]:02x}, want 0x{want[bad[0]]:02x}")


def test_every_byte_decodes_as_torch(mod):
    b = np.arange(256, dtype=np.uint8)
    fa, fb = np.full(256, -7.0, np.float32), np.full(256, -7.0, np.float32)
    ha, hb = np.zeros(256, np.uint16), np.zeros(256, np.uint16)
    mod.decode[_launch(256)](b, b, fa, fb, ha, hb, 256)
    for got, half, dt in ((fa, ha, E4M3), (fb, hb, E5M2)):
        want = torch.from_numpy(b.copy()).view(dt).float().numpy()
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan), f"{dt}: NaN bytes {np.flatnonzero(np.isnan(got))}"
        assert np.array_equal(got[~nan], want[~nan]) and np.array_equal(np.signbit(got[~nan]), np.signbit(want[~nan]))
        want_h = torch.from_numpy(b.copy()).view(dt).half().view(torch.uint16).numpy()
        assert np.array_equal(half[~nan], want_h[~nan]), f"{dt}: __nv_cvt_fp8_to_halfraw"
        assert np.all((half[nan] & 0x7C00) == 0x7C00) and np.all(half[nan] & 0x03FF), f"{dt}: NaN to half"
        if mod.backend == "cpu":  # the emulator's documented NaN (an H200 gave float 0x7FFFFFFF for e4m3's NaNs)
            assert np.all(got[nan].view(np.uint32) == 0x7FFFFFFF) and np.all(half[nan] == 0x7FFF), f"{dt}: canonical NaN"
    # the formats' landmarks
    assert fa[0x7E] == 448 and np.isnan(fa[0x7F]) and np.isnan(fa[0xFF]) and fa[0x01] == 2.0 ** -9
    assert fb[0x7B] == 57344 and fb[0x7C] == np.inf and fb[0xFC] == -np.inf and fb[0x01] == 2.0 ** -16


def test_float_encoding_rounds_to_nearest_even_and_saturates_as_cuda_documents(mod):
    x = sweep()
    n = x.size
    out = np.full(6 * n, 0xA5, np.uint8)
    mod.encode_float[_launch(n)](x, out, n)
    out = out.reshape(6, n)
    nan = np.isnan(x)
    for row, dt, sat, what in ((0, E4M3, True, "SATFINITE e4m3"), (1, E4M3, False, "NOSAT e4m3"),
                               (2, E5M2, True, "SATFINITE e5m2"), (3, E5M2, False, "NOSAT e5m2"),
                               (4, E4M3, True, "__nv_fp8_e4m3(float)"), (5, E5M2, True, "__nv_fp8_e5m2(float)")):
        assert_bytes(out[row][~nan], cuda_bytes(x[~nan], dt, sat), x[~nan], what)
    # the corners, spelled out
    def at(row, v):
        return out[row, int(np.flatnonzero(x.view(np.uint32) == np.float32(v).view(np.uint32))[0])]

    assert at(0, 464.0) == 0x7E and at(1, 464.0) == 0x7E              # tie at 448 + half an ulp: even 448
    assert at(1, np.nextafter(np.float32(464), np.float32(1e9))) == 0x7F  # just above: NaN without saturation
    assert at(0, np.inf) == 0x7E and at(1, np.inf) == 0x7F and at(1, -np.inf) == 0xFF
    assert at(2, 61440.0) == 0x7B and at(3, 61440.0) == 0x7C           # e5m2's tie rounds up to inf
    assert at(2, -np.inf) == 0xFB and at(3, -np.inf) == 0xFC
    assert at(0, 2.0 ** -10) == 0x00 and at(2, 2.0 ** -17) == 0x00     # half the smallest subnormal: even 0
    assert at(0, -0.0) == 0x80 and at(3, -0.0) == 0x80


def test_nan_encodes_to_0x7f(mod):
    # quiet and signalling NaNs of both signs, with payloads
    x = np.array([0x7FC00000, 0xFFC00000, 0x7FC00001, 0xFFFFFFFF, 0x7F800001, 0xFF800001], np.uint32).view(np.float32)
    out = np.zeros(6 * x.size, np.uint8)
    mod.encode_float[_launch(x.size)](x, out, x.size)
    assert np.all(out == 0x7F), out.reshape(6, -1)


def test_double_encoding_does_not_round_through_float(mod):
    # exactly-representable floats behave as the float path; doubles between floats keep their side of a tie
    x = np.array([464.0 + 1e-9, 464.0 - 1e-9, 61440.0 - 1e-9, 61440.0, 2.0 ** -10 * (1 + 2.0 ** -40), 2.0 ** -10,
                  -2.5, 1e300, -np.inf, 3.0 * 2 ** -11], np.float64)
    n = x.size
    out = np.zeros(6 * n, np.uint8)
    mod.encode_double[_launch(n)](x, out, n)
    out = out.reshape(6, n)
    want = {
        0: [0x7E, 0x7E, 0x7E, 0x7E, 0x01, 0x00, 0xC2, 0x7E, 0xFE, 0x01],   # SATFINITE e4m3
        1: [0x7F, 0x7E, 0x7F, 0x7F, 0x01, 0x00, 0xC2, 0x7F, 0xFF, 0x01],   # NOSAT e4m3
        2: [0x5F, 0x5F, 0x7B, 0x7B, 0x14, 0x14, 0xC1, 0x7B, 0xFB, 0x16],   # SATFINITE e5m2
        3: [0x5F, 0x5F, 0x7B, 0x7C, 0x14, 0x14, 0xC1, 0x7C, 0xFC, 0x16],   # NOSAT e5m2
    }
    want[4], want[5] = want[0], want[2]
    for row, w in want.items():
        assert out[row].tolist() == w, f"row {row}: got {[hex(v) for v in out[row]]}, want {[hex(v) for v in w]}"


@pytest.mark.parametrize("source", ["half", "bf16"])
def test_every_half_and_bfloat16_encodes_as_torch(mod, source):
    bits = np.arange(65536, dtype=np.uint16)
    n = bits.size
    out = np.full(6 * n, 0xA5, np.uint8)
    k = mod.encode_half if source == "half" else mod.encode_bf16
    k[_launch(n)](bits, out, n)
    out = out.reshape(6, n)
    x = torch.from_numpy(bits.copy()).view(torch.float16 if source == "half" else torch.bfloat16).float().numpy()
    nan = np.isnan(x)
    for row, dt, sat in ((0, E4M3, True), (1, E4M3, False), (2, E5M2, True), (3, E5M2, False), (4, E4M3, True),
                         (5, E5M2, True)):
        assert_bytes(out[row][~nan], cuda_bytes(x[~nan], dt, sat), x[~nan], f"{source} row {row}")
        assert np.all(out[row][nan] == 0x7F), f"{source} row {row}: NaN"


def test_vector_types_pack_element_zero_low(mod):
    rng = np.random.default_rng(81)
    n = 37
    x = (rng.standard_normal((n, 4)) * 50).astype(np.float32)
    x[0] = [1000.0, -1000.0, np.inf, 2.0 ** -12]
    q4, q2 = np.zeros(n, np.uint32), np.zeros(n, np.uint16)
    back = np.full((n, 4), np.nan, np.float32)
    mod.vectors[_launch(n)](x, q4, q2, back, n)
    e4 = cuda_bytes(x.ravel(), E4M3, True).reshape(n, 4).astype(np.uint32)
    assert np.array_equal(q4, e4[:, 0] | e4[:, 1] << 8 | e4[:, 2] << 16 | e4[:, 3] << 24)
    e5 = cuda_bytes(x[:, :2].ravel(), E5M2, True).reshape(n, 2).astype(np.uint16)
    assert np.array_equal(q2, e5[:, 0] | e5[:, 1] << 8)
    assert np.array_equal(back, torch.from_numpy(e4.astype(np.uint8)).view(E4M3).float().numpy())


@pytest.mark.skipif(not cuda.emulator_available(), reason="the emulator is not available here")
def test_conversions_are_explicit_as_in_cuda(tmp_path):
    # CUDA's constructors and conversion operators are `explicit`: the emulator refuses what nvcc refuses
    p = tmp_path / "implicit.cu"
    p.write_text(textwrap.dedent("""
        #include <cuda_fp8.h>
        __global__ void k(const __nv_fp8_e4m3* a, float* y) { float f = a[0]; y[0] = f; }
    """))
    with pytest.raises(cuda.CudaCompileError):
        cuda.load(p, backend="cpu", nvcc_check=False)
