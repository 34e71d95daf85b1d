"""Planted bugs, each detected by the CPU emulator with the right exception and line.

These always use the emulator (backend="cpu"): on a real GPU a deadlock hangs the device and an
illegal address poisons the CUDA context."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

KERNELS = Path(__file__).parent / "kernels"
pytestmark = pytest.mark.skipif(not cuda.emulator_available(), reason="no C++ compiler for the CUDA emulator")

rng = np.random.default_rng(99)
BUGS = (KERNELS / "bugs.cu").read_text().splitlines()


def line_of(snippet: str, after: str | None = None) -> int:
    """1-based line number of the first line containing `snippet` (after the line containing `after`)."""
    start = 0
    if after:
        start = next(i for i, ln in enumerate(BUGS) if after in ln)
    return next(i + 1 for i, ln in enumerate(BUGS) if i >= start and snippet in ln)


@pytest.fixture(scope="module")
def bugs():
    return cuda.load(KERNELS / "bugs.cu", backend="cpu", timeout=10)


def race_only(**kw):
    return dict(orders=(), race=True, asan=False, **kw)


def asan_only(**kw):
    return dict(orders=(), race=False, asan=True, **kw)


def test_barrier_removed_in_reduction_loop(bugs):
    x = rng.standard_normal(512).astype(np.float32)
    out = np.zeros(2, np.float32)
    with pytest.raises(cuda.CudaRaceError) as e:
        cuda.check(bugs.reduce_no_barrier, (2, 256), (x, out, 512), **race_only())
    assert e.value.kind == "race"
    assert e.value.line == line_of("s[tid] += s[tid + stride]", after="reduce_no_barrier")
    assert "no __syncthreads()" in str(e.value)
    # the full check catches it as well (the fwd and rev orders already disagree)
    with pytest.raises(cuda.CudaRaceError):
        cuda.check(bugs.reduce_no_barrier, (2, 256), (x, out, 512))


def test_neighbour_read_without_barrier(bugs):
    x = rng.standard_normal(300).astype(np.float32)
    y = np.zeros(300, np.float32)
    with pytest.raises(cuda.CudaRaceError) as e:
        cuda.check(bugs.neighbour_no_barrier, (2, 256), (x, y, 300), **race_only())
    assert e.value.line == line_of("s[tid - 1]")
    assert re.search(r"`s\[\d+\]`", str(e.value))
    # without the checked build, the reverse order gives a different answer
    with pytest.raises(cuda.CudaOrderDependenceError):
        cuda.check(bugs.neighbour_no_barrier, (2, 256), (x, y, 300), orders=("fwd", "rev"), race=False, asan=False)


def test_missing_tail_bounds_check(bugs):
    n = 1000
    x, y = rng.standard_normal(n).astype(np.float32), np.zeros(n, np.float32)
    with pytest.raises(cuda.CudaOutOfBoundsError) as e:
        cuda.check(bugs.saxpy_no_bounds, (4, 256), (x, y, 2.0, n), **race_only())
    assert e.value.line == line_of("y[i] = a * x[i] + y[i]")
    assert "index 1000 of `x`" in str(e.value)
    with pytest.raises(cuda.CudaOutOfBoundsError) as e:
        cuda.check(bugs.saxpy_no_bounds, (4, 256), (x, y, 2.0, n), **asan_only())
    assert e.value.line == line_of("y[i] = a * x[i] + y[i]")
    assert "AddressSanitizer" in str(e.value)


def test_shared_memory_overrun(bugs):
    x, y = rng.standard_normal(128).astype(np.float32), np.zeros(128, np.float32)
    for opts in (race_only(), asan_only()):
        with pytest.raises(cuda.CudaOutOfBoundsError) as e:
            cuda.check(bugs.smem_overrun, (1, 128), (x, y, 128), **opts)
        assert e.value.line == line_of("s[tid + 1] = x")
        assert "shared-memory overrun" in str(e.value)


def test_dynamic_shared_memory_too_small(bugs):
    x, y = rng.standard_normal(64).astype(np.float32), np.zeros(64, np.float32)
    for opts in (race_only(), asan_only()):
        with pytest.raises(cuda.CudaOutOfBoundsError) as e:
            cuda.check(bugs.dyn_smem_too_small, (1, 64, 128), (x, y, 64), **opts)
        assert e.value.line == line_of("buf[threadIdx.x] = x[threadIdx.x]")


def test_uninitialised_shared_read(bugs):
    x, y = rng.standard_normal(64).astype(np.float32), np.zeros(64, np.float32)
    with pytest.raises(cuda.CudaUninitializedError) as e:
        cuda.check(bugs.smem_uninit, (1, 64), (x, y, 64), **race_only())
    assert e.value.line == line_of("y[tid] = s[tid]", after="smem_uninit")
    assert "`s[32]`" in str(e.value)


def test_non_atomic_accumulate_across_blocks(bugs):
    x = rng.standard_normal(1000).astype(np.float32)
    total = np.zeros(1, np.float32)
    with pytest.raises(cuda.CudaRaceError) as e:
        cuda.check(bugs.sum_no_atomic, (8, 128), (x, total, 1000), **race_only())
    assert e.value.kind == "global-race"
    assert e.value.line == line_of("*total += s[0]")
    assert "atomicAdd" in str(e.value)


def test_shuffle_mask_with_lanes_parked_at_barrier(bugs):
    x, y = rng.standard_normal(32).astype(np.float32), np.zeros(32, np.float32)
    with pytest.raises(cuda.CudaDeadlockError) as e:
        bugs.shuffle_deadlock[1, 32](x, y)
    msg = str(e.value)
    assert "shuffle_deadlock" in msg
    assert "Threads 0-15 wait at __shfl_down_sync(mask=0xffffffff)" in msg
    assert "Threads 16-31 wait at __syncthreads()" in msg
    assert "lane 16 is parked at __syncthreads()" in msg
    assert e.value.line == line_of("__shfl_down_sync(0xffffffffu, v, 1)")
    assert not isinstance(e.value, cuda.CudaTimeoutError)


def test_segfaulting_kernel(bugs):
    y = np.zeros(32, np.float32)
    with pytest.raises(cuda.CudaOutOfBoundsError) as e:
        bugs.wild_pointer[1, 32](y, 32)
    assert e.value.kind == "segv"
    assert e.value.line == line_of("*p = 1.0f")
    assert "illegal memory access" in str(e.value)


def test_infinite_loop_times_out(bugs):
    x, y = np.arange(8, dtype=np.int32), np.zeros(4, np.int32)
    with pytest.raises(cuda.CudaTimeoutError) as e:
        bugs.infinite_loop.launch(1, 4, x, y, 8, timeout=1)
    assert isinstance(e.value, cuda.CudaDeadlockError)     # a hang is reported as a deadlock family error
    assert "time limit" in str(e.value)
    assert e.value.thread == (1, 0, 0)
    assert line_of("for (int k = 0; k < n; k += step)") - 1 <= e.value.line <= line_of("y[i] = acc;", after="infinite_loop")


def test_integer_division_by_zero(bugs):
    a, b = np.arange(32, dtype=np.int32), np.zeros(32, np.int32)
    with pytest.raises(cuda.CudaCrashError) as e:
        bugs.divide[1, 32](a, b, 0)
    assert e.value.line == line_of("a[threadIdx.x] / d")


def test_legacy_warp_synchronous_code_is_a_race(bugs):
    """Warp-synchronous code without __syncwarp() is racy under the CUDA programming guide
    (independent thread scheduling since Volta); the emulator follows the guide."""
    x = rng.standard_normal(64).astype(np.float32)
    out = np.zeros(1, np.float32)
    with pytest.raises(cuda.CudaRaceError) as e:
        cuda.check(bugs.warp_sync_legacy, (1, 32), (x, out), **race_only())
    assert e.value.line == line_of("vs[tid] += vs[tid + 16]")
    cuda.check(bugs.warp_sync_fixed, (1, 32), (x, out))
    assert out[0] == pytest.approx(x.astype(np.float64).sum(), rel=1e-5)


def test_error_attributes_name_the_kernel_block_and_thread(bugs):
    x, y = rng.standard_normal(128).astype(np.float32), np.zeros(128, np.float32)
    with pytest.raises(cuda.CudaOutOfBoundsError) as e:
        cuda.check(bugs.smem_overrun, (1, 128), (x, y, 128), **race_only())
    err = e.value
    assert err.kernel == "smem_overrun" and err.block == (0, 0, 0) and err.thread == (127, 0, 0)
    assert err.file.endswith("bugs.cu") and err.variant == "race-checked emulator build"
    assert f"bugs.cu:{err.line}" in str(err)


def test_divergent_syncthreads(bugs):
    x = np.ones(64, np.float32)
    with pytest.raises(cuda.CudaDeadlockError) as e:
        bugs.divergent_barrier[1, 64](x)
    assert "divergent __syncthreads()" in str(e.value)
    assert "16 threads (0..15)" in str(e.value) and "48 threads (16..63)" in str(e.value)
    assert e.value.line in (line_of("__syncthreads();", after="divergent_barrier"),
                            line_of("__syncthreads();", after="x[threadIdx.x] += 1.0f"))


UNINIT_LOCAL = r"""
extern "C" __global__ void sum4(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc[4]  INIT;  // a per-thread accumulator (registers on a GPU)
    for (int k = 0; k < 4; ++k) acc[k] += x[4 * i + k];
    y[i] = acc[0] + acc[1] + acc[2] + acc[3];
}
"""


@pytest.mark.skipif(not cuda.cpu._pattern_init_flags(), reason="compiler without -ftrivial-auto-var-init=pattern")
def test_uninitialised_local_accumulator_is_wrong_in_every_run(tmp_path: Path):
    """Fresh fiber stacks are zero, so `float acc[4];` would sum correctly by luck; pattern init makes it wrong."""
    x = rng.standard_normal(4 * 37).astype(np.float32)
    expect = x.reshape(37, 4).sum(axis=1)
    for init, ok in (("", False), ("= {}", True)):
        src = tmp_path / f"sum4_{int(ok)}.cu"
        src.write_text(UNINIT_LOCAL.replace("INIT", init))
        mod = cuda.load(src, backend="cpu", timeout=10)
        y = np.full(37, np.nan, np.float32)
        mod.sum4[(2,), (32,)](x, y, 37)
        assert np.allclose(y, expect, rtol=1e-5) == ok
        if not ok:
            assert np.all(np.abs(y) > 1e37)  # 0xFEFEFEFE as a float is about -1.7e38
