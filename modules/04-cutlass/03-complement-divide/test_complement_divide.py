"""Tests for cute-03. Oracle: pycute (nvidia-cutlass 4.2.0.0), CuTe's own Python layout algebra, plus
the post-conditions 02_layout_algebra.md states for complement and the definitions of divide and product.

- complement: CuTe coalesces its result, so shape and stride must equal pycute's exactly. Inputs: layouts
  whose modes, sorted by stride, do not overlap and each stride is a multiple of where the modes below it
  end (so that "the rest" exists); overlapping layouts must raise. pycute does not raise there: it returns
  a layout with a size-0 mode (or asserts), which is how the random error cases are recognised; the
  hand-written ones hit CuTe C++'s static_assert "Non-injective Layout detected in complement." (checked
  with g++ and the CUTLASS v4.2.0 headers).
- logical_divide / zipped_divide / logical_product: results are compared mode by mode down to the leaves of
  the tile (and of its complement), at every coordinate, as in cute-02 (CuTe guarantees compatibility and
  values, not one printed form); a mode the tiler does not touch must come back unchanged.
- pycute.logical_product(A, n) for an int n calls logical_divide (a pycute bug); CuTe C++ means
  logical_product(A, n:1), which is what the tests ask pycute for.
- Not tested, as in cute-02: a divide whose (B, B*) reaches past size(A) when A's last leaf is 1.
"""

import ast
import random

import pycute
import pytest

SAME = "same"
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

def rand_group(rng, items, depth=0):
    """Nest a flat list of leaves at random: [a, b, c] -> (a, (b, c)), ((a,), b, c), a (one leaf), ..."""
    if len(items) == 1 and (depth > 0 or rng.random() < 0.5):
        return items[0]
    if depth == 2 or len(items) == 1 or rng.random() < 0.4:
        return tuple(items)
    cuts = sorted(rng.sample(range(1, len(items)), rng.randint(1, min(2, len(items) - 1))))
    parts = [items[i:j] for i, j in zip([0, *cuts], [*cuts, len(items)])]
    return tuple(rand_group(rng, p, depth + 1) for p in parts)


class _Pair(tuple):
    """A (shape, stride) leaf while nesting, told apart from the tuples that group leaves."""


def _is_pair(g):
    return isinstance(g, _Pair)


def rand_injective(rng, max_leaves=4, leaves=(2, 2, 3, 4, 4, 5, 6, 8), gaps=(1, 1, 1, 2, 3, 4), extras=True):
    """A layout whose modes, sorted by stride, are each a multiple of where the ones below end (with holes
    of random size), in a random mode order; sometimes with a stride-0 and a size-1 mode mixed in."""
    n = rng.randint(1, max_leaves)
    shapes = [rng.choice(leaves) for _ in range(n)]
    strides, acc = [], 1
    for s in shapes:
        acc *= rng.choice(gaps)
        strides.append(acc)
        acc *= s
    order = list(range(n))
    rng.shuffle(order)
    shapes, strides = [shapes[i] for i in order], [strides[i] for i in order]
    if extras and rng.random() < 0.3:
        k = rng.randint(0, len(shapes))
        shapes.insert(k, rng.choice([2, 3, 4]))
        strides.insert(k, 0)  # a broadcast mode: no memory of its own
    if extras and rng.random() < 0.3:
        k = rng.randint(0, len(shapes))
        shapes.insert(k, 1)
        strides.insert(k, rng.choice([0, 1, 5, 64]))
    return nest(rng, shapes, strides)


def nest(rng, shapes, strides):
    """A layout with these flat leaves under a random nesting (shape and stride nested alike)."""
    grouped = rand_group(rng, [_Pair((s, d)) for s, d in zip(shapes, strides)])

    def pick(g, k):
        return g[k] if _is_pair(g) else tuple(pick(x, k) for x in g)
    return pycute.Layout(pick(grouped, 0), pick(grouped, 1))


def rand_overlapping(rng):
    """An injective-looking layout with one mode pushed below where the modes under it end."""
    while True:
        base = rand_injective(rng, max_leaves=4, extras=False)
        shapes, strides = list(pycute.flatten(base.shape)), list(pycute.flatten(base.stride))
        if len(shapes) < 2:
            continue
        order = sorted(range(len(shapes)), key=lambda i: strides[i])
        lo, hi = order[rng.randint(0, len(order) - 2)], None
        hi = order[order.index(lo) + 1]
        end = shapes[lo] * strides[lo]
        strides[hi] = rng.randint(strides[lo], end - 1)  # starts inside the span of the mode below
        return nest(rng, shapes, strides)


