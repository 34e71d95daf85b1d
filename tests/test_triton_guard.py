"""pytest_hpccourse.runtimes.triton.guard: out-of-bounds accesses caught in Triton's interpreter; tf32 emulated.

Kernels are wrapped in triton's InterpretedFunction explicitly, so these tests run interpreted whatever
TRITON_INTERPRET says in this process.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402  (after the importorskip guards)
from lesson_factory import write_lesson  # noqa: E402  (after the importorskip guards)
from triton.runtime import interpreter  # noqa: E402  (after the importorskip guards)

from pytest_hpccourse.runtimes.triton import guard  # noqa: E402  (after the importorskip guards)
from pytest_hpccourse.runtimes.triton.guard import TritonOutOfBoundsError, round_to_tf32  # noqa: E402  (after the importorskip guards)

HAS_DESCRIPTORS = hasattr(tl, "make_tensor_descriptor") and hasattr(interpreter.InterpreterBuilder,
                                                                     "create_make_tensor_descriptor")
HAS_BLOCK_PTR = hasattr(interpreter.InterpreterBuilder, "create_make_block_ptr")


def interpreted(fn):
    return interpreter.InterpretedFunction(fn)


@pytest.fixture(autouse=True)
def _guard():
    was, before = guard.installed(), guard.settings()
    guard.install(bounds=True, tf32="truncate")
    yield
    if was:
        guard.install(bounds=before["bounds"], tf32=before["tf32"])
    else:
        guard.uninstall()


def _padded(n: int, pad: int, seed: int = 0, fill: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A length-n view at the start of a buffer with `pad` more elements (what lessons pass in)."""
    g = torch.Generator().manual_seed(seed)
    buf = torch.randn(n + pad, generator=g) if fill is None else torch.full((n + pad,), fill)
    return buf, buf[:n]


# --- kernels -------------------------------------------------------------------------------------

def _copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr, MASK_LOAD: tl.constexpr, MASK_STORE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    if MASK_LOAD:
        x = tl.load(x_ptr + offs, mask=m, other=0.0)
    else:
        x = tl.load(x_ptr + offs)
    if MASK_STORE:
        tl.store(out_ptr + offs, x * 2.0, mask=m)
    else:
        tl.store(out_ptr + offs, x * 2.0)


copy_kernel = interpreted(_copy)


def _copy2d(x_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    m = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=m)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :], x, mask=m)


copy2d_kernel = interpreted(_copy2d)


def _scalar_at(x_ptr, out_ptr, i):
    tl.store(out_ptr, tl.load(x_ptr + i))


scalar_kernel = interpreted(_scalar_at)


def _accumulate(x_ptr, acc_ptr, n, BLOCK: tl.constexpr, MASK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0)
    if MASK:
        tl.atomic_add(acc_ptr + offs, x, mask=m)
    else:
        tl.atomic_add(acc_ptr + offs, x)


def _cas(lock_ptr, i):
    tl.atomic_cas(lock_ptr + i, 0, 1)


accumulate_kernel = interpreted(_accumulate)
cas_kernel = interpreted(_cas)


