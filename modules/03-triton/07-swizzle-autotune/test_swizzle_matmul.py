"""Tests for triton-07 (grouped program ordering + autotuned matmul).

The ordering is checked against a direct enumeration of its definition; the matmul against float64.
Tolerances as in triton-06: fp32 with input_precision="ieee" rtol 1e-5 / atol 1e-4 (K <= 100, entries ~10;
a tf32 dot would be off by ~1e-2 here);
fp16 operands accumulate in fp32 (exact products), fp16 output rounded once: rtol = atol = 1e-2.
"""

import pytest
import torch
import triton


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    """Every tensor the lesson allocates with torch.empty starts as NaN (-7 for integers)."""
    real_empty = torch.empty

    def empty(*a, **k):
        t = real_empty(*a, **k)
        return t.fill_(float("nan") if t.is_floating_point() else -7)

    monkeypatch.setattr(torch, "empty", empty)


def _grouped_order(num_pid_m, num_pid_n, group_m):
    """The definition: take GROUP_M tile-rows at a time (fewer at the bottom); inside that band walk the
    columns left to right, and each column top to bottom."""
    order = []
    for first in range(0, num_pid_m, group_m):
        rows = range(first, min(first + group_m, num_pid_m))
        for n in range(num_pid_n):
            order.extend((m, n) for m in rows)
    return order


@pytest.mark.points(2)
@pytest.mark.parametrize("npm,npn,group", [
    (7, 5, 3), (8, 8, 4), (5, 9, 8), (13, 3, 4), (1, 6, 2), (6, 1, 4), (9, 9, 1),
    # short bottom group whose first id is not a multiple of its height: a column must still start at its top row
    (5, 5, 3), (11, 7, 4),
])
def test_tile_order_matches_the_definition(lesson, device, npm, npn, group):
    mod = lesson.load("swizzle_matmul.py")
    total = npm * npn
    pm = torch.empty(total, dtype=torch.int32, device=device)
    pn = torch.empty(total, dtype=torch.int32, device=device)
    block = 128
    mod.tile_order_kernel[(triton.cdiv(total, block),)](pm, pn, npm, npn, GROUP_M=group, BLOCK=block)
    got = list(zip(pm.tolist(), pn.tolist()))
    assert got == _grouped_order(npm, npn, group)
    assert sorted(got) == [(m, n) for m in range(npm) for n in range(npn)], "not a bijection onto the tiles"


def _padded(rows, cols, device, dtype, seed):
    """A random rows x cols view at the corner of a NaN-filled buffer: a read past an edge that reaches the
    result (the K tail above all) turns it into NaN."""
    g = torch.Generator().manual_seed(seed)
    big = torch.full((rows + 32, cols + 32), float("nan"))
    big[:rows, :cols] = torch.randn(rows, cols, generator=g)
    return big.to(device=device, dtype=dtype)[:rows, :cols]


def _ref(a, b):
    return a.detach().cpu().double() @ b.detach().cpu().double()


@pytest.mark.points(2)
@pytest.mark.parametrize("mnk,group", [((67, 45, 53), 2), ((100, 40, 30), 4), ((16, 80, 16), 3), ((1, 1, 1), 8)])
def test_grouped_matmul_fp32(lesson, device, mnk, group):
    mod = lesson.load("swizzle_matmul.py")
    M, N, K = mnk
    a = _padded(M, K, device, torch.float32, seed=M)
    b = _padded(K, N, device, torch.float32, seed=N)
    cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": group}
    c = mod.matmul(a, b, config=cfg, input_precision="ieee")
    torch.testing.assert_close(c.cpu().double(), _ref(a, b), rtol=1e-5, atol=1e-4)


def test_grouped_matmul_fp16_rectangular_tiles(lesson, device):
    mod = lesson.load("swizzle_matmul.py")
    M, N, K = 90, 50, 70
    a = _padded(M, K, device, torch.float16, seed=1)
    b = _padded(K, N, device, torch.float16, seed=2)
    cfg = {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2}
    c = mod.matmul(a, b, config=cfg)
    torch.testing.assert_close(c.cpu().double(), _ref(a, b), rtol=1e-2, atol=1e-2)


@pytest.mark.requires("cuda-gpu")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_autotuned_matmul_on_gpu(lesson, device, dtype):
    mod = lesson.load("swizzle_matmul.py")
    M, N, K = 300, 520, 256
    a = _padded(M, K, device, dtype, seed=3)
    b = _padded(K, N, device, dtype, seed=4)
    c = mod.matmul(a, b)
    torch.testing.assert_close(c.cpu().double(), _ref(a, b), rtol=1e-2, atol=2e-2)
