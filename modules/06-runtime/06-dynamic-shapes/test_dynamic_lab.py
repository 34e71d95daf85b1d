"""Tests for runtime-06 (dynamic shapes and guards). Oracle: torch._dynamo.testing.CompileCounter.frame_count,
measured live on torch.compile with backend=CompileCounter (eager execution, no Inductor), and the eager
`project` for outputs (same ops on the same data: rtol = atol = 1e-6 covers matmul blocking differences)."""

import random

import pytest
import torch
import torch._dynamo as dynamo
from torch._dynamo.testing import CompileCounter
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

MODES = ("static", "auto", "mark", "dynamic")
D, E = 6, 5  # feature dims: never a value of B or T below


@pytest.fixture(autouse=True)
def fresh_dynamo():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: thread hand-offs dominate on a loaded 2-core runner
    dynamo.reset()
    yield
    dynamo.reset()
    torch.set_num_threads(threads)


class _MatmulRows(TorchDispatchMode):
    """Records the row count of every matrix product that runs (aten.mm / bmm / addmm, after matmul's decomposition)."""

    def __init__(self):
        super().__init__()
        self.rows = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func.overloadpacket
        if packet in (aten.mm, aten.bmm):
            self.rows.append(args[0].shape[-2] * (args[0].shape[0] if packet is aten.bmm else 1))
        elif packet is aten.addmm:
            self.rows.append(args[1].shape[0])
        return func(*args, **(kwargs or {}))


def test_fixed_still_pads_the_matmul(lesson):
    # The padding is what project is for (tensor-core friendly row counts): project_fixed removes the branch, not
    # the padding. B * T below is never a multiple of ALIGN, so an unpadded matmul shows up in its row count.
    mod = lesson.load("dynamic_lab.py")
    g = torch.Generator().manual_seed(12)
    for B, T in [(3, 7), (5, 9), (1, 13), (3, 65), (1, 1)]:
        x, w = torch.randn(B, T, D, generator=g), torch.randn(D, E, generator=g)
        rec = _MatmulRows()
        with rec:
            got = mod.project_fixed(x, w)
        torch.testing.assert_close(got, mod.project(x, w), rtol=1e-6, atol=1e-6)
        assert rec.rows, f"({B}, {T}): no matrix product ran"
        assert all(r % mod.ALIGN == 0 and r >= B * T for r in rec.rows), (
            f"({B}, {T}): the matmul ran on {rec.rows} rows; it must run on the sequence padded to a multiple of "
            f"ALIGN = {mod.ALIGN} (B * T = {B * T})")


def _f(x):
    return (x * 2).sin().cumsum(0)


def _measure(sizes, mode):
    """frame_count after each call, as torch 2.13 actually does it."""
    dynamo.reset()
    cnt = CompileCounter()
    kw = {"static": {"dynamic": False}, "dynamic": {"dynamic": True}}.get(mode, {})
    f = torch.compile(_f, backend=cnt, **kw)
    out = []
    for n in sizes:
        x = torch.randn(n)
        if mode == "mark":
            dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(f(x), _f(x))
        out.append(cnt.frame_count)
    return out


# documented in the README: (sizes, mode) -> frames after each call, measured on torch 2.13.0
WORKED = [
    ([2, 3, 4, 100], "auto", [1, 2, 2, 2]),
    ([3, 3, 5, 1, 1, 0, 0, 7, 1], "auto", [1, 1, 2, 3, 3, 4, 4, 4, 4]),
    ([5, 1, 0, 2], "auto", [1, 2, 3, 4]),
    ([5, 1, 0, 2], "mark", [1, 2, 3, 3]),
    ([0, 1, 2, 3, 0, 1], "dynamic", [1, 2, 3, 3, 3, 3]),
    ([2, 3, 2, 4], "static", [1, 2, 2, 3]),
]


@pytest.mark.parametrize("sizes,mode,frames", WORKED)
def test_expected_frames_worked_examples(lesson, sizes, mode, frames):
    mod = lesson.load("dynamic_lab.py")
    assert mod.expected_frames(sizes, mode) == frames


