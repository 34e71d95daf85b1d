"""Tests for runtime-08: ring / double-binary-tree all-reduce schedules and NCCL's algorithm choice.

Oracles, all written here independently of the lesson file:
* two interpreters of a schedule: numpy float64 on integer-valued data (every summation order is
  exact) and a contribution counter (which ranks' data each chunk holds, size-independent);
* a Ray drill: the same schedules run on 2-4 gloo ranks with point-to-point isend/irecv;
* NCCL v2.27.3-1 `src/graph/trees.cc` lines 31-109 (ncclGetBtree / ncclGetDtree), transcribed below
  statement by statement;
* NCCL v2.27.3-1 `src/graph/tuning.cc` lines 132-189, 228-360, 546-571 and `src/enqueue.cc`
  lines 1791-1810 (topoGetAlgoInfo), transcribed below with NCCL's array indices.
"""

import math
import random

import numpy as np
import pytest

from pytest_hpccourse.runtimes.ray.drills import run_ranks


@pytest.fixture
def na(lesson):
    return lesson.load("nccl_algos.py")


def bounds_of(n, nchunks):  # independent of the lesson file
    base, extra = divmod(n, nchunks)
    starts = [i * base + min(i, extra) for i in range(nchunks + 1)]
    return list(zip(starts, starts[1:]))


def validate(steps, p, nchunks):
    """Plain tuples (src, dst, chunk, op); every field in range."""
    out = []
    for step in steps:
        row = []
        for t in step:
            src, dst, chunk, op = tuple(t)
            assert all(isinstance(v, int) for v in (src, dst, chunk)), f"non-int field in {t!r}"
            assert 0 <= src < p and 0 <= dst < p and src != dst, f"bad ranks in {t!r} (p={p})"
            assert 0 <= chunk < nchunks, f"chunk out of range in {t!r} ({nchunks} chunks)"
            assert op in ("reduce", "copy"), f"unknown op in {t!r}"
            row.append((src, dst, chunk, op))
        out.append(row)
    return out


def run_numpy(steps, inputs, nchunks):
    """Execute a schedule: per step, read all sources first, then reduce/copy into destinations."""
    bufs = [x.copy() for x in inputs]
    b = bounds_of(len(inputs[0]), nchunks)
    for step in steps:
        payload = [bufs[s][slice(*b[c])].copy() for s, _, c, _ in step]
        for (_, d, c, op), data in zip(step, payload):
            if op == "reduce":
                bufs[d][slice(*b[c])] += data
            else:
                bufs[d][slice(*b[c])] = data
    return bufs


def run_counts(steps, p, nchunks):
    """counts[r, c, q] = how many times rank q's data is summed into chunk c on rank r."""
    counts = np.zeros((p, nchunks, p), dtype=np.int64)
    for r in range(p):
        counts[r, :, r] = 1
    for step in steps:
        payload = [counts[s, c].copy() for s, _, c, _ in step]
        for (_, d, c, op), data in zip(step, payload):
            counts[d, c] = counts[d, c] + data if op == "reduce" else data
    return counts


def check_reduces(steps, p, nchunks, sizes, seed):
    counts = run_counts(steps, p, nchunks)
    bad = np.argwhere(counts != 1)
    if len(bad):
        r, c, q = bad[0]
        raise AssertionError(f"p={p}: chunk {c} on rank {r} holds rank {q}'s data {counts[r, c, q]} times (want 1)")
    rng = np.random.default_rng(seed)
    for n in sizes:
        inputs = [rng.integers(-1000, 1000, n).astype(np.float64) for _ in range(p)]
        want = np.sum(inputs, axis=0)
        for r, got in enumerate(run_numpy(steps, inputs, nchunks)):
            assert np.array_equal(got, want), f"p={p}, n={n}: rank {r} does not hold the sum"


SIZES = [1, 2, 7, 13, 64, 1001]  # below p, not divisible by p or 2, and larger
RANKS = range(1, 18)


# ---------------------------------------------------------------------------------------------
# Ring
# ---------------------------------------------------------------------------------------------
@pytest.mark.points(2)
def test_ring_schedule_reduces_for_every_rank_count(na):
    for p in RANKS:
        steps = validate(na.ring_allreduce(p), p, p)
        check_reduces(steps, p, p, SIZES, seed=p)


