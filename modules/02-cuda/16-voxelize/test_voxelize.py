"""cuda-16 tests: point-cloud voxelization with a GPU hash table (insert, assign ids, scatter).

The reference is numpy: the voxel of each point from the same fp32 formula floor((x - min) / size),
np.unique over the linear keys for the voxel set and the per-voxel counts. The atomics make three things
depend on the order threads run in: where a key lands in the table when keys collide, which voxel gets
which id, and which points of an overflowing voxel are kept. So the tests compare CANONICAL forms:
the set of keys in the table and the count at each, the set of (voxel coordinate, count) pairs, and for
each voxel the set of points it kept (a subset of that voxel's points, of size min(count, max_points),
no point twice). On the CPU emulator every pipeline test runs in forward, reverse and seeded-random
thread/block order, and `cuda.check` adds the race build and AddressSanitizer; it compares bit for bit
only what the contract makes deterministic (the voxel count; the whole output of voxel_scatter, whose
inputs fix it).

Random points are generated in voxel units with their fractional part kept in [0.01, 0.99], so every
correct way of writing the fp32 formula (division, multiplication by the reciprocal, FMA) agrees on the
voxel; points sit exactly on a voxel face only in grids whose sizes are powers of two, where the
arithmetic is exact (x = min is voxel 0; x = max is outside). Point rows are unique (the intensity
column is a permutation), so a stored row identifies its point. Every output is poisoned before the
launch (-7 for ints, NaN for floats); the table's keys start EMPTY (-1) and its counts at 0, as the
contract says the caller leaves them.
"""

import math
from dataclasses import dataclass

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

EMPTY = -1
POISON = -7
# Emulator only: NaN or an out-of-range float converted to int traps (UB in C++ and CUDA; a GPU's cvt
# silently gives 0 for NaN, which would put the point in voxel 0). NVRTC would reject these flags.
TRAP_FLAGS = ["-fsanitize=float-cast-overflow", "-fsanitize-undefined-trap-on-error"]


