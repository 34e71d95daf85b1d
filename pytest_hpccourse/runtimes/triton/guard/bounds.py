"""Which bytes a launch may touch (its tensor arguments as views) and the check of one memory access."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))


class TritonOutOfBoundsError(IndexError):
    """An active lane of a load/store/atomic in an interpreted Triton kernel lies outside every tensor
    argument of the launch (or in a gap between a strided view's elements). Raised before the access."""

    def __init__(self, message: str, *, kernel: str, op: str, nbytes: int, arg: str | None, offset: int | None,
                 arg_bytes: int | None, where: str, program: tuple[int, ...] | None, lane: tuple[int, ...],
                 line: str | None) -> None:
        super().__init__(message)
        self.kernel = kernel
        self.op = op
        self.nbytes = nbytes
        self.arg = arg
        self.offset = offset
        self.arg_bytes = arg_bytes
        self.where = where
        self.program = program
        self.lane = lane
        self.line = line


@dataclass(frozen=True)
class Extent:
    """One tensor argument as the kernel sees it: the view's bytes, not its storage."""

    name: str
    ptr: int                                  # data_ptr of the view (its element [0, ..., 0])
    lo: int                                   # first byte any element covers
    hi: int                                   # one past the last byte any element covers
    dense: bool                               # its elements cover [lo, hi) without gaps
    nested: bool                              # strides decompose an offset uniquely (no overlap)
    dims: tuple[tuple[int, int], ...]         # (stride in bytes, size) of the outer dims, largest stride first
    row_bytes: int                            # bytes of one innermost run (contiguous last dim) or one element
    strides: tuple[int, ...]                  # element strides, for messages

    @property
    def span(self) -> int:
        return self.hi - self.lo


def extent_of(name: str, tensor: Any) -> Extent:
    """The extent of a torch tensor view (any strides; size-0 views cover nothing)."""
    es = int(tensor.element_size())
    ptr = int(tensor.data_ptr())
    sizes = [int(s) for s in tensor.shape]
    strides = [int(s) for s in tensor.stride()]
    if any(s == 0 for s in sizes):
        return Extent(name, ptr, ptr, ptr, True, True, (), 0, tuple(strides))
    if any(st < 0 for st in strides):  # not produced by torch today; keep the conservative box
        lo = ptr + es * sum(st * (n - 1) for st, n in zip(strides, sizes) if st < 0)
        hi = ptr + es * (sum(st * (n - 1) for st, n in zip(strides, sizes) if st > 0) + 1)
        return Extent(name, ptr, lo, hi, False, False, (), es, tuple(strides))
    hi = ptr + es * (sum(st * (n - 1) for st, n in zip(strides, sizes)) + 1)
    dims = sorted(((st * es, n) for st, n in zip(strides, sizes) if n > 1 and st > 0), reverse=True)
    row_bytes = es
    if dims and dims[-1][0] == es:
        row_bytes = es * dims[-1][1]
        dims = dims[:-1]
    nested = True
    dense = True
    inner = row_bytes
    for stride_bytes, n in reversed(dims):
        if stride_bytes < inner:
            nested = False
        if stride_bytes != inner:
            dense = False
        inner = stride_bytes * n
    dense = dense and nested
    return Extent(name, ptr, ptr, hi, dense, nested, tuple(dims), row_bytes, tuple(strides))


def collect(named_args: dict[str, Any]) -> list[Extent]:
    """Extents of every tensor among a launch's arguments (tuples and tensor descriptors included)."""
    return [extent_of(name, t) for name, t in _tensors(named_args.items())]


def _tensors(items: Any) -> Iterator[tuple[str, Any]]:
    for name, value in items:
        base = getattr(value, "base", None)
        if hasattr(value, "data_ptr") and hasattr(value, "element_size"):
            yield name, value
        elif hasattr(value, "data_ptr") and hasattr(base, "element_size"):  # triton's TensorWrapper
            yield name, base
        elif isinstance(value, tuple):
            yield from _tensors((f"{name}[{i}]", v) for i, v in enumerate(value))
        elif base is not None and hasattr(base, "data_ptr") and hasattr(value, "block_shape"):  # TensorDescriptor
            yield from _tensors([(f"{name}.base", base)])


def _inside(e: Extent, addr: np.ndarray, nbytes: int) -> np.ndarray:
    ok = (addr >= e.lo) & (addr + nbytes <= e.hi)
    if e.dense or not e.nested or not ok.any():
        return ok
    off = addr - e.ptr
    for stride_bytes, n in e.dims:
        idx = off // stride_bytes
        ok &= idx < n
        off = off - idx * stride_bytes
    return ok & (off >= 0) & (off + nbytes <= e.row_bytes)


def check(extents: list[Extent], ptrs: np.ndarray, mask: np.ndarray | None, nbytes: int, *, op: str,
          kernel: str, program: tuple[int, ...] | None) -> None:
    """Raise TritonOutOfBoundsError unless one extent holds the `nbytes` at `ptrs` of every active lane.

    One access (one tl.load / tl.store / atomic) must stay inside ONE argument: a lane that runs past the
    end of `x` into the bytes of another argument `y` is still reported (it read `y` by accident).
    """
    __tracebackhide__ = True  # pytest shows the kernel's frames, not this check
    addr = np.asarray(ptrs).astype(np.int64, copy=False)
    active = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), addr.shape)
    live = addr if active is None else addr[active]
    if live.size == 0:
        return
    first, last = int(live.min()), int(live.max())
    for e in extents:  # fast path: every active lane inside one dense view
        if e.dense and e.lo <= first and last + nbytes <= e.hi:
            return
    best: Extent | None = None
    best_ok: np.ndarray | None = None
    best_count = 0
    for e in extents:
        if e.nested and (last < e.lo or first >= e.hi):
            continue
        ok = _inside(e, live, nbytes)
        count = int(np.count_nonzero(ok))
        if count == ok.size:
            return
        if count > best_count:
            best, best_ok, best_count = e, ok, count
    bad_live = 0 if best_ok is None else int(np.argmin(best_ok))
    if active is None:
        lane = tuple(int(i) for i in np.unravel_index(bad_live, addr.shape))
    else:
        lane = tuple(int(i[bad_live]) for i in np.nonzero(active))
    bad_addr = int(live[bad_live])
    holder = next((e.name for e in extents if e is not best and _inside(e, live[bad_live:bad_live + 1], nbytes)[0]),
                  None)
    raise _error(extents, best, bad_addr, nbytes, op=op, kernel=kernel, program=program, lane=lane, holder=holder)