def test_ring_schedule_is_a_ring_of_2p_minus_2_steps(na):
    for p in RANKS:
        steps = validate(na.ring_allreduce(p), p, p)
        assert len(steps) == 2 * (p - 1), f"p={p}: {len(steps)} steps, a ring all-reduce takes 2(p-1)"
        directions = set()
        for i, step in enumerate(steps):
            assert sorted(s for s, *_ in step) == list(range(p)), f"p={p}, step {i}: every rank sends one chunk"
            assert sorted(d for _, d, *_ in step) == list(range(p)), f"p={p}, step {i}: every rank receives one chunk"
            directions |= {(d - s) % p for s, d, *_ in step}
        assert p <= 2 or directions in ({1}, {p - 1}), f"p={p}: messages must go to one ring neighbour only"
        for n in [p, 3 * p, 64 * p, 1001, 7]:  # per-rank bytes (float64): 2(p-1)/p * S
            sent = [0] * p
            b = bounds_of(n, p)
            for step in steps:
                for s, _, c, _ in step:
                    sent[s] += 8 * (b[c][1] - b[c][0])
            assert sum(sent) == 2 * (p - 1) * 8 * n, f"p={p}, n={n}: every chunk travels p-1 hops per phase"
            for r in range(p):
                if n % p == 0:
                    assert sent[r] == 2 * (p - 1) * 8 * n // p, f"p={p}, n={n}: rank {r} sends {sent[r]} B"
                else:
                    assert abs(sent[r] - 2 * (p - 1) / p * 8 * n) <= 2 * (p - 1) * 8, f"p={p}, n={n}: rank {r}"


# ---------------------------------------------------------------------------------------------
# NCCL's trees: src/graph/trees.cc at v2.27.3-1, transcribed statement by statement
# ---------------------------------------------------------------------------------------------
def nccl_get_btree(nranks, rank):  # trees.cc lines 31-65
    bit = 1
    while bit < nranks:
        if bit & rank:
            break
        bit <<= 1
    if rank == 0:
        return -1, -1, (bit >> 1 if nranks > 1 else -1)
    up = (rank ^ bit) | (bit << 1)
    if up >= nranks:
        up = rank ^ bit
    lowbit = bit >> 1
    down0 = -1 if lowbit == 0 else rank - lowbit
    down1 = -1 if lowbit == 0 else rank + lowbit
    while down1 >= nranks:
        down1 = -1 if lowbit == 0 else rank + lowbit
        lowbit >>= 1
    return up, down0, down1


def nccl_get_dtree(nranks, rank):  # trees.cc lines 88-109
    t0 = nccl_get_btree(nranks, rank)
    if nranks % 2 == 1:
        u, d0, d1 = nccl_get_btree(nranks, (rank - 1 + nranks) % nranks)
        t1 = tuple(-1 if v == -1 else (v + 1) % nranks for v in (u, d0, d1))
    else:
        u, d0, d1 = nccl_get_btree(nranks, nranks - 1 - rank)
        t1 = tuple(-1 if v == -1 else nranks - 1 - v for v in (u, d0, d1))
    return t0, t1


def check_oracle_against_the_pictures():
    """The transcription itself against the pictures in trees.cc (lines 23-29 and 70-86)."""
    assert [nccl_get_btree(14, r)[0] for r in range(14)] == [-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 12]
    assert nccl_get_btree(14, 12)[1:] == (10, 13)
    assert nccl_get_dtree(12, 11)[1] == (-1, -1, 3) and nccl_get_dtree(12, 3)[1] == (11, 7, 1)
    assert nccl_get_dtree(13, 1)[1] == (-1, -1, 9) and nccl_get_dtree(13, 0)[1] == (9, 11, -1)


def test_btree_equals_nccl_for_1_to_64_ranks(na):
    check_oracle_against_the_pictures()
    for n in range(1, 65):
        for r in range(n):
            assert tuple(na.btree(n, r)) == nccl_get_btree(n, r), f"nranks={n}, rank={r}"


