"""Tests for triton-06 (tiled matmul). Reference: float64 matmul on the CPU of the same (rounded) inputs.

Every operand is a view at the corner of a larger buffer whose other entries are NaN: a K-tail load that is
not masked (or masked with the wrong bound) pulls a NaN into the dot product, and NaN * 0 is still NaN.

Tolerances:
- fp32 operands with input_precision="ieee": fp32 products, K <= 100 fp32 additions -> rtol 1e-5, atol 1e-4
  (entries are O(sqrt(K)) ~ 10, so atol is ~1e-5 relative to the typical entry). A tf32 dot (operands rounded
  to 10 mantissa bits, 2^-11 relative each) is off by ~1e-3 on these entries: 10x over this bound.
- fp16 operands, fp32 output, K = 1000: products of two fp16 are exact in fp32, the sum of 1000 terms in fp32
  is off by ~sqrt(K) ulp ~ 3e-6 relative; an fp16 accumulator would be off by ~1e-3. rtol 1e-4.
- fp16/bf16 operands and output: one final rounding (2^-11 / 2^-9 relative) -> rtol 1e-2, atol 1e-2.
- fp32 operands with Triton's default precision: tf32 on GPUs (10-bit mantissa, ~5e-4 relative per product),
  exact in the interpreter -> normwise 5e-3.
"""

import pytest
import torch

BLOCKS16 = {"block_m": 16, "block_n": 16, "block_k": 16}  # small tiles: several programs and K steps on tiny shapes


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    """Every tensor the lesson allocates with torch.empty starts as NaN, so unwritten tiles cannot pass."""
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: real_empty(*a, **k).fill_(float("nan")))


def _padded(rows, cols, device, dtype, seed, uniform=False):
    """A rows x cols random view at the corner of a larger NaN-filled tensor: reads past the edge (in K
    especially, where masked lanes must contribute exactly 0) stay inside memory but poison the result."""
    g = torch.Generator().manual_seed(seed)
    big = torch.full((rows + 64, cols + 64), float("nan"))
    big[:rows, :cols] = torch.rand(rows, cols, generator=g) if uniform else torch.randn(rows, cols, generator=g)
    return big.to(device=device, dtype=dtype)[:rows, :cols]


def _ref(a, b):
    return a.detach().cpu().double() @ b.detach().cpu().double()


@pytest.mark.points(2)
@pytest.mark.parametrize("mnk,blocks", [
    ((67, 45, 53), BLOCKS16),  # K = 3 * 16 + 5
    ((16, 16, 16), BLOCKS16),
    ((1, 1, 1), BLOCKS16),
    ((33, 17, 5), BLOCKS16),  # K < BLOCK_K: the only K step is the ragged one
    ((20, 70, 100), BLOCKS16),
    ((45, 37, 33), {"block_m": 32, "block_n": 16, "block_k": 32}),  # K = BLOCK_K + 1: a one-column last step
    ((19, 50, 70), {"block_m": 16, "block_n": 32, "block_k": 64}),  # no dimension a multiple of its tile
], ids=["67x45x53", "16^3", "1^3", "K<BK", "20x70x100", "K=BK+1", "BK=64"])
def test_fp32_ieee(lesson, device, mnk, blocks):
    mod = lesson.load("matmul.py")
    M, N, K = mnk
    a = _padded(M, K, device, torch.float32, seed=M)
    b = _padded(K, N, device, torch.float32, seed=N + 1)
    c = mod.matmul(a, b, input_precision="ieee", **blocks)
    torch.testing.assert_close(c.cpu().double(), _ref(a, b), rtol=1e-5, atol=1e-4)


@pytest.mark.points(2)
def test_non_contiguous_operands(lesson, device):
    # A is every other column of a wider matrix (stride_ak = 2), B is a transposed weight (stride_bk = 1)
    mod = lesson.load("matmul.py")
    M, N, K = 37, 29, 41
    a = _padded(M, 2 * K, device, torch.float32, seed=1)[:, ::2]
    w = _padded(N, K, device, torch.float32, seed=2)
    b = w.t()
    c = mod.matmul(a, b, input_precision="ieee", **BLOCKS16)
    torch.testing.assert_close(c.cpu().double(), _ref(a, b), rtol=1e-5, atol=1e-4)


@pytest.mark.points(2)
def test_fp16_operands_accumulate_in_fp32(lesson, device):
    # long K with positive entries: an fp16 accumulator drifts by ~1e-3, fp32 by ~1e-6
    mod = lesson.load("matmul.py")
    M, N, K = 20, 24, 1000
    a = _padded(M, K, device, torch.float16, seed=3, uniform=True)
    b = _padded(K, N, device, torch.float16, seed=4, uniform=True)
    c = mod.matmul(a, b, out_dtype=torch.float32, **BLOCKS16)
    torch.testing.assert_close(c.cpu().double(), _ref(a, b), rtol=1e-4, atol=0)


@pytest.mark.parametrize("dtype", [
    torch.float16,
    # Triton's interpreter does not support bf16 arithmetic (it multiplies the raw uint16 bit patterns in
    # tl.dot, triton-lang/triton#11584), so bf16 operands are tested on a GPU only
    pytest.param(torch.bfloat16, marks=pytest.mark.requires("cuda-gpu")),
])
def test_half_precision_output(lesson, device, dtype):
    mod = lesson.load("matmul.py")
    M, N, K = 45, 38, 77
    a = _padded(M, K, device, dtype, seed=5)
    b = _padded(K, N, device, dtype, seed=6)
    c = mod.matmul(a, b, **BLOCKS16)
    assert c.dtype == dtype
    torch.testing.assert_close(c.cpu().double(), _ref(a, b), rtol=1e-2, atol=1e-2)


def test_default_precision_fp32(lesson, device):
    # Triton's default for fp32 dot is tf32 on GPUs: close, not exact. The interpreter computes in fp32.
    mod = lesson.load("matmul.py")
    a = _padded(50, 64, device, torch.float32, seed=7)
    b = _padded(64, 40, device, torch.float32, seed=8)
    c = mod.matmul(a, b, block_m=32, block_n=32, block_k=32).cpu().double()
    ref = _ref(a, b)
    assert torch.linalg.norm(c - ref) / torch.linalg.norm(ref) < 5e-3


@pytest.mark.interpreter
def test_loads_stay_inside_the_operands(lesson, device):
    # A and B are views at the corner of larger buffers: a row tile of A read past M, or a column tile of B
    # read past N, stays inside memory and only feeds output entries the masked store drops, so only a bounds
    # check sees it. On a GPU machine this test runs through the guarded interpreter in a subprocess.
    mod = lesson.load("matmul.py")
    M, N, K = 37, 29, 21  # ragged last tile in every dimension
    a = _padded(M, K, device, torch.float32, seed=9)
    b = _padded(K, N, device, torch.float32, seed=10)
    c = mod.matmul(a, b, input_precision="ieee", **BLOCKS16)
    torch.testing.assert_close(c.cpu().double(), _ref(a, b), rtol=1e-5, atol=1e-4)