def _desc_copy(x_ptr, out_ptr, M, N, DESC_M, stride_xm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    desc = tl.make_tensor_descriptor(x_ptr, shape=[DESC_M, N], strides=[stride_xm, 1], block_shape=[BLOCK_M, BLOCK_N])
    tile = desc.load([tl.program_id(0) * BLOCK_M, 0])
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    tl.store(out_ptr + rows[:, None] * N + cols[None, :], tile, mask=(rows[:, None] < M) & (cols[None, :] < N))


desc_kernel = interpreted(_desc_copy)


def _block_ptr_copy(x_ptr, out_ptr, M, N, stride_xm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    CHECK: tl.constexpr):
    src = tl.make_block_ptr(x_ptr, shape=(M, N), strides=(stride_xm, 1), offsets=(tl.program_id(0) * BLOCK_M, 0),
                            block_shape=(BLOCK_M, BLOCK_N), order=(1, 0))
    dst = tl.make_block_ptr(out_ptr, shape=(M, N), strides=(N, 1), offsets=(tl.program_id(0) * BLOCK_M, 0),
                            block_shape=(BLOCK_M, BLOCK_N), order=(1, 0))
    if CHECK:
        tl.store(dst, tl.load(src, boundary_check=(0, 1)), boundary_check=(0, 1))
    else:
        tl.store(dst, tl.load(src))


block_ptr_kernel = interpreted(_block_ptr_copy)


def _dot(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, PRECISION: tl.constexpr,
         ALLOW_TF32: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    if ALLOW_TF32 is not None:
        c = tl.dot(a, b, allow_tf32=ALLOW_TF32)
    else:
        c = tl.dot(a, b, input_precision=PRECISION)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)


dot_kernel = interpreted(_dot)


# --- bounds ----------------------------------------------------------------------------------------

def test_mask_correct_kernel_passes_on_views_inside_padded_buffers():
    _, x = _padded(1000, 1024)
    obuf, out = _padded(1000, 1024, fill=float("nan"))
    copy_kernel[(8,)](x, out, 1000, BLOCK=128, MASK_LOAD=True, MASK_STORE=True)
    assert torch.equal(out, x * 2)
    assert torch.isnan(obuf[1000:]).all()
    assert guard.settings()["checked"] > 0


def test_missing_load_mask_on_a_view_inside_a_padded_buffer_is_caught():
    _, x = _padded(1000, 1024)  # the unmasked lanes 1000..1023 read valid memory: only the guard sees it
    out = torch.empty(1024)
    with pytest.raises(TritonOutOfBoundsError) as e:
        copy_kernel[(8,)](x, out, 1000, BLOCK=128, MASK_LOAD=False, MASK_STORE=False)
    err = e.value
    assert (err.op, err.nbytes, err.arg, err.offset, err.arg_bytes, err.where) == ("load", 4, "x_ptr", 4000, 4000,
                                                                                  "past-end")
    assert err.kernel == "_copy" and err.program == (7, 0, 0) and err.lane == (104,)
    assert err.line is not None and err.line.startswith("test_triton_guard.py:")
    assert "load of 4 B at byte offset 4000 past the end of argument 'x_ptr' (4000 B) in _copy" in str(err)


def test_missing_store_mask_is_caught_before_the_write():
    _, x = _padded(1000, 1024)
    obuf, out = _padded(1000, 1024, fill=float("nan"))
    with pytest.raises(TritonOutOfBoundsError) as e:
        copy_kernel[(8,)](x, out, 1000, BLOCK=128, MASK_LOAD=True, MASK_STORE=False)
    assert (e.value.op, e.value.arg, e.value.offset, e.value.where) == ("store", "out_ptr", 4000, "past-end")
    assert torch.equal(out[:896], x[:896] * 2)  # programs 0..6 ran
    assert torch.isnan(obuf[896:]).all(), "the failing program must not have written any lane"


def test_an_overrun_into_the_next_argument_is_still_caught():
    buf = torch.randn(300)
    x, out = buf[:100], buf[100:200]  # out starts where x ends: the overrun reads out's bytes
    with pytest.raises(TritonOutOfBoundsError) as e:
        copy_kernel[(1,)](x, out, 100, BLOCK=128, MASK_LOAD=False, MASK_STORE=True)
    assert (e.value.arg, e.value.offset) == ("x_ptr", 400)
    assert "belongs to argument 'out_ptr'" in str(e.value)


def test_the_same_tensor_passed_twice_is_fine():
    x = torch.randn(256)
    ref = x * 2
    copy_kernel[(2,)](x, x, 256, BLOCK=128, MASK_LOAD=False, MASK_STORE=False)
    assert torch.equal(x, ref)


@pytest.mark.parametrize("i,where,offset", [(10, "past-end", 40), (-1, "before", -4), (9, None, None)])
def test_scalar_pointer_loads(i, where, offset):
    _, x = _padded(10, 64)
    out = torch.full((1,), float("nan"))
    if where is None:
        scalar_kernel[(1,)](x, out, i)
        assert out.item() == x[9].item()
        return
    with pytest.raises(TritonOutOfBoundsError) as e:
        scalar_kernel[(1,)](x, out, i)
    assert (e.value.arg, e.value.where, e.value.offset) == ("x_ptr", where, offset)


def _strided_views():
    g = torch.Generator().manual_seed(3)
    M, N = 37, 45
    padded = torch.randn(M + 5, N + 19, generator=g)[2:2 + M, 3:3 + N]  # row stride 64, inside a larger buffer
    transposed = torch.randn(N, M, generator=g).t()  # strides (1, M)
    every_other = torch.randn(M, 2 * N, generator=g)[:, ::2]  # column stride 2
    return {"padded": padded, "transposed": transposed, "every_other": every_other}


@pytest.mark.parametrize("name", ["padded", "transposed", "every_other"])
def test_strided_views_pass_with_their_strides(name):
    x = _strided_views()[name]
    M, N = x.shape
    out = torch.full((M, N), float("nan"))
    copy2d_kernel[(triton.cdiv(M, 16),)](x, out, M, N, x.stride(0), x.stride(1), N, BLOCK_M=16, BLOCK_N=64)
    assert torch.equal(out, x)


@pytest.mark.parametrize("name", ["padded", "every_other"])
def test_strided_views_fail_with_a_contiguous_stride(name):
    # offsets built as if the view were contiguous (row stride N, column stride 1): some land between rows
    # (padded) or between columns (every_other), bytes the view does not own although they are in its span
    x = _strided_views()[name]
    M, N = x.shape
    out = torch.full((M, N), float("nan"))
    with pytest.raises(TritonOutOfBoundsError) as e:
        copy2d_kernel[(triton.cdiv(M, 16),)](x, out, M, N, N, 1, N, BLOCK_M=16, BLOCK_N=64)
    assert (e.value.op, e.value.arg, e.value.where) == ("load", "x_ptr", "gap")
    assert "strides" in str(e.value)


def test_rows_past_the_last_row_of_a_strided_view_are_caught():
    x = _strided_views()["padded"]
    M, N = x.shape
    out = torch.full((M + 3, N), float("nan"))
    with pytest.raises(TritonOutOfBoundsError) as e:  # M + 3 rows claimed: the mask lets 3 extra rows through
        copy2d_kernel[(triton.cdiv(M + 3, 16),)](x, out, M + 3, N, x.stride(0), 1, N, BLOCK_M=16, BLOCK_N=64)
    assert e.value.arg == "x_ptr" and e.value.where in ("past-end", "gap")


@pytest.mark.parametrize("masked", [True, False])
def test_atomic_rmw(masked):
    n = 300
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-50, 50, (n,), generator=g, dtype=torch.int32)
    abuf = torch.full((n + 128,), -7, dtype=torch.int32)
    acc = abuf[:n]
    acc.copy_(torch.arange(n, dtype=torch.int32))
    if masked:
        accumulate_kernel[(3,)](x, acc, n, BLOCK=128, MASK=True)
        assert torch.equal(acc, torch.arange(n, dtype=torch.int32) + x)
        return
    with pytest.raises(TritonOutOfBoundsError) as e:
        accumulate_kernel[(3,)](x, acc, n, BLOCK=128, MASK=False)
    assert (e.value.op, e.value.arg, e.value.offset, e.value.where) == ("atomic", "acc_ptr", 4 * n, "past-end")
    assert (abuf[n:] == -7).all()


