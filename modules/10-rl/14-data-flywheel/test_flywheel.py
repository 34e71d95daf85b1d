"""Tests for rl-14. Fast tree / PER / mixed-replay / ingest tests first, then the RLlib and torchrl oracles (their imports
cost seconds), the Ray drill (a robot killed for real) last: every mutant should die before the slow part.

Oracles: a brute-force float64 cumulative sum (numpy searchsorted) for the prefix-sum search; RLlib's pure-Python
SumSegmentTree / MinSegmentTree (ray/rllib/execution/segment_tree.py, loaded from the installed file: RLlib's package
needs dm-tree); torchrl 0.14.1's PrioritizedSampler (its C++ trees do not load against torch 2.13, so a brute-force
array stands in for them and torchrl's own alpha / eps / max-priority / IS-weight code runs on top); the PER formulas
in float64; the robot's outbox on disk for the ledger of what was produced.
"""

from __future__ import annotations

import copy
import importlib.util
import time
from pathlib import Path

import numpy as np
import pytest

from pytest_hpccourse.runtimes.ray.drills import ray_cluster, remote  # noqa: F401 - ray_cluster is a fixture

CAPACITIES = [1, 2, 5, 7, 8, 13, 16, 100]


def brute_find(leaves: np.ndarray, u: float) -> int:
    """The leaf i with S(i-1) <= u < S(i): the first inclusive prefix sum strictly above u."""
    return int(np.searchsorted(np.cumsum(leaves), u, side="right"))


def fill(fw, leaves):
    tree = fw.SumTree(len(leaves))
    for i, v in enumerate(leaves):
        tree.update(i, float(v))
    return tree


class CountingNodes:
    """Stands in for tree.nodes: integer indexing only, every element access counted."""

    def __init__(self, arr):
        self.arr, self.reads, self.writes = arr, 0, 0

    def _index(self, i):
        if not isinstance(i, int | np.integer):
            raise TypeError(f"nodes may only be indexed by an integer, got {type(i).__name__}")
        return int(i)

    def __getitem__(self, i):
        self.reads += 1
        return self.arr[self._index(i)]

    def __setitem__(self, i, v):
        self.writes += 1
        self.arr[self._index(i)] = v

    def __len__(self):
        return len(self.arr)


# ------------------------------------------------------------------------------------------------ trees
def test_find_matches_the_cumulative_sum_exactly_on_integer_priorities(lesson):
    """Integers 0..4 (zeros included): every partial sum is exact in float64, so boundaries are tested exactly."""
    fw = lesson.load("flywheel.py")
    rng = np.random.default_rng(0)
    for cap in CAPACITIES:
        leaves = rng.integers(0, 5, size=cap).astype(np.float64)
        leaves[rng.random(cap) < 0.3] = 0.0
        leaves[-1] = max(leaves[-1], 1.0)
        tree = fill(fw, leaves)
        for _round in range(3):
            total = leaves.sum()
            assert tree.total() == total
            # every boundary S(i), every midpoint, 0, and the largest float below the total
            cs = np.cumsum(leaves)
            us = np.unique(np.concatenate([[0.0], cs[cs < total], cs[cs < total] + 0.5, [np.nextafter(total, 0)]]))
            for u in us:
                got = tree.find(float(u))
                assert got == brute_find(leaves, u), f"capacity {cap}, leaves {leaves.tolist()}, u={u}"
                assert leaves[got] > 0, "find returned a zero-priority leaf"
            for i in rng.choice(cap, size=min(cap, 3), replace=False):   # updates, zeros included
                leaves[i] = float(rng.integers(0, 4))
                tree.update(int(i), leaves[i])
            if leaves.sum() == 0:
                leaves[0] = 2.0
                tree.update(0, 2.0)
            assert [tree.get(i) for i in range(cap)] == leaves.tolist()


