"""Tests for train-16. References: brute-force optimal bin counts and rank partitions on small
instances, naive pad-to-longest batching, and per-sequence attention computed on each segment
alone (float64)."""

import itertools
import math
import random

import pytest
import torch


def _check_partition(groups, n):
    flat = [i for g in groups for i in g]
    assert sorted(flat) == list(range(n)), "every index must appear exactly once"


def _opt_bins(lengths, budget):
    """Fewest bins, by trying k = lower bound, lower bound + 1, ... with a backtracking search."""
    items = sorted(lengths, reverse=True)

    def fits(k):
        free = [budget] * k

        def place(t):
            if t == len(items):
                return True
            seen = set()
            for b in range(k):
                if free[b] >= items[t] and free[b] not in seen:
                    seen.add(free[b])
                    free[b] -= items[t]
                    if place(t + 1):
                        return True
                    free[b] += items[t]
            return False

        return place(0)

    k = max(1, math.ceil(sum(items) / budget))
    while not fits(k):
        k += 1
    return k


# Small instances: random ones plus orders that defeat greedy packers that do not sort
# (next-fit: 9,2,9,2,...; first-fit in input order: all small items first).
SMALL = [([9, 2] * 4, 10), ([3] * 9 + [7] * 9, 10), ([2] * 6 + [5] * 6, 11), ([4, 4, 4, 6, 6, 6], 10)]
_rng = random.Random(11)
SMALL += [([_rng.randint(1, 20) for _ in range(_rng.randint(1, 11))], 20) for _ in range(25)]


@pytest.mark.points(2)
def test_packs_fit_budget_and_are_near_optimal(lesson):
    pk = lesson.load("packing.py")
    for lengths, budget in SMALL:
        arg = list(lengths)
        packs = pk.pack_sequences(arg, budget)
        assert arg == lengths, "pack_sequences modified the caller's list"
        _check_partition(packs, len(lengths))
        assert all(sum(lengths[i] for i in p) <= budget for p in packs), "a pack exceeds the budget"
        opt = _opt_bins(lengths, budget)
        assert len(packs) <= 11 / 9 * opt + 6 / 9 + 1e-9, (
            f"{len(packs)} packs for {lengths} (budget {budget}); optimum {opt}, FFD bound {11 / 9 * opt + 6 / 9:.2f}")
    with pytest.raises(ValueError):
        pk.pack_sequences([3, 12, 4], 10)
    assert pk.pack_sequences([], 10) == []
    assert pk.pack_sequences([10], 10) == [[0]]


def _naive_waste(lengths, batch_size):
    """Pad-to-longest for fixed batches of batch_size sequences in arrival order."""
    return sum(len(b) * max(b) - sum(b)
               for b in (lengths[i:i + batch_size] for i in range(0, len(lengths), batch_size)))


@pytest.mark.points(1)
@pytest.mark.parametrize("dist", ["lognormal", "uniform", "bimodal"])
def test_packing_wastes_far_less_than_padding(lesson, dist):
    pk = lesson.load("packing.py")
    rng, budget = random.Random(dist), 4096
    gen = {"lognormal": lambda: min(budget, max(1, int(rng.lognormvariate(math.log(300), 1.0)))),
           "uniform": lambda: rng.randint(1, budget),
           "bimodal": lambda: rng.choice([rng.randint(16, 128), rng.randint(1500, budget)])}[dist]
    lengths = [gen() for _ in range(400)]
    packs = pk.pack_sequences(list(lengths), budget)
    _check_partition(packs, len(lengths))
    assert all(sum(lengths[i] for i in p) <= budget for p in packs)
    # Each micro-batch reserves budget tokens: unused capacity is the packed run's padding.
    waste = len(packs) * budget - sum(lengths)
    naive = _naive_waste(lengths, 8)
    assert waste <= 0.2 * naive, f"packed waste {waste} tokens vs naive padding {naive}: need <= 20%"


