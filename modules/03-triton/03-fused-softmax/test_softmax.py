"""Tests for triton-03 (fused softmax). Reference: torch.softmax in float64 on the CPU.

Tolerances: fp32 math differs from float64 by a few ulp of exp plus |x - max| * eps from forming the
argument (|x - max| < 40 here), so rtol 1e-5 / atol 1e-6 for fp32 outputs; fp16 and bf16 outputs are
rounded once at the store: half an ulp is 2^-11 (fp16) and 2^-8 (bf16) relative, so rtol 2e-3 / 1e-2.
"""

import pytest
import torch

TOL = {torch.float32: {"rtol": 1e-5, "atol": 1e-6},
       torch.float16: {"rtol": 2e-3, "atol": 1e-5},
       torch.bfloat16: {"rtol": 1e-2, "atol": 1e-4}}


def _reference(x):
    return torch.softmax(x.detach().cpu().double(), dim=-1)


def _run(mod, x, guard):
    """Runs the kernel into a NaN-poisoned output (conftest.py) whose rows are followed by BLOCK poisoned
    columns, with one padded row of poison before and after: a store can overrun a row by up to BLOCK - 1."""
    M, N = x.shape
    block = 1 << max(N - 1, 0).bit_length()  # the kernel's BLOCK = next_power_of_2(N)
    out = guard.rows(M, N, x.dtype, x.device, pad_cols=block)
    mod.softmax(x, out=out)
    guard.check()
    return out


def _rows(M, N, device, dtype, seed, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(M, N, generator=g)).to(device=device, dtype=dtype)


@pytest.mark.points(2)
@pytest.mark.parametrize("shape", [(37, 129), (16, 1000), (4, 4096), (9, 1), (3, 2), (1, 3001)])
def test_matches_torch_fp32(lesson, device, guard, shape):
    mod = lesson.load("softmax.py")
    x = _rows(*shape, device, torch.float32, seed=shape[1])
    out = _run(mod, x, guard)
    torch.testing.assert_close(out.cpu().double(), _reference(x), **TOL[torch.float32])


def test_large_values_do_not_overflow(lesson, device, guard):
    # exp(90) overflows fp32: only a max-subtracted softmax survives these rows
    mod = lesson.load("softmax.py")
    x = _rows(13, 300, device, torch.float32, seed=1, scale=1.0) * 1000.0
    x[:, 5] = 2.0e4
    out = _run(mod, x, guard)
    torch.testing.assert_close(out.cpu().double(), _reference(x), **TOL[torch.float32])


def test_all_negative_rows(lesson, device, guard):
    # every value < -50 (and in the last rows < -990, like logits behind a large additive mask): a padding value
    # of 0 instead of -inf would become the row max, and exp(x - 0) underflows to 0 for the far-negative rows
    mod = lesson.load("softmax.py")
    x = _rows(11, 77, device, torch.float32, seed=2, scale=1.0) - 60.0
    x[6:] -= 940.0
    out = _run(mod, x, guard)
    torch.testing.assert_close(out.cpu().double(), _reference(x), **TOL[torch.float32])


def test_minus_inf_entries(lesson, device, guard):
    # causal-style rows: row i keeps columns <= i, the rest are -inf (softmax gives them exactly 0)
    mod = lesson.load("softmax.py")
    M, N = 20, 45
    x = _rows(M, N, device, torch.float32, seed=3)
    keep = torch.arange(N)[None, :] <= torch.arange(M)[:, None]
    x = x.masked_fill(~keep.to(device), float("-inf"))
    out = _run(mod, x, guard)
    torch.testing.assert_close(out.cpu().double(), _reference(x), **TOL[torch.float32])
    assert (out.cpu()[~keep] == 0).all()


def test_strided_rows(lesson, device, guard):
    # a window of a wider matrix: the row stride (301) is not the row length (250)
    mod = lesson.load("softmax.py")
    big = _rows(30, 301, device, torch.float32, seed=4)
    x = big[2:27, 40:290]
    out = _run(mod, x, guard)
    torch.testing.assert_close(out.cpu().double(), _reference(x), **TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_io(lesson, device, guard, dtype):
    # fp16/bf16 in and out, fp32 inside; the reference sees the same rounded inputs
    mod = lesson.load("softmax.py")
    x = _rows(23, 700, device, dtype, seed=5)
    out = _run(mod, x, guard)
    assert out.dtype == dtype
    torch.testing.assert_close(out.cpu().double(), _reference(x), **TOL[dtype])

