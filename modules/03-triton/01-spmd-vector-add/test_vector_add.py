"""Tests for triton-01 (vector add). Exact comparison: one IEEE add per element, same on CPU and GPU.

Every output lives inside a guarded buffer (conftest.py): poisoned margins of >= 1024 elements before and
after it, more than any BLOCK_SIZE used here, so a store past either end is a failed assertion.
"""

import pytest
import torch

SIZES = [1, 2, 127, 128, 129, 1000, 3001]  # around and away from multiples of the block
PAD = 1024  # input slack: a kernel that reads past n stays inside valid memory


def _inputs(n, device, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    # inputs also sit inside larger buffers, so a kernel that reads past n stays in valid memory
    xb = torch.randn(n + PAD, generator=g).to(device=device, dtype=dtype)
    yb = torch.randn(n + PAD, generator=g).to(device=device, dtype=dtype)
    return xb[:n], yb[:n]


@pytest.mark.points(2)
@pytest.mark.parametrize("n", SIZES)
def test_add_matches_torch(lesson, device, guard, n):
    mod = lesson.load("vector_add.py")
    x, y = _inputs(n, device, torch.float32, seed=n)
    out = guard.empty((n,), torch.float32, device)
    mod.add(x, y, out=out)
    torch.testing.assert_close(out.cpu(), (x + y).cpu(), rtol=0, atol=0)  # bitwise: a single fp32 add
    guard.check()


@pytest.mark.parametrize("block_size", [16, 64, 256])
def test_block_size_is_a_meta_parameter(lesson, device, guard, block_size):
    # the grid must be derived from the BLOCK_SIZE actually launched, not a hard-coded 128
    mod = lesson.load("vector_add.py")
    n = 1000
    x, y = _inputs(n, device, torch.float32, seed=block_size)
    out = guard.empty((n,), torch.float32, device)
    mod.add(x, y, out=out, block_size=block_size)
    torch.testing.assert_close(out.cpu(), (x + y).cpu(), rtol=0, atol=0)
    guard.check()


def test_fp16(lesson, device, guard):
    # the same source specializes on the pointer dtype; fp16 + fp16 rounds once, like torch
    mod = lesson.load("vector_add.py")
    n = 517
    g = torch.Generator().manual_seed(7)
    x, y = (torch.randn(n, generator=g).to(device=device, dtype=torch.float16) for _ in range(2))
    out = guard.empty((n,), torch.float16, device)
    mod.add(x, y, out=out)
    torch.testing.assert_close(out.cpu(), (x + y).cpu(), rtol=0, atol=0)
    guard.check()


@pytest.mark.parametrize("dtype,bits", [(torch.int32, 30), (torch.int64, 60)])
def test_integers_beyond_float_precision(lesson, device, guard, dtype, bits):
    # |values| up to 2^bits (far above 2^24, and for int64 above 2^53): an add routed through fp32 (or fp64)
    # rounds them; an integer add is exact. Both halves stay below 2^(bits), so the sum cannot overflow.
    mod = lesson.load("vector_add.py")
    n = 517
    g = torch.Generator().manual_seed(11)
    lim = 2 ** bits
    x, y = (torch.randint(-lim, lim, (n,), generator=g, dtype=torch.int64).to(device=device, dtype=dtype)
            for _ in range(2))
    x[:4] = torch.tensor([2 ** 24 + 1, -(2 ** 24) - 3, lim - 1, -lim], dtype=dtype)  # odd, just above 2^24, extremes
    out = guard.empty((n,), dtype, device)
    mod.add(x, y, out=out)
    assert torch.equal(out.cpu(), x.cpu() + y.cpu()), "integer add is not exact (was it computed in floating point?)"
    guard.check()


def test_empty_and_default_output(lesson, device, guard, monkeypatch):
    # the default output comes from torch.empty_like inside add(): guarded and poisoned here as well
    mod = lesson.load("vector_add.py")
    guard.allocations(monkeypatch)
    e = torch.zeros(0, device=device)
    assert mod.add(e, e).numel() == 0
    x, y = _inputs(300, device, torch.float32, seed=3)
    torch.testing.assert_close(mod.add(x, y).cpu(), (x + y).cpu(), rtol=0, atol=0)
    guard.check()


@pytest.mark.interpreter
def test_loads_stay_inside_the_inputs(lesson, device, guard):
    # x and y are views at the start of larger buffers: a load past n reads valid memory and the masked store
    # hides it, so only a bounds check sees it. The interpreter's guard checks every lane against the views;
    # on a GPU machine this test runs through the interpreter in a subprocess (@pytest.mark.interpreter).
    mod = lesson.load("vector_add.py")
    n = 1001  # a ragged last block for every power-of-two BLOCK_SIZE
    x, y = _inputs(n, device, torch.float32, seed=5)
    out = guard.empty((n,), torch.float32, device)
    mod.add(x, y, out=out)
    torch.testing.assert_close(out.cpu(), (x + y).cpu(), rtol=0, atol=0)
    guard.check()
