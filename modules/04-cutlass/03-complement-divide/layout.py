"""cute-03: complement, logical_divide, zipped_divide, logical_product: tiling with the layout algebra.

IntTuple: an int, or a tuple of IntTuples. Layout: shape:stride, two congruent IntTuples, strides >= 0.
Given (working versions of cute-01/02): Layout, size, cosize, crd2idx, make_layout, coalesce, composition,
and by_mode, which applies a Layout-by-Layout operation through a tiler (None / int / tuple / Layout).
To write: complement, _divide (logical_divide's core), zipped_divide, _product (logical_product's core).

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
    """The canonical layout with the same size and the same value at every 1-D coordinate (cute-02):
    flat, size-1 modes dropped (1:0 if nothing is left), s0:d0 ++ s1:(s0*d0) merged, one mode as ints.
    A tuple profile coalesces mode by mode and keeps the modes beyond len(profile)."""
    if is_tuple(profile):
        modes = [coalesce(layout[i], p) for i, p in enumerate(profile)]
        return make_layout(*modes, *(layout[i] for i in range(len(profile), len(layout))))
    modes = []
    for s, d in zip(flatten(layout.shape), flatten(layout.stride)):
        if s == 1:
            continue
        if modes and modes[-1][0] * modes[-1][1] == d:
            modes[-1][0] *= s
        else:
            modes.append([s, d])
    return _from_modes(modes)


def _from_modes(modes) -> Layout:
    """A Layout from a list of (shape, stride) pairs: 1:0 when empty, ints for a single mode."""
    if not modes:
        return Layout(1, 0)
    if len(modes) == 1:
        return Layout(modes[0][0], modes[0][1])
    return Layout(tuple(m[0] for m in modes), tuple(m[1] for m in modes))


def by_mode(op, a: Layout, tiler) -> Layout:
    """Apply op(a, layout) through a tiler: None leaves a alone, an int n means n:1, a tuple applies its
    i-th entry to mode i of a (modes of a beyond the tuple are kept), a Layout is passed to op as it is."""
    if tiler is None:
        return a
    if is_int(tiler):
        return op(a, Layout(tiler, 1))
    if is_tuple(tiler):
        if len(tiler) > len(a):
            raise ValueError(f"tiler of rank {len(tiler)} for a layout of rank {len(a)}")
        done = [by_mode(op, a[i], t) for i, t in enumerate(tiler)]
        return make_layout(*done, *(a[i] for i in range(len(tiler), len(a))))
    return op(a, tiler)


def composition(a: Layout, b) -> Layout:
    """R = a o b with R(c) = a(b(c)), compatible with b; b a Layout or a tiler (cute-02).
    Raises ValueError when CuTe's stride or shape divisibility condition fails."""
    if isinstance(b, Layout) and is_tuple(b.shape):  # a o (b0, b1, ...) = (a o b0, a o b1, ...)
        return make_layout(*(composition(a, b[i]) for i in range(len(b))))
    if not isinstance(b, Layout):
        return by_mode(composition, a, b)
    if b.stride == 0:
        return Layout(b.shape, 0)
    flat = coalesce(a)
    shapes, strides = flatten(flat.shape), flatten(flat.stride)
    divided, r = [], b.stride  # every r-th element of a: mode k keeps ceil(m / r) at stride r * e
    for m, e in zip(shapes[:-1], strides[:-1]):
        if m % r and r % m:
            raise ValueError(f"stride divisibility: {m} and {r} do not divide each other")
        divided.append((-(-m // r), r * e))
        r = -(-r // m)
    divided.append((None, r * strides[-1]))  # the last mode of a is unbounded
    kept, left = [], b.shape  # the first b.shape of them
    for m, e in divided:
        take = left if m is None else min(m, left)
        if left % take:
            raise ValueError(f"shape divisibility: {take} does not divide {left}")
        if take > 1:
            kept.append((take, e))
        left //= take
    return _from_modes(kept) if kept else Layout(1, divided[-1][1])


def complement(layout: Layout, cotarget: int | None = None) -> Layout:
    """The layout of the "rest": ordered (strides increasing), its image disjoint from layout's, and
    (layout, result) covers [0, cotarget) as far as the layout allows. cotarget defaults to cosize(layout).

    Ignore modes of size 1 or stride 0; sort the others by stride; each mode s:d leaves a gap of
    d // covered elements below it (covered: where the modes so far end, s * d of the previous one,
    starting at 1); one last mode repeats everything until cotarget is reached (ceil). Return it coalesced.
    A mode whose stride is below `covered` overlaps the ones before it: raise ValueError, as CuTe's
    static_assert "Non-injective Layout detected in complement." does.
    """
    if cotarget is None:
        cotarget = cosize(layout)
    ### HINT: walk the sorted (stride, shape) pairs keeping `covered`; the result's strides are the
    ### HINT: successive values of `covered`, its shapes the gaps, then ceil(cotarget / covered)
    ### BEGIN SOLUTION
    modes = sorted((d, s) for s, d in zip(flatten(layout.shape), flatten(layout.stride)) if s != 1 and d != 0)
    gaps, covered = [], 1
    for d, s in modes:
        if d < covered:
            raise ValueError(f"complement: {s}:{d} overlaps the modes below it (non-injective)")
        gaps.append((d // covered, covered))  # fill the hole between `covered` and this mode's stride
        covered = s * d  # this mode and everything below it span [0, s * d)
    gaps.append((-(-cotarget // covered), covered))  # repeat the whole pattern up to cotarget
    return coalesce(Layout(tuple(g[0] for g in gaps), tuple(g[1] for g in gaps)))
    ### END SOLUTION


def logical_divide(a: Layout, tiler) -> Layout:
    """Split a into (tile, rest): mode 0 the elements the tiler points to, mode 1 the layout of the tiles.
    A tuple tiler divides mode by mode: ((tile0, rest0), (tile1, rest1), ..., untouched modes)."""
    return by_mode(_divide, a, tiler)


def _divide(a: Layout, b: Layout) -> Layout:
    """a divided by the Layout b: a o (b, b*), with b* the complement of b up to size(a)."""
    ### HINT: one line: concatenation, complement and composition
    ### BEGIN SOLUTION
    return composition(a, make_layout(b, complement(b, size(a))))
    ### END SOLUTION


def zipped_divide(a: Layout, tiler) -> Layout:
    """logical_divide with the tiles gathered: ((tile0, tile1, ...), (rest0, rest1, ..., untouched modes)).
    tiler: a Layout or an int (then this is logical_divide), or a tuple of Layouts / ints."""
    ### HINT: for a tuple tiler, mode i of logical_divide(a, tiler) is (tile_i, rest_i); regroup them
    ### BEGIN SOLUTION
    divided = logical_divide(a, tiler)
    if not is_tuple(tiler):
        return divided  # already (tile, rest)
    tiles = [divided[i][0] for i in range(len(tiler))]
    rests = [divided[i][1] for i in range(len(tiler))]
    rests += [divided[i] for i in range(len(tiler), len(a))]  # modes the tiler does not touch
    return make_layout(make_layout(*tiles), make_layout(*rests))
    ### END SOLUTION


def logical_product(a: Layout, tiler) -> Layout:
    """Repeat the tile a according to the tiler: (a, a* o b) for a Layout b, by mode for a tuple."""
    return by_mode(_product, a, tiler)


def _product(a: Layout, b: Layout) -> Layout:
    """(a, a* o b), with a* the complement of a up to size(a) * cosize(b): b says where the copies of a go."""
    ### HINT: one line; the complement must leave room for cosize(b) copies of a
    ### BEGIN SOLUTION
    return make_layout(a, composition(complement(a, size(a) * cosize(b)), b))
    ### END SOLUTION
