"""Tests for triton-05 (LayerNorm forward/backward). Reference: torch.nn.functional.layer_norm and its
autograd in float64 on the CPU.

Tolerances (fp32 I/O): y is O(1) and formed with ~N fp32 adds in the statistics, so rtol = atol = 1e-5;
dx subtracts two O(1) row means (one more fp32 reduction), and dW/dB sum M rows: rtol = atol = 1e-4.
bf16 I/O: outputs rounded once to 8 significant bits (rel. error 2^-9 = 2e-3 per element): rtol = atol = 2e-2.
"""

import pytest
import torch
import torch.nn.functional as F

EPS = 1e-5


@pytest.fixture(autouse=True)
def guarded_outputs(guard, monkeypatch):
    """Every tensor the lesson allocates with torch.empty / empty_like is a poisoned view (NaN, or a sentinel
    for integers) inside a buffer with poisoned margins of >= 2 x BLOCK_N elements (conftest.py): an element
    the kernels never write cannot pass by luck, and a store past either end fails `guard.check()`."""
    guard.allocations(monkeypatch)
    return guard


FP32 = {"y": {"rtol": 1e-5, "atol": 1e-5}, "grad": {"rtol": 1e-4, "atol": 1e-4}}


def _data(M, N, device, dtype=torch.float32, seed=0, mean=0.0):
    g = torch.Generator().manual_seed(seed)
    x = (mean + torch.randn(M, N, generator=g)).to(device=device, dtype=dtype)
    w = (1.0 + 0.5 * torch.randn(N, generator=g)).to(device=device, dtype=dtype)
    b = (0.5 * torch.randn(N, generator=g)).to(device=device, dtype=dtype)
    dy = torch.randn(M, N, generator=g).to(device=device, dtype=dtype)
    return x, w, b, dy


def _reference(x, w, b, dy, eps=EPS):
    x64, w64, b64 = (t.detach().cpu().double().requires_grad_() for t in (x, w, b))
    y = F.layer_norm(x64, (x.shape[-1],), w64, b64, eps)
    y.backward(dy.detach().cpu().double())
    return y.detach(), x64.grad, w64.grad, b64.grad


def _ours(mod, guard, x, w, b, dy, groups):
    x, w, b = (t.detach().clone().requires_grad_() for t in (x, w, b))
    y = mod.layer_norm(x, w, b, EPS, groups)
    y.backward(dy)
    guard.check()
    return y.detach().cpu().double(), x.grad.cpu().double(), w.grad.cpu().double(), b.grad.cpu().double()


@pytest.mark.points(2)
@pytest.mark.parametrize("shape,groups", [((37, 129), 8), ((8, 1000), 3), ((5, 1), 2), ((64, 33), 7)])
def test_forward_and_backward_match_torch(lesson, device, guard, shape, groups):
    mod = lesson.load("layernorm.py")
    x, w, b, dy = _data(*shape, device, seed=shape[1])
    y, dx, dw, db = _ours(mod, guard, x, w, b, dy, groups)
    ry, rdx, rdw, rdb = _reference(x, w, b, dy)
    torch.testing.assert_close(y, ry, **FP32["y"])
    torch.testing.assert_close(dx, rdx, **FP32["grad"])
    torch.testing.assert_close(dw, rdw, **FP32["grad"])
    torch.testing.assert_close(db, rdb, **FP32["grad"])


def test_more_groups_than_rows(lesson, device, guard):
    # stage-1 programs without rows must still write (zero) partial sums
    mod = lesson.load("layernorm.py")
    x, w, b, dy = _data(3, 70, device, seed=1)
    _, dx, dw, db = _ours(mod, guard, x, w, b, dy, groups=16)
    _, rdx, rdw, rdb = _reference(x, w, b, dy)
    torch.testing.assert_close(dx, rdx, **FP32["grad"])
    torch.testing.assert_close(dw, rdw, **FP32["grad"])
    torch.testing.assert_close(db, rdb, **FP32["grad"])


@pytest.mark.points(2)
def test_large_mean_is_stable(lesson, device, guard):
    # rows centred at 3000 with unit spread: E[x^2] - E[x]^2 loses every significant bit of the variance in fp32
    mod = lesson.load("layernorm.py")
    x, w, b, dy = _data(16, 129, device, seed=2, mean=3000.0)
    y, mean, rstd = mod.layernorm_forward(x, w, b, EPS)
    guard.check()
    ry, _, _, _ = _reference(x, w, b, dy)
    x64 = x.cpu().double()
    torch.testing.assert_close(mean.cpu().double(), x64.mean(1), rtol=1e-6, atol=0)
    torch.testing.assert_close(rstd.cpu().double(), 1 / torch.sqrt(x64.var(1, unbiased=False) + EPS), rtol=1e-4, atol=0)
    # |x| ~ 3000 carries an input rounding of 3000 * 2^-24 ~ 2e-4 relative to the unit spread
    torch.testing.assert_close(y.cpu().double(), ry, rtol=1e-3, atol=1e-3)