def _cdiv(a, b):
    return -(-a // b)


def _load(lesson, order="fwd", backend=None, **kw):
    """The emulator takes the thread/block order from here; a GPU ignores it (its own order is not fixed)."""
    flags = TRAP_FLAGS if (backend or cuda.backend()) == "cpu" else []
    if backend:
        kw["backend"] = backend
    return cuda.load(lesson.path("voxelize.cu"), order=order, seed=1607, flags=flags, **kw)


def _pow2(n):
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


# ----------------------------------------------------------------------------- grids, clouds, reference

@dataclass(frozen=True)
class Grid:
    mins: tuple
    sizes: tuple
    dims: tuple            # (nx, ny, nz)
    exact: bool = False    # sizes are powers of two and mins multiples of them: faces are exact in fp32

    def scalars(self):
        return (*[np.float32(v) for v in self.mins], *[np.float32(v) for v in self.sizes], *self.dims)


G_EXACT = Grid((-8.0, -6.0, -2.0), (0.25, 0.5, 0.5), (60, 26, 9), exact=True)          # nx != ny, negative mins
G_PILLARS = Grid((0.0, -39.68, -3.0), (0.16, 0.16, 4.0), (432, 496, 1))                # PointPillars (KITTI)
G_WAYMO = Grid((-75.2, -75.2, -2.0), (0.1, 0.1, 0.15), (1504, 1504, 40))              # nx*ny*nz = 90.5 M keys
G_TALL = Grid((-3.0, -1.0, -4.0), (0.125, 0.25, 0.0625), (17, 40, 130), exact=True)    # ny > nx, nz > 128


def _voxel_keys(pts, g):
    """Linear key (iz*ny + iy)*nx + ix of every point, -1 where dropped: the kernel's fp32 formula in numpy."""
    mins = np.asarray(g.mins, np.float32)
    sizes = np.asarray(g.sizes, np.float32)
    dims = np.asarray(g.dims, np.float32)
    with np.errstate(all="ignore"):
        f = np.floor((pts[:, :3] - mins) / sizes)
        ok = np.all((f >= 0) & (f < dims), axis=1)
    idx = np.where(ok[:, None], f, 0).astype(np.int64)
    nx, ny, _ = g.dims
    key = (idx[:, 2] * ny + idx[:, 1]) * nx + idx[:, 0]
    return np.where(ok, key, -1)


def _decode(key, g):
    nx, ny, _ = g.dims
    key = np.asarray(key, np.int64)
    return np.stack([key // (nx * ny), key // nx % ny, key % nx], axis=-1)   # (iz, iy, ix)


def _reference(pts, g):
    key = _voxel_keys(pts, g)
    uk, cnt = np.unique(key[key >= 0], return_counts=True)
    return dict(key=key, ukeys=uk, counts=cnt, V=int(uk.size), count_of=dict(zip(uk.tolist(), cnt.tolist())))


def _features(rng, n, F, start):
    """Unique intensities (so every point row is unique) and random extra features."""
    feat = rng.standard_normal((n, F - 3)).astype(np.float32)
    feat[:, 0] = ((rng.permutation(n) + 0.5) / n + start).astype(np.float32)
    return feat


def _from_units(u, g):
    """Voxel-unit coordinates -> fp32 points, fractional parts kept 1% away from every voxel face."""
    fl = np.floor(u)
    u = fl + np.clip(u - fl, 0.01, 0.99)
    xyz = (np.asarray(g.mins) + u * np.asarray(g.sizes)).astype(np.float32)
    with np.errstate(all="ignore"):
        f = np.floor((xyz - np.asarray(g.mins, np.float32)) / np.asarray(g.sizes, np.float32))
    assert np.array_equal(f, fl), "test generator: a point fell on the other side of a voxel face"
    return xyz


def _cloud(rng, P, F, g, *, per=6, sigma=0.6, margin=1.0, hot=0):
    """P points in clusters of about `per` around random centres (on each axis up to `margin` voxels, at most
    a fifth of the axis, outside the range), plus `hot` extra points all in one voxel (heavy overflow)."""
    dims = np.asarray(g.dims, np.float64)
    m = np.minimum(margin, 0.2 * dims)
    n_c = max(1, P // per)
    centres = rng.uniform(-m, dims + m, (n_c, 3))
    u = centres[rng.integers(n_c, size=P)] + rng.normal(0.0, 1.0, (P, 3)) * np.minimum(sigma, 0.3 * dims)
    if hot:
        v = np.array([int(d) // 3 for d in g.dims], np.float64)
        u = np.concatenate([u, v + rng.uniform(0.0, 1.0, (hot, 3))])
    xyz = _from_units(u, g)
    pts = np.concatenate([xyz, _features(rng, len(xyz), F, 0.0)], axis=1)
    return pts[rng.permutation(len(pts))]


def _edge_points(g, F):
    """Points exactly on the range faces and non-finite coordinates (only for exact grids)."""
    assert g.exact
    mins = np.asarray(g.mins, np.float64)
    sizes = np.asarray(g.sizes, np.float64)
    maxs = mins + sizes * np.asarray(g.dims)
    base = mins + (np.asarray(g.dims) // 2 + 0.5) * sizes
    rows = []
    for a in range(3):
        for v in (mins[a], maxs[a], mins[a] - 0.5 * sizes[a], mins[a] - 0.01 * sizes[a], maxs[a] - 0.5 * sizes[a],
                  np.nan, np.inf, -np.inf, 1e30, -1e30):
            r = base.copy()
            r[a] = v
            rows.append(r)
    xyz = np.asarray(rows, np.float32)
    feat = np.asarray([[2.0 + k] + [0.5] * (F - 4) for k in range(len(rows))], np.float32)
    pts = np.concatenate([xyz, feat], axis=1)
    nan_feature = np.concatenate([base.astype(np.float32), np.full(F - 3, np.nan, np.float32)])[None]
    return np.concatenate([pts, nan_feature]).astype(np.float32)


def _exact_voxels(rng, g, V, F, per_max=9):
    """Exactly V distinct voxels, 1..per_max points each (for tables filled to capacity)."""
    n = int(np.prod(g.dims))
    keys = rng.choice(n, size=V, replace=False)
    zyx = _decode(keys, g)
    reps = rng.integers(1, per_max + 1, size=V)
    u = np.repeat(zyx[:, ::-1].astype(np.float64), reps, axis=0) + rng.uniform(0.0, 1.0, (int(reps.sum()), 3))
    xyz = _from_units(u, g)
    pts = np.concatenate([xyz, _features(rng, len(xyz), F, 0.0)], axis=1)
    return pts[rng.permutation(len(pts))]


# ----------------------------------------------------------------------------- launches

def _insert(mod, pts, g, cap, block):
    P, F = pts.shape
    keys = np.full(cap, EMPTY, np.int32)
    counts = np.zeros(cap, np.int32)
    slot = np.full(P, POISON, np.int32)
    rank = np.full(P, POISON, np.int32)
    mod.voxel_insert[_cdiv(P, block), block](pts, P, F, *g.scalars(), keys, counts, cap, slot, rank)
    return keys, counts, slot, rank


def _assign_args(keys, counts, g, maxv, maxp):
    cap = keys.size
    return (keys, counts, cap, g.dims[0], g.dims[1], maxv, maxp, np.full(cap, POISON, np.int32),
            np.zeros(1, np.int32), np.full((maxv, 3), POISON, np.int32), np.full(maxv, POISON, np.int32))


def _assign(mod, keys, counts, g, maxv, maxp, block):
    args = _assign_args(keys, counts, g, maxv, maxp)
    mod.voxel_assign[_cdiv(keys.size, block), block](*args)
    return args[7], int(args[8][0]), args[9], args[10]


def _scatter_args(pts, slot, rank, vals, maxv, maxp):
    P, F = pts.shape
    return (pts, P, F, slot, rank, vals, maxv, maxp, np.full((maxv, maxp, F), np.nan, np.float32))


def _scatter(mod, pts, slot, rank, vals, maxv, maxp, block):
    args = _scatter_args(pts, slot, rank, vals, maxv, maxp)
    mod.voxel_scatter[_cdiv(pts.shape[0], block), block](*args)
    return args[8]


def _pipeline(mod, pts, g, cap, maxv, maxp, block):
    keys, counts, slot, rank = _insert(mod, pts, g, cap, block)
    vals, nvox, coors, nump = _assign(mod, keys, counts, g, maxv, maxp, block)
    voxels = _scatter(mod, pts, slot, rank, vals, maxv, maxp, block)
    return nvox, coors, nump, voxels


# ----------------------------------------------------------------------------- canonical checks

def _fail(what, msg):
    raise AssertionError(f"{what}: {msg}")


def _check_table(pts, g, ref, keys, counts, slot, rank, what):
    """The insert kernel's outputs, as sets: the keys in the table, the count at each, each point's slot
    holding its own key, and the ranks of each voxel's points being 0 .. count-1 in some order."""
    key = ref["key"]
    kept = key >= 0
    occ = keys != EMPTY
    if not np.array_equal(np.sort(keys[occ].astype(np.int64)), ref["ukeys"]):
        extra = sorted(set(keys[occ].tolist()) - set(ref["ukeys"].tolist()))[:5]
        missing = sorted(set(ref["ukeys"].tolist()) - set(keys[occ].tolist()))[:5]
        _fail(what, f"the table holds {int(occ.sum())} keys, want the {ref['V']} distinct voxel keys "
                    f"(key = (iz*ny + iy)*nx + ix) once each; keys not expected e.g. {extra}, missing e.g. {missing}")
    want_counts = np.array([ref["count_of"][int(k)] for k in keys[occ]], np.int64)
    if not np.array_equal(counts[occ], want_counts):
        i = int(np.flatnonzero(counts[occ] != want_counts)[0])
        _fail(what, f"table_counts at the slot of key {int(keys[occ][i])} is {int(counts[occ][i])}, that voxel has "
                    f"{int(want_counts[i])} points")
    if (counts[~occ] != 0).any():
        _fail(what, "an empty slot has a non-zero count")
    if not np.array_equal(slot[~kept], np.full((~kept).sum(), -1)) or not np.array_equal(
            rank[~kept], np.full((~kept).sum(), -1)):
        i = int(np.flatnonzero(~kept & ((slot != -1) | (rank != -1)))[0])
        _fail(what, f"point {i} {pts[i, :3].tolist()} is outside the grid (or not finite): want point_slot = "
                    f"point_rank = -1, got {int(slot[i])}, {int(rank[i])} ({POISON} = never written)")
    s = slot[kept]
    if ((s < 0) | (s >= keys.size)).any():
        i = int(np.flatnonzero(kept)[np.flatnonzero((s < 0) | (s >= keys.size))[0]])
        _fail(what, f"point {i} {pts[i, :3].tolist()} (voxel key {int(key[i])}) has point_slot {int(slot[i])} "
                    f"({POISON} = never written, -1 = dropped)")
    bad = keys[s] != key[kept]
    if bad.any():
        i = int(np.flatnonzero(kept)[np.flatnonzero(bad)[0]])
        _fail(what, f"point {i} (voxel key {int(key[i])}) points at slot {int(slot[i])}, which holds key "
                    f"{int(keys[slot[i]])}")
    r = rank[kept].astype(np.int64)
    order = np.lexsort((r, s))
    ss, rr = s[order], r[order]
    starts = np.r_[0, np.flatnonzero(np.diff(ss)) + 1]
    pos = np.arange(ss.size) - np.repeat(starts, np.diff(np.r_[starts, ss.size]))
    if not np.array_equal(rr, pos):
        j = int(np.flatnonzero(rr != pos)[0])
        _fail(what, f"the ranks of the points in slot {int(ss[j])} are not 0 .. count-1 once each "
                    f"(sorted: {rr[starts[np.searchsorted(starts, j, 'right') - 1]:][:8].tolist()} ...): take the "
                    f"rank from the atomicAdd on the slot's count")


def _row_index(pts):
    return {pts[i].tobytes(): i for i in range(pts.shape[0])}


def _check_voxelization(pts, g, ref, nvox, coors, nump, voxels, maxv, maxp, what, lut=None):
    """End-to-end, canonical: voxel count, the (coordinate, count) pairs, and each voxel's stored points."""
    V = ref["V"]
    if nvox != V:
        _fail(what, f"*num_voxels = {nvox}, numpy finds {V} distinct voxels (np.unique of the keys)")
    kept = min(V, maxv)
    c = coors[:kept].astype(np.int64)
    nx, ny, nz = g.dims
    inside = (c[:, 0] >= 0) & (c[:, 0] < nz) & (c[:, 1] >= 0) & (c[:, 1] < ny) & (c[:, 2] >= 0) & (c[:, 2] < nx)
    if not inside.all():
        v = int(np.flatnonzero(~inside)[0])
        _fail(what, f"coors[{v}] = {coors[v].tolist()} is not a voxel of the {nz}x{ny}x{nx} grid (z, y, x order; "
                    f"{POISON} = never written)")
    k = (c[:, 0] * ny + c[:, 1]) * nx + c[:, 2]
    if np.unique(k).size != kept:
        _fail(what, "two voxel ids have the same coordinates")
    unknown = ~np.isin(k, ref["ukeys"])
    if unknown.any():
        v = int(np.flatnonzero(unknown)[0])
        _fail(what, f"voxel {v} at (z, y, x) = {coors[v].tolist()} holds no point in numpy's voxelization")
    want = np.minimum(np.array([ref["count_of"][int(x)] for x in k], np.int64), maxp)
    if not np.array_equal(nump[:kept], want):
        v = int(np.flatnonzero(nump[:kept] != want)[0])
        _fail(what, f"num_points[{v}] = {int(nump[v])} for voxel (z, y, x) = {coors[v].tolist()}: it has "
                    f"{ref['count_of'][int(k[v])]} points, max_points = {maxp}, want {int(want[v])}")
    lut = lut or _row_index(pts)
    pbits = np.full(pts.shape[1], np.nan, np.float32).tobytes()
    seen = set()
    for v in range(maxv):
        n = int(nump[v]) if v < kept else 0
        for r in range(maxp):
            row = voxels[v, r].tobytes()
            if r >= n:
                if row != pbits:
                    _fail(what, f"voxels[{v}][{r}] was written, but voxel {v} stores {n} points "
                                f"(rows past num_points and voxels past the kept ones are left as they were)")
                continue
            i = lut.get(row)
            if i is None:
                _fail(what, f"voxels[{v}][{r}] = {voxels[v, r].tolist()} is not a bit-exact copy of any input point "
                            f"(NaN row = never written)")
            if ref["key"][i] != k[v]:
                _fail(what, f"voxels[{v}][{r}] is point {i}, which lies in voxel key {int(ref['key'][i])}, not in "
                            f"voxel {v} (z, y, x) = {coors[v].tolist()}")
            if i in seen:
                _fail(what, f"point {i} is stored twice")
            seen.add(i)


# ----------------------------------------------------------------------------- cases

# (name, grid, P, F, options for _cloud, edge points, capacity factor, max_voxels (None: V + 3), max_points, block)
CASES = [
    ("exact grid, faces and NaN", G_EXACT, 900, 4, dict(per=12, sigma=0.35), True, 2, None, 40, 128),
    ("PointPillars grid", G_PILLARS, 1001, 4, dict(per=20, sigma=0.5), False, 2, None, 6, 256),
    ("Waymo grid, 5 features, 2500+ voxels", G_WAYMO, 3001, 5, dict(per=2, sigma=0.5), False, 2, None, 5, 128),
    ("tall grid, one voxel with 300 points", G_TALL, 400, 4, dict(per=8, sigma=0.35, hot=300), True, 2, None, 7, 32),
    ("max_points = 1, max_voxels < V", G_EXACT, 513, 4, dict(per=8, sigma=0.35), False, 2, 0.5, 1, 64),
]


def _points(rng, g, P, F, opts, edges):
    pts = _cloud(rng, P, F, g, **opts)
    if edges:
        pts = np.concatenate([pts, _edge_points(g, F)])
        pts = pts[rng.permutation(len(pts))]
    return np.ascontiguousarray(pts, dtype=np.float32)


def _case(rng, case):
    name, g, P, F, opts, edges, capf, maxv, maxp, block = case
    pts = _points(rng, g, P, F, opts, edges)
    ref = _reference(pts, g)
    cap = _pow2(capf * ref["V"])
    maxv = ref["V"] + 3 if maxv is None else max(1, int(maxv * ref["V"]))
    what = f"{name} (P={len(pts)}, F={F}, V={ref['V']}, capacity={cap}, max_voxels={maxv}, max_points={maxp}, " \
           f"block={block})"
    return pts, g, ref, cap, maxv, maxp, block, what


def _table_from_reference(rng, ref, cap):
    """A valid table for voxel_assign: each voxel key in a random slot, its count there."""
    keys = np.full(cap, EMPTY, np.int32)
    counts = np.zeros(cap, np.int32)
    slots = rng.choice(cap, size=ref["V"], replace=False)
    keys[slots] = ref["ukeys"]
    counts[slots] = ref["counts"]
    return keys, counts, slots


# ----------------------------------------------------------------------------- tests

@pytest.mark.points(2)
def test_insert_builds_the_hash_table(lesson):
    """voxel_insert alone: the table holds each in-range voxel key exactly once with its point count, every kept
    point's slot holds its key and the ranks in a voxel are 0 .. count-1; dropped points (outside the range, on
    the max face, just below the min face, NaN / inf / 1e30) get -1. Reverse and random thread order; tables
    filled to 100% (1 voxel in 1 slot, 2 in 2, 64 in 64) and ~80% (100 in 128), where probe sequences wrap
    around the end (a probe loop that stops before the capacity-th slot loses the voxel of a 1-slot table)."""
    rng = np.random.default_rng(1601)
    for order in ("rev", "rand"):
        mod = _load(lesson, order=order)
        for case in CASES:
            pts, g, ref, cap, _maxv, _maxp, block, what = _case(rng, case)
            keys, counts, slot, rank = _insert(mod, pts, g, cap, block)
            _check_table(pts, g, ref, keys, counts, slot, rank, f"{what}, {order} order")
        # exact fit: a table of 1 slot for 1 voxel (whatever the hash, its probe sequence has one slot), 2 for 2
        for V, cap, block in ((1, 1, 32), (2, 2, 32), (64, 64, 32), (100, 128, 64)):
            pts = _exact_voxels(rng, G_TALL, V, 4)
            ref = _reference(pts, G_TALL)
            assert ref["V"] == V
            keys, counts, slot, rank = _insert(mod, pts, G_TALL, cap, block)
            _check_table(pts, G_TALL, ref, keys, counts, slot, rank,
                         f"{V} voxels in a table of {cap} slots (P={len(pts)}, block={block}, {order} order)")


@pytest.mark.points(1)
def test_assign_numbers_the_voxels(lesson):
    """voxel_assign on tables built by numpy (keys in random slots): *num_voxels = V, the occupied slots get
    the ids 0 .. V-1 once each, coors[id] = (iz, iy, ix) of the slot's key and num_points[id] = min(count,
    max_points) for id < max_voxels; max_voxels below V (only ids under it are written, coors and num_points
    have exactly max_voxels rows); capacity not a multiple of the block."""
    rng = np.random.default_rng(1602)
    mod = _load(lesson, order="rand")
    for case in CASES:
        pts, g, ref, cap, maxv, maxp, block, what = _case(rng, case)
        keys, counts, slots = _table_from_reference(rng, ref, cap)
        vals, nvox, coors, nump = _assign(mod, keys, counts, g, maxv, maxp, 96 if block == 128 else block)
        if nvox != ref["V"]:
            _fail(what, f"*num_voxels = {nvox}, the table holds {ref['V']} keys")
        ids = vals[slots]
        if not np.array_equal(np.sort(ids), np.arange(ref["V"])):
            _fail(what, f"table_vals of the occupied slots are not 0 .. {ref['V'] - 1} once each (sorted: "
                        f"{np.sort(ids)[:8].tolist()} ...; {POISON} = never written)")
        mine = ids < maxv
        want_c = _decode(ref["ukeys"][mine], g)
        got_c = coors[ids[mine]]
        if not np.array_equal(got_c, want_c):
            j = int(np.flatnonzero((got_c != want_c).any(axis=1))[0])
            _fail(what, f"coors[{int(ids[mine][j])}] = {got_c[j].tolist()}, its key {int(ref['ukeys'][mine][j])} is "
                        f"(z, y, x) = {want_c[j].tolist()}")
        want_n = np.minimum(ref["counts"][mine], maxp)
        if not np.array_equal(nump[ids[mine]], want_n):
            j = int(np.flatnonzero(nump[ids[mine]] != want_n)[0])
            _fail(what, f"num_points[{int(ids[mine][j])}] = {int(nump[ids[mine]][j])}, want min(count = "
                        f"{int(ref['counts'][mine][j])}, max_points = {maxp})")


@pytest.mark.points(1)
def test_scatter_stores_at_most_max_points(lesson):
    """voxel_scatter with slots, ranks and ids given (ranks a random permutation inside each voxel): point i
    goes to voxels[id][rank], all F floats bit for bit, only when id < max_voxels and rank < max_points;
    overflow points and dropped points write nothing, so every other row keeps its NaN poison. A voxel of
    300 points with max_points = 7, max_points = 1, F = 5, a point with a NaN feature."""
    rng = np.random.default_rng(1603)
    mod = _load(lesson, order="rev")
    for case in CASES:
        pts, g, ref, cap, maxv, maxp, block, what = _case(rng, case)
        _keys, _counts, slots = _table_from_reference(rng, ref, cap)
        vals = np.full(cap, POISON, np.int32)
        ids = rng.permutation(ref["V"]).astype(np.int32)
        vals[slots] = ids
        vox = np.searchsorted(ref["ukeys"], ref["key"])          # voxel index of each point (garbage if dropped)
        kept = ref["key"] >= 0
        slot = np.where(kept, slots[np.minimum(vox, ref["V"] - 1)], -1).astype(np.int32)
        rank = np.full(len(pts), -1, np.int32)
        for j in range(ref["V"]):
            members = np.flatnonzero(kept & (vox == j))
            rank[members] = rng.permutation(members.size)
        got = _scatter(mod, pts, slot, rank, vals, maxv, maxp, block)
        want = np.full((maxv, maxp, pts.shape[1]), np.nan, np.float32)
        i = np.flatnonzero(kept)
        vid = vals[slot[i]]
        store = (vid < maxv) & (rank[i] < maxp)
        want[vid[store], rank[i][store]] = pts[i[store]]
        diff = (got.view(np.uint32) != want.view(np.uint32)).any(axis=2)
        if diff.any():
            v, r = (int(x) for x in np.argwhere(diff)[0])
            src = np.flatnonzero(kept & (vals[np.maximum(slot, 0)] == v) & (rank == r))
            _fail(what, f"voxels[{v}][{r}] = {got[v, r].tolist()}, want {want[v, r].tolist()} "
                        f"({'point ' + str(int(src[0])) if src.size and r < maxp else 'nothing: NaN poison'}; "
                        f"{int(diff.sum())} rows differ)")


@pytest.mark.points(2)
def test_pipeline_matches_numpy_in_every_order(lesson):
    """insert -> assign -> scatter, canonical comparison with numpy in forward, reverse and seeded-random
    thread/block order: the same voxel count, the same set of (z, y, x) voxels with counts min(count,
    max_points), and every voxel's stored rows are distinct points of that voxel; with max_voxels < V, any
    max_voxels of the voxels, each complete. Also a table filled to capacity."""
    rng = np.random.default_rng(1604)
    cases = [_case(rng, c) for c in CASES]
    full = _exact_voxels(rng, G_TALL, 128, 5, per_max=5)
    for order in ("fwd", "rev", "rand"):
        mod = _load(lesson, order=order)
        for pts, g, ref, cap, maxv, maxp, block, what in cases:
            nvox, coors, nump, voxels = _pipeline(mod, pts, g, cap, maxv, maxp, block)
            _check_voxelization(pts, g, ref, nvox, coors, nump, voxels, maxv, maxp, f"{what}, {order} order")
        ref = _reference(full, G_TALL)
        nvox, coors, nump, voxels = _pipeline(mod, full, G_TALL, 128, 130, 3, 64)
        _check_voxelization(full, G_TALL, ref, nvox, coors, nump, voxels, 130, 3,
                            f"128 voxels in a table of 128 slots, F=5, {order} order")


@pytest.mark.points(1)
def test_checked_builds(lesson):
    """cuda.check on each kernel: forward / reverse / random order, the race build (two plain writes of one
    global element, e.g. a claim or a count without an atomic; writes past coors, num_points or voxels) and
    AddressSanitizer. Compared between variants: nothing for voxel_insert (slots and ranks follow the atomics),
    *num_voxels for voxel_assign, everything for voxel_scatter (its inputs fix its output)."""
    rng = np.random.default_rng(1605)
    mod = _load(lesson)
    g = G_EXACT
    pts = _points(rng, g, 300, 4, dict(per=6, hot=40), True)
    ref = _reference(pts, g)
    cap = _pow2(ref["V"])        # load factor above 1/2: long probe sequences, some wrap
    maxv, maxp, block = ref["V"] - 9, 6, 64
    P, F = pts.shape
    args = (pts, P, F, *g.scalars(), np.full(cap, EMPTY, np.int32), np.zeros(cap, np.int32), cap,
            np.full(P, POISON, np.int32), np.full(P, POISON, np.int32))
    r = cuda.check(mod.voxel_insert, (_cdiv(P, block), block), args, compare=False)
    keys, counts, slot, rank = (r.outputs[i] for i in (12, 13, 15, 16))
    what = f"checked voxel_insert (P={P}, V={ref['V']}, capacity={cap})"
    _check_table(pts, g, ref, keys, counts, slot, rank, what)

    args = _assign_args(keys, counts, g, maxv, maxp)
    r = cuda.check(mod.voxel_assign, (_cdiv(cap, 32), 32), args, compare=[8])
    vals = r.outputs[7]
    if int(r.outputs[8][0]) != ref["V"]:
        _fail("checked voxel_assign", f"*num_voxels = {int(r.outputs[8][0])}, want {ref['V']}")

    args = _scatter_args(pts, slot, rank, vals, maxv, maxp)
    r = cuda.check(mod.voxel_scatter, (_cdiv(P, block), block), args, rtol=0, atol=0)
    nump = np.full(maxv, POISON, np.int32)
    coors = np.full((maxv, 3), POISON, np.int32)
    ids = vals[keys != EMPTY]
    m = ids < maxv
    coors[ids[m]] = _decode(keys[keys != EMPTY][m], g)
    nump[ids[m]] = np.minimum(counts[keys != EMPTY][m], maxp)
    _check_voxelization(pts, g, ref, ref["V"], coors, nump, r.outputs[8], maxv, maxp, "checked voxel_scatter")


@pytest.mark.points(1)
def test_non_finite_points_are_dropped_before_int_conversion(lesson):
    """NaN, +-inf and +-1e30 in x, y or z: the point is dropped, and no NaN or out-of-range float is converted
    to int (undefined behaviour: on a GPU (int)NaN is 0, which files a NaN point under voxel 0). On the
    emulator the module is built with -fsanitize=float-cast-overflow, trapping: convert after the range test."""
    rng = np.random.default_rng(1606)
    mod = _load(lesson)
    g = G_EXACT
    pts = _points(rng, g, 150, 4, dict(per=5), True)
    bad = rng.choice(150, size=30, replace=False)
    axis = rng.integers(0, 3, size=30)
    pts[bad, axis] = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30], np.float32)[rng.integers(0, 5, size=30)]
    ref = _reference(pts, g)
    cap = _pow2(2 * ref["V"])
    try:
        nvox, coors, nump, voxels = _pipeline(mod, pts, g, cap, ref["V"], 50, 64)
    except cuda.CudaCrashError as e:
        raise AssertionError(f"{e}\nA trap at that line: a NaN, infinite or huge coordinate was converted to int "
                             f"(undefined behaviour). Test the range on the float values first.") from None
    _check_voxelization(pts, g, ref, nvox, coors, nump, voxels, ref["V"], 50, "NaN / inf / 1e30 coordinates")


@pytest.mark.points(1)
def test_hash_probes_not_scans(lesson):
    """Counted in the emulator's race build. voxel_insert: a slot is claimed only by atomicCAS (no plain store to
    table_keys: check-then-write lets two threads both see EMPTY on a GPU) and counts only by atomics (no plain
    load or store of table_counts: the rank is the atomicAdd's return value); the table
    is probed from the key's hash, so the CAS and loads on table_keys stay a few per point (load factor <= 1/2:
    Knuth's 1.5 probes for a hit, 2.5 for a miss), not a scan over the voxels found so far (V/2 per point).
    voxel_assign makes at most one global atomic per voxel; voxel_scatter none, and reads each point once."""
    rng = np.random.default_rng(1607)
    mod = _load(lesson, backend="cpu", build="race")
    g = G_WAYMO
    pts = _points(rng, g, 1500, 4, dict(per=3, sigma=1.2, margin=10.0), False)
    ref = _reference(pts, g)
    cap = _pow2(2 * ref["V"])
    P, F = pts.shape
    n_in = int((ref["key"] >= 0).sum())
    kernel = mod.voxel_insert
    keys, counts, slot, rank = _insert(mod, pts, g, cap, 128)
    _check_table(pts, g, ref, keys, counts, slot, rank, "voxel_insert (race build)")
    st = kernel.stats
    tk = cuda.gmem_counters(st, "table_keys")
    tc = cuda.gmem_counters(st, "table_counts")
    assert tk["stores"] == 0 and tc["stores"] == 0, (
        f"voxel_insert: {tk['stores']} plain stores to table_keys, {tc['stores']} to table_counts: claim a slot "
        f"with atomicCAS and count with atomicAdd (a load, a compare and a store let two threads both claim)")
    probes = tk["atomics"] + tk["loads"]
    assert probes <= 6 * n_in, (
        f"voxel_insert: {tk['atomics']} atomics and {tk['loads']} loads on table_keys for {n_in} points in the "
        f"range and {ref['V']} voxels (table of {cap}): start each probe sequence at the key's hash; a scan from "
        f"slot 0 costs about V/2 = {ref['V'] // 2} per point")
    assert tc["atomics"] <= n_in and tc["loads"] == 0, (
        f"voxel_insert: {tc['atomics']} atomics and {tc['loads']} plain loads on table_counts for {n_in} points: a "
        f"point's rank is the value its atomicAdd returns (a separate load lets two points read the same count)")
    pc = cuda.gmem_counters(st, "points")
    assert pc["max_reads_per_byte"] <= 2, "voxel_insert reads some coordinate more than twice"

    kernel = mod.voxel_assign
    vals, nvox, _coors, _nump = _assign(mod, keys, counts, g, ref["V"], 8, 256)
    assert nvox == ref["V"], f"voxel_assign (race build): *num_voxels = {nvox}, want {ref['V']}"
    st = kernel.stats
    assert 1 <= st["gmem_atomics"] <= ref["V"], (
        f"voxel_assign: {st['gmem_atomics']} global atomics for {ref['V']} voxels: one per occupied slot (or one "
        f"per warp, aggregated) at most")
    assert cuda.gmem_counters(st, "table_keys")["max_reads_per_byte"] <= 1, "voxel_assign reads a key twice"

    kernel = mod.voxel_scatter
    _scatter(mod, pts, slot, rank, vals, ref["V"], 8, 128)
    st = kernel.stats
    pc = cuda.gmem_counters(st, "points")
    assert st["gmem_atomics"] == 0, f"voxel_scatter: {st['gmem_atomics']} atomics; ranks and ids are already known"
    assert pc["max_reads_per_byte"] <= 1, "voxel_scatter reads some point value twice: copy each point once"
