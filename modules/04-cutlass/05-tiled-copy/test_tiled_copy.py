"""cute-05 tests: a CTA tile copied by a CuTe TiledCopy with 128-bit vectors, checked on the host and the GPU.

driver_host.cpp runs the learner's `copy_tile` for every thread of every CTA on host memory (CuTe's algorithms
are host-callable) and prints, per case, every element each thread wrote (found by scanning the whole poisoned
destination after each thread, so writes outside M x N show up too) and every copy instruction the TiledCopy's
atom executed (the same TV layout rebuilt around a logging 128-bit atom). One build and one run serve every test
(pytest_hpccourse.runtimes.cute.cutecxx caches the binary by content). Independent references:
- the source itself: element (r, c) holds r*N + c, everything outside M x N holds a negative value;
- the CuTe DSL (nvidia-cutlass-dsl): `make_tiled_copy_tv` with the contract's thread and value layouts gives the
  TV layout the learner's TiledCopy must equal (as a function (thread, value) -> tile offset, via pycute);
- the memory model the lesson teaches: a warp's 128-bit accesses coalesce into 512 contiguous-in-rows bytes, i.e.
  4 lines of 128 bytes, the minimum for 32 x 16 bytes.
Shapes: two configurations (A: 32x128 tile, 128 threads; B: 24x32 tile, 64 threads), M and N not multiples of the
tile (residue tiles), leading dimensions above N, the one-vector matrix 1x4, exact tiles, and random shapes from a
fixed seed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache

import numpy as np
import pytest

from pytest_hpccourse.runtimes.cute import cutecxx

cutlass = cute = None  # the CuTe DSL, imported when the DSL test runs

CONFIGS = {"A": (32, 128, 128), "B": (24, 32, 64)}  # name -> (BM, BN, threads), as driver_host.cpp instantiates
VEC = 4  # floats per 128-bit copy
FIXED = [("A", 37, 132, 136), ("A", 100, 300, 300), ("A", 32, 128, 128), ("A", 1, 4, 4), ("A", 64, 256, 288),
         ("B", 7, 20, 24), ("B", 24, 32, 32), ("B", 50, 44, 48), ("B", 48, 64, 64), ("B", 3, 4, 8)]


def _random_cases(seed: int = 5, per_config: int = 3) -> list[tuple[str, int, int, int]]:
    rng = np.random.default_rng(seed)
    out = []
    for cfg, (bm, bn, _) in CONFIGS.items():
        for _ in range(per_config):
            m = int(rng.integers(1, 3 * bm))
            n = VEC * int(rng.integers(1, 3 * bn // VEC))
            out.append((cfg, m, n, n + VEC * int(rng.integers(0, 5))))
    return out


CASES = FIXED + _random_cases()


@dataclass
class Config:
    name: str
    bits: int
    tiler: tuple[int, int]
    values: int
    layout: str
    tv: np.ndarray


@dataclass
class Case:
    cfg: str
    m: int
    n: int
    ld: int
    writes: np.ndarray  # (E, 3): dst offset, thread, value
    instr: np.ndarray | None  # (I, 3): thread, dst offset, src offset; None when the atom is not 128-bit


def _ints(text: str, width: int) -> np.ndarray:
    return np.array(text.split(), dtype=np.int64).reshape(-1, width)


@cache  # every test parses the same output: once per process
def _parse(out: str) -> tuple[dict[str, Config], list[Case], list[str]]:
    configs: dict[str, Config] = {}
    cases: list[Case] = []
    todo: list[str] = []
    lines = out.splitlines()
    i = 0
    while i < len(lines):
        head = lines[i].split()
        if head and head[0] == "todo":
            todo.append(lines[i])
        elif head and head[0] == "config":
            bits = int(head[5].split("=")[1])
            tm, tn = (int(x) for x in head[6].split("=")[1].split(","))
            tv = np.array(lines[i + 2].split()[1:], dtype=np.int64)
            configs[head[1]] = Config(head[1], bits, (tm, tn), int(head[7].split("=")[1]),
                                      lines[i + 1].removeprefix("layout "), tv)
            i += 2
        elif head and head[0] == "case":
            writes = _ints(lines[i + 1].removeprefix("writes"), 3)
            rest = lines[i + 2].removeprefix("instr").strip()
            instr = None if rest == "none" else _ints(rest, 3)
            cases.append(Case(head[1], int(head[2]), int(head[3]), int(head[4]), writes, instr))
            i += 2
        i += 1
    return configs, cases, todo


@pytest.fixture
def run(lesson):
    """The host driver's output for CASES, parsed (one build and one run per session)."""
    args = [f"{c}:{m}:{n}:{ld}" for c, m, n, ld in CASES]
    configs, cases, todo = _parse(cutecxx.run(lesson.path("driver_host.cpp"), *args))
    assert not todo, "; ".join(todo)
    assert set(configs) == set(CONFIGS) and len(cases) == len(CASES), "the driver printed an incomplete report"
    return configs, cases