@pytest.mark.points(2)
def test_dtree_equals_nccl_for_1_to_64_ranks(na):
    for n in range(1, 65):
        for r in range(n):
            got = tuple(tuple(t) for t in na.dtree(n, r))
            want = nccl_get_dtree(n, r)
            assert got[0] == want[0], f"nranks={n}, rank={r}: tree 0 (parent, down0, down1)"
            assert got[1] == want[1], f"nranks={n}, rank={r}: tree 1 must be the mirror (even) / shift (odd) of tree 0"


@pytest.mark.points(2)
def test_tree_schedule_reduces_for_every_rank_count(na):
    for p in RANKS:
        steps = validate(na.tree_allreduce(p), p, 2)
        check_reduces(steps, p, 2, SIZES, seed=100 + p)


def test_tree_schedule_follows_the_two_nccl_trees(na):
    for p in RANKS:
        steps = validate(na.tree_allreduce(p), p, 2)
        assert len(steps) <= 2 * math.ceil(math.log2(p)) if p > 1 else not steps, \
            f"p={p}: {len(steps)} steps; reduce up + broadcast down a tree of depth ceil(log2 p) is 2*ceil(log2 p)"
        trees = [[nccl_get_dtree(p, r)[t] for r in range(p)] for t in (0, 1)]
        ups, downs = set(), set()
        for step in steps:
            for s, d, c, op in step:
                parent_of_s, parent_of_d = trees[c][s][0], trees[c][d][0]
                if op == "reduce":
                    assert parent_of_s == d, f"p={p}: chunk {c} must be reduced up tree {c}: {s} -> {d} is not child -> parent"
                    assert (s, c) not in ups, f"p={p}: rank {s} reduces chunk {c} to its parent twice"
                    ups.add((s, c))
                else:
                    assert parent_of_d == s, f"p={p}: chunk {c} must be broadcast down tree {c}: {s} -> {d} is not parent -> child"
                    assert (d, c) not in downs, f"p={p}: rank {d} receives chunk {c} twice"
                    downs.add((d, c))
        non_roots = {(r, c) for c in (0, 1) for r in range(p) if trees[c][r][0] != -1}
        assert ups == non_roots and downs == non_roots, f"p={p}: every tree edge carries its half once up, once down"


# ---------------------------------------------------------------------------------------------
# The same schedules on Ray ranks: gloo point-to-point
# ---------------------------------------------------------------------------------------------
def exec_schedules_rank(rank, world_size, cases):
    """Run every (p, steps, nchunks, inputs) case with isend/irecv (ranks >= p sit it out);
    returns (result, bytes sent) per case."""
    import torch
    import torch.distributed as dist

    results = []
    for p, steps, nchunks, inputs in cases:
        if rank >= p:
            results.append((None, 0))
            continue
        buf = torch.tensor(inputs[rank], dtype=torch.float64)
        base, extra = divmod(buf.numel(), nchunks)
        starts = [i * base + min(i, extra) for i in range(nchunks + 1)]
        sent = 0
        for step in steps:
            reqs, incoming = [], []
            for src, dst, chunk, op in step:
                lo, hi = starts[chunk], starts[chunk + 1]
                if lo == hi:
                    continue  # empty chunk: both ends skip it
                if src == rank:
                    reqs.append(dist.isend(buf[lo:hi].clone(), dst, tag=chunk))  # the value at the start of the step
                    sent += 8 * (hi - lo)
                if dst == rank:
                    tmp = torch.empty(hi - lo, dtype=torch.float64)
                    reqs.append(dist.irecv(tmp, src, tag=chunk))
                    incoming.append((lo, hi, op, tmp))
            for req in reqs:
                req.wait()
            for lo, hi, op, tmp in incoming:
                if op == "reduce":
                    buf[lo:hi] += tmp
                else:
                    buf[lo:hi] = tmp
        results.append((buf.numpy(), sent))
    return results


