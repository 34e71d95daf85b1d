"""Tests for cute-02. Oracle: pycute (nvidia-cutlass 4.2.0.0), CuTe's own Python layout algebra, plus the
definition itself: (A o B)(i) == A(B(i)) at every coordinate of B.

- coalesce: CuTe's result is canonical, so shape and stride must equal pycute's exactly.
- composition: CuTe guarantees compatibility with B and the values, not one printed form (the static and the
  dynamic C++ results of 02_layout_algebra.md's Example 3 differ by size-1 modes). So the result must have
  B's nesting down to B's leaves, and each sub-layout at a leaf must have that leaf's size and pycute's
  values at every coordinate.
- admissibility: pairs where pycute asserts (stride divisibility) or returns a layout of the wrong size
  (shape divisibility, which CuTe C++ static_asserts and pycute does not check) must raise. With static
  shapes, g++ and the CUTLASS v4.2.0 headers (include/cute/layout.hpp, composition_impl) reject every
  HAND_ERRORS case with "Stride Divisibility Condition" or "Shape Divisibility Condition", except
  (6,2):(8,2) o 4:4: C++ checks the weaker `r % m == 0 or r < m`, lets 4 < 6 through and returns
  (2,2):(32,2), which is not A o B (its value at 2 is 2, A(B(2)) = A(8) = 18); pycute asserts there.
- Not tested: A whose last leaf is 1 composed with a B that reaches past size(A); pycute and C++ disagree
  there (pycute's coalesce drops the trailing size-1 mode, C++'s coalesce_x keeps its stride).
"""

import ast
import random

import pycute
import pytest

LEAVES = [1, 2, 2, 3, 4, 4, 5, 6, 8]
STRIDES = [0, 1, 1, 2, 3, 4, 5, 7, 8, 12, 16, 32, 60, 100]
SAME = "same"  # profile marker: this mode of A must come back unchanged
ERRORS = (ValueError, AssertionError)


