"""Misaligned accesses in the CUDA emulator: a GPU stops a kernel with "misaligned address"
(cudaErrorMisalignedAddress) on a vector load/store at an address that is not a multiple of its size,
and on a WMMA load/store whose pointer is not 32-byte aligned or whose ldm is not a multiple of 16 bytes;
the emulator raises CudaMisalignedError (a CudaOutOfBoundsError, kind "misaligned") naming the line, in
every build. Aligned code (argument buffers start 256-byte aligned like cudaMalloc's, `__align__(32)`
shared arrays) runs. The race build counts a float4 access as one 16-byte access (nvcc's LDG.128)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda
from pytest_hpccourse.runtimes.cuda import gpu

SRC = Path(__file__).parent / "cuda" / "kernels" / "alignment.cu"
BUILDS = ("fast", "race", "asan")
pytestmark = pytest.mark.skipif(not cuda.emulator_available(), reason="no C++ compiler for the CUDA emulator")


def _line(tag: str) -> int:
    """The line of alignment.cu marked `// @tag`."""
    lines = [i for i, ln in enumerate(SRC.read_text().splitlines(), 1) if ln.rstrip().endswith(f"// @{tag}")]
    assert len(lines) == 1, tag
    return lines[0]


@pytest.fixture(scope="module")
def mod():
    return cuda.load(SRC, backend="cpu")


def _x(n: int = 256) -> np.ndarray:
    return np.random.default_rng(7).standard_normal(n).astype(np.float32)


def test_aligned_vectors_run_in_every_variant(mod):
    x = _x()
    for off in (0, 4, 8):                         # float4 at 16-byte multiples
        y = np.full(31, np.nan, np.float32)
        r = cuda.check(mod.sum4, (1, 32), (x, y, off, 31))
        want = x[off:off + 4 * 31].reshape(31, 4).astype(np.float64).sum(axis=1)
        np.testing.assert_allclose(r.outputs[1], want, rtol=1e-5, atol=1e-5)
    y = np.full(64, np.nan, np.float32)
    r = cuda.check(mod.sum2, (1, 64), (x, y, 2, 63))   # float2 needs 8 bytes only: 2 floats in is aligned
    np.testing.assert_allclose(r.outputs[1][:63], x[2:2 + 126:2] * x[3:3 + 126:2], rtol=1e-6)
    assert np.isnan(r.outputs[1][63])
    y = np.full(4 * 31 + 8, np.nan, np.float32)
    r = cuda.check(mod.store4, (1, 32), (x, y, 8, 31))
    got = r.outputs[1][8:8 + 4 * 31].reshape(31, 4)
    np.testing.assert_array_equal(got, x[:31, None] * np.array([1, 2, 3, 4], np.float32))
    assert np.isnan(r.outputs[1][:8]).all()
    y = np.full(16, np.nan, np.float32)
    r = cuda.check(mod.smem4, (1, 64), (x, y, 4))      # shared float4 at the tile's 4th float: 16-byte aligned
    tile = np.concatenate([x[:64], np.zeros(16, np.float32)])
    np.testing.assert_allclose(r.outputs[1], tile[4:68].reshape(16, 4).astype(np.float64).sum(axis=1), rtol=1e-5)


MISALIGNED = [
    # kernel, threads, float offset, tag, what the message names
    ("sum4", 32, 1, "sum4", ("`const float4`", "16-byte", "`x`")),
    ("sum4", 32, 2, "sum4", ("`const float4`", "8 bytes past a 16-byte boundary", "`x`")),
    ("store4", 32, 2, "store4", ("store to `float4`", "`y`")),
    ("sum2", 32, 1, "sum2", ("`const float2`", "8-byte", "`x`")),
    ("ldg4", 32, 3, "ldg4", ("`const float4`", "12 bytes past")),     # through the header's __ldg template
    ("smem4", 64, 2, "smem4", ("`__shared__ tile`", "16-byte")),
    ("smem_store4", 64, 1, "smem_store4", ("store to `float4`", "`__shared__ tile`")),
]


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("kernel,threads,off,tag,words", MISALIGNED, ids=[f"{m[0]}-{m[2]}" for m in MISALIGNED])
def test_misaligned_vector_access_raises_with_the_line(mod, build, kernel, threads, off, tag, words):
    if build == "asan" and not cuda.cpu.asan_available():
        pytest.skip("no AddressSanitizer here")
    x = _x()
    y = np.full(200, np.nan, np.float32)
    args = (x, y, off) if kernel.startswith("smem") else (x, y, off, 31)
    with pytest.raises(cuda.CudaMisalignedError) as e:
        getattr(mod, kernel).launch(1, threads, *args, build=build)
    err = e.value
    assert isinstance(err, cuda.CudaOutOfBoundsError) and err.kind == "misaligned"
    assert err.file == str(SRC) and err.line == _line(tag), (err.file, err.line)
    assert err.kernel == kernel and err.thread == (0, 0, 0) and err.block == (0, 0, 0)
    msg = str(err)
    assert f"alignment.cu:{_line(tag)}" in msg and "misaligned address" in msg
    for w in words:
        assert w in msg, (w, msg)


def test_check_reports_the_misaligned_load(mod):
    x = _x()
    y = np.full(31, np.nan, np.float32)
    with pytest.raises(cuda.CudaMisalignedError) as e:
        cuda.check(mod.sum4, (1, 32), (x, y, 1, 31))
    assert e.value.line == _line("sum4") and e.value.variant


def test_float4_access_counts_as_one_16_byte_access():
    """g++ splits a float4 copied into a local into four 4-byte loads unless SRA is off; the race build turns it
    off, so the counters see what nvcc emits: one 16-byte load per thread, 16 sectors per 32-lane request."""
    race = cuda.load(SRC, backend="cpu", build="race")
    n4 = 64
    x = _x(4 * n4)
    y = np.full(n4, np.nan, np.float32)
    k = race.sum4
    k[2, 32](x, y, 0, n4)
    np.testing.assert_allclose(y, x.reshape(n4, 4).astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-6)
    xs = cuda.gmem_counters(k.stats, "x")
    assert (xs["loads"], xs["load_bytes"], xs["bytes_read"]) == (n4, 16 * n4, 16 * n4)
    assert (xs["load_requests"], xs["load_sectors"]) == (n4 // 32, 16 * (n4 // 32))
    assert (k.stats["gmem_loads"], k.stats["gmem_load_bytes"]) == (n4, 16 * n4)
    s = race.store4
    y4 = np.full(4 * n4, np.nan, np.float32)
    s[2, 32](x, y4, 0, n4)
    ys = cuda.gmem_counters(s.stats, "y")
    assert (ys["stores"], ys["store_bytes"], ys["store_requests"], ys["store_sectors"]) == (n4, 16 * n4, 2, 32)


def test_argument_buffers_shared_arrays_and_locals_are_aligned(mod):
    a = np.arange(1, 9, dtype=np.float32)
    b = np.ones(3)
    for build in BUILDS:
        if build == "asan" and not cuda.cpu.asan_available():
            continue
        out = np.full(5, -1, np.int64)
        mod.where.launch(1, 48, a, b, out, build=build)
        assert out.tolist() == [0, 0, 0, 10, 0], (build, out)


# ----------------------------------------------------------------------------- WMMA

def _wmma_inputs():
    rng = np.random.default_rng(11)
    return rng.standard_normal(16 * 48).astype(np.float16), rng.standard_normal(256).astype(np.float16)


@pytest.mark.parametrize("aoff,lda,ldc", [(0, 16, 16), (16, 24, 20), (32, 40, 24)])
def test_aligned_wmma_runs(mod, aoff, lda, ldc):
    a, b = _wmma_inputs()
    c = np.full(16 * ldc, np.nan, np.float32)
    r = cuda.check(mod.wmma_one, (1, 32), (a, b, c, aoff, lda, ldc))
    want = a[aoff:aoff + 16 * lda].reshape(16, lda)[:, :16].astype(np.float64) @ b.reshape(16, 16).astype(np.float64)
    got = r.outputs[2].reshape(16, ldc)
    np.testing.assert_allclose(got[:, :16], want, rtol=1e-5, atol=1e-5)
    assert np.isnan(got[:, 16:]).all()           # the padding of each row is not written


@pytest.mark.parametrize("aoff,lda,ldc,tag,words", [
    (1, 16, 16, "wmma_load", ("load_matrix_sync", "2 bytes past a 32-byte boundary", "`A`")),
    (8, 16, 16, "wmma_load", ("16 bytes past a 32-byte boundary",)),         # 16-byte aligned is not enough
    (0, 20, 16, "wmma_load", ("ldm = 20", "40 bytes", "multiple of 16 bytes")),
    (0, 17, 16, "wmma_load", ("ldm = 17",)),
    (0, 16, 18, "wmma_store", ("store_matrix_sync", "ldm = 18", "72 bytes")),
])
@pytest.mark.parametrize("build", BUILDS)
def test_wmma_misaligned_pointer_or_ldm_raises(mod, build, aoff, lda, ldc, tag, words):
    if build == "asan" and not cuda.cpu.asan_available():
        pytest.skip("no AddressSanitizer here")
    a, b = _wmma_inputs()
    c = np.full(16 * 20, np.nan, np.float32)
    with pytest.raises(cuda.CudaMisalignedError) as e:
        mod.wmma_one.launch(1, 32, a, b, c, aoff, lda, ldc, build=build)
    assert e.value.kind == "misaligned" and e.value.file == str(SRC) and e.value.line == _line(tag)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_wmma_from_shared_memory(mod):
    a, b = _wmma_inputs()
    want = a[:256].reshape(16, 16).astype(np.float64) @ b.reshape(16, 16).astype(np.float64)
    for soff in (0, 16):                        # __align__(32) tile, 32-byte steps: fine
        c = np.full(256, np.nan, np.float32)
        r = cuda.check(mod.wmma_smem, (1, 32), (a[:256], b, c, soff))
        np.testing.assert_allclose(r.outputs[2].reshape(16, 16), want, rtol=1e-5, atol=1e-5)
    for soff in (8, 1):                         # 16 and 2 bytes into the tile
        c = np.full(256, np.nan, np.float32)
        with pytest.raises(cuda.CudaMisalignedError) as e:
            cuda.check(mod.wmma_smem, (1, 32), (a[:256], b, c, soff))
        assert e.value.line == _line("wmma_smem_load") and "`__shared__ As`" in str(e.value)


@pytest.mark.parametrize("body", [
    # a half accumulator stored to a float* (nvcc: no instance of overloaded function matches)
    "wmma::fragment<wmma::accumulator, 16, 16, 16, half> acc; wmma::fill_fragment(acc, __float2half(0.0f)); "
    "wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);",
    # a half matrix_a fragment loaded from a float*
    "wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a; wmma::load_matrix_sync(a, c, 16);",
])
def test_wmma_pointer_type_must_match_the_fragment(tmp_path, body):
    p = tmp_path / "bad.cu"
    p.write_text("#include <mma.h>\nusing namespace nvcuda;\n__global__ void k(float* c) {\n    " + body + "\n}\n")
    with pytest.raises(cuda.CudaCompileError) as e:
        cuda.load(p, backend="cpu", nvcc_check=False).k.launch(1, 32, np.zeros(256, np.float32))
    assert "element type" in str(e.value) and e.value.line == 4


# ----------------------------------------------------------------------------- GPU backend (no GPU needed)

@pytest.mark.parametrize("text", ["CUDA_ERROR_MISALIGNED_ADDRESS: misaligned address",
                                  "cudaErrorMisalignedAddress: misaligned address"])
def test_gpu_fault_maps_to_the_same_error(text):
    with pytest.raises(cuda.CudaMisalignedError) as e:
        gpu._raise_fault(RuntimeError(text), "sgemm")
    assert e.value.kind == "misaligned" and "misaligned address in kernel `sgemm`" in str(e.value)
    with pytest.raises(cuda.CudaMisalignedError) as e:     # sticky: the next get_function fails with it
        gpu._raise_fault(RuntimeError(text), "other", earlier=True)
    assert "a launch before `other` faulted" in str(e.value)
    with pytest.raises(cuda.CudaOutOfBoundsError) as e:
        gpu._raise_fault(RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"), "k")
    assert not isinstance(e.value, cuda.CudaMisalignedError)
    assert gpu._raise_fault(RuntimeError("CUDA_ERROR_INVALID_VALUE"), "k") is None
