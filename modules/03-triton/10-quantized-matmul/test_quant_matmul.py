"""Tests for triton-10 (W4A16 / W8A16 matmul with in-kernel dequantization).

The test builds quantized weights, packs them with its own (loop-based) packer, and compares against
float64 A @ W_deq, where W_deq = (q - z) * s is rounded to the activation dtype exactly as the format
defines. So the only kernel error is fp32 accumulation of exact fp16 products (~1e-6 relative) plus the
final rounding of C: fp32 output -> rtol 1e-5, atol 1e-4 (entries ~ 1); fp16 output -> half an fp16 ulp
(~5e-4 relative) -> rtol = atol = 2e-3.
"""

import pytest
import torch


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    """Every tensor the lesson allocates with torch.empty starts as NaN."""
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: real_empty(*a, **k).fill_(float("nan")))


def _pack(q, bits):
    """q [K, N] ints in [0, 2^bits) -> [K * bits / 32, N] int32; q[k, n] at bit (k % pack) * bits of word k // pack."""
    pack = 32 // bits
    K, N = q.shape
    words = torch.zeros(K // pack, N, dtype=torch.int64)
    for j in range(pack):
        words |= q[j::pack].to(torch.int64) << (j * bits)
    words[words >= 2**31] -= 2**32  # reinterpret the unsigned 32-bit pattern as int32
    return words.to(torch.int32)


def _in_padded(t, fill):
    """t as a view at the corner of a larger buffer filled with `fill`: every load past an edge stays inside
    memory, and one that reaches the result (a K-tail lane of the last tile) poisons it."""
    big = torch.full((t.shape[0] + 8, t.shape[1] + 16), fill, dtype=t.dtype)
    big[: t.shape[0], : t.shape[1]] = t
    return big[: t.shape[0], : t.shape[1]]


def _quantized(K, N, bits, group, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 2**bits, (K, N), generator=g)
    zeros = torch.randint(0, 2**bits, (K // group, N), generator=g).to(torch.int32)
    scales = (0.005 + 0.02 * torch.rand(K // group, N, generator=g)).to(dtype)
    z = zeros.repeat_interleave(group, dim=0)
    s = scales.float().repeat_interleave(group, dim=0)
    w_deq = ((q - z).float() * s).to(dtype)  # the format's dequantized weight, in the activation dtype
    # past the last group the scales are NaN and the zero points / words garbage: a scale or zero load for a
    # K-tail lane must be masked (the activation there is 0, but 0 * NaN is NaN)
    return (_in_padded(_pack(q, bits), -123456789), _in_padded(scales, float("nan")),
            _in_padded(zeros, 1 << 20), w_deq)


def _run(mod, M, N, K, bits, group, device, dtype=torch.float16, out_dtype=None, seed=0, **blocks):
    qweight, scales, zeros, w_deq = _quantized(K, N, bits, group, dtype, seed)
    a = torch.randn(M, K, generator=torch.Generator().manual_seed(seed + 1)).to(dtype)
    out = mod.quant_matmul(a.to(device), qweight.to(device), scales.to(device), zeros.to(device), bits, group,
                           out_dtype=out_dtype, **blocks)
    return out.cpu().double(), a.double() @ w_deq.double()


FP32_OUT = {"rtol": 1e-5, "atol": 1e-4}
FP16_OUT = {"rtol": 2e-3, "atol": 2e-3}


@pytest.mark.points(3)
@pytest.mark.parametrize("M,N,K,group", [(1, 45, 256, 64), (37, 70, 128, 32), (5, 16, 192, 192), (20, 33, 96, 16)])
def test_w4a16(lesson, device, M, N, K, group):
    mod = lesson.load("quant_matmul.py")
    out, ref = _run(mod, M, N, K, 4, group, device, out_dtype=torch.float32, seed=M + K,
                    block_m=16, block_n=32, block_k=32)
    torch.testing.assert_close(out, ref, **FP32_OUT)


@pytest.mark.points(2)
@pytest.mark.parametrize("M,N,K,group", [(3, 40, 128, 128), (18, 24, 64, 16)])
def test_w8a16(lesson, device, M, N, K, group):
    mod = lesson.load("quant_matmul.py")
    out, ref = _run(mod, M, N, K, 8, group, device, out_dtype=torch.float32, seed=M + K,
                    block_m=16, block_n=32, block_k=32)
    torch.testing.assert_close(out, ref, **FP32_OUT)


def test_fp16_output_and_k_tail(lesson, device):
    # K = 96 is not a multiple of BLOCK_K = 64: the last tile is half empty
    mod = lesson.load("quant_matmul.py")
    out, ref = _run(mod, 9, 50, 96, 4, 32, device, seed=7, block_m=16, block_n=16, block_k=64)
    torch.testing.assert_close(out, ref, **FP16_OUT)


@pytest.mark.points(2)
@pytest.mark.parametrize("M,N,K,bits,group,block_k", [
    (7, 37, 144, 4, 48, 32),  # G = 1.5 tiles: tile 1 holds k 32..63, groups 0 and 1; K tail of 16
    (5, 20, 120, 8, 24, 16),  # W8 (PACK 4), G = 1.5 tiles; K = 7.5 tiles
    (3, 18, 80, 4, 40, 64),   # G = 5/8 of a tile; the second (last) tile is ragged
])
def test_group_size_neither_divides_nor_is_a_multiple_of_block_k(lesson, device, M, N, K, bits, group, block_k):
    # a tile straddles a group boundary at a place that moves from tile to tile: one scale row per tile is wrong
    mod = lesson.load("quant_matmul.py")
    out, ref = _run(mod, M, N, K, bits, group, device, out_dtype=torch.float32, seed=K + group,
                    block_m=16, block_n=16, block_k=block_k)
    torch.testing.assert_close(out, ref, **FP32_OUT)


@pytest.mark.interpreter
def test_loads_stay_inside_the_inputs(lesson, device):
    # scales and zero points are views at the corner of larger buffers: a load past column N (or past the
    # last group) stays inside memory and only feeds columns the masked store drops, so only a bounds check
    # sees it. On a GPU machine this test runs through the guarded interpreter in a subprocess.
    mod = lesson.load("quant_matmul.py")
    out, ref = _run(mod, 5, 37, 96, 4, 32, device, out_dtype=torch.float32, seed=9,
                    block_m=16, block_n=16, block_k=64)  # ragged last tile along N and K
    torch.testing.assert_close(out, ref, **FP32_OUT)


@pytest.mark.requires("cuda-gpu")
def test_bf16_activations_on_gpu(lesson, device):
    # bf16 tl.dot cannot run in Triton's interpreter (triton-lang/triton#11584)
    mod = lesson.load("quant_matmul.py")
    out, ref = _run(mod, 64, 256, 1024, 4, 128, device, dtype=torch.bfloat16, seed=8,
                    block_m=64, block_n=64, block_k=64)
    torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2)