def _seqs(lengths, seed):
    """Sequences of globally unique token ids so any loss, duplication or reorder shows."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randperm(sum(lengths) + 50, generator=g)[: sum(lengths)] + 1000
    return list(torch.split(ids, lengths))


@pytest.mark.points(1)
def test_packed_batch_keeps_every_token_in_order(lesson):
    pk = lesson.load("packing.py")
    lengths = [5, 1, 9, 3, 7, 2, 11]
    seqs = _seqs(lengths, 1)
    for pack in ([2, 0, 5], [6], [1, 3, 4], [4, 1, 6, 0]):
        tokens, cu, pos = pk.build_packed_batch(seqs, pack)
        assert cu.dtype == torch.int32, "flash-attn's varlen API takes int32 cu_seqlens"
        want_cu = [0] + list(itertools.accumulate(lengths[i] for i in pack))
        assert cu.tolist() == want_cu
        assert torch.equal(tokens, torch.cat([seqs[i] for i in pack]))
        assert pos.tolist() == [p for i in pack for p in range(lengths[i])], "positions restart per sequence"


def _attend(q, k, v, keep):
    s = (q @ k.T) / math.sqrt(q.shape[1])
    return torch.softmax(s.masked_fill(~keep, -math.inf), dim=1) @ v


# Causal is the case LLM training runs (and the one a whole-pack triangle gets wrong): it weighs more.
@pytest.mark.parametrize("causal", [pytest.param(False, id="bidirectional", marks=pytest.mark.points(1)),
                                    pytest.param(True, id="causal", marks=pytest.mark.points(3))])
def test_varlen_mask_equals_per_sequence_attention(lesson, causal):
    pk = lesson.load("packing.py")
    g = torch.Generator().manual_seed(5)
    for lengths in ([4, 1, 7, 3], [13], [1, 1, 2], [6, 9, 2, 5, 1]):
        cu = torch.tensor([0] + list(itertools.accumulate(lengths)), dtype=torch.int32)
        total = cu[-1].item()
        q, k, v = (torch.randn(total, 6, generator=g, dtype=torch.float64) for _ in range(3))
        keep = pk.varlen_mask(cu, causal)
        assert keep.dtype == torch.bool and keep.shape == (total, total)
        out = _attend(q, k, v, keep)
        for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
            n = b - a
            own = torch.ones(n, n, dtype=torch.bool)
            if causal:
                own = own.tril()
            ref = _attend(q[a:b], k[a:b], v[a:b], own)
            # float64 softmax over <= 13 keys: only rounding differs.
            torch.testing.assert_close(out[a:b], ref, rtol=1e-12, atol=1e-12,
                                       msg=f"sequence [{a}, {b}) of {lengths}")


@pytest.mark.points(3)
def test_packed_causal_layer_equals_per_sequence_layer(lesson):
    """The taught path end to end: build_packed_batch + varlen_mask(causal=True) feed one attention
    layer with token and absolute-position embeddings; each sequence's rows must equal the layer run on
    that sequence alone (positions from 0). Leaks across sequences, wrong positions or a reordered
    pack all change the output."""
    pk = lesson.load("packing.py")
    lengths = [5, 1, 8, 3, 6, 2]
    seqs = _seqs(lengths, 2)
    g = torch.Generator().manual_seed(8)
    d = 6
    vocab = int(max(t.max() for t in seqs)) + 1
    tok_emb = torch.randn(vocab, d, generator=g, dtype=torch.float64)
    pos_emb = torch.randn(16, d, generator=g, dtype=torch.float64)
    wq, wk, wv = (torch.randn(d, d, generator=g, dtype=torch.float64) for _ in range(3))

    def layer(x, keep):
        return _attend(x @ wq, x @ wk, x @ wv, keep)

    for pack in ([2, 0, 4, 1], [5, 3], [1, 4, 2, 5, 0, 3]):
        tokens, cu, pos = pk.build_packed_batch(seqs, pack)
        out = layer(tok_emb[tokens.long()] + pos_emb[pos.long()], pk.varlen_mask(cu, True))
        want = torch.cat([layer(tok_emb[seqs[i]] + pos_emb[:lengths[i]],
                                torch.ones(lengths[i], lengths[i], dtype=torch.bool).tril()) for i in pack])
        assert out.shape == want.shape, f"pack {pack}: output {tuple(out.shape)}, want {tuple(want.shape)}"
        torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12, msg=f"pack {pack}")


def _opt_makespan(costs, m):
    best = math.inf
    for assign in itertools.product(range(m), repeat=len(costs)):
        load = [0.0] * m
        for c, r in zip(costs, assign):
            load[r] += c
        best = min(best, max(load))
    return best


@pytest.mark.points(2)
def test_rank_assignment_is_near_optimal(lesson):
    pk = lesson.load("packing.py")
    rng = random.Random(3)
    cases = [([8, 7, 6, 5, 4], 2), ([1, 1, 1, 1, 4], 2), ([1, 1, 1, 1, 1, 1, 6], 3), ([5, 5, 4, 4, 3, 3, 3], 3)]
    cases += [([rng.choice([rng.randint(1, 10), rng.randint(30, 100)]) for _ in range(rng.randint(2, 8))],
               rng.choice([2, 3])) for _ in range(30)]
    # costs in seconds (all below 1) and odd fractions: loads are floats, not integers
    cases += [([c / 128 for c in costs], m) for costs, m in cases[4:14]]
    cases += [([0.75, 0.5], 3), ([2.5], 4)]  # more ranks than micro-batches: some ranks stay empty
    for costs, m in cases:
        arg = [float(c) for c in costs]
        ranks = pk.assign_to_ranks(arg, m)
        assert arg == [float(c) for c in costs], "assign_to_ranks modified the caller's list"
        assert len(ranks) == m
        _check_partition(ranks, len(costs))
        makespan = max(sum(costs[i] for i in r) for r in ranks)
        opt = _opt_makespan(costs, m)
        assert makespan <= (4 / 3 - 1 / (3 * m)) * opt + 1e-9, (
            f"max rank load {makespan} for {costs} on {m} ranks; optimum {opt}")
    assert pk.assign_to_ranks([], 3) == [[], [], []]


@pytest.mark.points(1)
def test_balancing_by_attention_cost(lesson):
    """Packs of equal token count can differ 10x in attention work: the ranks must be balanced on
    the cost they are given (here sum len^2), not on token counts."""
    pk = lesson.load("packing.py")
    budget = 4096
    lengths = [4096] * 4 + [256] * 64 + [1024] * 12
    packs = pk.pack_sequences(list(lengths), budget)
    _check_partition(packs, len(lengths))
    costs = [pk.attention_cost([lengths[i] for i in p], attn_weight=1.0 / 64) for p in packs]
    ranks = pk.assign_to_ranks(costs, 4)
    _check_partition(ranks, len(packs))
    loads = [sum(costs[i] for i in r) for r in ranks]
    assert max(loads) <= 1.1 * sum(loads) / 4, f"attention-cost loads {loads}"