def _error(extents: list[Extent], base: Extent | None, addr: int, nbytes: int, *, op: str, kernel: str,
           program: tuple[int, ...] | None, lane: tuple[int, ...], holder: str | None) -> TritonOutOfBoundsError:
    line = learner_line()
    context = []
    if program is not None:
        context.append(f"program_id {program}")
    if lane:
        context.append(f"lane {lane}")
    if line:
        context.append(line)
    suffix = f" [{', '.join(context)}]" if context else ""
    if not extents:
        message = f"{op} of {nbytes} B at address {addr:#x} in {kernel}: the launch has no tensor arguments{suffix}"
        return TritonOutOfBoundsError(message, kernel=kernel, op=op, nbytes=nbytes, arg=None, offset=None,
                                      arg_bytes=None, where="no-arguments", program=program, lane=lane, line=line)

    def distance(e: Extent) -> int:
        if addr < e.lo:
            return e.lo - addr
        return max(0, addr + nbytes - e.hi)

    e = base if base is not None else min(extents, key=distance)
    offset = addr - e.ptr
    size = f"({e.span} B)"
    if addr < e.lo:
        where, text = "before", f"at byte offset {offset} before the start of argument '{e.name}' {size}"
    elif addr >= e.hi:
        where, text = "past-end", f"at byte offset {offset} past the end of argument '{e.name}' {size}"
    elif addr + nbytes > e.hi:
        where, text = "straddles-end", f"at byte offset {offset} straddling the end of argument '{e.name}' {size}"
    else:
        where = "gap"
        text = (f"at byte offset {offset} of argument '{e.name}' {size}, between its elements "
                f"(a strided view, strides {e.strides} in elements: check the stride used for this offset)")
    note = ""
    if holder is not None:
        note = (f"; that address belongs to argument '{holder}', but the other lanes of this {op} "
                f"use '{e.name}': one access must stay inside one argument")
    message = f"{op} of {nbytes} B {text} in {kernel}{note}{suffix}"
    return TritonOutOfBoundsError(message, kernel=kernel, op=op, nbytes=nbytes, arg=e.name, offset=offset,
                                  arg_bytes=e.span, where=where, program=program, lane=lane, line=line)


def learner_line() -> str | None:
    """`file:line` of the innermost frame outside triton, numpy and this package (the kernel's line)."""
    try:
        import triton
        skip = (os.path.dirname(os.path.abspath(triton.__file__)), os.path.dirname(np.__file__), _HERE)
    except ImportError:
        skip = (os.path.dirname(np.__file__), _HERE)
    frame = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(skip) and not filename.startswith("<"):
            return f"{os.path.basename(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None