@pytest.mark.points(3)
@pytest.mark.requires("torch", "ray")
def test_schedules_on_ray_ranks(na, ray_cluster):
    """Ring and tree schedules for 2, 3 and 4 ranks, all in one call on 4 gloo ranks."""
    rng = np.random.default_rng(4)
    cases, meta = [], []
    for p in (2, 3, 4):
        for kind, steps, nchunks in [("ring", na.ring_allreduce(p), p), ("tree", na.tree_allreduce(p), 2)]:
            steps = validate(steps, p, nchunks)
            for n in [1, 7, 4 * p, 1001]:
                inputs = [rng.integers(-1000, 1000, n).astype(np.float64) for _ in range(p)]
                cases.append((p, steps, nchunks, inputs))
                meta.append((p, kind, n, np.sum(inputs, axis=0)))
    per_rank = run_ranks(exec_schedules_rank, 4, cases, timeout=60)
    for i, (p, kind, n, want) in enumerate(meta):
        for r in range(p):
            got, sent = per_rank[r][i]
            assert np.array_equal(got, want), f"{kind}, p={p}, n={n}: rank {r} does not hold the sum"
            if kind == "ring" and n % p == 0:
                assert sent == 2 * (p - 1) * 8 * n // p, f"ring, p={p}, n={n}: rank {r} sent {sent} B"


