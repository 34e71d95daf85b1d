"""Tests for triton-02. A transpose only moves bits, so every comparison is exact (rtol = atol = 0)."""

import pytest
import torch

PAD = 64  # >= any block size: rows/columns of slack around every tensor, poisoned on outputs


def _padded_randn(rows, cols, device, dtype, seed):
    """A rows x cols view at the corner of a larger random tensor, so stray reads stay inside memory."""
    g = torch.Generator().manual_seed(seed)
    big = torch.randn(rows + PAD, cols + PAD, generator=g).to(device=device, dtype=dtype)
    return big[:rows, :cols]


def _guarded_out(guard, rows, cols, device, dtype, row_pad=PAD):
    """A rows x cols output inside a NaN buffer (conftest.py): row_pad poisoned columns after every row and
    PAD poisoned rows before and after the matrix, more than a tile (<= 32 x 32) can overrun."""
    return guard.rows(rows, cols, dtype, device, pad_cols=row_pad, pad_rows=PAD)


def _check(guard, out, expected):
    torch.testing.assert_close(out.cpu(), expected.cpu(), rtol=0, atol=0)
    guard.check()


def _layout(kind, M, N, device, dtype=torch.float32):
    """An M x N input with the named memory layout."""
    if kind == "contiguous":
        return torch.randn(M, N, generator=torch.Generator().manual_seed(1)).to(device=device, dtype=dtype)
    if kind == "transposed":  # strides (1, M): column-major
        return _padded_randn(N, M, device, dtype, seed=2).t()
    if kind == "strided-slice":  # strides (2 * row, 3): every other row, every third column
        return _padded_randn(2 * M, 3 * N, device, dtype, seed=3)[::2, ::3]
    if kind == "offset-window":  # storage offset and a row stride wider than N
        return _padded_randn(M + 9, N + 5, device, dtype, seed=4)[7:7 + M, 2:2 + N]
    if kind == "broadcast":  # stride 0 along columns: one value per row
        return _padded_randn(M, 1, device, dtype, seed=5).expand(M, N)
    raise ValueError(kind)


LAYOUTS = ["contiguous", "transposed", "strided-slice", "offset-window", "broadcast"]


@pytest.mark.points(3)
@pytest.mark.parametrize("kind", LAYOUTS)
def test_strided_transpose_any_layout(lesson, device, guard, kind):
    mod = lesson.load("transpose.py")
    M, N = 37, 53  # neither is a multiple of the 16 x 32 tile
    x = _layout(kind, M, N, device)
    out = _guarded_out(guard, N, M, device, x.dtype)
    mod.transpose_strided(x, out=out)
    _check(guard, out, x.t())


@pytest.mark.points(2)
@pytest.mark.parametrize("kind", ["contiguous", "strided-slice"])
def test_strided_into_a_transposed_output_view(lesson, device, guard, kind):
    # the output may be non-contiguous too: write y through a column-major view (unit stride along m, not n)
    mod = lesson.load("transpose.py")
    M, N = 29, 70
    x = _layout(kind, M, N, device)
    out = _guarded_out(guard, M, N, device, x.dtype).t()  # N x M with strides (1, N + PAD)
    mod.transpose_strided(x, out=out)
    _check(guard, out, x.t())


@pytest.mark.parametrize("shape", [(1, 1), (1, 200), (200, 1), (16, 32)])
def test_strided_edge_shapes(lesson, device, guard, shape):
    mod = lesson.load("transpose.py")
    M, N = shape
    x = _layout("offset-window", M, N, device)
    out = _guarded_out(guard, N, M, device, x.dtype)
    mod.transpose_strided(x, out=out)
    _check(guard, out, x.t())


@pytest.mark.interpreter
def test_loads_stay_inside_the_input(lesson, device, guard):
    # x is a window of a larger buffer: an edge tile read past its last row or column stays inside memory and
    # only feeds elements the masked store drops, so only a bounds check sees it. On a GPU machine this test
    # runs through the guarded interpreter in a subprocess.
    mod = lesson.load("transpose.py")
    M, N = 37, 53  # ragged against every tile
    x = _layout("offset-window", M, N, device)
    out = _guarded_out(guard, N, M, device, x.dtype)
    mod.transpose_strided(x, out=out)
    _check(guard, out, x.t())


@pytest.mark.points(2)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_descriptor_transpose(lesson, device, guard, dtype):
    mod = lesson.load("transpose.py")
    M, N = 40, 104  # ragged against the 32 x 32 tile; rows of 16-byte multiples (see descriptor_compatible)
    # a window of a wider matrix: unit last stride, row stride 136 elements (16-byte aligned),
    # storage offset (3 * 136 + 8) elements = 16-byte aligned for fp32 and fp16
    big = torch.randn(M + 3 + PAD, 136, generator=torch.Generator().manual_seed(6)).to(device=device, dtype=dtype)
    x = big[3:3 + M, 8:8 + N]
    assert mod.descriptor_compatible(x)
    row_pad = 12 if dtype == torch.float32 else 64  # output row stride 52 / 104 elements: 16-byte aligned
    out = _guarded_out(guard, N, M, device, dtype, row_pad=row_pad)
    assert mod.descriptor_compatible(out)
    mod.transpose_descriptor(x, out=out)
    _check(guard, out, x.t())


def test_dispatch_picks_a_correct_path(lesson, device, guard, monkeypatch):
    mod = lesson.load("transpose.py")
    guard.allocations(monkeypatch)  # the outputs transpose() allocates itself are guarded and poisoned too
    for kind in ("contiguous", "transposed"):
        x = _layout(kind, 40, 24, device)
        torch.testing.assert_close(mod.transpose(x).cpu(), x.t().cpu(), rtol=0, atol=0)
    # a 37-wide output has 148-byte rows: not descriptor-compatible, so the strided kernel must take it
    x = _layout("contiguous", 37, 24, device)
    out = _guarded_out(guard, 24, 37, device, x.dtype, row_pad=11)
    assert not mod.descriptor_compatible(out)
    mod.transpose(x, out=out)
    _check(guard, out, x.t())
