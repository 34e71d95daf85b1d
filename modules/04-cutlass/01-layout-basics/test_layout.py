"""Tests for cute-01. Oracle: pycute (nvidia-cutlass 4.2.0.0), CuTe's own Python layout algebra.

Random layouts come from a fixed seed: nested shapes up to depth 3 (rank-1 tuples such as (6,) included),
size-1 modes, and strides that are compact column-major, compact row-major, dilated or arbitrary
(stride 0 included). Each layout is checked at every coordinate, in every coordinate form.
"""

import ast
import random

import pycute
import pytest

LEAVES = [1, 2, 2, 3, 4, 4, 5, 6, 8]
STRIDES = [0, 1, 1, 2, 3, 4, 5, 7, 8, 12, 16, 32, 60, 100]
MAX_SIZE = 256


def load(lesson):
    """The learner's layout.py; it may not import the oracle it is graded against."""
    tree = ast.parse(lesson.path("layout.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        assert not any(n.split(".")[0] in ("pycute", "cutlass") for n in names), \
            "layout.py imports pycute/cutlass: write the algebra yourself"
    return lesson.load("layout.py")


def rand_shape(rng, depth=0):
    if depth == 3 or (depth > 0 and rng.random() < 0.5):
        return rng.choice(LEAVES)
    if depth == 0 and rng.random() < 0.04:
        return rng.choice(LEAVES + [7, 12, 16])  # an integral (rank-0 tuple-free) shape
    return tuple(rand_shape(rng, depth + 1) for _ in range(rng.choice([1, 2, 2, 3, 3, 4])))


def unflatten(flat, profile):
    """Rebuild `flat` (a list, consumed left to right) with the nesting of `profile`."""
    if isinstance(profile, tuple):
        return tuple(unflatten(flat, p) for p in profile)
    return flat.pop(0)


def rand_stride(rng, shape):
    leaves = pycute.flatten(shape)
    kind = rng.choice(["col", "row", "dilated", "random", "random"])
    if kind == "col":
        return pycute.prefix_product(shape)
    if kind == "row":  # the rightmost leaf is contiguous
        strides, acc = [], 1
        for s in reversed(leaves):
            strides.insert(0, acc)
            acc *= s
        return unflatten(strides, shape)
    if kind == "dilated":  # column-major with gaps: injective, not compact
        strides, acc = [], 1
        for s in leaves:
            acc *= rng.choice([1, 1, 2, 3])
            strides.append(acc)
            acc *= s
        return unflatten(strides, shape)
    return unflatten([rng.choice(STRIDES) for _ in leaves], shape)


def rand_layouts(seed, n):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        shape = rand_shape(rng)
        if pycute.size(shape) <= MAX_SIZE:
            out.append((shape, rand_stride(rng, shape)))
    return out


def mixed_coord(rng, nat, shape):
    """An equivalent coordinate: each mode given either naturally or as one int, chosen at random."""
    if not isinstance(shape, tuple) or rng.random() < 0.3:
        return pycute.crd2idx(nat, shape)  # 1-D coordinate of this (sub)mode, colexicographic
    return tuple(mixed_coord(rng, c, s) for c, s in zip(nat, shape))


def natural(idx, shape):
    """The natural coordinate of a (possibly mixed) coordinate, mode by mode with pycute.
    pycute.idx2crd on a tuple index applies the global strides to each mode: correct only for an int."""
    if isinstance(idx, tuple):
        return tuple(natural(i, s) for i, s in zip(idx, shape))
    return pycute.idx2crd(idx, shape)


LAYOUTS = rand_layouts(seed=2024, n=300)
DOC_SHAPE, DOC_STRIDE = (3, (2, 3)), (3, (12, 1))


def test_doc_examples(lesson):
    """media/docs/cpp/cute/01_layout.md (CUTLASS v4.2.0): the coordinate table and crd2idx examples."""
    m = load(lesson)
    assert m.idx2crd(16, DOC_SHAPE) == (1, (1, 2))
    assert m.idx2crd((1, 5), DOC_SHAPE) == (1, (1, 2))
    assert m.idx2crd((1, (1, 2)), DOC_SHAPE) == (1, (1, 2))
    for crd in (16, (1, 5), (1, (1, 2))):
        assert m.crd2idx(crd, DOC_SHAPE, DOC_STRIDE) == 17, f"crd2idx({crd}, {DOC_SHAPE}, {DOC_STRIDE})"
    # the 3 x 6 table of the doc: row i, 1-D column j
    table = [[0, 12, 1, 13, 2, 14], [3, 15, 4, 16, 5, 17], [6, 18, 7, 19, 8, 20]]
    for i in range(3):
        for j in range(6):
            assert m.crd2idx((i, j), DOC_SHAPE, DOC_STRIDE) == table[i][j], f"crd ({i},{j})"
    L = m.Layout(DOC_SHAPE, DOC_STRIDE)
    assert m.size(L) == 18 and m.size(DOC_SHAPE) == 18
    assert m.cosize(L) == 21


@pytest.mark.points(2)
def test_row_major_layout_is_still_walked_column_first(lesson):
    """1-D coordinates are colexicographic even when the strides are row-major (closed form)."""
    m = load(lesson)
    for M, N in [(4, 8), (3, 5), (1, 7), (6, 1)]:
        row = m.Layout((M, N), (N, 1))
        col = m.Layout((M, N), (1, M))
        for i in range(M * N):
            r, c = i % M, i // M  # 1-D coordinate i is the natural coordinate (i % M, i // M)
            assert row(i) == r * N + c, f"{row} at 1-D coordinate {i}"
            assert col(i) == i, f"{col} at 1-D coordinate {i}"
            assert m.idx2crd(i, (M, N)) == (r, c)


@pytest.mark.points(3)
def test_crd2idx_matches_pycute_in_every_coordinate_form(lesson):
    m = load(lesson)
    rng = random.Random(7)
    for shape, stride in LAYOUTS:
        for i in range(pycute.size(shape)):
            want = pycute.crd2idx(i, shape, stride)
            got = m.crd2idx(i, shape, stride)
            assert got == want, f"crd2idx({i}, {shape}, {stride}) = {got}, pycute: {want}"
            nat = pycute.idx2crd(i, shape)
            assert m.crd2idx(nat, shape, stride) == want, f"natural coordinate {nat} in {shape}:{stride}"
            mix = mixed_coord(rng, nat, shape)
            assert m.crd2idx(mix, shape, stride) == want, f"coordinate {mix} in {shape}:{stride}"


@pytest.mark.points(2)
def test_idx2crd_gives_the_natural_coordinate(lesson):
    m = load(lesson)
    rng = random.Random(8)
    for shape, _ in LAYOUTS:
        for i in range(pycute.size(shape)):
            nat = pycute.idx2crd(i, shape)
            got = m.idx2crd(i, shape)
            assert got == nat, f"idx2crd({i}, {shape}) = {got}, want {nat}"
            mix = mixed_coord(rng, nat, shape)
            assert m.idx2crd(mix, shape) == natural(mix, shape) == nat, f"idx2crd({mix}, {shape})"


def test_int_coordinate_past_the_end_runs_along_the_last_mode(lesson):
    m = load(lesson)
    for shape, stride in LAYOUTS[:120]:
        n = pycute.size(shape)
        for i in range(n, 3 * n + 2):
            want = pycute.crd2idx(i, shape, stride)
            assert m.crd2idx(i, shape, stride) == want, f"crd2idx({i}, {shape}, {stride}), size {n}"


@pytest.mark.points(2)
def test_size_and_cosize_match_pycute(lesson):
    m = load(lesson)
    for shape, stride in LAYOUTS:
        L, ref = m.Layout(shape, stride), pycute.Layout(shape, stride)
        assert m.size(L) == m.size(shape) == pycute.size(ref), f"size of {ref}"
        assert m.cosize(L) == pycute.cosize(ref), f"cosize of {ref}"
        # cosize is one past the largest index of the image (all strides >= 0 here)
        assert m.cosize(L) == 1 + max(ref(i) for i in range(pycute.size(ref)))