def rand_layout(rng, max_size):
    """Any layout (compact, dilated or arbitrary strides): the A of a divide."""
    while True:
        L = rand_injective(rng, max_leaves=4) if rng.random() < 0.6 else None
        if L is None:
            n = rng.randint(1, 4)
            shapes = [rng.choice([1, 2, 3, 4, 6, 8]) for _ in range(n)]
            strides = [rng.choice([0, 1, 2, 3, 4, 8, 12, 16, 60]) for _ in range(n)]
            L = nest(rng, shapes, strides)
        if pycute.size(L) <= max_size:
            return L


def complement_verdict(layout, cotarget):
    """pycute's complement, or None where CuTe C++ rejects the layout (pycute asserts or yields size 0)."""
    try:
        r = pycute.complement(layout, cotarget)
    except AssertionError:
        return None
    return r if pycute.size(r) > 0 else None


def rand_cotarget(rng, layout):
    c = pycute.cosize(layout)
    return rng.choice([c, c, pycute.size(layout), 2 * c, 3 * c + rng.randint(1, c), rng.randint(1, 4 * c)])


COMPLEMENTS = []
_rng = random.Random(301)
while len(COMPLEMENTS) < 300:
    L = rand_injective(_rng)
    if pycute.cosize(L) <= 2000:
        COMPLEMENTS.append((L, rand_cotarget(_rng, L)))
OVERLAPPING = []
_rng = random.Random(302)
while len(OVERLAPPING) < 40:
    L = rand_overlapping(_rng)
    if complement_verdict(L, pycute.cosize(L)) is None:
        OVERLAPPING.append(L)


# ---------------------------------------------------------------- tilers for divide and product

def as_layout(t):
    return pycute.Layout(t, 1) if isinstance(t, int) else t


def reaches_past_a_trailing_one(a, b, bstar):
    whole = pycute.make_layout(b, bstar)
    return pycute.flatten(a.shape)[-1] == 1 and pycute.cosize(whole) > pycute.size(a)


def divide_profile_1d(a, t):
    """(B.shape, B*.shape) for one tile, or None when CuTe rejects the divide."""
    b = as_layout(t)
    bstar = complement_verdict(b, pycute.size(a))
    if bstar is None:
        return None
    try:
        ref = pycute.composition(a, pycute.make_layout(b, bstar))
    except AssertionError:
        return None
    if pycute.size(ref) != pycute.size(b) * pycute.size(bstar):
        return None  # shape divisibility: pycute floored a division
    return b.shape, bstar.shape, bstar


def divide_case(a, tiler):
    """('ok', profile) | ('error', None) | ('skip', None) for logical_divide(a, tiler)."""
    parts = [(a, tiler)] if not isinstance(tiler, tuple) else [(a[i], t) for i, t in enumerate(tiler)]
    profile = []
    for ai, t in parts:
        if t is None:
            profile.append(SAME)
            continue
        p = divide_profile_1d(ai, t)
        if p is None:
            return "error", None
        if reaches_past_a_trailing_one(ai, as_layout(t), p[2]):
            return "skip", None
        profile.append((p[0], p[1]))
    if not isinstance(tiler, tuple):
        return "ok", profile[0]
    return "ok", tuple(profile) + (SAME,) * (len(a) - len(tiler))


def rand_tile(rng, a):
    """A tile for (a mode of) a: an int, or an injective layout, usually fitting in size(a)."""
    if rng.random() < 0.25:
        return rng.choice([1, 2, 3, 4, 6, 8])
    while True:
        t = rand_injective(rng, max_leaves=2, leaves=(1, 2, 2, 3, 4), gaps=(1, 1, 2), extras=False)
        if pycute.cosize(t) <= max(4, 2 * pycute.size(a)):
            return t


def to_pycute_tiler(t):
    return tuple(to_pycute_tiler(x) for x in t) if isinstance(t, tuple) else as_layout(t) if t is not None else None