def test_every_parent_is_recomputed_from_its_children(lesson):
    """Bitwise: nodes[j] == nodes[2j] + nodes[2j+1]; a huge priority that comes back down leaves no residue."""
    fw = lesson.load("flywheel.py")
    rng = np.random.default_rng(1)
    for cap in (5, 13, 100):
        tree = fill(fw, rng.random(cap))
        tree.update(cap // 2, 1e18)
        tree.update(cap // 2, 0.25)
        for _ in range(200):
            tree.update(int(rng.integers(cap)), float(rng.exponential()))
        n = tree.nodes
        for j in range(1, tree.base):
            assert n[j] == n[2 * j] + n[2 * j + 1], f"capacity {cap}: node {j} is not the sum of its children"
        assert np.all(n[tree.base + cap:] == 0.0), "a padding leaf was written"
        leaves = n[tree.base:tree.base + cap]
        assert tree.total() == pytest.approx(leaves.sum(), rel=1e-12)
    mt = fw.MinTree(7)
    vals = rng.random(7) + 0.5
    for i, v in enumerate(vals):
        mt.update(i, float(v))
    mt.update(3, 0.01)
    mt.update(3, 5.0)
    assert mt.reduce() == np.delete(vals, 3).min()
    assert np.isinf(mt.nodes[mt.base + 7]) and mt.nodes[1] == min(mt.nodes[2], mt.nodes[3])


def test_update_and_find_touch_only_log_n_nodes(lesson):
    fw = lesson.load("flywheel.py")
    rng = np.random.default_rng(2)
    cap = 1000                                   # base 1024, depth 10
    leaves = rng.integers(1, 9, size=cap).astype(np.float64)
    tree = fill(fw, leaves)
    counter = CountingNodes(tree.nodes)
    tree.nodes = counter
    for i in (0, 517, 999):
        counter.reads = counter.writes = 0
        tree.update(i, 3.0)
        leaves[i] = 3.0
        assert counter.reads + counter.writes <= 44, f"update touched {counter.reads + counter.writes} nodes"
    for u in (0.0, 1234.5, leaves.sum() - 0.5):
        counter.reads = counter.writes = 0
        assert tree.find(u) == brute_find(leaves, u)
        assert counter.writes == 0, "find must not write"
        assert counter.reads <= 33, f"find read {counter.reads} nodes: a scan, not a descent"


def test_find_rejects_u_outside_zero_to_total(lesson):
    fw = lesson.load("flywheel.py")
    tree = fill(fw, [1.0, 0.0, 2.0, 0.0, 0.0])
    for u in (3.0, 3.5, -1e-12, float("nan")):                 # NaN lies in no interval
        with pytest.raises(ValueError):
            tree.find(u)
    assert tree.find(2.999) == 2
    empty = fw.SumTree(3)
    with pytest.raises(ValueError):
        empty.find(0.0)


# --------------------------------------------------------------------------------------- prioritized replay
def per_reference(raw, alpha, eps, beta, idx):
    """float64 PER: P(i) = (|d|+eps)^a / sum, w = (N P)^-b / max over the N stored."""
    p = (np.abs(raw) + eps) ** alpha
    prob = p / p.sum()
    w_all = (len(raw) * prob) ** -beta
    return prob, w_all[idx] / w_all.max()


def test_priorities_weights_and_new_item_priority(lesson):
    fw = lesson.load("flywheel.py")
    alpha, beta, eps = 0.7, 0.5, 1e-3
    buf = fw.PrioritizedReplay(9, alpha, beta, eps)
    for k in range(6):
        assert buf.add(("item", k)) == k
    assert len(buf) == 6
    # new items: raw priority max(1, |delta| seen) = 1 before any update
    assert buf.sums.get(3) == pytest.approx((1.0 + eps) ** alpha, rel=1e-15)
    td = np.array([0.3, -2.5, 0.0, 0.01, -0.2, 0.7])
    td_before = td.copy()
    buf.update_priorities(np.arange(6), td)
    np.testing.assert_array_equal(td, td_before)
    raw = td.copy()
    idx = np.array([5, 0, 2, 2, 1])
    prob, w = per_reference(raw, alpha, eps, beta, idx)
    np.testing.assert_allclose(buf.weights(idx), w, rtol=1e-12)
    np.testing.assert_allclose(buf.weights(idx), w, rtol=1e-12)              # twice: no hidden state
    np.testing.assert_allclose([buf.sums.get(i) / buf.sums.total() for i in range(6)], prob, rtol=1e-12)
    # a new item now enters at the largest |delta| seen (2.5), and the ring overwrites the oldest when full
    for k in range(6, 11):
        buf.add(("item", k))
    assert len(buf) == 9 and buf.items[0] == ("item", 9) and buf.items[1] == ("item", 10)
    assert buf.sums.get(0) == pytest.approx((2.5 + eps) ** alpha, rel=1e-15)
    raw = np.array([2.5, 2.5, 0.0, 0.01, -0.2, 0.7, 2.5, 2.5, 2.5])
    _, w = per_reference(raw, alpha, eps, beta, np.arange(9))
    np.testing.assert_allclose(buf.weights(np.arange(9)), w, rtol=1e-12)
    # a slot updated twice in one call keeps its last delta; smaller deltas never lower max_raw
    buf.update_priorities(np.array([4, 4]), np.array([9.0, 0.5]))
    assert buf.sums.get(4) == pytest.approx((0.5 + eps) ** alpha, rel=1e-15)
    buf.update_priorities(np.array([7]), np.array([0.1]))
    assert buf.max_raw == 9.0


def test_sample_uses_the_stated_draws(lesson):
    fw = lesson.load("flywheel.py")
    alpha, beta, eps = 0.6, 0.4, 1e-6
    buf = fw.PrioritizedReplay(13, alpha, beta, eps)
    rng = np.random.default_rng(4)
    raw = rng.normal(size=11) * np.array([1, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1])
    for k in range(11):
        buf.add(k)
    buf.update_priorities(np.arange(11), raw)
    idx, w = buf.sample(57, np.random.default_rng(5))
    assert idx.dtype == np.int64 and w.dtype == np.float64 and idx.shape == w.shape == (57,)
    p = (np.abs(raw) + eps) ** alpha
    u = np.random.default_rng(5).random(57) * p.sum()
    np.testing.assert_array_equal(idx, [brute_find(p, x) for x in u])
    np.testing.assert_allclose(w, per_reference(raw, alpha, eps, beta, idx)[1], rtol=1e-12)
    i0, w0 = buf.sample(0, np.random.default_rng(5))
    assert i0.shape == w0.shape == (0,)
    with pytest.raises(ValueError):
        fw.PrioritizedReplay(4).sample(1, np.random.default_rng(0))


def test_sampling_distribution_is_p_alpha_normalised(lesson):
    """Chi-square over 40000 draws against P(i) computed in float64; 9 cells, 8 dof: 45 is p < 1e-6."""
    fw = lesson.load("flywheel.py")
    alpha, eps = 0.6, 1e-2
    raw = np.array([0.0, 3.0, 0.5, 1.2, 0.05, 2.0, 0.3, 0.8, 4.0])
    buf = fw.PrioritizedReplay(9, alpha, 0.4, eps)
    for k in range(9):
        buf.add(k)
    buf.update_priorities(np.arange(9), raw)
    idx, _ = buf.sample(40000, np.random.default_rng(6))
    counts = np.bincount(idx, minlength=9)
    prob = (raw + eps) ** alpha / ((raw + eps) ** alpha).sum()
    chi2 = float((((counts - 40000 * prob) ** 2) / (40000 * prob)).sum())
    assert chi2 < 45.0, f"chi-square {chi2:.1f}: counts {counts.tolist()} vs expected {(40000 * prob).round(0).tolist()}"


# -------------------------------------------------------------------------------------------- mixed replay
def make_pools(fw, n_sim, n_real, alpha=0.6, beta=0.4, eps=1e-3, seed=8):
    rng = np.random.default_rng(seed)
    sim, real = fw.PrioritizedReplay(64, alpha, beta, eps), fw.PrioritizedReplay(32, alpha, beta, eps)
    for k in range(n_sim):
        sim.add(("sim", k))
    for k in range(n_real):
        real.add(("real", k))
    if n_sim:
        sim.update_priorities(np.arange(n_sim), rng.normal(size=n_sim))
    if n_real:
        real.update_priorities(np.arange(n_real), rng.normal(size=n_real) * 3)
    return sim, real


def test_split_rounds_half_up(lesson):
    fw = lesson.load("flywheel.py")
    sim, real = make_pools(fw, 5, 5)
    cases = {(0.25, 10): 3, (0.25, 6): 2, (0.125, 4): 1, (0.375, 4): 2, (0.25, 3): 1, (0.0, 7): 0, (1.0, 7): 7,
             (0.5, 1): 1, (0.3, 10): 3, (0.25, 0): 0, (0.625, 4): 3}
    for (frac, b), n_real in cases.items():
        assert fw.MixedReplay(sim, real, frac).split(b) == (n_real, b - n_real), f"fraction {frac}, B = {b}"


def test_mixed_batches_hold_the_ratio_and_the_stated_draws(lesson):
    fw = lesson.load("flywheel.py")
    sim, real = make_pools(fw, 40, 17)
    mix = fw.MixedReplay(sim, real, 0.25)
    rng, check = np.random.default_rng(9), np.random.default_rng(9)
    for _ in range(5):
        b = mix.sample(10, rng)
        assert b.pools.dtype == np.int8, f"pools must be int8, got {b.pools.dtype}"
        assert b.indices.dtype == np.int64 and b.weights.dtype == np.float64
        np.testing.assert_array_equal(b.pools, [1, 1, 1] + [0] * 7)
        ri, rw = real.sample(3, check)
        si, sw = sim.sample(7, check)
        np.testing.assert_array_equal(b.indices, np.concatenate([ri, si]))
        np.testing.assert_allclose(b.weights, np.concatenate([rw, sw]), rtol=1e-15)
        assert b.items == [real.items[i] for i in ri] + [sim.items[i] for i in si]
    # all-sim with an empty real pool is fine; a real row from an empty pool is not
    sim2, real2 = make_pools(fw, 12, 0)
    b = fw.MixedReplay(sim2, real2, 0.0).sample(5, np.random.default_rng(0))
    assert list(b.pools) == [0] * 5
    with pytest.raises(ValueError):
        fw.MixedReplay(sim2, real2, 0.2).sample(5, np.random.default_rng(0))


def test_priorities_change_only_on_the_sampled_rows_of_each_pool(lesson):
    fw = lesson.load("flywheel.py")
    sim, real = make_pools(fw, 40, 17)
    mix = fw.MixedReplay(sim, real, 0.375)
    b = mix.sample(8, np.random.default_rng(10))
    before_sim, before_real = sim.sums.nodes.copy(), real.sums.nodes.copy()
    batch_copy = copy.deepcopy(b)
    td = np.linspace(-3.0, 4.0, 8)
    mix.update_priorities(b, td)
    np.testing.assert_array_equal(b.indices, batch_copy.indices)
    for pool, before, rows in ((sim, before_sim, b.pools == 0), (real, before_real, b.pools == 1)):
        leaves_now = pool.sums.nodes[pool.sums.base:pool.sums.base + len(pool)]
        leaves_then = before[pool.sums.base:pool.sums.base + len(pool)]
        changed = set(np.flatnonzero(leaves_now != leaves_then).tolist())
        assert changed == set(b.indices[rows].tolist()), "priorities changed outside the sampled rows"
        last = dict(zip(b.indices[rows].tolist(), td[rows].tolist()))   # a repeated slot keeps its last delta
        for i, d in last.items():
            assert pool.sums.get(i) == pytest.approx((abs(d) + pool.eps) ** pool.alpha, rel=1e-14)


def test_each_pool_keeps_its_own_max_raw(lesson):
    """Real rows carry |delta| = 50, sim rows |delta| <= 4: the sim pool's max_raw (and so the priority its next new
    transition enters at) must come from the sim rows alone."""
    fw = lesson.load("flywheel.py")
    alpha, beta, eps = 0.6, 0.4, 1e-3
    sim, real = fw.PrioritizedReplay(32, alpha, beta, eps), fw.PrioritizedReplay(16, alpha, beta, eps)
    for k in range(20):
        sim.add(("sim", k))
    for k in range(10):
        real.add(("real", k))
    mix = fw.MixedReplay(sim, real, 0.5)
    rng = np.random.default_rng(12)
    for sim_scale in (0.5, 4.0):                                # first round: every sim |delta| < 1
        b = mix.sample(8, rng)
        is_real = b.pools == 1
        td = np.where(is_real, 50.0 * np.sign(rng.normal(size=8)), rng.uniform(-sim_scale, sim_scale, size=8))
        mix.update_priorities(b, td)
        expect_sim = max(1.0, float(np.abs(td[~is_real]).max()))
        assert sim.max_raw == expect_sim, f"sim max_raw {sim.max_raw}, expected {expect_sim}: real deltas leaked"
        assert real.max_raw == 50.0
        slot = sim.add(("sim", "new"))
        assert sim.sums.get(slot) == pytest.approx((sim.max_raw + eps) ** alpha, rel=1e-15)
        assert sim.sums.get(slot) == pytest.approx((expect_sim + eps) ** alpha, rel=1e-15)
        slot = real.add(("real", "new"))
        assert real.sums.get(slot) == pytest.approx((50.0 + eps) ** alpha, rel=1e-15)


# -------------------------------------------------------------------------------- ingest and robot, in-process
def fake(robot, seqs):
    return [{"robot": robot, "seq": s, "episode": 0, "t": s, "obs": [float(s)], "action": 0, "reward": 0.0,
             "done": False} for s in seqs]


def test_ingest_commits_in_order_exactly_once(lesson):
    fw = lesson.load("flywheel.py")
    ing = fw.Ingest(fw.PrioritizedReplay(64))
    assert ing.receive(0, fake(0, range(4))) == 4
    assert ing.receive(1, fake(1, range(2))) == 2
    with pytest.raises(ValueError):
        ing.receive(1, fake(0, [0]))                          # foreign robot, seq below robot 1's ack: not a duplicate
    assert ing.duplicates == 0 and ing.ack(1) == 2, "the robot check comes before the seq check"
    assert ing.receive(0, fake(0, range(2, 7))) == 7          # overlaps the ack: 2, 3 are duplicates
    assert ing.duplicates == 2
    assert ing.receive(0, []) == 7
    with pytest.raises(ValueError):
        ing.receive(0, fake(0, [7, 8, 10, 11]))              # a gap after 8
    assert ing.ack(0) == 9, "what came before the gap stays committed"
    with pytest.raises(ValueError):
        ing.receive(1, fake(0, [2]))                          # robot 0's transition on robot 1's stream
    assert ing.ack(1) == 2
    with pytest.raises(ValueError):                           # a foreign transition mid-chunk: what came before stays
        ing.receive(1, fake(1, [1, 2]) + fake(0, [3]) + fake(1, [3]))
    assert ing.ack(1) == 3 and ing.duplicates == 3 and ing.ack(5) == 0
    assert ing.committed == [(0, s) for s in range(4)] + [(1, 0), (1, 1)] + [(0, s) for s in range(4, 9)] + [(1, 2)]
    assert [(t["robot"], t["seq"]) for t in ing.real.items[:len(ing.real)]] == ing.committed


def test_robot_restart_continues_from_its_outbox(lesson, tmp_path):
    fw = lesson.load("flywheel.py")
    box = tmp_path / "robot3.jsonl"
    r = fw.Robot(3, str(box), episode_len=4)
    first = r.produce(6)
    assert [t["seq"] for t in first] == list(range(6))
    assert [(t["episode"], t["t"]) for t in first] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]
    assert fw.read_outbox(box) == first
    with open(box, "ab") as f:                                # the process died inside a write
        f.write(b'{"robot": 3, "seq": 6, "epi')
    again = fw.Robot(3, str(box), episode_len=4)              # a new incarnation, nothing in memory
    assert again.unacked(4) == first[4:]
    assert again.unacked(6) == [] and again.unacked(0) == first
    nxt = again.produce(2)
    assert [(t["seq"], t["episode"], t["t"]) for t in nxt] == [(6, 2, 0), (7, 2, 1)], \
        "a new incarnation continues the seqs on disk and starts a new episode at t = 0"
    assert fw.read_outbox(box) == first + nxt


# ------------------------------------------------------- field oracles (RLlib, torchrl): slower imports, after the fast tests
@pytest.mark.requires("ray")
def test_trees_agree_with_rllib_segment_trees(lesson):
    """RLlib's SumSegmentTree.find_prefixsum_idx descends with `left > u` (the same half-open intervals); it needs a
    power-of-two capacity, so ours is compared with RLlib's of size `base` whose extra leaves stay 0."""
    import ray

    src = Path(ray.__file__).parent / "rllib" / "execution" / "segment_tree.py"
    spec = importlib.util.spec_from_file_location("rllib_segment_tree", src)
    rl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rl)
    fw = lesson.load("flywheel.py")
    rng = np.random.default_rng(3)
    for cap in (3, 11, 64, 77):
        ours, mins = fw.SumTree(cap), fw.MinTree(cap)
        theirs, their_min = rl.SumSegmentTree(ours.base), rl.MinSegmentTree(ours.base)
        for _ in range(4 * cap):
            i, v = int(rng.integers(cap)), float(rng.exponential() * (rng.random() < 0.8))
            ours.update(i, v)
            mins.update(i, v)
            theirs[i] = v
            their_min[i] = v
        assert ours.total() == theirs.sum()
        assert mins.reduce() == their_min.min(0, cap)
        for u in rng.random(200) * ours.total():
            assert ours.find(float(u)) == theirs.find_prefixsum_idx(float(u))