# ---------------------------------------------------------------------------------------------
# NCCL's cost model: tuning.cc at v2.27.3-1 with its array indices (TREE=0, RING=1; LL=0, LL128=1, SIMPLE=2)
# ---------------------------------------------------------------------------------------------
BASE_LAT = [[6.8, 14.0, 8.4], [6.6, 14.0, 8.4]]  # lines 134-135
HW_LAT = [  # lines 143-156: [NVLINK, PCI, NET][algo][proto]
    [[.6, 1.25, 4.0], [.6, 1.9, 3.4]],
    [[1.0, 1.9, 4.0], [1.0, 2.5, 5.7]],
    [[5.0, 8.5, 14], [2.7, 4.0, 14.0]],
]
LL_MAX_BWS = [[39.0, 39.0, 20.4], [87.7, 22.5, 19.0], [141.0, 45.0, 35.0], [2 * 141.0, 2 * 45.0, 2 * 35.0]]
RING_LL128 = [[20.0] * 3, [20.0] * 3, [36.7] * 3, [2 * 36.7] * 3]
TREE_LL128 = [[20.0] * 3, [20.0] * 3, [36.7, 36.7, 29.0], [2 * 36.7, 2 * 36.7, 2 * 29.0]]
TREE_BWS = [[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [38.7, 41.4, 36.0], [2 * 38.7, 2 * 41.4, 2 * 36.0]]
TREE_CORR = [  # lines 548-552
    [1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0],
    [1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0],
    [.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9],
]
ALGO_NAMES, PROTO_NAMES = ["tree", "ring"], ["LL", "LL128", "Simple"]


def log2i(n):
    return -1 if n == 0 else int(n).bit_length() - 1


def tune_model(t):
    """ncclTopoTuneModel for coll = AllReduce: (latencies[a][p], bandwidths[a][p])."""
    n_ranks, n_nodes = t.n_ranks, t.n_nodes
    cc = 3 if t.compcap >= 100 else (2 if t.compcap >= 90 else (1 if t.compcap >= 80 else 0))
    index2 = n_nodes - 1 if n_nodes <= 2 else 2
    index1 = cc if n_nodes == 1 else (1 if t.amd_cpu else 0)
    ll_max_bw = LL_MAX_BWS[index1][index2]
    ppn = n_ranks / n_nodes
    intra_hw = 0 if t.nvlink else 1
    nsteps = 2 * (n_ranks - 1)
    lat = [[0.0] * 3 for _ in range(2)]
    bws = [[0.0] * 3 for _ in range(2)]
    for a in range(2):
        for p in range(3):
            bw = t.bw_intra if n_nodes <= 2 else t.bw_inter
            bus = t.n_channels * bw
            if a == 1 and p == 0:
                bus = min(ll_max_bw, bus * .5)
            if a == 1 and p == 1:
                bus = min(bus * 0.92, t.n_channels * RING_LL128[cc][index2])
            if a == 0:
                bus = min(bus * .92, t.n_channels * TREE_BWS[cc][index2])
            if a == 0 and p == 0:
                bus = min(bus * 1.0 / 3.8, ll_max_bw)
            if a == 0 and p == 1:
                bus = min(bus * (7.0 / 9.0 if n_nodes == 1 else 120.0 / 128.0), t.n_channels * TREE_LL128[cc][index2])
            bus *= (1.0 * n_ranks) / nsteps if a == 1 else .5
            bws[a][p] = bus
            lat[a][p] = BASE_LAT[a][p]
            intra_lat = HW_LAT[intra_hw][a][p]
            inter_lat = (HW_LAT[2][0][p] if ppn == 1 else HW_LAT[2][a][p]) + t.latency_inter
            if p == 2:
                inter_lat += t.latency_inter
            if a == 1:
                net_overhead = 0.0
                if n_nodes > 1:
                    net_overhead = 2.0 if t.amd_cpu else 1.0
                    if p == 2:
                        net_overhead *= 3
                intra_lat = max(intra_lat, net_overhead)
                n_inter = 0 if n_nodes == 1 else 2 * (n_nodes - 1)
                lat[a][p] += (nsteps - n_inter) * intra_lat + n_inter * inter_lat
            else:
                lat[a][p] += 2 * ((n_ranks // n_nodes - 1) * intra_lat + log2i(n_nodes) * inter_lat)
            if p == 1 and not (t.nvlink and t.compcap >= 70):  # lines 455-465, our LL128 rule
                bws[a][p] = 0.0
    return lat, bws


def get_algo_time(t, model, a, p, nbytes):  # lines 554-571, numPipeOps = 1
    lat, bws = model
    bw, la = bws[a][p], lat[a][p]
    if bw == 0:
        return -1.0
    log_size = log2i(nbytes >> 6)
    if a == 0 and 0 <= log_size < 23:
        bw *= TREE_CORR[p][log_size]
    if a == 1 and p == 2 and t.n_nodes > 1 and nbytes // (t.n_channels * t.n_ranks) >= 64:
        la *= 1.9 if t.compcap < 80 else 1.4
    return la * 1 + nbytes / (1000 * bw)


def model_choice(t, model, nbytes):  # enqueue.cc topoGetAlgoInfo: strict <, tree before ring
    if t.n_ranks == 1:
        return "ring", "Simple"
    best, min_time = None, 3600000000.0
    for a in range(2):
        for p in range(3):
            tm = get_algo_time(t, model, a, p, nbytes)
            if tm >= 0.0 and tm < min_time:
                best, min_time = (ALGO_NAMES[a], PROTO_NAMES[p]), tm
    return best


def assert_model_choice(t, model, nbytes, got, what):
    """got must be the model's minimum; an exact tie (equal times up to float rounding) may go either way."""
    want = model_choice(t, model, nbytes)
    if got == want:
        return
    assert got is not None and len(got) == 2 and got[0] in ALGO_NAMES and got[1] in PROTO_NAMES, \
        f"{what}: {nbytes} B -> {got!r} is not an (algo, proto) pair"
    t_got = get_algo_time(t, model, ALGO_NAMES.index(got[0]), PROTO_NAMES.index(got[1]), nbytes)
    t_want = get_algo_time(t, model, ALGO_NAMES.index(want[0]), PROTO_NAMES.index(want[1]), nbytes)
    assert t_got >= 0 and abs(t_got - t_want) <= 1e-9 * t_want, \
        f"{what}: {nbytes} B -> {got} ({t_got:.4f} us), the model's minimum is {want} ({t_want:.4f} us)"


def named_topos(na):
    T = na.Topo
    return {
        "1 node x 8 H100, NVLink": T(8, 1, 16, 20.0, 0.0),
        "2 nodes x 8 H100": T(16, 2, 16, 20.0, 12.5),
        "16 nodes x 8 H100": T(128, 16, 16, 20.0, 12.5),
        "64 nodes x 1 GPU, AMD CPUs": T(64, 64, 2, 12.0, 12.0, amd_cpu=True),
        "8 A100 on PCIe": T(8, 1, 2, 12.0, 0.0, nvlink=False, compcap=80),
        "4 V100 NVLink": T(4, 1, 4, 20.0, 0.0, compcap=70),
        "32 nodes x 4 B200, inter latency": T(128, 32, 8, 40.0, 25.0, compcap=100, latency_inter=2.0),
        "2 GPUs": T(2, 1, 2, 20.6, 0.0),
    }


def random_topos(na, count, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n_nodes = rng.choice([1, 1, 2, 3, 4, 8, 16, 32, 100, 256])
        ppn = rng.choice([1, 2, 4, 8]) if n_nodes > 1 else rng.choice([2, 3, 4, 8])
        out.append(na.Topo(n_ranks=n_nodes * ppn, n_nodes=n_nodes, n_channels=rng.randint(1, 32),
                           bw_intra=round(rng.uniform(3, 60), 1), bw_inter=round(rng.uniform(3, 50), 1),
                           nvlink=rng.random() < 0.7, compcap=rng.choice([70, 80, 86, 90, 100]),
                           amd_cpu=rng.random() < 0.3,
                           latency_inter=rng.choice([0.0, 0.0, round(rng.uniform(0, 5), 2)])))
    return out


def size_grid(seed):
    rng = random.Random(seed)
    sizes = {0, 1, 63, 64, 65} | {1 << k for k in range(4, 36)} | {(1 << k) + 1 for k in range(4, 34)}
    sizes |= {rng.randrange(1, 1 << 33) for _ in range(60)} | {rng.randrange(1, 1 << 20) for _ in range(60)}
    return sorted(sizes)


def test_bandwidths_and_times_equal_tuning_cc(na):
    topos = list(named_topos(na).values()) + random_topos(na, 150, seed=8)
    for t in topos:
        model = tune_model(t)
        for a, algo in enumerate(ALGO_NAMES):
            for p, proto in enumerate(PROTO_NAMES):
                want_bw = model[1][a][p]
                got_bw = na.bandwidth(t, algo, proto)
                assert math.isclose(got_bw, want_bw, rel_tol=1e-9, abs_tol=1e-12), \
                    f"{t}: bandwidth({algo}, {proto}) = {got_bw}, tuning.cc gives {want_bw}"
                for n in [0, 100, 4096, 3 << 20, 1 << 30]:
                    want = get_algo_time(t, model, a, p, n)
                    got = na.algo_time(t, algo, proto, n)
                    assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12), \
                        f"{t}: algo_time({algo}, {proto}, {n} B) = {got}, model gives {want}"


@pytest.mark.points(2)
def test_choice_is_the_model_minimum_on_a_size_grid(na):
    topos = list(named_topos(na).items()) + [(f"random #{i}", t) for i, t in enumerate(random_topos(na, 60, seed=9))]
    sizes = size_grid(seed=10)
    for name, t in topos:
        model = tune_model(t)
        for n in sizes:
            assert_model_choice(t, model, n, tuple(na.choose(t, n)), f"{name} {t}")


def crossovers(t, model, lo=1, hi=1 << 36):
    """Every size where the model's choice changes, found by bisection between grid points."""
    grid = sorted({lo, hi} | {1 << k for k in range(0, 37)} | {3 << k for k in range(0, 35)})
    out = []
    for a, b in zip(grid, grid[1:]):
        ca, cb = model_choice(t, model, a), model_choice(t, model, b)
        while ca != cb and b - a > 1:
            m = (a + b) // 2
            cm = model_choice(t, model, m)
            if cm == ca:
                a = m
            else:
                b, cb = m, cm
        if ca != cb:
            out.append((b, ca, cb))
    return out


def test_crossover_sizes_are_where_the_model_says(na):
    for name, t in list(named_topos(na).items()) + [(f"random #{i}", t) for i, t in enumerate(random_topos(na, 12, seed=11))]:
        model = tune_model(t)
        for x, _before, _after in crossovers(t, model):  # the model switches from `_before` to `_after` at x
            assert_model_choice(t, model, x - 1, tuple(na.choose(t, x - 1)), f"{name}: just below a crossover")
            assert_model_choice(t, model, x, tuple(na.choose(t, x)), f"{name}: at a crossover")


def test_worked_example_of_the_readme(na):
    """README: one node of 8 H100 (16 channels x 20 GB/s): small messages ring/LL, then LL128, then Simple."""
    t = named_topos(na)["1 node x 8 H100, NVLink"]
    model = tune_model(t)
    assert [(c[1], c[2]) for c in crossovers(t, model)] == [
        (("ring", "LL"), ("ring", "LL128")), (("ring", "LL128"), ("ring", "Simple"))]
    big = tune_model(named_topos(na)["16 nodes x 8 H100"])
    assert model_choice(named_topos(na)["16 nodes x 8 H100"], big, 1 << 10)[0] == "tree"
    assert tuple(na.choose(t, 1 << 34)) == ("ring", "Simple")
