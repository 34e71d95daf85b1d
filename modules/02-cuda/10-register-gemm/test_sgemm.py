"""cuda-10 tests: register-blocked, float4, double-buffered SGEMM, C = A @ B, row-major fp32.

Correctness: float64 matmul of the float32 inputs; element-wise bound 2 * K * 2^-24 * (|A| @ |B|)
(a K-term fp32 dot product, with or without FMA, is within gamma_K * (|A| @ |B|), gamma_K ~= K * 2^-24:
Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., 3.1). C is poisoned with NaN.
Shapes are not multiples of any tile (BM, BN, BK, TM, TN, 4), include M, N or K = 1, K < BK and sizes
of several block tiles; K and N that are not multiples of 4 need the scalar path of the loads.

The technique is counted on the emulator's race build (the counters exist only there, so those tests
run on the CPU on every machine and grade the same on a GPU box):
- register blocking: shared-memory load requests per k step <= TM + TN per warp (cuda-09's kernel,
  one shared load per operand of every FMA, makes 2 * TM * TN);
- float4: on a shape with K % 4 == N % 4 == 0 every global load of A and B is 16 bytes, and each
  element is read once per block that needs it (ceil(N / BN) times for A, ceil(M / BM) for B);
- double buffering: at most one __syncthreads() per K-tile plus one (a single-buffered tile loop
  needs two).
The emulator stops a float4 load from an address that is not 16-byte aligned (CudaMisalignedError), as
"misaligned address" does on a GPU, and its race build counts a float4 access as one 16-byte access (as
nvcc makes it).
"""

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

U = 2.0**-24
DEFAULT = dict(BM=64, BN=64, BK=16, TM=4, TN=4)


def _load(lesson, cfg=None, backend=None, build="fast"):
    cfg = cfg or DEFAULT
    backend = backend or cuda.backend()
    return cuda.load(lesson.path("sgemm.cu"), backend=backend, build=build, defines=dict(cfg),
                     banks=(build == "race"))


