"""cuda-14 tests: MoE dispatch/combine layout kernels (counts, offsets, stable permute, weighted combine).

References are numpy: np.bincount per tile for the counts, np.cumsum for the offsets, a STABLE argsort of
the valid slots by expert for the permuted layout (exact integers and bit-exact row copies), and float64
sums for the combine. Routing is skewed (one hot expert, most experts empty), holds -1 (dropped) slots and
tokens whose every slot is dropped; S = T*k is never a multiple of the block; E goes above 256 (DeepSeek-V3
has 256 routed experts: 257 catches a hard-coded 256) and above the block size. Every output is poisoned
before the launch (NaN for floats, -7 for ints).

Determinism is part of the contract: the layout must be the same bits whatever order threads and blocks
run in. On the CPU emulator the layout tests run in reverse and seeded-random thread/block order, and
`cuda.check` compares the forward, reverse and random orders and the race build bit for bit: a row index
taken from an atomicAdd's return value (arrival order) differs between them. The traffic counters exist
only in the emulator's race build, so those tests load the module with backend="cpu" (same grade on a GPU box).
"""

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

U = 2.0**-24
POISON = -7


def _cdiv(a, b):
    return -(-a // b)


def _load(lesson, order="fwd", **kw):
    """The emulator takes the thread/block order from here; a GPU ignores it (its own order is not fixed)."""
    return cuda.load(lesson.path("moe_layout.cu"), order=order, seed=1407, **kw)


# ----------------------------------------------------------------------------- routing and references

def _routing(rng, t, k, e, *, drop=0.1, hot=0.4, empty=0.5, dead_tokens=0):
    """Top-k routing over e experts: distinct experts per token while enough experts are live, one hot expert
    (sampling weight `hot`: with k = 1 it takes that share of the slots, with k = 8 nearly every token picks it),
    about `empty` of the experts never picked (at least one), a fraction `drop` of slots set to -1 and
    `dead_tokens` tokens with every slot dropped."""
    w = rng.random(e) ** 3 + 0.01
    w[rng.random(e) < empty] = 0.0
    w[rng.integers(e)] = 0.0 if e > 1 else 1.0
    if w.sum() == 0:
        w[0] = 1.0
    hot_e = int(rng.integers(e))
    w[hot_e] = 0.0
    w = (1 - hot) * w / max(w.sum(), 1e-30)
    w[hot_e] += hot
    w /= w.sum()
    idx = np.empty((t, k), dtype=np.int32)
    for i in range(t):
        if int((w > 0).sum()) >= k:
            idx[i] = rng.choice(e, size=k, replace=False, p=w)
        else:  # fewer live experts than slots: repeats are allowed (the kernels do not care)
            idx[i] = rng.choice(e, size=k, replace=True, p=w)
    idx[rng.random((t, k)) < drop] = -1
    if dead_tokens:
        idx[rng.choice(t, size=dead_tokens, replace=False)] = -1
    return idx


def _ref_layout(idx, e, block):
    """Every layout array, from numpy alone."""
    flat = idx.ravel()
    s = flat.size
    g = _cdiv(s, block)
    tiles = np.full(g * block, -1, dtype=np.int64)
    tiles[:s] = flat
    tiles = tiles.reshape(g, block)
    block_counts = np.stack([np.bincount(r[r >= 0], minlength=e) for r in tiles]).astype(np.int32)
    counts = np.bincount(flat[flat >= 0], minlength=e).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    block_offsets = (offsets[:-1][None, :] + np.cumsum(block_counts, axis=0) - block_counts).astype(np.int32)
    valid = np.flatnonzero(flat >= 0)
    src = valid[np.argsort(flat[valid], kind="stable")].astype(np.int32)   # stable: slot order inside an expert
    pos = np.full(s, -1, dtype=np.int32)
    pos[src] = np.arange(src.size, dtype=np.int32)
    return dict(G=g, block_counts=block_counts, counts=counts, offsets=offsets, block_offsets=block_offsets,
                src=src, pos=pos, N=int(src.size))


def _poisoned(shape, dtype):
    return np.full(shape, np.nan if np.dtype(dtype).kind == "f" else POISON, dtype=dtype)


# ----------------------------------------------------------------------------- launches

def _count(mod, idx, e, block):
    s = idx.size
    g = _cdiv(s, block)
    bc = _poisoned((g, e), np.int32)
    mod.moe_count[g, block, e * 4](idx, s, e, bc)
    return bc


def _offsets(mod, block_counts, block):
    g, e = block_counts.shape
    counts, offsets, boffs = _poisoned(e, np.int32), _poisoned(e + 1, np.int32), _poisoned((g, e), np.int32)
    mod.moe_offsets[1, block, e * 4](block_counts, g, e, counts, offsets, boffs)
    return counts, offsets, boffs


def _permute_args(x, idx, block_offsets, n):
    t, k = idx.shape
    permuted = _poisoned((max(n, 1), x.shape[1]), np.float32)   # the runtime needs a non-empty buffer
    return (x, idx, block_offsets, t * k, k, x.shape[1], block_offsets.shape[1], permuted,
            _poisoned(t * k, np.int32), _poisoned(max(n, 1), np.int32))


def _permute_launch(idx, e, block):
    return _cdiv(idx.size, block), block, ((block // 32) * e + block) * 4


def _combine(mod, y, pos, w, block):
    t, k = w.shape
    out = _poisoned((t, y.shape[1]), np.float32)
    mod.moe_combine[t, block](y, pos, w, k, y.shape[1], out)
    return out


# ----------------------------------------------------------------------------- checks

def _expect_equal(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape == want.shape and np.array_equal(got, want):
        return
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    bad = np.argwhere(got != want)
    i = tuple(int(v) for v in bad[0])
    raise AssertionError(f"{what}: {len(bad)} of {got.size} entries differ, first at {list(i)}: got {got[i]}, "
                         f"want {want[i]} ({POISON} = never written)")


def _check_permute(x, idx, ref, permuted, pos, src, what):
    k = idx.shape[1]
    n = ref["N"]
    _expect_equal(pos, ref["pos"], f"{what}: pos (row of each slot in the expert-major buffer, -1 if dropped)")
    if n:
        _expect_equal(src[:n], ref["src"], f"{what}: src_slot (slots of each expert in increasing slot order)")
        want = x[ref["src"] // k]
        if not np.array_equal(permuted[:n].view(np.uint32), want.view(np.uint32)):
            rows = np.flatnonzero((permuted[:n].view(np.uint32) != want.view(np.uint32)).any(axis=1))
            raise AssertionError(f"{what}: permuted rows {rows[:8].tolist()} (of {n}) are not bit-exact copies of "
                                 f"X[src_slot // k] (NaN = never written)")
    else:
        assert np.isnan(permuted).all() and (src == POISON).all(), f"{what}: no valid slot, yet rows were written"


# (name, T, k, E, H, block, routing options)
CASES = [
    ("k=1, E=257", 300, 1, 257, 5, 128, dict()),
    ("k=2, two warps per block", 129, 2, 6, 33, 64, dict(dead_tokens=3)),
    ("k=8, hot expert, E=257", 97, 8, 257, 40, 128, dict(hot=0.5, empty=0.6, dead_tokens=2)),
    ("k=8, one warp per block", 45, 8, 19, 70, 32, dict(drop=0.3)),
    ("E above the block", 61, 4, 300, 17, 256, dict(empty=0.3)),
    ("one expert (repeated picks)", 33, 2, 1, 9, 128, dict(drop=0.2)),
    ("one token", 1, 8, 9, 1, 32, dict(drop=0.0)),
]


@pytest.mark.points(1)
def test_counts_per_tile(lesson):
    """moe_count: block_counts[b][e] = np.bincount of tile b's valid slots, for every (tile, expert) entry,
    with E from 1 to 300 (above the block and above 256), blocks of 32 to 256 threads, a partial last tile,
    a single partial tile (S < B) and routing where every slot is dropped."""
    mod = _load(lesson, order="rev")
    rng = np.random.default_rng(1401)
    for name, t, k, e, _h, block, opts in CASES + [("all dropped", 10, 2, 4, 3, 64, dict(drop=1.0))]:
        idx = _routing(rng, t, k, e, **opts)
        ref = _ref_layout(idx, e, block)
        _expect_equal(_count(mod, idx, e, block), ref["block_counts"],
                      f"{name} (T={t}, k={k}, E={e}, block={block}): block_counts")


@pytest.mark.points(1)
def test_offsets(lesson):
    """moe_offsets on random block_counts (zeros included, whole empty columns): counts = column sums,
    offsets = exclusive scan with offsets[E] = N, block_offsets = offsets + exclusive prefix down each column.
    E = 1 .. 700, so the scan over experts needs several chunks of the block (E = 257 with 256 threads,
    E = 700 with 32 and 64 threads); G from 1 to 40 tiles."""
    mod = _load(lesson, order="rev")
    rng = np.random.default_rng(1402)
    for g, e, block in [(1, 1, 32), (7, 5, 64), (40, 257, 256), (3, 700, 32), (12, 700, 64), (1, 257, 128),
                        (25, 33, 128)]:
        bc = rng.integers(0, 9, (g, e)).astype(np.int32)
        bc[rng.random((g, e)) < 0.4] = 0
        bc[:, rng.random(e) < 0.2] = 0
        counts, offsets, boffs = _offsets(mod, bc, block)
        what = f"G={g}, E={e}, block={block}"
        want_counts = bc.sum(axis=0).astype(np.int32)
        want_offsets = np.concatenate([[0], np.cumsum(want_counts)]).astype(np.int32)
        _expect_equal(counts, want_counts, f"{what}: counts")
        _expect_equal(offsets, want_offsets, f"{what}: offsets (E + 1 entries, exclusive)")
        _expect_equal(boffs, want_offsets[:-1] + np.cumsum(bc, axis=0) - bc, f"{what}: block_offsets")


@pytest.mark.points(2)
def test_permute_is_a_stable_sort_by_expert(lesson):
    """moe_permute with the reference block_offsets: pos, src_slot and the permuted rows equal a STABLE numpy
    argsort of the valid slots by expert, bit for bit. On the emulator the threads and blocks run in reverse
    and in seeded-random order: the rank of a slot inside its expert must come from the slots before it, not
    from the order in which threads reach an atomicAdd."""
    rng = np.random.default_rng(1403)
    cases = CASES + [("all dropped", 10, 2, 4, 3, 64, dict(drop=1.0))]
    for order in ("rev", "rand"):
        mod = _load(lesson, order=order)
        for name, t, k, e, h, block, opts in cases:
            idx = _routing(rng, t, k, e, **opts)
            ref = _ref_layout(idx, e, block)
            x = rng.standard_normal((t, h)).astype(np.float32)
            args = _permute_args(x, idx, ref["block_offsets"], ref["N"])
            mod.moe_permute[_permute_launch(idx, e, block)](*args)
            _check_permute(x, idx, ref, args[7], args[8], args[9],
                           f"{name} (T={t}, k={k}, E={e}, H={h}, block={block}, {order} order)")


def _combine_bound(w, y, pos):
    """Per element |error| of a k-term fp32 sum of fp32 products: (k + 1) u sum |w y| (Higham 3.1), x2."""
    t, k = w.shape
    acc = np.zeros((t, y.shape[1]))
    want = np.zeros((t, y.shape[1]))
    for j in range(k):
        p = pos.reshape(t, k)[:, j]
        ok = p >= 0
        term = w[ok, j].astype(np.float64)[:, None] * y[p[ok]].astype(np.float64)
        want[ok] += term
        acc[ok] += np.abs(term)
    return want, 2 * (k + 1) * U * acc + 1e-30


@pytest.mark.points(1)
def test_combine_weighted_gather(lesson):
    """moe_combine: out[t] = sum of w[t, j] * Y[pos[t, j]] over the valid slots (float64 reference, fp32 bound);
    dropped slots carry nonzero weights that must be ignored; a token with no valid slot gets 0."""
    mod = _load(lesson)
    # The summation order is part of the contract (valid slots in increasing j, from 0): a cancelling token
    # whose fp32 sum in that order differs from every other order and from the exact sum. Rows
    # 3, 1e8, -1e8, 2 (times a power of two per column, weights 1, so a fused multiply-add rounds the same):
    # 3 + 1e8 rounds to 1e8, - 1e8 gives 0, + 2 gives 2; decreasing j gives 3, the exact sum is 5.
    h = 40                                                         # more columns than a 32-thread block
    scale = (2.0 ** (np.arange(h) % 5)).astype(np.float32)
    y = np.stack([3.0 * scale, 1e8 * scale, -1e8 * scale, 2.0 * scale]).astype(np.float32)
    pos = np.array([0, -1, 1, 2, 3], np.int32)                     # slot 1 dropped, with a nonzero weight
    w = np.array([[1.0, 7.0, 1.0, 1.0, 1.0]], np.float32)
    for cblock in (32, 128):
        out = _combine(mod, y, pos, w, cblock)
        assert np.array_equal(out[0], 2.0 * scale), (
            f"cancelling token (Y rows 3, 1e8, -1e8, 2 times 2^(h % 5), weights 1, combine block={cblock}): "
            f"out[0][:5] = {out[0][:5].tolist()}, want {(2.0 * scale[:5]).tolist()}: the fp32 sum in increasing j "
            f"(3 + 1e8 rounds to 1e8); decreasing j gives 3, another order or a wider accumulator gives 5")

    rng = np.random.default_rng(1404)
    for name, t, k, e, h, block, opts in CASES:
        idx = _routing(rng, t, k, e, **opts)
        ref = _ref_layout(idx, e, block)
        y = rng.standard_normal((max(ref["N"], 1), h)).astype(np.float32)
        w = rng.uniform(-2.0, 2.0, (t, k)).astype(np.float32)
        for cblock in (32, 128):
            out = _combine(mod, y, ref["pos"], w, cblock)
            want, bound = _combine_bound(w, y, ref["pos"])
            what = f"{name} (T={t}, k={k}, H={h}, combine block={cblock})"
            assert not np.isnan(out).any(), f"{what}: NaN in out (a row or column was never written)"
            bad = np.abs(out - want) > bound
            assert not bad.any(), (f"{what}: {int(bad.sum())} elements off the weighted sum, e.g. out"
                                   f"{np.argwhere(bad)[0].tolist()} = {out[tuple(np.argwhere(bad)[0])]!r}, want "
                                   f"{want[tuple(np.argwhere(bad)[0])]!r}")


def _pipeline(mod, x, idx, w, e, block, cblock):
    bc = _count(mod, idx, e, block)
    counts, offsets, boffs = _offsets(mod, bc, 128)
    n = int(offsets[-1])
    assert 0 <= n <= idx.size, f"offsets[E] = {n} is not a slot count"
    args = _permute_args(x, idx, boffs, n)
    mod.moe_permute[_permute_launch(idx, e, block)](*args)
    permuted, pos = args[7], args[8]
    out = _combine(mod, permuted, pos, w, cblock)   # identity experts: Y = the dispatched rows
    return counts, offsets, pos, out


@pytest.mark.points(2)
def test_round_trip_restores_tokens(lesson):
    """The whole pipeline count -> offsets -> permute -> combine with identity experts (Y = permuted rows):
    counts equal np.bincount and the layout is the stable one; weights one-hot on a token's first valid slot give X back bit for bit; softmax
    weights over the valid slots (summing to 1) give X within fp32 rounding; tokens with no valid slot give 0.
    Dropped slots carry nonzero weights. Emulator in seeded-random thread/block order."""
    mod = _load(lesson, order="rand")
    rng = np.random.default_rng(1405)
    for name, t, k, e, h, block, opts in CASES:
        idx = _routing(rng, t, k, e, **opts)
        x = rng.standard_normal((t, h)).astype(np.float32) * np.float32(3.0)
        valid = idx >= 0
        live = valid.any(axis=1)
        what = f"{name} (T={t}, k={k}, E={e}, H={h}, block={block})"

        onehot = np.where(valid, 0.0, 2.5).astype(np.float32)
        onehot[live, valid[live].argmax(axis=1)] = 1.0
        counts, offsets, pos, out = _pipeline(mod, x, idx, onehot, e, block, 64)
        _expect_equal(counts, np.bincount(idx[valid], minlength=e).astype(np.int32), f"{what}: counts")
        _expect_equal(offsets[-1], int(valid.sum()), f"{what}: offsets[E] (valid slots)")
        _expect_equal(pos, _ref_layout(idx, e, block)["pos"], f"{what}: pos after the whole pipeline (stable layout)")
        want = np.where(live[:, None], x, np.float32(0.0))
        if not np.array_equal(out, want):
            bad = np.argwhere(out != want)[0]
            raise AssertionError(f"{what}: one-hot weights must give X back exactly; out{bad.tolist()} = "
                                 f"{out[tuple(bad)]!r}, want {want[tuple(bad)]!r}")

        logits = rng.standard_normal((t, k))
        soft = np.where(valid, np.exp(logits), 0.0)
        soft = soft / np.maximum(soft.sum(axis=1, keepdims=True), 1e-300)
        soft = np.where(valid, soft, 1.5).astype(np.float32)
        _, _, _, out = _pipeline(mod, x, idx, soft, e, block, 32)
        err = np.abs(out.astype(np.float64) - want)
        bound = 3 * (k + 1) * U * np.abs(x.astype(np.float64)) + 1e-30
        assert not np.isnan(out).any() and (err <= bound).all(), (
            f"{what}: softmax weights over the valid slots must restore X within fp32 rounding; worst "
            f"|out - x| = {np.nanmax(err):.3g} at {np.unravel_index(np.nanargmax(err), err.shape)}")


@pytest.mark.points(1)
def test_same_bits_in_every_order(lesson):
    """cuda.check, bit for bit (rtol = atol = 0): forward, reverse and seeded-random thread/block order, the
    race build (shared-memory races, uninitialised shared reads, two writers of one global element) and the
    AddressSanitizer build, for each kernel on skewed routing with a partial last tile. The combine runs on
    the emulator only, where every variant rounds alike (a GPU may contract a*b + c into an FMA)."""
    mod = _load(lesson)
    rng = np.random.default_rng(1406)
    t, k, e, h, block = 37, 4, 21, 19, 64   # S = 148: two full tiles and a partial one
    idx = _routing(rng, t, k, e, hot=0.6, dead_tokens=2)
    ref = _ref_layout(idx, e, block)
    g = ref["G"]

    r = cuda.check(mod.moe_count, (g, block, e * 4), (idx, idx.size, e, _poisoned((g, e), np.int32)))
    _expect_equal(r.outputs[3], ref["block_counts"], "checked moe_count: block_counts")

    r = cuda.check(mod.moe_offsets, (1, 32, e * 4), (ref["block_counts"], g, e, _poisoned(e, np.int32),
                                                     _poisoned(e + 1, np.int32), _poisoned((g, e), np.int32)))
    _expect_equal(r.outputs[5], ref["block_offsets"], "checked moe_offsets: block_offsets")

    x = rng.standard_normal((t, h)).astype(np.float32)
    args = _permute_args(x, idx, ref["block_offsets"], ref["N"])
    r = cuda.check(mod.moe_permute, _permute_launch(idx, e, block), args, rtol=0, atol=0)
    _check_permute(x, idx, ref, r.outputs[7], r.outputs[8], r.outputs[9], "checked moe_permute")

    emu = _load(lesson, backend="cpu")
    y = rng.standard_normal((ref["N"], h)).astype(np.float32)
    w = rng.uniform(0.1, 1.0, (t, k)).astype(np.float32)
    r = cuda.check(emu.moe_combine, (t, 32), (y, ref["pos"], w, k, h, _poisoned((t, h), np.float32)),
                   rtol=0, atol=0)
    want, bound = _combine_bound(w, y, ref["pos"])
    assert (np.abs(r.outputs[5] - want) <= bound).all(), "checked moe_combine: out is off the weighted sum"


@pytest.mark.points(1)
def test_each_routing_entry_read_once(lesson):
    """Counted in the emulator's race build. moe_count reads each topk_idx entry from global memory once (at
    most twice) and makes at most one global atomic per (block, expert): the private histogram in shared
    memory takes the per-slot traffic. moe_permute reads each entry at most twice: a slot's rank comes from
    the block's own counts, not from re-reading the routing of the slots before it (O(S^2) loads); and the rows
    are written coalesced (a warp per row, as the given copy does), not a row per thread."""
    mod = _load(lesson, backend="cpu", build="race")
    rng = np.random.default_rng(1407)
    t, k, e, h, block = 250, 6, 13, 40, 128   # S = 1500, G = 12: G * E = 156 is far below the ~1350 valid slots
    idx = _routing(rng, t, k, e, hot=0.5, empty=0.3)
    ref = _ref_layout(idx, e, block)
    g = ref["G"]
    kernel = mod.moe_count
    bc = _poisoned((g, e), np.int32)
    kernel[g, block, e * 4](idx, idx.size, e, bc)
    _expect_equal(bc, ref["block_counts"], "moe_count (race build): block_counts")
    stats = kernel.stats
    assert stats["gmem_atomics"] <= g * e, (
        f"moe_count: {stats['gmem_atomics']} global atomics for {ref['N']} valid slots; count in a private "
        f"histogram in shared memory and write each block's row (at most {g * e} global atomics)")
    c = cuda.gmem_counters(stats, "topk_idx")
    assert c["bytes_read"] == idx.nbytes and c["max_reads_per_byte"] <= 2, (
        f"moe_count: topk_idx {c['bytes_read']} of {idx.nbytes} bytes read, some byte {c['max_reads_per_byte']} "
        f"times: read each slot's expert once")

    kernel = mod.moe_permute
    x = rng.standard_normal((t, h)).astype(np.float32)
    args = _permute_args(x, idx, ref["block_offsets"], ref["N"])
    kernel[_permute_launch(idx, e, block)](*args)
    _check_permute(x, idx, ref, args[7], args[8], args[9], "moe_permute (race build)")
    c = cuda.gmem_counters(kernel.stats, "topk_idx")
    assert c["max_reads_per_byte"] <= 2, (
        f"moe_permute: some topk_idx entry was read {c['max_reads_per_byte']} times ({c['loads']} loads for "
        f"{idx.size} slots): rank a slot with the block's per-warp counts instead of re-reading earlier slots")
    c = cuda.gmem_counters(kernel.stats, "permuted")
    per_row = -(-h * 4 // 32) + 2   # a row of 160 B written by one warp: 5 sectors, 6 when it straddles one more
    assert c["store_sectors"] <= ref["N"] * per_row, (
        f"moe_permute: {c['store_sectors']} 32-byte sectors written for {ref['N']} rows of {h * 4} B (a warp per row "
        f"needs about {ref['N'] * (per_row - 1)}): the lanes of one store must write neighbouring elements of one "
        f"row, not one element of 32 different rows")