@pytest.mark.parametrize("i", [3, 4])
def test_atomic_cas(i):
    locks = torch.zeros(8, dtype=torch.int32)[:4]
    if i < 4:
        cas_kernel[(1,)](locks, i)
        assert locks.tolist() == [0, 0, 0, 1]
        return
    with pytest.raises(TritonOutOfBoundsError) as e:
        cas_kernel[(1,)](locks, i)
    assert (e.value.op, e.value.arg, e.value.offset) == ("atomic_cas", "lock_ptr", 16)


@pytest.mark.skipif(not HAS_DESCRIPTORS, reason="this triton's interpreter has no tensor descriptors")
def test_tensor_descriptors_pass_with_the_right_shape_and_fail_with_a_too_large_one():
    M, N = 37, 32
    buf = torch.randn(M + 20, N)
    x = buf[:M]
    out = torch.full((M, N), float("nan"))
    desc_kernel[(3,)](x, out, M, N, M, N, BLOCK_M=16, BLOCK_N=32)  # the descriptor's bounds check masks rows >= M
    assert torch.equal(out, x)
    with pytest.raises(TritonOutOfBoundsError) as e:  # a descriptor that claims M + 8 rows reads the padding
        desc_kernel[(3,)](x, out, M, N, M + 8, N, BLOCK_M=16, BLOCK_N=32)
    assert (e.value.arg, e.value.where) == ("x_ptr", "past-end")


@pytest.mark.skipif(not HAS_BLOCK_PTR, reason="block pointers were removed from this triton (tensor descriptors "
                                               "replace them; see the descriptor test)")