def make_divides(seed, n_ok, n_err, tuple_tiler, allow_none):
    rng = random.Random(seed)
    ok, err = [], []
    while len(ok) < n_ok or len(err) < n_err:
        a = rand_layout(rng, 128)
        if tuple_tiler:
            if not isinstance(a.shape, tuple) or len(a) < 2:
                continue
            k = rng.randint(1, len(a))
            tiler = tuple(None if allow_none and rng.random() < 0.2 else rand_tile(rng, a[i]) for i in range(k))
            if all(t is None for t in tiler):
                continue
        else:
            tiler = rand_tile(rng, a)
        verdict, profile = divide_case(a, tiler)
        if verdict == "ok" and len(ok) < n_ok:
            ok.append((a, tiler, profile))
        elif verdict == "error" and len(err) < n_err:
            err.append((a, tiler))
    return ok, err


DIVIDES, DIVIDE_ERRORS = make_divides(401, 200, 30, tuple_tiler=False, allow_none=False)
TILED, TILED_ERRORS = make_divides(402, 150, 20, tuple_tiler=True, allow_none=True)
ZIPPED, _ = make_divides(403, 150, 0, tuple_tiler=True, allow_none=False)


def make_products(seed, n_ok, n_err):
    rng = random.Random(seed)
    ok, err = [], []
    while len(ok) < n_ok or len(err) < n_err:
        a = rand_injective(rng, max_leaves=3, leaves=(1, 2, 2, 3, 4))
        if rng.random() < 0.15:
            a = rand_overlapping(rng)  # no complement: the product must raise
        r = rng.random()
        b = rng.choice([2, 3, 4, 6]) if r < 0.2 else rand_injective(rng, max_leaves=2, leaves=(2, 3, 4)) \
            if r < 0.7 else rand_layout(rng, 24)
        bl = as_layout(b)
        astar = complement_verdict(a, pycute.size(a) * pycute.cosize(bl))
        try:
            ref = pycute.logical_product(a, bl) if astar is not None else None
        except AssertionError:
            ref = None
        if ref is None or pycute.size(ref) != pycute.size(a) * pycute.size(bl):
            if len(err) < n_err:
                err.append((a, b))
            continue
        if len(ok) < n_ok:
            ok.append((a, b, ref))
    return ok, err


PRODUCTS, PRODUCT_ERRORS = make_products(404, 200, 25)


# ---------------------------------------------------------------- comparisons

def to_learner(m, t):
    if isinstance(t, pycute.Layout):
        return m.Layout(t.shape, t.stride)
    if isinstance(t, tuple):
        return tuple(to_learner(m, x) for x in t)
    return t


def shape_stride(L):
    assert hasattr(L, "shape") and hasattr(L, "stride"), f"expected a Layout, got {L!r}"
    return L.shape, L.stride


def values(shape, stride):
    ref = pycute.Layout(shape, stride)
    return [ref(i) for i in range(pycute.size(shape))]


def assert_compatible(got, want, profile, where):
    """got/want: (shape, stride); the same nesting down to the profile's leaves, the same size and values
    at each leaf; a SAME leaf must be identical."""
    (gs, gd), (ws, wd) = got, want
    if profile == SAME:
        assert (gs, gd) == (ws, wd), f"{where}: this mode must stay {ws}:{wd}, got {gs}:{gd}"
        return
    if isinstance(profile, tuple):
        assert isinstance(gs, tuple) and len(gs) == len(profile), \
            f"{where}: {gs}:{gd} must have {len(profile)} modes (profile {profile})"
        for i, p in enumerate(profile):
            assert_compatible((gs[i], gd[i]), (ws[i], wd[i]), p, f"{where}, mode {i}")
        return
    assert pycute.size(gs) == pycute.size(ws), f"{where}: size of {gs}:{gd} should be {pycute.size(ws)}"
    assert values(gs, gd) == values(ws, wd), f"{where}: {gs}:{gd} differs from {ws}:{wd} (pycute) as a function"


def zipped_profile(profile, n_tiler):
    """The zipped_divide arrangement of a by-mode logical_divide profile."""
    return (tuple(profile[i][0] for i in range(n_tiler)),
            tuple(profile[i][1] for i in range(n_tiler)) + profile[n_tiler:])


# ---------------------------------------------------------------- complement

