"""cute-02: coalesce and composition, the two operations every other layout operation is built from.

IntTuple: an int, or a tuple of IntTuples. Layout: shape:stride, two congruent IntTuples, strides >= 0.
Given (working, from cute-01): the Layout class, size, cosize, crd2idx, make_layout.
To write: coalesce(layout, profile=None) and composition(a, b).

A Layout with a single mode is written with ints (12:1, not (12,):(1,)), as CuTe prints it.
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


def compact_col_major(shape: IntTuple, start: int = 1) -> IntTuple:
    """Column-major strides for `shape`: the leftmost leaf gets `start`, each next leaf the product so far."""
    if is_int(shape):
        return start
    strides = []
    for mode in shape:
        strides.append(compact_col_major(mode, start))
        start *= size(mode)
    return tuple(strides)


@dataclass(frozen=True)
class Layout:
    shape: IntTuple
    stride: IntTuple = None  # None: compact column-major

    def __post_init__(self):
        if self.stride is None:
            object.__setattr__(self, "stride", compact_col_major(self.shape))

    def __call__(self, crd) -> int:
        return crd2idx(crd, self.shape, self.stride)

    def __len__(self) -> int:
        """The rank: number of top-level modes (1 for an int shape)."""
        return len(self.shape) if is_tuple(self.shape) else 1

    def __getitem__(self, i: int) -> Layout:
        """Top-level mode i as a Layout (an int-shaped layout is its own mode 0)."""
        if is_tuple(self.shape):
            return Layout(self.shape[i], self.stride[i])
        if i != 0:
            raise IndexError(i)
        return self

    def __str__(self) -> str:
        return f"{self.shape}:{self.stride}"


def make_layout(*layouts: Layout) -> Layout:
    """Concatenation: each argument becomes one top-level mode, make_layout(4:1, 3:8) == (4,3):(1,8)."""
    return Layout(tuple(L.shape for L in layouts), tuple(L.stride for L in layouts))


def size(x: Layout | IntTuple) -> int:
    shape = x.shape if isinstance(x, Layout) else x
    if is_int(shape):
        return shape
    n = 1
    for mode in shape:
        n *= size(mode)
    return n


def crd2idx(crd, shape: IntTuple, stride: IntTuple) -> int:
    """Index of a natural, 1-D or mixed coordinate; an int coordinate is split colexicographically and
    the last mode is not wrapped (an int >= size runs on along the last mode)."""
    if is_tuple(crd):
        return sum(crd2idx(c, s, d) for c, s, d in zip(crd, shape, stride, strict=True))
    if is_int(shape):
        return crd * stride
    idx = 0
    for s, d in zip(shape[:-1], stride[:-1]):
        idx += crd2idx(crd % size(s), s, d)
        crd //= size(s)
    return idx + crd2idx(crd, shape[-1], stride[-1])


def cosize(layout: Layout) -> int:
    return layout(size(layout) - 1) + 1


def coalesce(layout: Layout, profile: IntTuple | None = None) -> Layout:
    """The simplest layout with the same size and the same value at every 1-D coordinate 0 <= i < size.

    Result: flat (depth <= 1); no size-1 mode unless the whole layout has size 1, which gives 1:0;
    adjacent modes s0:d0, s1:d1 with d1 == s0*d0 merged into (s0*s1):d0; a single mode written with ints.
    profile: None or an int -> coalesce the whole layout. A tuple -> by-mode: mode i is coalesced with
    profile[i] (recursively), modes of the layout beyond len(profile) are kept as they are, and the
    result has one top-level mode per mode of the layout.
    """
    ### HINT: walk the (shape, stride) leaves left to right; four cases: skip size-1, replace a size-1 result,
    ### HINT: merge when the new stride continues the last mode, else start a new mode
    ### BEGIN SOLUTION
    if is_tuple(profile):
        modes = [coalesce(layout[i], p) for i, p in enumerate(profile)]
        rest = [layout[i] for i in range(len(profile), len(layout))]  # modes the profile does not cover
        return make_layout(*modes, *rest)
    modes = []  # [shape, stride] pairs of the result
    for s, d in zip(flatten(layout.shape), flatten(layout.stride)):
        if s == 1:
            continue  # a size-1 mode only ever sees coordinate 0, whatever its stride
        if modes and modes[-1][0] * modes[-1][1] == d:
            modes[-1][0] *= s  # s0:d0 ++ s1:(s0*d0) is the single mode (s0*s1):d0
        else:
            modes.append([s, d])
    if not modes:
        return Layout(1, 0)
    if len(modes) == 1:
        return Layout(modes[0][0], modes[0][1])
    return Layout(tuple(m[0] for m in modes), tuple(m[1] for m in modes))
    ### END SOLUTION


def composition(a: Layout, b) -> Layout:
    """R = a o b, R(c) = a(b(c)) for every coordinate c of b; R is compatible with b (same nesting down to
    b's leaves, same size in each mode).

    b is a Layout; or a tiler: an int n (meaning n:1), None (leave that mode of a alone), or a tuple of
    tilers, applied by-mode: mode i of a composed with b[i], modes of a beyond len(b) kept as they are.
    Raises ValueError when CuTe's admissibility conditions fail (see _compose_1d), and for a tiler tuple
    longer than the rank of a.
    """
    ### HINT: dispatch only; a Layout b with a tuple shape distributes: a o (b0, b1, ...) = (a o b0, a o b1, ...)
    ### BEGIN SOLUTION
    if b is None:
        return a
    if is_int(b):
        return composition(a, Layout(b, 1))
    if is_tuple(b):  # a tiler: by-mode
        if len(b) > len(a):
            raise ValueError(f"tiler of rank {len(b)} for a layout of rank {len(a)}")
        done = [composition(a[i], t) for i, t in enumerate(b)]
        return make_layout(*done, *(a[i] for i in range(len(b), len(a))))
    if is_tuple(b.shape):
        return make_layout(*(composition(a, b[i]) for i in range(len(b))))
    return _compose_1d(a, b.shape, b.stride)
    ### END SOLUTION


def _compose_1d(a: Layout, s: int, d: int) -> Layout:
    """a o s:d for an integral shape s and stride d: the first s elements of every d-th element of a.

    Coalesce a first, then, over its modes m0:e0, m1:e1, ..., mn:en (the last one is unbounded):
    1. divide out d: mode k keeps ceil(mk / r) elements at stride r*ek, where r is what is left of d,
       and r becomes ceil(r / mk). Stride divisibility: for every mode but the last, mk % r == 0 or
       r % mk == 0, else ValueError.
    2. mod out s: take modes from the left until s elements are kept; a kept count that does not divide
       what is left of s (shape divisibility) raises ValueError. The last mode takes whatever is left.
    Size-1 modes are left out of the result (s == 1 gives 1:e for some e); d == 0 gives s:0.
    """
    ### HINT: ceil(x / y) for positive ints is -(-x // y); the result's modes are (kept count, r * ek)
    ### BEGIN SOLUTION
    if d == 0:
        return Layout(s, 0)
    flat = coalesce(a)
    shapes, strides = flatten(flat.shape), flatten(flat.stride)
    divided, r = [], d  # 1. every d-th element of a
    for m, e in zip(shapes[:-1], strides[:-1]):
        if m % r and r % m:
            raise ValueError(f"stride divisibility: {m} and {r} do not divide each other")
        divided.append((-(-m // r), r * e))
        r = -(-r // m)
    divided.append((None, r * strides[-1]))  # the last mode of a is unbounded
    kept, left = [], s  # 2. the first s of them
    for m, e in divided:
        take = left if m is None else min(m, left)
        if left % take:
            raise ValueError(f"shape divisibility: {take} does not divide {left}")
        if take > 1 or (m is None and not kept):
            kept.append((take, e))
        left //= take
    if len(kept) == 1:
        return Layout(*kept[0])
    return Layout(tuple(k[0] for k in kept), tuple(k[1] for k in kept))
    ### END SOLUTION
