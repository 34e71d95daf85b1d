"""Tests for triton-09 (causal FlashAttention forward + logsumexp).

Reference: torch.nn.functional.scaled_dot_product_attention in float64 on the CPU, and the logsumexp of the
float64 scaled scores. Tolerances:
- fp32 inputs with input_precision="ieee": fp32 dots over D <= 64 terms, exp2 and the online rescaling
  (one extra rounded multiply per key block): rtol = atol = 2e-5 for O (entries O(1)), 1e-5 for LSE.
- fp16 inputs: P is rounded to fp16 before P @ V (as in FlashAttention), 2^-11 relative per weight; O is an
  average of O(1) values: atol = rtol = 5e-3 (bf16, GPU only: 8 bits, 3e-2).
"""

import math

import pytest
import torch
import torch.nn.functional as F


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    """Every tensor the lesson allocates with torch.empty / empty_like starts as NaN."""
    real_empty, real_empty_like = torch.empty, torch.empty_like
    monkeypatch.setattr(torch, "empty", lambda *a, **k: real_empty(*a, **k).fill_(float("nan")))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: real_empty_like(*a, **k).fill_(float("nan")))


def _qkv(B, H, S, D, device, dtype, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return [(scale * torch.randn(B, H, S, D, generator=g)).to(device=device, dtype=dtype) for _ in range(3)]


def _reference(q, k, v, causal, sm_scale=None):
    q, k, v = (t.detach().cpu().double() for t in (q, k, v))
    D = q.shape[-1]
    scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        S = q.shape[-2]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    return o, torch.logsumexp(s, dim=-1)


def _check(mod, q, k, v, causal, tol_o, tol_lse, **kw):
    o, lse = mod.flash_attn_forward(q, k, v, causal=causal, **kw)
    ro, rlse = _reference(q, k, v, causal, kw.get("sm_scale"))
    torch.testing.assert_close(o.detach().cpu().double(), ro, **tol_o)
    torch.testing.assert_close(lse.detach().cpu().double(), rlse, **tol_lse)


FP32_O = {"rtol": 2e-5, "atol": 2e-5}
FP32_LSE = {"rtol": 1e-5, "atol": 1e-5}
SMALL = {"block_m": 32, "block_n": 16, "input_precision": "ieee"}


@pytest.mark.points(3)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("B,H,S,D", [(1, 2, 67, 16), (2, 1, 100, 32), (1, 1, 32, 16), (1, 1, 1, 16), (1, 1, 5, 64)])
def test_fp32_matches_sdpa(lesson, device, causal, B, H, S, D):
    mod = lesson.load("flash_attn.py")
    q, k, v = _qkv(B, H, S, D, device, torch.float32, seed=S + D)
    _check(mod, q, k, v, causal, FP32_O, FP32_LSE, **SMALL)


def test_large_logits(lesson, device):
    # scores of several hundred: exp overflows unless every block is shifted by the running max
    mod = lesson.load("flash_attn.py")
    q, k, v = _qkv(1, 1, 70, 16, device, torch.float32, seed=1, scale=6.0)
    _check(mod, q, k, v, True, FP32_O, {"rtol": 1e-5, "atol": 1e-4}, **SMALL)


def test_non_contiguous_bshd_layout(lesson, device):
    # projections usually produce [B, S, H, D]; the kernel reads the [B, H, S, D] view through its strides
    mod = lesson.load("flash_attn.py")
    B, S, H, D = 2, 45, 3, 16
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(B, S, H, D, generator=g).to(device).transpose(1, 2) for _ in range(3))
    assert not q.is_contiguous()
    _check(mod, q, k, v, True, FP32_O, FP32_LSE, **SMALL)


def test_custom_scale_and_square_blocks(lesson, device):
    mod = lesson.load("flash_attn.py")
    q, k, v = _qkv(1, 2, 50, 32, device, torch.float32, seed=3)
    _check(mod, q, k, v, True, FP32_O, FP32_LSE, sm_scale=0.3, block_m=16, block_n=16, input_precision="ieee")


@pytest.mark.parametrize("dtype", [
    torch.float16,
    # Triton's interpreter cannot run bf16 tl.dot (triton-lang/triton#11584): bf16 is checked on a GPU only
    pytest.param(torch.bfloat16, marks=pytest.mark.requires("cuda-gpu")),
])
def test_half_precision(lesson, device, dtype):
    mod = lesson.load("flash_attn.py")
    q, k, v = _qkv(1, 2, 90, 32, device, dtype, seed=4)
    tol = {"rtol": 5e-3, "atol": 5e-3} if dtype == torch.float16 else {"rtol": 3e-2, "atol": 3e-2}
    _check(mod, q, k, v, True, tol, {"rtol": 1e-3, "atol": 1e-3}, block_m=32, block_n=16)


@pytest.mark.requires("cuda-gpu")
def test_gpu_sized_blocks(lesson, device):
    # the tile shapes the benchmark uses, on a long ragged sequence
    mod = lesson.load("flash_attn.py")
    q, k, v = _qkv(1, 4, 1000, 128, device, torch.bfloat16, seed=5)
    _check(mod, q, k, v, True, {"rtol": 3e-2, "atol": 3e-2}, {"rtol": 1e-3, "atol": 1e-3},
           block_m=128, block_n=64, num_warps=8, num_stages=3)