DOC_COMPLEMENTS = [  # 02_layout_algebra.md (CUTLASS v4.2.0), Complement Examples
    ((4, 1), 24, (6, 4)),
    ((6, 4), 24, (4, 1)),
    (((4, 6), (1, 4)), 24, (1, 0)),
    ((4, 2), 24, ((2, 3), (1, 8))),
    (((2, 4), (1, 6)), 24, (3, 2)),
    (((2, 2), (1, 6)), 24, ((3, 2), (2, 12))),
]


def test_complement_doc_examples(lesson):
    m = load(lesson)
    for (s, d), cotarget, want in DOC_COMPLEMENTS:
        got = shape_stride(m.complement(m.Layout(s, d), cotarget))
        assert got == want, f"complement({s}:{d}, {cotarget}) = {got[0]}:{got[1]}, documented {want[0]}:{want[1]}"
    # the default cotarget is cosize(layout), as in CuTe C++ (pycute's default, 1, differs)
    # with a broadcast (stride-0) mode size > cosize: complement((4,3):(1,0)) is 1:0 in C++, not 3:4
    for L in [pycute.Layout(4, 2), pycute.Layout((2, 2), (1, 6)), pycute.Layout((3, 2), (8, 1)),
              pycute.Layout((4, 3), (1, 0)), pycute.Layout((2, (3, 2)), (0, (4, 1)))]:
        want = pycute.complement(L, pycute.cosize(L))
        assert shape_stride(m.complement(m.Layout(L.shape, L.stride))) == (want.shape, want.stride), f"complement({L})"


@pytest.mark.points(2)
def test_complement_matches_pycute_exactly(lesson):
    m = load(lesson)
    for L, cotarget in COMPLEMENTS:
        want = pycute.complement(L, cotarget)
        got = shape_stride(m.complement(m.Layout(L.shape, L.stride), cotarget))
        assert got == (want.shape, want.stride), f"complement({L}, {cotarget}) = {got[0]}:{got[1]}, pycute: {want}"


def test_complement_post_conditions(lesson):
    """The documented post-conditions, checked directly: ordered, disjoint from A, (A, R) reaches cotarget."""
    m = load(lesson)
    for L, cotarget in COMPLEMENTS[:150]:
        gs, gd = shape_stride(m.complement(m.Layout(L.shape, L.stride), cotarget))
        r = values(gs, gd)
        assert all(x < y for x, y in zip(r, r[1:])), f"complement({L}, {cotarget}) = {gs}:{gd} is not ordered"
        image = {L(i) for i in range(pycute.size(L))}
        assert not image & set(r[1:]), f"complement({L}, {cotarget}) = {gs}:{gd} hits the image of {L}"
        assert pycute.cosize(pycute.make_layout(L, pycute.Layout(gs, gd))) >= cotarget


HAND_OVERLAPPING = [((2, 2), (1, 1)), ((3, 2), (2, 3)), ((4, 4), (1, 2)), (((2, 3), 4), ((6, 1), 2))]


@pytest.mark.points(2)
def test_complement_rejects_overlapping_modes(lesson):
    m = load(lesson)
    cases = [pycute.Layout(s, d) for s, d in HAND_OVERLAPPING] + OVERLAPPING
    for L in cases:
        assert complement_verdict(L, pycute.cosize(L)) is None
        with pytest.raises(ERRORS):
            got = m.complement(m.Layout(L.shape, L.stride), pycute.cosize(L))
            pytest.fail(f"complement({L}): its modes overlap, CuTe rejects it; got {got}")


# ---------------------------------------------------------------- divide

def check_divide(m, fn, a, tiler, profile):
    ref_fn = pycute.logical_divide if fn == "logical_divide" else pycute.zipped_divide
    want = ref_fn(a, to_pycute_tiler(tiler))
    got = getattr(m, fn)(m.Layout(a.shape, a.stride), to_learner(m, tiler))
    assert_compatible(shape_stride(got), (want.shape, want.stride), profile, f"{fn}({a}, {tiler})")
    return got


def test_logical_divide_doc_examples(lesson):
    """02_layout_algebra.md: the 1-D example and the 2-D example with the tiler <3:3, (2,4):(1,8)>."""
    m = load(lesson)
    a, b = pycute.Layout((4, 2, 3), (2, 1, 8)), pycute.Layout(4, 2)
    got = check_divide(m, "logical_divide", a, b, (4, (2, 3)))
    assert values(*shape_stride(got)) == values(((2, 2), (2, 3)), ((4, 1), (2, 8)))
    a = pycute.Layout((9, (4, 8)), (59, (13, 1)))
    tiler = (pycute.Layout(3, 3), pycute.Layout((2, 4), (1, 8)))
    got = check_divide(m, "logical_divide", a, tiler, ((3, 3), ((2, 4), (2, 2))))
    assert values(got.shape[0][0], got.stride[0][0]) == values(3, 177)


