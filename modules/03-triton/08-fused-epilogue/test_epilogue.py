"""Tests for triton-08 (fused bias + GELU and SwiGLU epilogues). Reference: float64 on the CPU.

Tolerances: fp32 operands with input_precision="ieee" give fp32 products, K <= 100 fp32 additions and an
fp32 erf/sigmoid (a few ulp): rtol 1e-5, atol 1e-5 (entries ~ sqrt(K) ~ 10). A tf32 dot (operands rounded to
10 mantissa bits) is off by 3e-3 to 4e-2 on these entries, hundreds of times the bound.
fp16 operands and output: products exact in fp32, the epilogue in fp32, then ONE rounding to fp16; so every
element must lie within 1 fp16 ulp of the float64 result (0.5 ulp from the final rounding plus fp32 noise).
An epilogue done at fp16 precision rounds two or three times and breaks that bound.
"""

import pytest
import torch
import torch.nn.functional as F

FP32 = {"rtol": 1e-5, "atol": 1e-5}
SMALL = {"block": (16, 16, 16)}


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    """Every tensor the lesson allocates with torch.empty starts as NaN, so unwritten tiles cannot pass."""
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: real_empty(*a, **k).fill_(float("nan")))


def _rand(shape, device, dtype, seed, scale=1.0):
    """Random values in a view at the corner of a NaN-filled buffer: a read past an edge that reaches the
    result (a K-tail lane not masked on both operands) turns it into NaN."""
    g = torch.Generator().manual_seed(seed)
    big = torch.full([n + 16 for n in shape], float("nan"))
    big[tuple(slice(0, n) for n in shape)] = scale * torch.randn(*shape, generator=g)
    return big.to(device=device, dtype=dtype)[tuple(slice(0, n) for n in shape)]


def _d(t):
    return t.detach().cpu().double()


def _fp16_ulp(ref):
    # spacing of fp16 numbers around |ref| (normal range; subnormal spacing below 2^-14)
    e = torch.floor(torch.log2(ref.abs().clamp_min(2.0 ** -14)))
    return torch.pow(2.0, e - 10)


def _assert_within_one_ulp(out, ref):
    # + 1e-6 absolute: in the far negative tail 1 + erf(x / sqrt(2)) cancels in fp32 (as in torch's own CUDA
    # GELU), worth ~|x| * 2^-24 absolute -- far below one fp16 ulp of any value that is not itself ~1e-5
    err = (_d(out) - ref).abs()
    bound = _fp16_ulp(ref) + 1e-6
    worst = (err / _fp16_ulp(ref)).max().item()
    assert (err <= bound).all(), f"an element is off by {worst:.2f} fp16 ulp: more than one rounding to fp16"


@pytest.mark.points(2)
@pytest.mark.parametrize("mnk", [(67, 45, 53), (1, 20, 30), (40, 33, 100)])
def test_bias_gelu_fp32(lesson, device, mnk):
    mod = lesson.load("epilogue.py")
    M, N, K = mnk
    x = _rand((M, K), device, torch.float32, seed=M)
    w = _rand((K, N), device, torch.float32, seed=N, scale=0.3)  # pre-activations mostly in [-3, 3]
    b = _rand((N,), device, torch.float32, seed=K)
    out = mod.linear_act(x, w, b, "gelu", input_precision="ieee", **SMALL)
    ref = F.gelu(_d(x) @ _d(w) + _d(b))
    torch.testing.assert_close(_d(out), ref, **FP32)


def test_plain_linear(lesson, device):
    mod = lesson.load("epilogue.py")
    x = _rand((30, 50), device, torch.float32, seed=1)
    w = _rand((50, 20), device, torch.float32, seed=2)
    out = mod.linear_act(x, w, None, "none", input_precision="ieee", **SMALL)
    torch.testing.assert_close(_d(out), _d(x) @ _d(w), rtol=1e-5, atol=1e-4)


@pytest.mark.points(2)
@pytest.mark.parametrize("mnk", [(37, 29, 41), (16, 16, 16)])
def test_swiglu_fp32(lesson, device, mnk):
    mod = lesson.load("epilogue.py")
    M, N, K = mnk
    x = _rand((M, K), device, torch.float32, seed=3)
    wg = _rand((K, N), device, torch.float32, seed=4, scale=0.3)
    wu = _rand((K, N), device, torch.float32, seed=5, scale=0.3)
    out = mod.swiglu(x, wg, wu, input_precision="ieee", **SMALL)
    ref = F.silu(_d(x) @ _d(wg)) * (_d(x) @ _d(wu))
    torch.testing.assert_close(_d(out), ref, **FP32)


def test_swiglu_transposed_weights(lesson, device):
    # nn.Linear stores weights as [N, K]; their transposes are non-contiguous [K, N] views
    mod = lesson.load("epilogue.py")
    M, N, K = 20, 35, 48
    x = _rand((M, K), device, torch.float32, seed=6)
    wg = _rand((N, K), device, torch.float32, seed=7, scale=0.3).t()
    wu = _rand((N, K), device, torch.float32, seed=8, scale=0.3).t()
    out = mod.swiglu(x, wg, wu, input_precision="ieee", **SMALL)
    ref = F.silu(_d(x) @ _d(wg)) * (_d(x) @ _d(wu))
    torch.testing.assert_close(_d(out), ref, **FP32)


@pytest.mark.points(2)
def test_fp16_epilogue_rounds_once(lesson, device):
    mod = lesson.load("epilogue.py")
    M, N, K = 64, 48, 64
    x = _rand((M, K), device, torch.float16, seed=9)
    w = _rand((K, N), device, torch.float16, seed=10, scale=0.3)
    b = _rand((N,), device, torch.float16, seed=11)
    out = mod.linear_act(x, w, b, "gelu", **SMALL)
    ref = F.gelu(_d(x) @ _d(w) + _d(b))
    _assert_within_one_ulp(out, ref)

    wg = _rand((K, N), device, torch.float16, seed=12, scale=0.3)
    wu = _rand((K, N), device, torch.float16, seed=13, scale=0.3)
    h = mod.swiglu(x, wg, wu, **SMALL)
    ref = F.silu(_d(x) @ _d(wg)) * (_d(x) @ _d(wu))
    _assert_within_one_ulp(h, ref)


@pytest.mark.interpreter
def test_loads_stay_inside_the_inputs(lesson, device):
    # the bias is a view at the start of a larger buffer: a bias load past N stays inside memory and only
    # feeds columns the masked store drops, so only a bounds check sees it. On a GPU machine this test runs
    # through the guarded interpreter in a subprocess.
    mod = lesson.load("epilogue.py")
    M, N, K = 21, 37, 19  # ragged last tile in every dimension
    x = _rand((M, K), device, torch.float32, seed=14)
    w = _rand((K, N), device, torch.float32, seed=15, scale=0.3)
    b = _rand((N,), device, torch.float32, seed=16)
    out = mod.linear_act(x, w, b, "gelu", input_precision="ieee", **SMALL)
    torch.testing.assert_close(_d(out), F.gelu(_d(x) @ _d(w) + _d(b)), **FP32)
    wu = _rand((K, N), device, torch.float32, seed=17, scale=0.3)
    h = mod.swiglu(x, w, wu, input_precision="ieee", **SMALL)
    torch.testing.assert_close(_d(h), F.silu(_d(x) @ _d(w)) * (_d(x) @ _d(wu)), **FP32)
