"""Shared test helpers of module 03: guard regions around every buffer a learner kernel writes.

A Triton store with a wrong mask or offset writes up to BLOCK - 1 elements past (or before) the tensor
it was meant for. On a GPU that silently corrupts a neighbouring allocation; on the CPU interpreter it
can corrupt the heap. Tests therefore place every output inside a larger buffer whose margins hold a
sentinel (NaN for floating dtypes, GUARD_INT for integers) and assert, after the kernel ran, that the
margins still hold it: an overrun becomes a failed assertion that names the buffer and the distance.

    def test_x(lesson, device, guard):
        out = guard.empty((n,), torch.float32, device, margin=1024)   # margins of 1024 elements
        mod.add(x, y, out=out)
        guard.check()

    def test_y(lesson, device, guard, monkeypatch):
        guard.allocations(monkeypatch)   # torch.empty / empty_like return guarded, poisoned views
        dx, dw, db = mod.layernorm_backward(...)
        guard.check()
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch

GUARD_INT = -12345  # sentinel for integer buffers (never a sum of the small test values in the margins)
ALIGN = 256  # margins are rounded up to this many elements: 16-byte (TMA) alignment is kept for every dtype


def _poison_value(dtype: torch.dtype) -> float | int:
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    if dtype == torch.bool:
        return True
    # GUARD_INT where the dtype holds it; 8-bit integers (e.g. the int8 scratch Triton allocates for TMA
    # descriptors on a GPU) get 0x5A instead of a value torch.full would reject as an overflow
    return GUARD_INT if torch.iinfo(dtype).min <= GUARD_INT <= torch.iinfo(dtype).max else 0x5A


def _is_poison(t: torch.Tensor) -> torch.Tensor:
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return torch.isnan(t)
    return t == _poison_value(t.dtype)


def _round_up(n: int, k: int) -> int:
    return (n + k - 1) // k * k


def default_margin(shape: Sequence[int]) -> int:
    """Margin (elements) that holds the largest overrun of a row store: twice the row's power-of-two block."""
    last = int(shape[-1]) if len(shape) else 1
    return max(1024, 2 * (1 << max(last - 1, 0).bit_length()))


@dataclass
class _Guarded:
    name: str
    buf: torch.Tensor  # flat storage: margin | tensor | margin
    inside: torch.Tensor  # bool, same length as buf: True where the tensor's own elements are
    start: int  # offset of the tensor in buf (elements)
    end: int  # one past the tensor's last element in buf


class Guards:
    """Factory of guarded buffers for one test; `check()` asserts that every margin is untouched."""

    def __init__(self) -> None:
        self._all: list[_Guarded] = []

    def empty(self, shape: Sequence[int], dtype: torch.dtype, device: str | torch.device,
              margin: int | None = None, stride: Sequence[int] | None = None,
              name: str | None = None) -> torch.Tensor:
        """A poisoned tensor of `shape` (contiguous, or the given `stride`) inside a buffer with
        `margin` poisoned elements before and after it."""
        shape = tuple(int(s) for s in shape)
        if stride is None:
            stride, acc = [], 1
            for s in reversed(shape):
                stride.insert(0, acc)
                acc *= max(s, 1)
        stride = tuple(int(s) for s in stride)
        span = 1 + sum((s - 1) * st for s, st in zip(shape, stride)) if all(shape) else 0
        margin = _round_up(default_margin(shape) if margin is None else margin, ALIGN)
        buf = torch.full((span + 2 * margin,), _poison_value(dtype), dtype=dtype, device=device)
        view = buf.as_strided(shape, stride, margin)
        inside = torch.zeros(buf.numel(), dtype=torch.bool)
        inside.as_strided(shape, stride, margin).fill_(True)
        self._all.append(_Guarded(name or f"buffer #{len(self._all) + 1} {list(shape)} {dtype}",
                                  buf, inside, margin, margin + span))
        return view

    def rows(self, rows: int, cols: int, dtype: torch.dtype, device: str | torch.device,
             pad_cols: int, pad_rows: int = 1, name: str | None = None) -> torch.Tensor:
        """A rows x cols matrix whose row stride is cols + pad_cols: each row is followed by pad_cols
        poisoned elements (catches a store that runs past its row), and the whole matrix has poisoned
        margins of pad_rows padded rows before and after it (a 2-D tile can overrun by BLOCK - 1 rows)."""
        return self.empty((rows, cols), dtype, device, margin=pad_rows * (cols + pad_cols),
                          stride=(cols + pad_cols, 1), name=name)

    def allocations(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """From now on in this test, torch.empty and torch.empty_like return guarded, poisoned tensors
        (same shape, dtype, device and strides as the real call would give)."""
        real_empty, real_empty_like = torch.empty, torch.empty_like

        def wrap(real: Any) -> Any:
            def alloc(*args: Any, **kwargs: Any) -> torch.Tensor:
                t = real(*args, **kwargs)
                if t.layout != torch.strided or t.requires_grad or "out" in kwargs:
                    return t
                return self.empty(t.shape, t.dtype, t.device, stride=t.stride())
            return alloc

        monkeypatch.setattr(torch, "empty", wrap(real_empty))
        monkeypatch.setattr(torch, "empty_like", wrap(real_empty_like))

    def check(self) -> None:
        """Every margin still holds the sentinel; the message names the first overrun."""
        for g in self._all:
            touched = ~_is_poison(g.buf.detach().cpu()) & ~g.inside
            if touched.any():
                idx = torch.nonzero(touched).flatten()
                before, after = idx[idx < g.start], idx[idx >= g.start]
                where = []
                if len(before):
                    where.append(f"up to {g.start - int(before.min())} element(s) before its start")
                if len(after) and int(after.max()) >= g.end:
                    where.append(f"up to {int(after.max()) - g.end + 1} element(s) past its end")
                if len(after) and int(after.min()) < g.end:
                    where.append("in the padding between its rows")
                raise AssertionError(f"a store landed outside the output ({g.name}): "
                                     f"{int(touched.sum())} guard element(s) overwritten, "
                                     f"{'; '.join(where)} (mask, offsets or stride?)")


@pytest.fixture
def guard() -> Guards:
    """Guarded output buffers (see the module docstring)."""
    return Guards()