@pytest.mark.points(2)
def test_logical_divide_random(lesson):
    m = load(lesson)
    for a, tiler, profile in DIVIDES + TILED:
        check_divide(m, "logical_divide", a, tiler, profile)


@pytest.mark.points(2)
def test_zipped_divide_gathers_tiles_and_rests(lesson):
    m = load(lesson)
    # 02_layout_algebra.md: ((TileM,TileN),(RestM,RestN)) with shape ((3,8),(3,4)); mode 0 is composition(a, b)
    a = pycute.Layout((9, (4, 8)), (59, (13, 1)))
    tiler = (pycute.Layout(3, 3), pycute.Layout((2, 4), (1, 8)))
    zd = check_divide(m, "zipped_divide", a, tiler, ((3, (2, 4)), (3, (2, 2))))
    assert values(zd.shape[0], zd.stride[0]) == values(*shape_stride(pycute.composition(a, tiler)))
    # tiling a row-major 8x12 matrix by 4x3 tiles: zd(i, j) = element i of tile j
    a = pycute.Layout((8, 12), (12, 1))
    zd = check_divide(m, "zipped_divide", a, (4, 3), ((4, 3), (2, 4)))
    for j in range(8):
        tm, tn = j % 2, j // 2  # tile j in colexicographic order over the 2 x 4 grid of tiles
        for i in range(12):
            r, c = 4 * tm + i % 4, 3 * tn + i // 4
            assert pycute.Layout(zd.shape, zd.stride)((i, j)) == a((r, c)), f"tile {j}, element {i}"
    for a, tiler, profile in ZIPPED:
        zd = check_divide(m, "zipped_divide", a, tiler, zipped_profile(profile, len(tiler)))
    for a, tiler, profile in DIVIDES[:80]:  # a single Layout or int: zipped_divide == logical_divide
        check_divide(m, "zipped_divide", a, tiler, profile)


@pytest.mark.points(1)
def test_divide_rejects_what_cute_rejects(lesson):
    m = load(lesson)
    for a, tiler in DIVIDE_ERRORS + TILED_ERRORS:
        with pytest.raises(ERRORS):
            got = m.logical_divide(m.Layout(a.shape, a.stride), to_learner(m, tiler))
            pytest.fail(f"logical_divide({a}, {tiler}) is not admissible in CuTe; got {got}")


# ---------------------------------------------------------------- product

def check_product(m, a, b, ref):
    got = m.logical_product(m.Layout(a.shape, a.stride), to_learner(m, b))
    assert_compatible(shape_stride(got), (ref.shape, ref.stride), (SAME, as_layout(b).shape),
                      f"logical_product({a}, {b})")
    return got


def test_logical_product_doc_examples(lesson):
    """02_layout_algebra.md: (2,2):(4,1) reproduced by 6:1 and by (4,2):(2,1)."""
    m = load(lesson)
    a = pycute.Layout((2, 2), (4, 1))
    got = check_product(m, a, pycute.Layout(6, 1), pycute.Layout(((2, 2), (2, 3)), ((4, 1), (2, 8))))
    assert values(*shape_stride(got)) == values(((2, 2), (2, 3)), ((4, 1), (2, 8)))
    check_product(m, a, pycute.Layout((4, 2), (2, 1)), pycute.logical_product(a, pycute.Layout((4, 2), (2, 1))))
    check_product(m, a, 6, pycute.logical_product(a, pycute.Layout(6, 1)))  # an int tiler n is n:1


@pytest.mark.points(2)
def test_logical_product_random(lesson):
    m = load(lesson)
    for a, b, ref in PRODUCTS:
        check_product(m, a, b, ref)
    for a, b in PRODUCT_ERRORS:
        with pytest.raises(ERRORS):
            got = m.logical_product(m.Layout(a.shape, a.stride), to_learner(m, b))
            pytest.fail(f"logical_product({a}, {b}) is not admissible in CuTe; got {got}")
