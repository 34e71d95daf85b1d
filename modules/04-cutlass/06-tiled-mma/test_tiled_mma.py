"""cute-06 tests: the lane -> fragment ownership of mma.sync.m16n8k16 (f16 in, f32 accumulate) and a CTA tile of C
computed through a TiledMMA's partitions.

One build and one run of driver_host.cpp serve every host test (pytest_hpccourse.runtimes.cute.cutecxx caches the binary). Three
independent references for the ownership maps, each for all 32 lanes x every value of A, B and C:
- the PTX ISA's fragment tables ("Matrix Fragments for mma.m16n8k16 with floating point type"), written below as
  the ISA states them: groupID = %laneid >> 2, threadID_in_group = %laneid % 4, and the row/col rules per a_i, b_i,
  c_i;
- CuTe C++'s MMA_Traits<SM80_16x8x16_F32F16F16F32_TN> (ALayout, BLayout, CLayout), printed by the driver;
- the CuTe DSL's MmaF16BF16Op(Float16, Float32, (16, 8, 16)) tv_layout_A/B/C (evaluated with pycute).
The TiledMMA's C partition is compared with the contract (warps column-major, the PTX table per warp) and with
the DSL's make_tiled_mma(op, (2, 2, 1), permutation_mnk=(32, 32, 16)).tv_layout_C_tiled.
Numerics: the driver's inputs are multiples of 1/8 in [-1, 1], so every product and partial sum is exact in fp32 and
D must equal numpy's float64 A @ B + C exactly (no tolerance needed, and a single misplaced value shows). The host
emulates mma.sync from CuTe's traits with the 32 lanes of a warp as threads; on a GPU (driver_gpu.cu) the same code
runs the real instruction.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import pytest

from pytest_hpccourse.runtimes.cute import cutecxx

cutlass = cute = None  # the CuTe DSL, imported when a DSL test runs
VALUES = {"A": 8, "B": 4, "C": 4}
SHAPE = {"A": (16, 16), "B": (16, 8), "C": (16, 8)}  # (rows, cols) in the PTX convention: A m x k, B k x n, C m x n


def ptx_table(operand: str, lane: int, i: int) -> tuple[int, int]:
    """PTX ISA, mma.m16n8k16 with .f16/.bf16 A and B and .f32 C/D: (row, col) of value i of `lane`."""
    group, tig = lane >> 2, lane % 4  # groupID, threadID_in_group
    if operand == "A":  # a0..a7
        row = group if i < 2 or 4 <= i < 6 else group + 8
        col = tig * 2 + (i & 1) + (8 if i >= 4 else 0)
    elif operand == "B":  # b0..b3; B is K x N
        row = tig * 2 + (i & 1) + (8 if i >= 2 else 0)
        col = group
    else:  # c0..c3
        row = group if i < 2 else group + 8
        col = tig * 2 + (i & 1)
    return row, col


@dataclass
class Run:
    maps: dict[str, np.ndarray] = field(default_factory=dict)  # operand -> (32, V, 2) (row, col)
    traits: dict[str, np.ndarray] = field(default_factory=dict)
    warp: dict[str, np.ndarray] = field(default_factory=dict)
    tiled: dict[str, object] = field(default_factory=dict)
    gemm: dict[str, np.ndarray] = field(default_factory=dict)
    todo: list[str] = field(default_factory=list)


@cache  # every test parses the same output: once per process
def _parse(out: str) -> Run:
    run = Run()
    shapes = {"warpA": (16, 16), "warpB": (16, 8), "warpC": (16, 8), "warpD": (16, 8)}
    gemm_shape = None
    for line in out.splitlines():
        head, _, rest = line.partition(" ")
        if head in ("maps", "traits"):
            op, _, nums = rest.partition(" ")
            getattr(run, head)[op] = np.array(nums.split(), dtype=np.int64).reshape(32, VALUES[op], 2)
        elif head in shapes:
            run.warp[head[4]] = np.array(rest.split(), dtype=np.float64).reshape(shapes[head])
        elif head == "tiled":
            kv = dict(x.split("=") for x in rest.split())
            run.tiled["tile"] = tuple(int(x) for x in kv["tile"].split(","))
            run.tiled["threads"] = int(kv["threads"])
        elif head == "layoutC":
            run.tiled["layout"] = rest
        elif head == "tvC":
            run.tiled["tv"] = np.array(rest.split(), dtype=np.int64)
        elif head == "gemm":
            gemm_shape = tuple(int(x) for x in rest.split())
        elif head in ("gA", "gB", "gC", "gD") and gemm_shape:
            m, n, k = gemm_shape
            shape = {"gA": (m, k), "gB": (n, k), "gC": (m, n), "gD": (m, n)}[head]
            run.gemm[head[1]] = np.array(rest.split(), dtype=np.float64).reshape(shape)
        elif head == "mma_rounds":
            run.gemm["mma_rounds"] = np.array(rest.split(), dtype=np.int64)
        elif head == "outside":
            run.gemm["outside"] = np.array(int(rest))
        elif head == "todo":
            run.todo.append(line)
    return run


@pytest.fixture
def run(lesson) -> Run:
    return _parse(cutecxx.run(lesson.path("driver_host.cpp")))


def _first_mismatch(got: np.ndarray, want: np.ndarray, operand: str, what: str) -> str | None:
    bad = np.argwhere(np.any(got != want, axis=-1))
    if bad.size == 0:
        return None
    lane, i = (int(x) for x in bad[0])
    g, w = tuple(int(x) for x in got[lane, i]), tuple(int(x) for x in want[lane, i])
    return (f"{operand}: lane {lane} value {i} is (row, col) = {g} in your map, {w} in {what} "
            f"({len(bad)} of {got.shape[0] * got.shape[1]} (lane, value) pairs differ)")


@pytest.mark.points(2)
def test_fragment_maps_match_the_ptx_isa_tables(run):
    for op, nv in VALUES.items():
        want = np.array([[ptx_table(op, lane, i) for i in range(nv)] for lane in range(32)])
        msg = _first_mismatch(run.maps[op], want, op, "the PTX ISA table")
        assert msg is None, msg


@pytest.mark.points(1)
def test_fragment_maps_match_cute_cxx_sm80_traits(run):
    for op in VALUES:
        msg = _first_mismatch(run.maps[op], run.traits[op], op,
                              "CuTe C++'s MMA_Traits<SM80_16x8x16_F32F16F16F32_TN>")
        assert msg is None, msg


def _pycute_values(text: str) -> np.ndarray:
    import pycute

    shape, stride = (ast.literal_eval(part) for part in re.sub(r"_(\d)", r"\1", text).split(":"))
    layout = pycute.Layout(shape, stride)
    return np.array([layout(i) for i in range(layout.size())], dtype=np.int64)


@cache
def _dsl_layouts() -> dict[str, str]:
    global cutlass, cute  # the DSL resolves names in this module's globals
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.nvgpu import warp

    out: dict[str, str] = {}

    @cute.jit
    def build():
        op = warp.MmaF16BF16Op(cutlass.Float16, cutlass.Float32, (16, 8, 16))
        atom = cute.make_tiled_mma(op)
        out["A"], out["B"], out["C"] = str(atom.tv_layout_A), str(atom.tv_layout_B), str(atom.tv_layout_C)
        tiled = cute.make_tiled_mma(op, (2, 2, 1), permutation_mnk=(32, 32, 16))
        out["tiledC"] = str(tiled.tv_layout_C_tiled)

    build()
    return out


def _dsl_rowcol(op: str, idx: np.ndarray) -> np.ndarray:
    """DSL TV layouts index A as m + 16k, B as n + 8k (B stored N x K), C as m + 16n; return PTX (row, col)."""
    if op == "A":
        return np.stack([idx % 16, idx // 16], axis=-1)
    if op == "B":
        return np.stack([idx // 8, idx % 8], axis=-1)
    return np.stack([idx % 16, idx // 16], axis=-1)


@pytest.mark.points(1)
@pytest.mark.requires("cute-dsl")
def test_fragment_maps_match_the_cute_dsl_tv_layouts(run):
    layouts = _dsl_layouts()
    for op, nv in VALUES.items():
        idx = _pycute_values(layouts[op])  # i = lane + 32 * value
        want = _dsl_rowcol(op, idx.reshape(nv, 32).T)
        msg = _first_mismatch(run.maps[op], want, op, f"the CuTe DSL's tv_layout_{op} {layouts[op]}")
        assert msg is None, msg


@pytest.mark.points(1)
def test_warp_mma_with_your_fragments_equals_numpy(run):
    a, b, c, d = (run.warp[k] for k in "ABCD")
    want = a @ b + c
    bad = np.argwhere(d != want)
    assert bad.size == 0, (f"D = A*B + C of one 16x8x16 atom: {len(bad)} of 128 elements wrong, first (row, col) = "
                           f"{tuple(int(x) for x in bad[0])}: got {d[tuple(bad[0])]}, want {want[tuple(bad[0])]} "
                           f"(the emulated mma.sync places values as the hardware does; your maps load/store them)")


def _needs_tiled(run: Run) -> None:
    assert not run.todo, "; ".join(run.todo)
    assert "tv" in run.tiled, "the driver printed no TiledMMA"


def _compare_c_partition(run: Run, want: np.ndarray, source: str) -> None:
    """The learner's TiledMMA has the contract's size and its C TV layout (m + 32 * n per thread + 128 * value)
    equals `want`, taken from `source`."""
    _needs_tiled(run)
    assert run.tiled["threads"] == 128, f"the TiledMMA has {run.tiled['threads']} threads; 2 x 2 warps are 128"
    assert run.tiled["tile"] == (32, 32, 16), (f"the TiledMMA covers {run.tiled['tile']} per step; the contract's "
                                               f"2 x 2 warps permuted to 32 x 32 x 16")
    got = run.tiled["tv"]
    assert got.shape == want.shape, (f"your C TV layout {run.tiled['layout']} has {got.size} entries, "
                                     f"{want.size} in {source}")
    bad = np.flatnonzero(got != want)
    if bad.size:
        t, v = int(bad[0]) % 128, int(bad[0]) // 128
        pytest.fail(f"thread {t} value {v} owns C (m, n) = ({got[bad[0]] % 32}, {got[bad[0]] // 32}) in your "
                    f"TiledMMA {run.tiled['layout']}, ({want[bad[0]] % 32}, {want[bad[0]] // 32}) in {source}")


@pytest.mark.points(1)
@pytest.mark.requires("cute-dsl")
def test_tiled_mma_c_partition_matches_the_dsl(run):
    text = _dsl_layouts()["tiledC"]
    _compare_c_partition(run, _pycute_values(text), f"the DSL's {text}")


def contract_tv_c(i: int) -> int:
    """The contract's TiledMMA, C's TV layout at flat index i = thread + 128 * value, as m + 32 * n: warp w of the
    2 x 2 warps sits at (w % 2, w // 2) (column-major, CuTe's default stride), each warp's 16 x 8 atom owns C by the
    PTX table, and the 32 x 32 x 16 permutation repeats the atom once along N (value v = atom value + 4 * repeat)."""
    t, v = i % 128, i // 128
    warp, lane = divmod(t, 32)
    row, col = ptx_table("C", lane, v % 4)
    m = 16 * (warp % 2) + row
    n = 8 * (warp // 2) + col + 16 * (v // 4)
    return m + 32 * n


@pytest.mark.points(1)
def test_tiled_mma_c_partition_matches_the_contract(run):
    # the DSL test above checks the same layout where the CuTe DSL is installed; this one needs only the PTX table
    want = np.array([contract_tv_c(i) for i in range(128 * 8)])  # 32 x 32 elements of C
    _compare_c_partition(run, want, "the contract (2 x 2 warps column-major, the PTX table per warp, the atom "
                                    "repeated once along N)")


@pytest.mark.points(2)
def test_cta_gemm_through_the_partitions_equals_numpy(run):
    _needs_tiled(run)
    a, b, c, d = (run.gemm[k] for k in "ABCD")
    want = a @ b.T + c
    bad = np.argwhere(d != want)
    assert bad.size == 0, (f"C += A*B^T for the 64x64x32 tile: {len(bad)} of {d.size} elements wrong, first (row, col) "
                           f"= {tuple(int(x) for x in bad[0])}: got {d[tuple(bad[0])]}, want {want[tuple(bad[0])]}")
    assert int(run.gemm["outside"]) == 0, "elements of C outside the 64x64 tile (its padding columns) changed"
    # the tile must go through the TiledMMA's atoms: 64*64*32 / (16*8*16) = 64 mma.sync, 16 per warp, each once
    rounds = run.gemm["mma_rounds"].tolist()
    assert rounds == [16, 16, 16, 16], (f"emulated mma.sync calls per warp: {rounds}, want 16 each "
                                        "(one per 16x8x16 atom of the warp's part of the 64x64x32 tile, through gemm)")


@pytest.mark.requires("cute-gpu")
def test_gpu_mma_sync_equals_numpy(lesson):
    """driver_gpu.cu: the same functions with the real mma.sync (SM80_16x8x16_F32F16F16F32_TN); needs nvcc + a GPU."""
    gpu = _parse(cutecxx.run(lesson.path("driver_gpu.cu"), gpu=True, timeout=120))
    _needs_tiled(gpu)
    a, b, c, d = (gpu.warp[k] for k in "ABCD")
    assert np.array_equal(d, a @ b + c), "one atom on the GPU: D != A*B + C"
    a, b, c, d = (gpu.gemm[k] for k in "ABCD")
    assert np.array_equal(d, a @ b.T + c), "the CTA tile on the GPU: D != A*B^T + C"
    assert int(gpu.gemm["outside"]) == 0