@pytest.mark.requires("torchrl")
def test_matches_torchrl_prioritized_sampler(lesson, monkeypatch):
    """torchrl's alpha, eps, default priority (max raw priority, 1 at first) and weight = (p_i / p_min)^-beta."""
    import torch
    import torchrl.data.replay_buffers.samplers.prioritized as trp
    from torchrl.data.replay_buffers import ListStorage

    class Flat:   # brute-force stand-in for torchrl's C++ segment trees (their extension does not load here)
        def __init__(self, n, op):
            self.op, self.v = op, np.full(n, 0.0 if op == "sum" else np.inf)

        def query(self, a, b):
            return float(self.v[a:b].sum() if self.op == "sum" else self.v[a:b].min())

        def scan_lower_bound(self, mass):
            return np.searchsorted(np.cumsum(self.v), np.asarray(mass, dtype=np.float64), side="left")

        def __getitem__(self, i):
            return self.v[np.asarray(i)]

        def __setitem__(self, i, x):
            self.v[np.asarray(i)] = np.asarray(x, dtype=np.float64)

    for name in ("SumSegmentTreeFp32", "SumSegmentTreeFp64"):
        monkeypatch.setattr(trp, name, lambda n: Flat(n, "sum"))
    for name in ("MinSegmentTreeFp32", "MinSegmentTreeFp64"):
        monkeypatch.setattr(trp, name, lambda n: Flat(n, "min"))
    fw = lesson.load("flywheel.py")
    alpha, beta, eps, cap = 0.7, 0.45, 1e-3, 10
    theirs = trp.PrioritizedSampler(cap, alpha=alpha, beta=beta, eps=eps, dtype=torch.float64)
    theirs._rng = torch.Generator().manual_seed(0)
    ours = fw.PrioritizedReplay(cap, alpha, beta, eps)
    storage = ListStorage(cap)
    rng = np.random.default_rng(7)
    for step in range(4):
        n_new = 3 if step < 3 else 1
        for _ in range(n_new):   # add = torchrl's mark_update: update_priority(slot, default_priority), here in float64
            slot = ours.add(step)
            storage.set([slot], [step])
            theirs.update_priority(torch.tensor([slot]), torch.as_tensor(theirs.default_priority, dtype=torch.float64))
        td = rng.normal(size=len(ours)) * (0.5 + step)
        sel = rng.choice(len(ours), size=len(ours) // 2 + 1, replace=False)
        ours.update_priorities(sel, td[sel])
        theirs.update_priority(torch.as_tensor(sel), torch.as_tensor(np.abs(td[sel])))
        np.testing.assert_allclose([ours.sums.get(i) for i in range(len(ours))], theirs._sum_tree.v[:len(ours)],
                                   rtol=1e-13, err_msg=f"step {step}: priorities differ from torchrl's tree")
        index, info = theirs.sample(storage, 16)
        np.testing.assert_allclose(ours.weights(index.numpy()), info["priority_weight"].numpy(), rtol=1e-12,
                                   err_msg=f"step {step}: IS weights differ from torchrl's")


# --------------------------------------------------------------------------------------- the Ray drill
def wait_lines(path: Path, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_bytes().count(b"\n") >= n):
        assert time.monotonic() < deadline, f"the robot wrote fewer than {n} transitions in {timeout} s"
        time.sleep(0.01)


@pytest.mark.requires("ray")
@pytest.mark.points(2)
@pytest.mark.timeout(240)
def test_robot_killed_mid_episode_loses_and_duplicates_nothing(lesson, ray_cluster, tmp_path):  # noqa: F811
    import ray

    fw = lesson.load("flywheel.py")
    real = fw.PrioritizedReplay(128, 0.6, 0.4, 1e-3)
    ing = fw.Ingest(real)
    boxes = [tmp_path / "robot0.jsonl", tmp_path / "robot1.jsonl"]
    Robot = remote(fw.Robot, num_cpus=0, max_restarts=0)
    robots = [Robot.remote(k, str(boxes[k]), 6) for k in range(2)]
    assert [fw.recover(robots[k], ing, k) for k in range(2)] == [0, 0]
    for _ in range(3):
        fw.pump(robots[0], ing, 0, 5)
        fw.pump(robots[1], ing, 1, 4)
    assert ing.ack(0) == 15                                   # robot 0 is mid-episode (episode 2, t = 3)

    ref = robots[0].produce.remote(60, 0.05)                  # a slow chunk the learner never receives
    wait_lines(boxes[0], 15 + 4)
    ray.kill(robots[0], no_restart=True)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(ref, timeout=60)
    time.sleep(0.3)
    on_disk = fw.read_outbox(boxes[0])
    assert len(on_disk) == len(fw.read_outbox(boxes[0])), "the killed robot is still writing"
    durable = len(on_disk)
    assert 19 <= durable < 75, f"the kill did not land mid-chunk ({durable} transitions on disk)"
    fw.pump(robots[1], ing, 1, 4)                             # the other robot keeps streaming

    ing.receive(0, on_disk[5:10])                             # a retried old chunk: all duplicates
    assert ing.ack(0) == 15
    robots[0] = Robot.remote(0, str(boxes[0]), 6)             # the new incarnation on the same disk
    assert fw.recover(robots[0], ing, 0) == durable - 15, "resend exactly the durable, uncommitted transitions"
    fw.pump(robots[0], ing, 0, 5)
    fw.pump(robots[1], ing, 1, 4)

    mine = [c for c in ing.committed if c[0] == 0]
    assert mine == [(0, s) for s in range(durable + 5)], "robot 0: a committed transition lost or duplicated"
    assert [c for c in ing.committed if c[0] == 1] == [(1, s) for s in range(20)]
    assert ing.duplicates == 5
    ledger = fw.read_outbox(boxes[0])
    stored = [t for t in real.items[:len(real)] if t["robot"] == 0]
    assert stored == ledger, "the committed transitions differ from what the robot recorded"
    restart = ledger[durable]
    assert (restart["seq"], restart["episode"], restart["t"]) == (durable, ledger[durable - 1]["episode"] + 1, 0)

    # the learner samples the flywheel's mix and updates priorities of the sampled rows only
    sim = fw.PrioritizedReplay(64, 0.6, 0.4, 1e-3)
    for k in range(50):
        sim.add({"robot": -1, "seq": k})
    mix = fw.MixedReplay(sim, real, 0.25)
    rng = np.random.default_rng(11)
    committed = set(ing.committed)
    for _ in range(20):
        b = mix.sample(10, rng)
        assert int((b.pools == 1).sum()) == 3
        assert all((t["robot"], t["seq"]) in committed for t, p in zip(b.items, b.pools) if p == 1)
        before = real.sums.nodes.copy()
        mix.update_priorities(b, rng.normal(size=10) + 5.0)
        changed = set(np.flatnonzero(real.sums.nodes[real.sums.base:] != before[real.sums.base:]).tolist())
        assert changed <= set(b.indices[b.pools == 1].tolist())
    print(f"robot 0: {durable - 15} durable uncommitted transitions resent after the kill")
    ray.kill(robots[0], no_restart=True)
    ray.kill(robots[1], no_restart=True)