def test_block_pointers_with_and_without_boundary_check():
    M, N = 37, 32
    x = torch.randn(M + 20, N)[:M]
    out = torch.full((M, N), float("nan"))
    block_ptr_kernel[(3,)](x, out, M, N, N, BLOCK_M=16, BLOCK_N=32, CHECK=True)
    assert torch.equal(out, x)
    with pytest.raises(TritonOutOfBoundsError):
        block_ptr_kernel[(3,)](x, out, M, N, N, BLOCK_M=16, BLOCK_N=32, CHECK=False)


def test_other_kernel_errors_keep_the_interpreter_error():
    x = torch.randn(8)
    with pytest.raises(Exception) as e:
        copy_kernel[(1,)](x, x, 8, BLOCK=6, MASK_LOAD=True, MASK_STORE=True)  # arange of 6: not a power of 2
    assert not isinstance(e.value, TritonOutOfBoundsError)


def test_sanitize_off_lets_the_overrun_through(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("HPCCOURSE_TRITON_SANITIZE", "0")
    assert guard.enable_for_interpreter()
    assert guard.settings()["bounds"] is False and guard.settings()["tf32"] == "truncate"
    _, x = _padded(1000, 1024)
    copy_kernel[(8,)](x, torch.empty(1024), 1000, BLOCK=128, MASK_LOAD=False, MASK_STORE=False)


def test_enable_does_nothing_without_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert guard.enable_for_interpreter() is False


def test_extent_of_views():
    buf = torch.zeros(10, 16)
    e = guard.extent_of("x", buf[2:5, 1:9])
    assert (e.lo - buf.data_ptr(), e.hi - buf.data_ptr(), e.dense, e.nested) == (4 * 33, 4 * (4 * 16 + 9), False, True)
    assert guard.extent_of("y", buf.t()).dense
    empty = guard.extent_of("z", buf[:0])
    assert empty.lo == empty.hi


# --- tf32 ------------------------------------------------------------------------------------------

def _tf32_reference(bits: int, mode: str) -> int:
    """Independent reference: exact arithmetic on the float's value (Python floats are float64)."""
    x = struct.unpack("<f", struct.pack("<I", bits))[0]
    if math.isnan(x) or math.isinf(x) or x == 0.0:
        return bits
    _, e = math.frexp(x)  # |x| = m * 2**e, 0.5 <= m < 1
    ulp = 2.0 ** max(e - 11, -136)  # 11 significant bits; subnormal tf32 spacing 2**-136
    q = x / ulp  # exact: a power-of-two scaling of a float32 value
    r = (round(q) if mode == "rne" else math.trunc(q)) * ulp  # round(): ties to even
    if abs(r) > 3.4028234663852886e38:
        r = math.copysign(math.inf, x)
    return struct.unpack("<I", struct.pack("<f", r))[0]


SPECIALS = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC00001,  # 0, inf, nan
            0x00000001, 0x00001000, 0x00001FFF, 0x00003000, 0x807FFFFF, 0x00800000,  # subnormals, min normal
            0x7F7FFFFF, 0xFF7FF000, 0x7F7FEFFF,  # largest finite values: RNE overflows to inf
            0x3FFFFFFF, 0x3FBFFFFF, 0xBF7FF000,  # carry into the next binade
            0x3F801000, 0x3F803000, 0x3F801001, 0x3F800FFF]  # ties (even / odd kept bit), just above/below half


