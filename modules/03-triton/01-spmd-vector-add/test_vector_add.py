"""Tests for triton-01 (vector add). Exact comparison: one IEEE add per element, same on CPU and GPU."""

import pytest
import torch

SIZES = [1, 2, 127, 128, 129, 1000, 3001]  # around and away from multiples of the block
GUARD = 300  # poisoned elements after the output, to catch writes past n


def _padded(n, device, dtype, fill):
    """A length-n view at the start of a larger buffer; the tail is the guard region."""
    buf = torch.full((n + GUARD,), fill, device=device, dtype=dtype)
    return buf, buf[:n]


def _inputs(n, device, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    # inputs also sit inside larger buffers, so a kernel that reads past n stays in valid memory
    xb = torch.randn(n + GUARD, generator=g).to(device=device, dtype=dtype)
    yb = torch.randn(n + GUARD, generator=g).to(device=device, dtype=dtype)
    return xb[:n], yb[:n]


@pytest.mark.points(2)
@pytest.mark.parametrize("n", SIZES)
def test_add_matches_torch(lesson, device, n):
    mod = lesson.load("vector_add.py")
    x, y = _inputs(n, device, torch.float32, seed=n)
    buf, out = _padded(n, device, torch.float32, float("nan"))
    mod.add(x, y, out=out)
    torch.testing.assert_close(out.cpu(), (x + y).cpu(), rtol=0, atol=0)  # bitwise: a single fp32 add
    assert torch.isnan(buf[n:]).all(), "the kernel wrote past the end of the output (mask?)"


@pytest.mark.parametrize("block_size", [16, 64, 256])
def test_block_size_is_a_meta_parameter(lesson, device, block_size):
    # the grid must be derived from the BLOCK_SIZE actually launched, not a hard-coded 128
    mod = lesson.load("vector_add.py")
    n = 1000
    x, y = _inputs(n, device, torch.float32, seed=block_size)
    buf, out = _padded(n, device, torch.float32, float("nan"))
    mod.add(x, y, out=out, block_size=block_size)
    torch.testing.assert_close(out.cpu(), (x + y).cpu(), rtol=0, atol=0)
    assert torch.isnan(buf[n:]).all(), "the kernel wrote past the end of the output"


@pytest.mark.parametrize("dtype", [torch.float16, torch.int32])
def test_other_dtypes(lesson, device, dtype):
    # the same source specializes on the pointer dtype; fp16 + fp16 rounds once, like torch
    mod = lesson.load("vector_add.py")
    n = 517
    g = torch.Generator().manual_seed(7)
    if dtype.is_floating_point:
        x, y = (torch.randn(n, generator=g).to(device=device, dtype=dtype) for _ in range(2))
        sentinel = float("nan")
    else:
        x, y = (torch.randint(-1000, 1000, (n,), generator=g).to(device=device, dtype=dtype) for _ in range(2))
        sentinel = -12345
    buf, out = _padded(n, device, dtype, sentinel)
    mod.add(x, y, out=out)
    torch.testing.assert_close(out.cpu(), (x + y).cpu(), rtol=0, atol=0)


def test_empty_and_default_output(lesson, device):
    mod = lesson.load("vector_add.py")
    e = torch.empty(0, device=device)
    assert mod.add(e, e).numel() == 0
    x, y = _inputs(300, device, torch.float32, seed=3)
    torch.testing.assert_close(mod.add(x, y).cpu(), (x + y).cpu(), rtol=0, atol=0)
