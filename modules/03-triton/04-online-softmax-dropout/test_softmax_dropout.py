"""Tests for triton-04 (online softmax over long rows + seeded dropout).

Reference: torch.softmax in float64 on the CPU. fp32 math: rtol 1e-5 / atol 1e-6 (a few ulp of exp plus
|x - max| * eps; the online rescaling adds one more rounded exp per block).
The dropout mask is specified, not sampled: element (r, c) is kept iff tl.rand(seed, r * n_cols + c) >= p,
which the helper kernel below generates independently of the lesson's kernel.
"""

import math

import pytest
import torch
import triton
import triton.language as tl

TOL = {"rtol": 1e-5, "atol": 1e-6}


@triton.jit
def _philox_uniform(out_ptr, seed, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.rand(seed, offs), mask=offs < n)


def _expected_keep(M, N, p, seed, device):
    u = torch.full((M * N,), float("nan"), device=device)
    _philox_uniform[(triton.cdiv(M * N, 512),)](u, seed, M * N, BLOCK=512)
    return (u >= p).reshape(M, N).cpu()


def _reference(x):
    return torch.softmax(x.detach().cpu().double(), dim=-1)


def _run(mod, x, guard, block, **kw):
    """Runs the kernel into a NaN-poisoned output (conftest.py): every row is followed by `block` poisoned
    columns (a store can overrun the row by up to BLOCK - 1), one padded row of poison before and after.
    The output's row stride (N + block) differs from the input's, so the two strides cannot be mixed up."""
    M, N = x.shape
    out = guard.rows(M, N, x.dtype, x.device, pad_cols=block)
    mod.softmax_dropout(x, out=out, block=block, **kw)
    guard.check()
    return out.cpu()


def _rows(M, N, device, seed, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(M, N, generator=g)).to(device)


def _strided_rows(M, N, device, seed, scale=3.0):
    """An M x N window of a wider matrix: contiguous rows, row stride N + 42 (not N), storage offset 5."""
    return _rows(M, N + 42, device, seed, scale)[:, 5:5 + N]


@pytest.mark.points(2)
@pytest.mark.parametrize("shape,block", [((3, 1000), 128), ((2, 4099), 512), ((5, 1), 64), ((4, 300), 256), ((2, 64), 64)])
def test_online_softmax_matches_torch(lesson, device, guard, shape, block):
    # non-contiguous rows: the row stride of x (N + 42) is neither N nor the output's row stride
    mod = lesson.load("softmax_dropout.py")
    x = _strided_rows(*shape, device, seed=shape[1])
    out = _run(mod, x, guard, block, p=0.0)
    torch.testing.assert_close(out.double(), _reference(x), **TOL)


@pytest.mark.points(2)
def test_row_max_in_an_early_block(lesson, device, guard):
    # the max sits in block 0 and is ~1000 above the rest: every later block must be rescaled to it, and a
    # kernel that only keeps the current block's max computes exp(1000) = inf
    mod = lesson.load("softmax_dropout.py")
    x = _rows(6, 700, device, seed=1)
    x[:, 3] = 1000.0
    x[:, 600:] -= 50.0
    x[1, 130] = 1000.5  # and once in a middle block
    out = _run(mod, x, guard, 64, p=0.0)
    torch.testing.assert_close(out.double(), _reference(x), **TOL)


def test_increasing_rows(lesson, device, guard):
    # the running max grows in every block: the running sum must be rescaled at each step
    mod = lesson.load("softmax_dropout.py")
    x = (torch.linspace(-30.0, 30.0, 900)[None, :] + 0.1 * _rows(4, 900, "cpu", seed=2)).to(device)
    out = _run(mod, x, guard, 128, p=0.0)
    torch.testing.assert_close(out.double(), _reference(x), **TOL)


def test_leading_minus_inf_blocks(lesson, device, guard):
    # masked prefixes: whole blocks of -inf before the first finite value must not produce NaN
    mod = lesson.load("softmax_dropout.py")
    M, N = 5, 500
    x = _rows(M, N, device, seed=3)
    for r in range(M):
        x[r, : 70 * (r + 1)] = float("-inf")
    out = _run(mod, x, guard, 64, p=0.0)
    torch.testing.assert_close(out.double(), _reference(x), **TOL)


@pytest.mark.points(2)
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_mask_is_philox_of_the_global_index(lesson, device, guard, p):
    mod = lesson.load("softmax_dropout.py")
    M, N, seed = 6, 777, 1234
    # rows 819 elements apart: an offset built from the row stride instead of n_cols gives another mask
    x = _strided_rows(M, N, device, seed=4)
    out = _run(mod, x, guard, 256, p=p, seed=seed)
    keep = _expected_keep(M, N, p, seed, device)
    assert torch.equal(out != 0, keep), "dropped elements differ from tl.rand(seed, row * n_cols + col) >= p"
    ref = _reference(x) / (1.0 - p)
    torch.testing.assert_close(out.double()[keep], ref[keep], **TOL)


def test_dropout_statistics_and_seeds(lesson, device, guard):
    mod = lesson.load("softmax_dropout.py")
    M, N, p = 8, 1000, 0.3
    x = _rows(M, N, device, seed=5)
    a = _run(mod, x, guard, 1024, p=p, seed=7)
    b = _run(mod, x, guard, 1024, p=p, seed=7)
    c = _run(mod, x, guard, 1024, p=p, seed=8)
    assert torch.equal(a, b), "same seed must reproduce the same output"
    assert not torch.equal(a != 0, c != 0), "a different seed must give a different mask"
    kept = (a != 0).double().mean().item()
    sigma = math.sqrt(p * (1 - p) / (M * N))
    assert abs(kept - (1 - p)) < 5 * sigma, f"kept fraction {kept:.4f}, expected {1 - p} ± {5 * sigma:.4f}"
    assert not torch.equal(a[0] != 0, a[1] != 0), "rows must get different masks"


def test_mask_does_not_depend_on_block(lesson, device, guard):
    mod = lesson.load("softmax_dropout.py")
    x = _rows(3, 600, device, seed=6)
    a = _run(mod, x, guard, 128, p=0.25, seed=99)
    b = _run(mod, x, guard, 512, p=0.25, seed=99)
    assert torch.equal(a != 0, b != 0)
    torch.testing.assert_close(a, b, **TOL)