@pytest.mark.parametrize("mode", ["truncate", "rne"])
def test_tf32_rounding_matches_the_reference_bit_for_bit(mode):
    rng = np.random.default_rng(7)
    bits = np.concatenate([np.array(SPECIALS, dtype=np.uint32),
                           rng.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32)])
    got = round_to_tf32(bits.view(np.float32), mode).view(np.uint32)
    want = np.array([_tf32_reference(int(b), mode) for b in bits], dtype=np.uint32)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(hex(bits[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]
    assert np.isnan(round_to_tf32(np.array([np.nan], np.float32), mode)).all()
    expected_two = 0x40000000 if mode == "rne" else 0x3FFFE000
    assert int(round_to_tf32(np.array([0x3FFFFFFF], np.uint32).view(np.float32), mode).view(np.uint32)[0]) == expected_two


def _dot_inputs(seed=11, M=32, N=32, K=64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=g), torch.randn(K, N, generator=g)


def _run_dot(a, b, precision=None, allow_tf32=None):
    c = torch.full((a.shape[0], b.shape[1]), float("nan"))
    dot_kernel[(1,)](a, b, c, a.shape[0], b.shape[1], a.shape[1], PRECISION=precision, ALLOW_TF32=allow_tf32)
    return c


def _rel_rms(x, ref):
    return float(torch.sqrt(((x.double() - ref) ** 2).mean()) / torch.sqrt((ref ** 2).mean()))


def test_default_dot_on_fp32_is_tf32_and_ieee_is_exact(monkeypatch):
    monkeypatch.delenv("TRITON_F32_DEFAULT", raising=False)
    a, b = _dot_inputs()
    exact = a.double() @ b.double()
    ieee = _run_dot(a, b, "ieee")
    assert _rel_rms(ieee, exact) < 1e-6  # fp32 products, 64 fp32 additions
    ta = torch.from_numpy(round_to_tf32(a.numpy()))
    tb = torch.from_numpy(round_to_tf32(b.numpy()))
    emulated = ta.double() @ tb.double()
    for c in (_run_dot(a, b, None), _run_dot(a, b, "tf32"), _run_dot(a, b, allow_tf32=True)):
        assert _rel_rms(c, emulated) < 1e-6  # exactly the truncated operands, fp32 accumulation
        # truncating 13 bits: per-operand relative error in [0, 2^-10), mean 2^-11 = 4.9e-4; products of two
        # operands and random signs over K = 64 terms give a relative RMS error of about 1e-3 of the result
        assert 2e-4 < _rel_rms(c, exact) < 3e-3
    assert _rel_rms(_run_dot(a, b, "tf32x3"), exact) < 1e-6  # emulated as ieee (documented)
    assert _rel_rms(_run_dot(a, b, allow_tf32=False), exact) < 1e-6


def test_triton_f32_default_env_and_rne_mode(monkeypatch):
    a, b = _dot_inputs(seed=12)
    exact = a.double() @ b.double()
    monkeypatch.setenv("TRITON_F32_DEFAULT", "ieee")
    assert _rel_rms(_run_dot(a, b, None), exact) < 1e-6
    monkeypatch.delenv("TRITON_F32_DEFAULT")
    guard.install(tf32="rne")
    ra = torch.from_numpy(round_to_tf32(a.numpy(), "rne")).double()
    rb = torch.from_numpy(round_to_tf32(b.numpy(), "rne")).double()
    c = _run_dot(a, b, "tf32")
    assert _rel_rms(c, ra @ rb) < 1e-6
    assert 1e-4 < _rel_rms(c, exact) < 2e-3  # RNE: half the truncation error, no bias
    guard.install(tf32="off")
    assert _rel_rms(_run_dot(a, b, "tf32"), exact) < 1e-6  # the interpreter's own behaviour


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_operands_are_not_rounded_and_bf16_dots_are_right(dtype):
    # products of 16-bit values are exact in fp32, so the dot is exact up to fp32 accumulation. (Without the
    # guard, triton 3.9's interpreter multiplies bf16's raw uint16 bit patterns: results ~1e10.)
    a, b = (t.to(dtype) for t in _dot_inputs(seed=13))
    exact = a.double() @ b.double()
    for precision in (None, "ieee"):
        assert _rel_rms(_run_dot(a, b, precision), exact) < 1e-6


# --- wiring ----------------------------------------------------------------------------------------

UNMASKED = '''
import triton
import triton.language as tl

@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ### BEGIN SOLUTION
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, x * 2.0, mask=offs < n)
    ### END SOLUTION

def scale(x, out):
    scale_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
'''

SCALE_TEST = '''
import torch

def test_scale(lesson):
    mod = lesson.load("kernel.py")
    x = torch.randn(1000)[:100]  # a view inside a larger buffer: the unmasked read stays in valid memory
    out = torch.full((100,), float("nan"))
    mod.scale(x, out)
    assert torch.equal(out, x * 2)
'''


def test_the_plugin_guards_triton_lessons_on_the_interpreter(course, monkeypatch):
    from pytest_hpccourse.grading import capabilities

    if capabilities.has_torch_cuda():
        pytest.skip("a CUDA GPU runs Triton compiled, not interpreted")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("HPCCOURSE_TRITON_SANITIZE", raising=False)
    write_lesson(course.path, "m/01", "demo-01", requires='["triton"]', kernel=UNMASKED, test=SCALE_TEST)
    result = course.runpytest_subprocess("-p", "no:cacheprovider", "--course-report")
    out = result.stdout.str()
    assert "load of 4 B at byte offset 400 past the end of argument 'x_ptr' (400 B) in scale_kernel" in out, out
    assert "demo-01" in out and "0/4" in out