def _launch(cfg, m, n):
    threads = (cfg["BM"] // cfg["TM"]) * (cfg["BN"] // cfg["TN"])
    return (-(-n // cfg["BN"]), -(-m // cfg["BM"])), threads, 0


def _inputs(rng, m, n, k):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    return a, b, np.full((m, n), np.nan, dtype=np.float32)


def _check(c, a, b, what):
    k = a.shape[1]
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    bound = 2 * k * U * (np.abs(a64) @ np.abs(b64)) + 1e-30
    assert not np.isnan(c).any(), (f"{what}: NaN in C at {np.argwhere(np.isnan(c))[0].tolist()} "
                                   f"({int(np.isnan(c).sum())} elements never written)")
    bad = np.abs(c - want) > bound
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} elements outside the fp32 bound, e.g. C{list(i)} = {c[i]!r}, "
                             f"want {want[i]!r}")


def _run(mod, cfg, a, b, c):
    m, k = a.shape
    n = b.shape[1]
    kernel = mod.sgemm_reg_tiled
    kernel[_launch(cfg, m, n)](a, b, c, m, n, k)
    return kernel.stats


@pytest.mark.points(3)
def test_sgemm_shapes(lesson):
    """Default tiles (BM=BN=64, BK=16, TM=TN=4, 256 threads): M, N, K of 1, below one tile, not multiples
    of any tile or of 4, several block tiles in every direction, and exact tiles."""
    mod = _load(lesson)
    rng = np.random.default_rng(1001)
    shapes = [(1, 1, 1), (1, 70, 33), (67, 1, 5), (33, 47, 29), (100, 130, 72), (129, 67, 257),
              (64, 64, 64), (150, 200, 20), (5, 131, 203), (70, 9, 3)]
    for m, n, k in shapes:
        a, b, c = _inputs(rng, m, n, k)
        _run(mod, DEFAULT, a, b, c)
        _check(c, a, b, f"M={m}, N={n}, K={k}")


@pytest.mark.points(1)
def test_other_tile_sizes(lesson):
    """The kernel is written in terms of BM, BN, BK, TM, TN: two other configurations (64 and 128 threads,
    non-square micro-tiles, two or four float4s of a tile per thread)."""
    rng = np.random.default_rng(1002)
    for cfg in (dict(BM=32, BN=64, BK=8, TM=4, TN=8), dict(BM=128, BN=32, BK=16, TM=8, TN=4)):
        mod = _load(lesson, cfg)
        for m, n, k in [(45, 77, 38), (130, 33, 41), (3, 100, 8)]:
            a, b, c = _inputs(rng, m, n, k)
            _run(mod, cfg, a, b, c)
            _check(c, a, b, f"{cfg}: M={m}, N={n}, K={k}")


@pytest.mark.points(1)
def test_checked_mode(lesson):
    """fwd / rev / random thread order + race build (a missing barrier, a stash into the buffer being read)
    + ASan build (tail loads and stores), on K of several tiles with K and N not multiples of 4."""
    rng = np.random.default_rng(1003)
    m, n, k = 70, 83, 45
    mod = _load(lesson)
    a, b, c = _inputs(rng, m, n, k)
    res = cuda.check(mod.sgemm_reg_tiled, _launch(DEFAULT, m, n), (a, b, c, m, n, k))
    _check(res.outputs[2], a, b, f"checked mode: M={m}, N={n}, K={k}")


# one shape for the counters: K % 4 == N % 4 == 0 (every tile load can be a float4), nothing a multiple
# of BM, BN or BK, 7 K-tiles, 2 x 3 blocks
CM, CN, CK = 100, 136, 100


def _counted(lesson):
    mod = _load(lesson, DEFAULT, backend="cpu", build="race")
    rng = np.random.default_rng(1004)
    a, b, c = _inputs(rng, CM, CN, CK)
    stats = _run(mod, DEFAULT, a, b, c)
    _check(c, a, b, f"race build, M={CM}, N={CN}, K={CK}")
    blocks = -(-CM // DEFAULT["BM"]) * -(-CN // DEFAULT["BN"])
    return stats, blocks, -(-CK // DEFAULT["BK"])


@pytest.mark.points(1)
def test_register_fragments_cut_shared_loads(lesson):
    """Per k step a warp may issue at most TM + TN shared-memory load requests (TM values of As and TN of Bs
    into registers, then TM * TN FMAs from registers); 2 * TM * TN is one shared load per FMA operand."""
    stats, blocks, ntiles = _counted(lesson)
    warps = (DEFAULT["BM"] // DEFAULT["TM"]) * (DEFAULT["BN"] // DEFAULT["TN"]) // 32
    ksteps = blocks * warps * ntiles * DEFAULT["BK"]  # (warp, k) pairs of the launch
    per_k = stats["smem_load_requests"] / ksteps
    limit = DEFAULT["TM"] + DEFAULT["TN"]
    assert per_k <= limit, (
        f"{per_k:.1f} shared-memory load requests per warp and k (limit TM + TN = {limit}; reading both operands "
        f"of every FMA from shared memory makes {2 * DEFAULT['TM'] * DEFAULT['TN']}): copy this thread's TM values "
        f"of As and TN values of Bs for one k into register arrays, then do the TM x TN FMAs from those registers")


@pytest.mark.points(1)
def test_float4_loads_and_one_read_per_block(lesson):
    """K and N multiples of 4: every global load of A and B is a 16-byte float4; every element is read, A's
    at most ceil(N / BN) times and B's at most ceil(M / BM) times (once per block tile that needs it)."""
    stats, _, _ = _counted(lesson)
    for name, times in (("A", -(-CN // DEFAULT["BN"])), ("B", -(-CM // DEFAULT["BM"]))):
        g = cuda.gmem_counters(stats, name)
        width = g["load_bytes"] / max(g["loads"], 1)
        assert g["load_bytes"] == 16 * g["loads"], (
            f"{name}: {g['loads']} global loads of {width:.1f} bytes on average; with K % 4 == N % 4 == 0 every "
            f"load of a tile should be one 16-byte float4 (LDG.128)")
        assert g["bytes_read"] == g["bytes"] and g["max_reads_per_byte"] <= times, (
            f"{name}: {g['bytes_read']} of {g['bytes']} bytes read, some byte {g['max_reads_per_byte']} times "
            f"(at most {times}: one read per block tile that uses it, staged in shared memory)")


@pytest.mark.points(1)
def test_double_buffering_one_barrier_per_tile(lesson):
    """Double buffering: the K-tile loop needs one __syncthreads() per tile (plus one after the first load);
    a single buffer needs two (tile complete before reading, everyone done before overwriting)."""
    stats, blocks, ntiles = _counted(lesson)
    limit = blocks * (ntiles + 1)
    assert stats["barriers"] <= limit, (
        f"{stats['barriers']} barriers for {blocks} blocks x {ntiles} K-tiles (limit {limit}, one per K-tile plus "
        f"one): load tile t + 1 into the other shared-memory buffer while multiplying tile t, so one barrier per "
        f"tile covers both the read-after-write and the write-after-read hazard")