def test_saved_statistics(lesson, device, guard):
    mod = lesson.load("layernorm.py")
    x, w, _, _ = _data(9, 200, device, seed=3)
    _, mean, rstd = mod.layernorm_forward(x, w, w, EPS)
    guard.check()
    x64 = x.cpu().double()
    torch.testing.assert_close(mean.cpu().double(), x64.mean(1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rstd.cpu().double(), 1 / torch.sqrt(x64.var(1, unbiased=False) + EPS),
                               rtol=1e-5, atol=0)


def test_bf16_io(lesson, device, guard):
    # bf16 in/out, fp32 statistics and accumulators; the reference sees the same rounded bf16 inputs
    mod = lesson.load("layernorm.py")
    x, w, b, dy = _data(21, 300, device, dtype=torch.bfloat16, seed=4)
    y, dx, dw, db = _ours(mod, guard, x, w, b, dy, groups=4)
    ry, rdx, rdw, rdb = _reference(x, w, b, dy)
    tol = {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(y, ry, **tol)
    torch.testing.assert_close(dx, rdx, **tol)
    torch.testing.assert_close(dw, rdw, rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(db, rdb, rtol=2e-2, atol=5e-2)


@pytest.mark.points(2)
def test_more_than_32_partial_groups(lesson, device, guard):
    # 70 stage-1 programs, and the default min(M, 256) = 40: stage 2 must walk every partial row,
    # not just the first BLOCK_G = 32 of them
    mod = lesson.load("layernorm.py")
    for M, N, groups in ((72, 40, 70), (40, 24, None)):
        x, w, b, dy = _data(M, N, device, seed=M)
        _, dx, dw, db = _ours(mod, guard, x, w, b, dy, groups)
        _, rdx, rdw, rdb = _reference(x, w, b, dy)
        torch.testing.assert_close(dx, rdx, **FP32["grad"])
        torch.testing.assert_close(dw, rdw, **FP32["grad"])
        torch.testing.assert_close(db, rdb, **FP32["grad"])


@pytest.mark.points(2)
def test_rows_whose_variance_is_near_eps(lesson, device, guard):
    # std 1e-3 (variance 1e-6 << eps) and std ~3e-3 (variance ~ eps = 1e-5), around means of 0 and 0.5:
    # here eps dominates rstd, so eps outside the sqrt (1 / (std + eps)) or divided by N (eps / N) is off by
    # a factor of ~3; rows with variance ~1 cannot tell these apart (relative difference ~5e-6).
    mod = lesson.load("layernorm.py")
    M, N = 12, 200
    g = torch.Generator().manual_seed(5)
    std = torch.tensor([1e-3, 3.16e-3, 1e-3, 3.16e-3] * 3)[:, None]
    mean = torch.tensor([0.0, 0.0, 0.5, 0.5] * 3)[:, None]
    x = (mean + std * torch.randn(M, N, generator=g)).to(device)
    w = (1.0 + 0.5 * torch.randn(N, generator=g)).to(device)
    b = (0.5 * torch.randn(N, generator=g)).to(device)
    dy = torch.randn(M, N, generator=g).to(device)
    y, _, rstd_s = mod.layernorm_forward(x, w, b, EPS)
    guard.check()
    x64 = x.cpu().double()
    # fp32 statistics of values ~0.5 +- 1e-3: the centred sum loses ~0.5 * 2^-24 per element, far below 1e-3 of std
    torch.testing.assert_close(rstd_s.cpu().double(), 1 / torch.sqrt(x64.var(1, unbiased=False) + EPS),
                               rtol=1e-4, atol=0)
    ry, rdx, rdw, rdb = _reference(x, w, b, dy)
    torch.testing.assert_close(y.cpu().double(), ry, rtol=1e-4, atol=1e-4)
    _, dx, dw, db = _ours(mod, guard, x, w, b, dy, groups=5)
    # dx scales with rstd (up to ~300 here): relative tolerance on O(100) values
    torch.testing.assert_close(dx, rdx, rtol=1e-3, atol=1e-2)
    torch.testing.assert_close(dw, rdw, **FP32["grad"])
    torch.testing.assert_close(db, rdb, **FP32["grad"])