def _valid(case: Case, off: np.ndarray) -> np.ndarray:
    return (off // case.ld < case.m) & (off % case.ld < case.n) & (off >= 0)


def _where(case: Case, off: int) -> str:
    return f"({off // case.ld}, {off % case.ld})"


@pytest.mark.points(2)
def test_every_element_is_copied_exactly_once(run):
    _, cases = run
    for case in cases:
        what = f"config {case.cfg}, M={case.m}, N={case.n}, ld={case.ld}"
        off = case.writes[:, 0]
        inside = off[_valid(case, off)]
        count = np.bincount(inside, minlength=case.m * case.ld)
        rows, cols = np.meshgrid(np.arange(case.m), np.arange(case.n), indexing="ij")
        want = (rows * case.ld + cols).ravel()
        missing = want[count[want] == 0]
        assert missing.size == 0, (f"{what}: {missing.size} of {want.size} elements never copied, first at (row, col) "
                                   f"{_where(case, int(missing[0]))}")
        twice = want[count[want] > 1]
        assert twice.size == 0, (f"{what}: {twice.size} elements written more than once (by several threads or "
                                 f"twice by one), first at {_where(case, int(twice[0]))}")
        ok = _valid(case, off)
        r, c = off[ok] // case.ld, off[ok] % case.ld
        bad = np.flatnonzero(case.writes[ok, 2] != r * case.n + c)
        assert bad.size == 0, (f"{what}: element {_where(case, int(off[ok][bad[0]]))} holds {case.writes[ok][bad[0], 2]}, "
                               f"the source holds {int(r[bad[0]] * case.n + c[bad[0]])}")


@pytest.mark.points(1)
def test_nothing_outside_the_matrix_is_read_or_written(run):
    _, cases = run
    for case in cases:
        what = f"config {case.cfg}, M={case.m}, N={case.n}, ld={case.ld}"
        off = case.writes[:, 0]
        out = off[~_valid(case, off)]
        assert out.size == 0, (f"{what}: {out.size} writes outside the {case.m}x{case.n} matrix, first at "
                               f"(row, col) {_where(case, int(out[0]))}: the residue tile needs a predicate")
        neg = case.writes[case.writes[:, 2] < 0]
        assert neg.size == 0, f"{what}: an element was copied from outside the source matrix (value {neg[0, 2]})"
        if case.instr is not None:
            src = case.instr[:, 2]
            for k in range(VEC):  # every float of every 16-byte read must lie inside the matrix
                far = src[~_valid(case, src + k)]
                assert far.size == 0, (f"{what}: a 128-bit read covers {_where(case, int(far[0]) + k)}, outside "
                                       f"the matrix")


@pytest.mark.points(2)
def test_copies_are_aligned_128_bit_vectors_through_the_tiled_copy(run):
    configs, cases = run
    for name, cfg in configs.items():
        assert cfg.bits == 128, (f"config {name}: the TiledCopy's atom moves {cfg.bits} bits per copy; the lesson "
                                 f"asks for 128-bit (4-float) vectors: LDG.128 / STG.128")
    for case in cases:
        what = f"config {case.cfg}, M={case.m}, N={case.n}, ld={case.ld}"
        assert case.instr is not None
        dst, src = case.instr[:, 1], case.instr[:, 2]
        assert np.all(dst % VEC == 0), f"{what}: a 128-bit store at float offset {dst[dst % VEC != 0][0]}: not 16-byte aligned"
        assert np.all(src == dst), f"{what}: a vector was stored at another position than it was read from"
        # The elements each thread wrote must be exactly the vectors its atom copied: the copy goes through the
        # TiledCopy (copy / copy_if with the tiled copy), not element by element.
        from_atom = {(int(t), int(d) + k) for t, d in case.instr[:, :2] for k in range(VEC)}
        written = {(int(t), int(d)) for d, t, _ in case.writes}
        assert from_atom == written, (f"{what}: the elements written ({len(written)}) are not the ones the "
                                      f"TiledCopy's 128-bit atom copied ({len(from_atom)}): copy through the atom")


@pytest.mark.points(1)
def test_warp_accesses_are_coalesced(run):
    """Full tiles with rows aligned to 128 bytes: the k-th copy of the 32 lanes of a warp covers 32 x 16 bytes,
    which must fall into the minimum number of 128-byte lines, 4."""
    _, cases = run
    checked = 0
    for case in cases:
        bm, bn, threads = CONFIGS[case.cfg]
        if case.m % bm or case.n % bn or case.ld % 32 or case.instr is None:
            continue
        threads_ids, dst = case.instr[:, 0], case.instr[:, 1]
        for warp in range(int(threads_ids.max()) // 32 + 1):
            lanes = [dst[threads_ids == warp * 32 + lane] for lane in range(32)]
            steps = min(len(x) for x in lanes)
            assert all(len(x) == steps for x in lanes), "lanes of one warp issue different numbers of copies"
            for k in range(steps):
                lines = {int(x[k]) * 4 // 128 for x in lanes}
                assert len(lines) == 4, (f"config {case.cfg}, M={case.m}, N={case.n}: copy {k} of warp {warp} "
                                         f"touches {len(lines)} lines of 128 bytes; 32 lanes x 16 B fit in 4 "
                                         f"when consecutive lanes take consecutive vectors of a row")
            checked += 1
    assert checked > 0


def _pycute_values(text: str, size: int) -> np.ndarray:
    """Evaluate a printed layout `shape:stride` at 0..size-1 with pycute."""
    import pycute

    shape, stride = (ast.literal_eval(part) for part in re.sub(r"_(\d)", r"\1", text).split(":"))
    layout = pycute.Layout(shape, stride)
    return np.array([layout(i) for i in range(size)], dtype=np.int64)


@cache
def _dsl_tiled_copy(threads: int, bn: int) -> tuple[str, tuple[int, int]]:
    """The CuTe DSL's TV layout and tiler for the contract: threads row-major over (threads/(BN/4), BN/4),
    1x4 values, a 128-bit universal copy of Float32."""
    global cutlass, cute  # the DSL resolves the annotations below in this module's globals
    import cutlass
    import cutlass.cute as cute

    out: dict[str, str] = {}

    @cute.jit
    def build(tm: cutlass.Constexpr, tn: cutlass.Constexpr):
        atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.Float32, num_bits_per_copy=128)
        tc = cute.make_tiled_copy_tv(atom, cute.make_layout((tm, tn), stride=(tn, 1)), cute.make_layout((1, VEC)))
        out["tv"], out["tiler"] = str(tc.layout_tv_tiled), str(tc.tiler_mn)

    build(threads // (bn // VEC), bn // VEC)
    tm, tn = (int(x) for x in re.findall(r"(\d+):", out["tiler"]))
    return out["tv"], (tm, tn)


@pytest.mark.points(2)
@pytest.mark.requires("cute-dsl")
def test_tv_layout_matches_the_cute_dsl(run):
    configs, _ = run
    for name, (_, bn, threads) in CONFIGS.items():
        cfg = configs[name]
        tv_text, tiler = _dsl_tiled_copy(threads, bn)
        assert cfg.tiler == tiler, (f"config {name}: your TiledCopy covers a {cfg.tiler[0]}x{cfg.tiler[1]} block "
                                    f"per step, the contract's covers {tiler[0]}x{tiler[1]}")
        want = _pycute_values(tv_text, threads * VEC)
        assert cfg.tv.shape == want.shape, (f"config {name}: your TV layout {cfg.layout} has {cfg.tv.size} "
                                            f"(thread, value) pairs, the DSL's {tv_text} has {want.size}")
        bad = np.flatnonzero(cfg.tv != want)
        if bad.size:
            t, v = int(bad[0]) % threads, int(bad[0]) // threads
            tm = tiler[0]
            got, exp = int(cfg.tv[bad[0]]), int(want[bad[0]])
            pytest.fail(f"config {name}: thread {t} value {v} is (m, n) = ({got % tm}, {got // tm}) in your TV "
                        f"layout {cfg.layout}, ({exp % tm}, {exp // tm}) in the DSL's {tv_text}")


@pytest.mark.requires("cute-gpu")
def test_gpu_kernel_copies_every_tile(lesson):
    """The same copy_tile in a real kernel (driver_gpu.cu): one CTA per tile; needs nvcc and an NVIDIA GPU."""
    out = cutecxx.run(lesson.path("driver_gpu.cu"), *[f"{c}:{m}:{n}:{ld}" for c, m, n, ld in CASES],
                      gpu=True, timeout=120)
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("gpu ")]
    assert len(rows) == len(CASES), out[-2000:]
    for row in rows:
        fields = dict(x.split("=") for x in row[5:])  # gpu CFG M N LD wrong=.. outside=..
        assert fields["wrong"] == "0" and fields["outside"] == "0", " ".join(row)
