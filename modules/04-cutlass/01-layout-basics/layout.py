"""cute-01: a CuTe Layout is a function from coordinates to indices.

IntTuple: an int, or a tuple of IntTuples: 8, (4, 2), (3, (2, 3)), (6,).
Layout:   a shape and a stride, two congruent IntTuples (same nesting, ints at the same places),
          written shape:stride, e.g. (3,(2,3)):(3,(12,1)). All strides in this lesson are >= 0.

A coordinate into a shape is either
- the natural coordinate: an IntTuple congruent to the shape, e.g. (1,(1,2)) for (3,(2,3));
- an int (a 1-D coordinate), read colexicographically: the leftmost mode varies fastest;
- a tuple with the top-level rank of the shape whose entries are, recursively, either of these,
  e.g. (1,5) for (3,(2,3)): 5 is a 1-D coordinate into the mode (2,3).

Nothing here may import pycute or cutlass: the tests compare your functions with them.
"""

from __future__ import annotations

from dataclasses import dataclass

IntTuple = int | tuple


def is_tuple(x) -> bool:
    return isinstance(x, tuple)


def is_int(x) -> bool:
    return isinstance(x, int)


def flatten(t: IntTuple) -> tuple[int, ...]:
    """The leaves of an IntTuple, left to right: flatten((3, (2, 3))) == (3, 2, 3)."""
    if is_tuple(t):
        return tuple(x for m in t for x in flatten(m))
    return (t,)


@dataclass(frozen=True)
class Layout:
    shape: IntTuple
    stride: IntTuple

    def __call__(self, crd) -> int:
        return crd2idx(crd, self.shape, self.stride)

    def __str__(self) -> str:
        return f"{self.shape}:{self.stride}"


def size(x: Layout | IntTuple) -> int:
    """Number of coordinates: the product of all leaves of the shape (of a Layout, or of an IntTuple)."""
    shape = x.shape if isinstance(x, Layout) else x
    ### HINT: recurse into nested modes; an int shape is its own size
    ### BEGIN SOLUTION
    if is_int(shape):
        return shape
    n = 1
    for mode in shape:
        n *= size(mode)
    return n
    ### END SOLUTION


def crd2idx(crd, shape: IntTuple, stride: IntTuple) -> int:
    """The index of coordinate `crd` (natural, 1-D, or mixed) in the layout shape:stride.

    An int coordinate at a tuple shape is split colexicographically: mode 0 gets crd % size(mode 0), the
    rest continues into mode 1, and so on; the last mode takes whatever is left, without a modulo, so an
    int coordinate >= size keeps counting along the last mode (CuTe does this, composition relies on it).
    """
    ### HINT: three cases: tuple coordinate (one per mode, recurse and add up), int at an int shape
    ### HINT: (coordinate times stride), int at a tuple shape (split it across the modes, left mode fastest)
    ### BEGIN SOLUTION
    if is_tuple(crd):
        return sum(crd2idx(c, s, d) for c, s, d in zip(crd, shape, stride, strict=True))
    if is_int(shape):
        return crd * stride
    modes = list(zip(shape, stride, strict=True))
    idx = 0
    for s, d in modes[:-1]:
        idx += crd2idx(crd % size(s), s, d)  # the part of crd that stays inside this mode
        crd //= size(s)  # what is left moves on to the next mode
    return idx + crd2idx(crd, *modes[-1])  # the last mode is not wrapped
    ### END SOLUTION


def idx2crd(idx, shape: IntTuple) -> IntTuple:
    """The natural coordinate (congruent to `shape`) of coordinate `idx`: an int with 0 <= idx < size(shape),
    or a tuple whose entries are coordinates into the corresponding modes.

    idx2crd(16, (3, (2, 3))) == (1, (1, 2));  idx2crd((1, 5), (3, (2, 3))) == (1, (1, 2)).
    """
    ### HINT: the inverse of crd2idx's split: at a tuple shape every mode gets a (natural) sub-coordinate
    ### BEGIN SOLUTION
    if is_tuple(idx):
        return tuple(idx2crd(i, s) for i, s in zip(idx, shape, strict=True))
    if is_int(shape):
        return idx
    crd = []
    for s in shape:
        crd.append(idx2crd(idx % size(s), s))
        idx //= size(s)
    return tuple(crd)
    ### END SOLUTION


def cosize(layout: Layout) -> int:
    """Size of the codomain: 1 + the largest index the layout maps a coordinate in [0, size) to."""
    ### HINT: with strides >= 0 the largest index is reached at the last coordinate
    ### BEGIN SOLUTION
    return layout(size(layout) - 1) + 1
    ### END SOLUTION