def load(lesson):
    """The learner's layout.py; it may not import the oracle it is graded against."""
    tree = ast.parse(lesson.path("layout.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        assert not any(n.split(".")[0] in ("pycute", "cutlass") for n in names), \
            "layout.py imports pycute/cutlass: write the algebra yourself"
    return lesson.load("layout.py")


# ---------------------------------------------------------------- random layouts (fixed seeds)

def rand_shape(rng, depth=0, leaves=LEAVES, max_rank=4):
    if depth == 3 or (depth > 0 and rng.random() < 0.5):
        return rng.choice(leaves)
    if depth == 0 and rng.random() < 0.08:
        return rng.choice(leaves + [7, 12, 16])
    return tuple(rand_shape(rng, depth + 1, leaves, max_rank) for _ in range(rng.randint(1, max_rank)))


def unflatten(flat, profile):
    if isinstance(profile, tuple):
        return tuple(unflatten(flat, p) for p in profile)
    return flat.pop(0)


def rand_stride(rng, shape):
    leaves = pycute.flatten(shape)
    kind = rng.choice(["col", "row", "dilated", "random"])
    if kind == "col":
        return pycute.prefix_product(shape)
    strides, acc = [], 1
    if kind == "row":
        for s in reversed(leaves):
            strides.insert(0, acc)
            acc *= s
    elif kind == "dilated":
        for s in leaves:
            acc *= rng.choice([1, 1, 2, 3])
            strides.append(acc)
            acc *= s
    else:
        strides = [rng.choice(STRIDES) for _ in leaves]
    return unflatten(strides, shape)


def rand_layout(rng, max_size, **kw):
    while True:
        shape = rand_shape(rng, **kw)
        if pycute.size(shape) <= max_size:
            return pycute.Layout(shape, rand_stride(rng, shape))


def rand_profile(rng, shape):
    """A target profile for by-mode coalesce: a truncation of the shape's nesting, sometimes shorter."""
    if not isinstance(shape, tuple) or rng.random() < 0.35:
        return 1
    modes = [rand_profile(rng, s) for s in shape]
    if len(modes) > 1 and rng.random() < 0.2:
        modes = modes[: rng.randint(1, len(modes) - 1)]
    return tuple(modes)


def rand_tiler_leaf(rng, a):
    """A 1-D B for layout a: strides that usually satisfy the divisibility conditions, sometimes not."""
    flat = pycute.coalesce(a)
    prefix = [1]
    for m in pycute.flatten(flat.shape):
        prefix.append(prefix[-1] * m)
    shape = rand_shape(rng, leaves=[1, 2, 2, 3, 4, 4, 6, 8], max_rank=3)
    while pycute.size(shape) > 64:
        shape = rand_shape(rng, leaves=[1, 2, 2, 3, 4, 4, 6, 8], max_rank=3)
    strides = []
    for s in pycute.flatten(shape):
        if s == 1:
            strides.append(rng.choice([0, 1]))
            continue
        pick = rng.random()
        if pick < 0.08:
            strides.append(0)
        elif pick < 0.75:  # a divisor of a prefix product of a's shape: the admissible kind
            p = rng.choice(prefix[:-1])
            nxt = prefix[prefix.index(p) + 1] // p
            strides.append(p * rng.choice([d for d in range(1, nxt + 1) if nxt % d == 0]))
        else:
            strides.append(rng.choice([2, 3, 4, 5, 6, 8, 9, 10, 12]))
    return pycute.Layout(shape, unflatten(strides, shape))


def classify(a, b):
    """('ok', ref) | ('error', None) | ('skip', None): pycute's verdict, checked against A(B(i))."""
    try:
        ref = pycute.composition(a, b)
    except AssertionError:
        return "error", None
    target = size_of_tiler(a, b)
    if pycute.size(ref) != target:
        return "error", None  # shape divisibility failed somewhere: pycute floored a division
    return "ok", ref


def size_of_tiler(a, b):
    if b is None:
        return pycute.size(a)
    if isinstance(b, int):
        return b
    if isinstance(b, tuple):
        n = 1
        for i in range(len(a)):
            n *= size_of_tiler(a[i], b[i] if i < len(b) else None)
        return n
    return pycute.size(b)


def definition_holds(a, b, ref):
    """(A o B)(i) == A(B(i)) for a Layout b, evaluated with pycute's crd2idx."""
    return all(ref(i) == a(b(i)) for i in range(pycute.size(b)))


def reaches_past_a_trailing_one(a, b):
    return pycute.flatten(a.shape)[-1] == 1 and pycute.cosize(b) > pycute.size(a)


def make_pairs(seed, n_ok, n_err, tiler):
    rng = random.Random(seed)
    ok, err = [], []
    while len(ok) < n_ok or len(err) < n_err:
        if tiler:
            a = rand_layout(rng, 96, max_rank=3)
            if not isinstance(a.shape, tuple) or len(a) < 2:
                continue
            k = rng.randint(1, len(a))
            b = tuple(rng.choice([None, "int", "layout", "layout"]) for _ in range(k))
            b = tuple(None if t is None else rng.choice([1, 2, 3, 4, 6, 8]) if t == "int"
                      else rand_tiler_leaf(rng, a[i]) for i, t in enumerate(b))
            if any(isinstance(t, pycute.Layout) and reaches_past_a_trailing_one(a[i], t) for i, t in enumerate(b)):
                continue
        else:
            a = rand_layout(rng, 96)
            if not isinstance(pycute.coalesce(a).shape, tuple) and rng.random() < 0.75:
                continue  # mostly multi-mode A: a single mode is the trivial case s:d o s':d' = s':(d*d')
            b = rand_tiler_leaf(rng, a)
            if reaches_past_a_trailing_one(a, b):
                continue
        verdict, ref = classify(a, b)
        if verdict == "ok" and len(ok) < n_ok:
            # CuTe promises R(i) == A(B(i)) only where its algorithm applies (e.g. B injective, 02_layout_algebra.md):
            # keep the pairs where the oracle's result meets the definition, mode by mode for a tiler
            parts = [(a[i], t, ref[i]) for i, t in enumerate(b) if isinstance(t, pycute.Layout)] if tiler \
                else [(a, b, ref)]
            if all(definition_holds(*p) for p in parts):
                ok.append((a, b, ref))
        elif verdict == "error" and len(err) < n_err:
            err.append((a, b))
    return ok, err


LAYOUTS = [rand_layout(random.Random(1000 + k), 256) for k in range(300)]
PAIRS, PAIR_ERRORS = make_pairs(seed=31, n_ok=300, n_err=60, tiler=False)
TILERS, TILER_ERRORS = make_pairs(seed=32, n_ok=150, n_err=30, tiler=True)


# ---------------------------------------------------------------- conversions and comparisons

def to_learner(m, b):
    """A pycute Layout / tiler as the learner's objects."""
    if isinstance(b, pycute.Layout):
        return m.Layout(b.shape, b.stride)
    if isinstance(b, tuple):
        return tuple(to_learner(m, t) for t in b)
    return b  # int or None


def shape_stride(L):
    assert hasattr(L, "shape") and hasattr(L, "stride"), f"expected a Layout, got {L!r}"
    return L.shape, L.stride


def values(shape, stride):
    ref = pycute.Layout(shape, stride)
    return [ref(i) for i in range(pycute.size(shape))]


def assert_compatible(got, want, profile, where):
    """got/want: (shape, stride); profile: B's shape (or SAME). Same nesting down to the profile's leaves,
    and at each leaf the same size and the same values (evaluated with pycute)."""
    (gs, gd), (ws, wd) = got, want
    if profile == SAME:
        assert (gs, gd) == (ws, wd), f"{where}: this mode must stay {ws}:{wd}, got {gs}:{gd}"
        return
    if isinstance(profile, tuple):
        assert isinstance(gs, tuple) and len(gs) == len(profile), \
            f"{where}: result {gs}:{gd} must have {len(profile)} modes like B's shape {profile}"
        for i, p in enumerate(profile):
            assert_compatible((gs[i], gd[i]), (ws[i], wd[i]), p, f"{where}, mode {i}")
        return
    assert pycute.size(gs) == pycute.size(ws), f"{where}: size of {gs}:{gd} should be {pycute.size(ws)}"
    assert values(gs, gd) == values(ws, wd), f"{where}: {gs}:{gd} differs from {ws}:{wd} (pycute) as a function"


def tiler_profile(a, b):
    if b is None:
        return SAME
    if isinstance(b, int):
        return b
    if isinstance(b, tuple):
        return tuple(tiler_profile(a[i], b[i]) if i < len(b) else SAME for i in range(len(a)))
    return b.shape


def check_composition(m, a, b, ref):
    got = m.composition(m.Layout(a.shape, a.stride), to_learner(m, b))
    assert_compatible(shape_stride(got), (ref.shape, ref.stride), tiler_profile(a, b), f"{a} o {b}")


# ---------------------------------------------------------------- coalesce

def test_coalesce_doc_examples(lesson):
    """media/docs/cpp/cute/02_layout_algebra.md (CUTLASS v4.2.0), Coalesce and By-mode Coalesce."""
    m = load(lesson)
    L = m.Layout
    assert shape_stride(m.coalesce(L((2, (1, 6)), (1, (6, 2))))) == (12, 1)
    assert shape_stride(m.coalesce(L((2, (1, 6)), (1, (6, 2))), (1, 1))) == ((2, 6), (1, 2))
    assert shape_stride(m.coalesce(L((2, 4), (1, 2)))) == (8, 1)       # column-major acts like 8:1
    assert shape_stride(m.coalesce(L((4, 1), (3, 7)))) == (4, 3)       # s0:d0 ++ 1:d1 => s0:d0
    assert shape_stride(m.coalesce(L((1, 4), (7, 3)))) == (4, 3)       # 1:d0 ++ s1:d1 => s1:d1
    assert shape_stride(m.coalesce(L((4, 5), (3, 12)))) == (20, 3)     # s0:d0 ++ s1:s0*d0 => s0*s1:d0
    assert shape_stride(m.coalesce(L((4, 5), (3, 13)))) == ((4, 5), (3, 13))
    assert shape_stride(m.coalesce(L((4, 8), (8, 1)))) == ((4, 8), (8, 1))  # row-major: nothing merges
    assert shape_stride(m.coalesce(L((1, (1, 1)), (5, (6, 7))))) == (1, 0)
    assert shape_stride(m.coalesce(L((3, 2, 4), (0, 0, 0)))) == (24, 0)


@pytest.mark.points(2)
def test_coalesce_matches_pycute_exactly(lesson):
    m = load(lesson)
    for ref in LAYOUTS:
        want = pycute.coalesce(ref)
        got = shape_stride(m.coalesce(m.Layout(ref.shape, ref.stride)))
        assert got == (want.shape, want.stride), f"coalesce({ref}) = {got[0]}:{got[1]}, pycute: {want}"


def test_coalesce_by_mode_matches_pycute_exactly(lesson):
    m = load(lesson)
    rng = random.Random(5)
    n = 0
    for ref in LAYOUTS:
        if not isinstance(ref.shape, tuple):
            continue
        profile = rand_profile(rng, ref.shape)
        if not isinstance(profile, tuple):
            profile = tuple(1 for _ in ref.shape)
        want = pycute.coalesce(ref, profile)
        got = shape_stride(m.coalesce(m.Layout(ref.shape, ref.stride), profile))
        assert got == (want.shape, want.stride), \
            f"coalesce({ref}, {profile}) = {got[0]}:{got[1]}, pycute: {want}"
        n += 1
    assert n > 200


# ---------------------------------------------------------------- composition

DOC_COMPOSITIONS = [
    # (A shape, A stride), B, documented result
    (((6, 2), (8, 2)), ((4, 3), (3, 1)), (((2, 2), 3), ((24, 2), 8))),
    (((20,), (2,)), ((5, 4), (4, 1)), ((5, 4), (8, 2))),  # Example 2 (A as 20:2 below)
    (((10, 2), (16, 4)), ((5, 4), (1, 5)), ((5, (2, 2)), (16, (80, 4)))),  # Example 3
    (((3, 6, 2, 8), (1, 5, 40, 1000)), ((16,), (9,)), ((2, 2, 4), (15, 40, 1000))),  # (1,2,2,4):(9w,3x,y,z)
]


@pytest.mark.points(2)
def test_composition_doc_examples(lesson):
    """02_layout_algebra.md (CUTLASS v4.2.0): the worked examples, the tilers <3:4, 8:2> and (3, 8)."""
    m = load(lesson)
    for (ash, ast_), (bsh, bst), (rsh, rst) in DOC_COMPOSITIONS:
        if ash == (20,):
            ash, ast_ = 20, 2
        if bsh == (16,):
            bsh, bst = 16, 9
        a, b = pycute.Layout(ash, ast_), pycute.Layout(bsh, bst)
        want = pycute.Layout(rsh, rst)
        assert definition_holds(a, b, want)
        check_composition(m, a, b, want)
    a = pycute.Layout((12, (4, 8)), (59, (13, 1)))
    tiler = (pycute.Layout(3, 4), pycute.Layout(8, 2))
    check_composition(m, a, tiler, pycute.Layout((3, (2, 4)), (236, (26, 1))))
    check_composition(m, a, (3, 8), pycute.Layout((3, (4, 2)), (59, (13, 1))))
    got = m.composition(m.Layout(a.shape, a.stride), (3, 8))
    assert m.size(got) == 24 and len(got) == 2


@pytest.mark.points(3)
def test_composition_is_a_of_b_on_random_layouts(lesson):
    m = load(lesson)
    assert any(isinstance(b.shape, tuple) and len(b.shape) > 1 for _, b, _ in PAIRS)
    for a, b, ref in PAIRS:
        check_composition(m, a, b, ref)


@pytest.mark.points(2)
def test_composition_by_mode_with_tilers(lesson):
    m = load(lesson)
    kinds = {type(t).__name__ for _, b, _ in TILERS for t in b}
    assert kinds == {"NoneType", "int", "Layout"}
    for a, b, ref in TILERS:
        check_composition(m, a, b, ref)


HAND_ERRORS = [
    # stride divisibility: the stride left over meets a mode of A it neither divides nor is divided by
    (((4, 6), (1, 5)), ((3,), (6,))),
    (((6, 2), (8, 2)), ((4,), (4,))),  # pycute asserts; C++ v4.2.0 returns the wrong (2,2):(32,2)
    (((10, 2), (16, 4)), ((5, 4), (1, 4))),
    # shape divisibility: the elements kept from a mode do not divide what is left of B's shape
    (((4, 3, 2), (1, 10, 100)), ((6,), (1,))),
    (((4, 4, 5), (2, 100, 1000)), ((2, 6), (1, 4))),
]


@pytest.mark.points(2)
def test_composition_rejects_inadmissible_layouts(lesson):
    m = load(lesson)
    cases = []
    for (ash, ast_), (bsh, bst) in HAND_ERRORS:
        if len(bsh) == 1:
            bsh, bst = bsh[0], bst[0]
        cases.append((pycute.Layout(ash, ast_), pycute.Layout(bsh, bst)))
    a = pycute.Layout((12, (4, 8)), (59, (13, 1)))
    cases.append((a, (pycute.Layout(3, 4), pycute.Layout(6, 1))))  # by-mode: 6:1 against (4,8):(13,1)
    cases += PAIR_ERRORS + TILER_ERRORS
    # a tiler of higher rank than A (pycute asserts len(A) >= len(B)); the README asks for a ValueError
    cases += [(pycute.Layout((4, 6), (1, 4)), (2, 3, None)), (pycute.Layout(8, 1), (pycute.Layout(2, 1), 2))]
    for a, b in cases:
        assert classify(a, b)[0] == "error"
        with pytest.raises(ERRORS):
            got = m.composition(m.Layout(a.shape, a.stride), to_learner(m, b))
            pytest.fail(f"{a} o {b} is not admissible in CuTe, got {got} instead of a ValueError")