@pytest.mark.points(3)
@pytest.mark.parametrize("mode", MODES)
def test_expected_frames_matches_measured_recompiles(lesson, mode):
    mod = lesson.load("dynamic_lab.py")
    rng = random.Random(f"runtime-06-{mode}")
    pool = [0, 1, 2, 3, 4, 7, 16, 1000, 4096]
    for _ in range(3):
        sizes = [rng.choice(pool) for _ in range(rng.randint(4, 9))]
        assert mod.expected_frames(sizes, mode) == _measure(sizes, mode), f"{mode} {sizes}"


@pytest.mark.points(2)
@pytest.mark.parametrize("mode", ["static", "auto"])
def test_expected_frames_respects_the_recompile_limit(lesson, mode):
    mod = lesson.load("dynamic_lab.py")
    sizes = {"static": [2, 3, 4, 5, 2, 6, 3], "auto": [3, 0, 1, 5, 1, 0, 8]}[mode]
    with dynamo.config.patch(recompile_limit=3):
        measured = _measure(sizes, mode)
    assert mod.expected_frames(sizes, mode, limit=3) == measured


# ------------------------------------------------------------------------------------------------ part 2


def _classes(shapes):
    c = lambda n: n if n in (0, 1) else ">=2"  # noqa: E731
    seen, out = set(), []
    for B, T in shapes:
        seen.add((c(B), c(T)))
        out.append(len(seen))
    return out


def _run_shapes(mod, shapes, seed):
    cnt = CompileCounter()
    run = mod.make_runner(cnt)
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(D, E, generator=g)
    frames = []
    for B, T in shapes:
        x = torch.randn(B, T, D, generator=g)
        want = mod.project(x, w)
        got = run(x, w)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        frames.append(cnt.frame_count)
    return frames


SHAPES = [
    # B, T >= 2 only: one frame for all of them (a square first shape, T a multiple of 8 and not, large)
    [(4, 4), (3, 16), (2, 70), (9, 100), (2, 64), (300, 3), (2, 65), (7, 1000)],
    # 0 and 1 in either dim: each (0/1, 0/1/>=2) class once
    [(2, 10), (1, 10), (1, 20), (0, 20), (3, 1), (1, 1), (4, 1), (5, 90), (0, 3), (2, 2)],
    # the FIRST call already has B = 1 (then B = 0): T must be symbolic in those specializations too
    [(1, 10), (1, 20), (0, 5), (0, 9), (3, 30), (5, 1), (7, 1), (1, 1), (6, 9)],
]


@pytest.mark.points(3)
@pytest.mark.parametrize("case", range(len(SHAPES)))
def test_runner_compiles_one_frame_per_shape_class(lesson, case):
    mod = lesson.load("dynamic_lab.py")
    shapes = SHAPES[case]
    assert _run_shapes(mod, shapes, seed=case) == _classes(shapes)


@pytest.mark.points(2)
def test_runner_random_shape_sequence(lesson):
    mod = lesson.load("dynamic_lab.py")
    rng = random.Random("runtime-06-shapes")
    vals = [0, 1, 2, 3, 8, 9, 17, 64, 130]
    shapes = [(rng.choice(vals), rng.choice(vals)) for _ in range(12)]
    assert _run_shapes(mod, shapes, seed=7) == _classes(shapes), shapes


def test_fixed_equals_project_eager(lesson):
    mod = lesson.load("dynamic_lab.py")
    g = torch.Generator().manual_seed(11)
    for B, T in [(0, 5), (3, 0), (1, 1), (2, 7), (2, 8), (2, 9), (4, 63), (1, 64), (3, 65)]:
        x, w = torch.randn(B, T, D, generator=g), torch.randn(D, E, generator=g)
        torch.testing.assert_close(mod.project_fixed(x, w), mod.project(x, w), rtol=1e-6, atol=1e-6)
