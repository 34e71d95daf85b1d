"""Tests for train-08. Reference: full softmax attention of the whole sequence in float64 (one
process, explicit mask), sliced to each rank's rows. The ring runs on Ray actors forming a gloo
group; inside each rank the test wraps `block_attention` (to count the dense and visible score
entries of every call and stamp which K/V slice is being used) and every point-to-point call
(to see the peer and the bytes of each message, and when each request is waited for)."""

import functools
import math

import pytest
import torch
import torch.distributed as dist

from pytest_hpccourse.runtimes.ray.collectives import record_collectives
from pytest_hpccourse.runtimes.ray.drills import drill_once


def ref_zigzag(n, cp, r):  # independent of the lesson file
    c = n // (2 * cp)
    return [*range(r * c, (r + 1) * c), *range((2 * cp - 1 - r) * c, (2 * cp - r) * c)]


def ref_contiguous(n, cp, r):
    return list(range(r * n // cp, (r + 1) * n // cp))


LAYOUTS = {"zigzag": ref_zigzag, "contiguous": ref_contiguous}


def layout_positions(layout, n, cp, r):  # picklable, handed to the learner's ring_attention
    return torch.tensor(LAYOUTS[layout](n, cp, r), dtype=torch.long)


def full_attention(q, k, v, scale, causal):
    s = (q @ k.T) * scale
    if causal:
        n = q.shape[0]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
    lse = torch.logsumexp(s, dim=1)
    return torch.softmax(s, dim=1) @ v, lse


# ---------------------------------------------------------------------------- pure functions
def test_zigzag_positions(lesson):
    mod = lesson.load("ring_attention.py")
    for cp in (1, 2, 3, 4):
        for c in (1, 2, 5):
            n = 2 * cp * c
            held = [mod.zigzag_positions(n, cp, r) for r in range(cp)]
            for r, pos in enumerate(held):
                assert pos.dtype == torch.long, f"positions must be int64, got {pos.dtype}"
                assert pos.tolist() == ref_zigzag(n, cp, r), f"n={n}, cp={cp}, rank {r}: {pos.tolist()}"
            # causal work of a rank = number of (query, key) pairs with key <= query among its rows
            work = [sum(t + 1 for t in pos.tolist()) for pos in held]
            assert max(work) == min(work), f"zig-zag work is unbalanced: {work}"


def test_merge_partial_equals_attention_over_the_union(lesson):
    mod = lesson.load("ring_attention.py")
    inf_ = math.inf
    g = torch.Generator().manual_seed(8)
    m, j, d, dv = 7, 13, 4, 3
    q = torch.randn(m, d, generator=g, dtype=torch.float64) * 3
    k = torch.randn(j, d, generator=g, dtype=torch.float64) * 3
    v = torch.randn(j, dv, generator=g, dtype=torch.float64)
    q_pos = torch.tensor([0, 1, 2, 6, 9, 11, 12])  # rows 0-2 see only some of the keys
    k_pos = torch.randperm(j, generator=g)
    want_o, want_l = full_attention_pos(q, k, v, q_pos, k_pos)
    for parts in ([0, 4, 9, 13], [0, 1, 13], [0, 6, 7, 8, 13]):
        order = torch.randperm(len(parts) - 1, generator=g).tolist()
        out = torch.full((m, dv), 0.0, dtype=torch.float64)
        lse = torch.full((m,), -math.inf, dtype=torch.float64)
        for i in order:
            sl = slice(parts[i], parts[i + 1])
            bo, bl = mod.block_attention(q, k[sl], v[sl], q_pos, k_pos[sl], 0.9, True)
            args = (out, lse, bo, bl)
            kept = [a.clone() for a in args]
            out, lse = mod.merge_partial(*args)
            assert all(torch.equal(a, b) for a, b in zip(args, kept)), \
                "merge_partial changed a tensor it was given: return new tensors, leave the arguments alone"
            assert not torch.isnan(out).any() and not torch.isnan(lse).any(), \
                "NaN after a merge: rows whose lse is still -inf on both sides must stay 0 / -inf"
        torch.testing.assert_close(out, want_o, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(lse, want_l, rtol=1e-10, atol=1e-12)
    # large log-sum-exps (e^lse overflows float64 above ~709): the merge must stay finite and exact
    out_a = torch.randn(4, dv, generator=g, dtype=torch.float64)
    out_b = torch.randn(4, dv, generator=g, dtype=torch.float64)
    lse_a = torch.tensor([800.0, 1000.0, -inf_, 3.0], dtype=torch.float64)
    lse_b = torch.tensor([801.5, -inf_, 1200.0, 2.0], dtype=torch.float64)
    top = torch.maximum(lse_a, lse_b)
    wa, wb = torch.exp(lse_a - top), torch.exp(lse_b - top)  # independent: shift by the larger side
    want_l = top + torch.log(wa + wb)
    want_o = (wa[:, None] * out_a + wb[:, None] * out_b) / (wa + wb)[:, None]
    o, lse = mod.merge_partial(out_a, lse_a, out_b, lse_b)
    assert torch.isfinite(o).all() and torch.isfinite(lse).all(), \
        f"merge of lse around 1000 overflowed: lse {lse.tolist()} (do not form e^lse directly)"
    torch.testing.assert_close(o, want_o, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(lse, want_l, rtol=1e-12, atol=1e-12)
    # two fully masked partials: stays empty
    neg = torch.full((3,), -math.inf, dtype=torch.float64)
    o, lse = mod.merge_partial(torch.zeros(3, 2, dtype=torch.float64), neg,
                               torch.zeros(3, 2, dtype=torch.float64), neg.clone())
    assert torch.equal(o, torch.zeros(3, 2, dtype=torch.float64)) and torch.equal(lse, neg)


def full_attention_pos(q, k, v, q_pos, k_pos, scale=0.9):
    s = ((q @ k.T) * scale).masked_fill(k_pos[None, :] > q_pos[:, None], -math.inf)
    return torch.softmax(s, dim=1) @ v, torch.logsumexp(s, dim=1)


@pytest.mark.parametrize("causal", [True, False])
def test_single_rank_ring_skips_only_blocks_above_the_diagonal(lesson, monkeypatch, causal):
    """cp = 1, in this process (no messages): the two halves, the merge and the skip rule."""
    mod = lesson.load("ring_attention.py")
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 1)
    scope = mod.ring_attention.__globals__
    original, calls = scope["block_attention"], []

    def counted(qb, kb, vb, q_pos, k_pos, sc, cz):
        calls.append(int((k_pos[None, :] <= q_pos[:, None]).sum()) if cz else qb.shape[0] * kb.shape[0])
        return original(qb, kb, vb, q_pos, k_pos, sc, cz)

    monkeypatch.setitem(scope, "block_attention", counted)
    g = torch.Generator().manual_seed(5)
    for c in (1, 4, 7):
        n = 2 * c
        q, k = (torch.randn(n, 6, generator=g, dtype=torch.float64) * 2 for _ in range(2))
        v = torch.randn(n, 4, generator=g, dtype=torch.float64)
        calls.clear()
        out, lse = mod.ring_attention(q, k, v, functools.partial(layout_positions, "zigzag", n, 1), causal, 0.7)
        want_o, want_l = full_attention(q, k, v, 0.7, causal)
        torch.testing.assert_close(out, want_o, rtol=1e-10, atol=1e-12, msg=f"n={n}, causal={causal}")
        torch.testing.assert_close(lse, want_l, rtol=1e-10, atol=1e-12, msg=f"n={n}, causal={causal}")
        assert sum(calls) == (n * (n + 1) // 2 if causal else n * n), \
            f"n={n}: visible entries per block_attention call {calls}: every score exactly once"
        # causal: the (front half of q, back half of k) sub-block lies entirely above the diagonal
        assert 0 not in calls, "block_attention was called on a sub-block entirely above the diagonal"


# ---------------------------------------------------------------------------- the ring drill
class PeerLog:
    """Patches dist.isend/irecv/send/recv and dist.P2POp (on top of record_collectives) to log
    (direction, peer, bytes) of every message this rank posts."""

    def __init__(self):
        self.messages = []
        self.saved = {}

    def __enter__(self):
        for name, kind in (("isend", "send"), ("irecv", "recv"), ("send", "send"), ("recv", "recv")):
            orig = getattr(dist, name)
            self.saved[name] = orig
            setattr(dist, name, self._wrap(orig, kind))
        base = dist.P2POp
        self.saved["P2POp"] = base
        messages = self.messages

        class P2POp(base):
            def __init__(self, op, tensor, peer=None, *args, **kwargs):
                kind = "send" if getattr(op, "__name__", "") in ("isend", "send") else "recv"
                messages.append((kind, peer, tensor.numel() * tensor.element_size()))
                super().__init__(op, tensor, peer, *args, **kwargs)

        dist.P2POp = P2POp
        return self

    def _wrap(self, orig, kind):
        @functools.wraps(orig)
        def logged(tensor, peer=None, *args, **kwargs):
            self.messages.append((kind, peer, tensor.numel() * tensor.element_size()))
            return orig(tensor, peer, *args, **kwargs)
        return logged

    def __exit__(self, *exc):
        for name, orig in self.saved.items():
            setattr(dist, name, orig)


def ring_rank(rank, world_size, mod, cases):
    results = []
    # functions shipped by value carry their own globals dict: patch the one ring_attention reads
    scope = mod.ring_attention.__globals__
    original_block = scope["block_attention"]
    for layout, causal, q, k, v, scale in cases:
        n = q.shape[0]
        owner = {p: r for r in range(world_size) for p in LAYOUTS[layout](n, world_size, r)}
        mine = layout_positions(layout, n, world_size, rank)
        calls = []

        with record_collectives() as log, PeerLog() as peers:
            log.phase = "start"

            def counted(qb, kb, vb, q_pos, k_pos, sc, cz, log=log, calls=calls, owner=owner):
                src = owner[int(k_pos[0])]
                log.phase = f"blocks of rank {src}"
                visible = int((k_pos[None, :] <= q_pos[:, None]).sum()) if cz else qb.shape[0] * kb.shape[0]
                calls.append((src, qb.shape[0] * kb.shape[0], visible))
                return original_block(qb, kb, vb, q_pos, k_pos, sc, cz)

            scope["block_attention"] = counted
            try:
                out, lse = mod.ring_attention(q[mine].clone(), k[mine].clone(), v[mine].clone(),
                                              functools.partial(layout_positions, layout, n, world_size),
                                              causal, scale)
            finally:
                scope["block_attention"] = original_block
        events = [(e.op, e.phase, e.async_op, tuple(e.touched)) for e in log.collectives]
        results.append({"out": out, "lse": lse, "calls": calls, "events": events,
                        "messages": list(peers.messages)})
    return results


def make_cases(cp):
    g = torch.Generator().manual_seed(100 + cp)
    cases = []
    for layout, causal, c in (("zigzag", True, 3), ("zigzag", True, 1), ("zigzag", False, 3),
                              ("contiguous", True, 3)):
        n = 2 * cp * c
        q = torch.randn(n, 5, generator=g, dtype=torch.float64) * 2
        k = torch.randn(n, 5, generator=g, dtype=torch.float64) * 2
        v = torch.randn(n, 3, generator=g, dtype=torch.float64)
        cases.append((layout, causal, q, k, v, 0.8))
    return cases




def run_drill(lesson, cp):
    """One Ray run per (learner source, cp), shared by the tests that grade it."""
    cases = make_cases(cp)  # fixed seeds: the same cases on every call
    return cases, drill_once(lesson, "ring_attention.py", ring_rank, cp, cases, timeout=60)


@pytest.mark.points(2)
@pytest.mark.parametrize("cp", [2, 4])
def test_ring_equals_full_attention(lesson, ray_cluster, cp):
    cases, per_rank = run_drill(lesson, cp)
    for i, (layout, causal, q, k, v, scale) in enumerate(cases):
        want_o, want_l = full_attention(q, k, v, scale, causal)
        n = q.shape[0]
        for rank in range(cp):
            res = per_rank[rank][i]
            rows = layout_positions(layout, n, cp, rank)
            where = f"cp={cp}, rank {rank}, {layout}, causal={causal}, n={n}"
            # float64, the same sums in another order: ~1e-15 relative
            torch.testing.assert_close(res["out"], want_o[rows], rtol=1e-10, atol=1e-12, msg=where)
            torch.testing.assert_close(res["lse"], want_l[rows], rtol=1e-10, atol=1e-12, msg=where)
            calls = res["calls"]
            got = sum(vis for _, _, vis in calls)
            true = sum(min(t + 1, n) if causal else n for t in rows.tolist())
            assert got == true, (f"{where}: block_attention saw {got} visible score entries, the rows "
                                 f"have {true}: every score once, all through block_attention")


@pytest.mark.parametrize("cp", [2, 4])
def test_kv_hops_to_a_ring_neighbour_cp_minus_1_times(lesson, ray_cluster, cp):
    cases, per_rank = run_drill(lesson, cp)
    for i, (layout, causal, _q, k, v, _) in enumerate(cases):
        kv_bytes = (k.numel() + v.numel()) * 8 // cp
        for rank in range(cp):
            msgs = per_rank[rank][i]["messages"]
            where = f"cp={cp}, rank {rank}, {layout}, causal={causal}"
            sends = [m for m in msgs if m[0] == "send"]
            recvs = [m for m in msgs if m[0] == "recv"]
            neighbours = {(rank + 1) % cp, (rank - 1) % cp}
            assert sends and {p for _, p, _ in sends} <= neighbours and len({p for _, p, _ in sends}) == 1, \
                f"{where}: K/V must go to one ring neighbour, sent to {sorted({p for _, p, _ in sends})}"
            assert {p for _, p, _ in recvs} == {(2 * rank - sends[0][1]) % cp}, \
                f"{where}: K/V must come from the other neighbour, got {sorted({p for _, p, _ in recvs})}"
            sent = sum(b for _, _, b in sends)
            assert sent == (cp - 1) * kv_bytes, \
                f"{where}: sent {sent} B, a ring sends its K/V slice (cp - 1) = {cp - 1} times ({kv_bytes} B each)"
            assert sum(b for _, _, b in recvs) == (cp - 1) * kv_bytes, f"{where}: received bytes"


@pytest.mark.points(2)
@pytest.mark.parametrize("cp", [2, 4])
def test_next_hop_is_in_flight_during_compute(lesson, ray_cluster, cp):
    cases, per_rank = run_drill(lesson, cp)
    for rank in range(cp):
        for case, res in zip(cases, per_rank[rank]):
            if case[0] == "contiguous":  # causal + contiguous: rank 0 has nothing to compute after step 0
                continue
            for op, phase, is_async, touched in res["events"]:
                assert is_async, f"rank {rank}: blocking dist.{op}: the ring stalls on every hop"
                same = [m for m, ph in touched if ph == phase]
                assert not same, (f"rank {rank}: {op} posted and then waited ({same[0]}) with no block "
                                  "computed in between: the transfer does not overlap the compute")


@pytest.mark.points(2)
@pytest.mark.parametrize("cp", [2, 4])
def test_causal_skips_masked_blocks_and_zigzag_balances(lesson, ray_cluster, cp):
    cases, per_rank = run_drill(lesson, cp)
    for i, (layout, causal, q, _, _, _) in enumerate(cases):
        if not causal:
            continue
        n = q.shape[0]
        c = n // (2 * cp)
        dense = []
        for rank in range(cp):
            calls = per_rank[rank][i]["calls"]
            empty = [(src, m) for src, m, vis in calls if vis == 0]
            assert not empty, (f"cp={cp}, rank {rank}, {layout}: {len(empty)} call(s) on a sub-block entirely "
                               "above the diagonal: skip it")
            dense.append(sum(m for _, m, _ in calls))
        if layout == "zigzag":
            # chunk-pair bound: 2cp + 1 (q half, k half) pairs touch the diagonal or below; +1 allows
            # computing the step-0 block whole with the mask, as ring-flash-attn does
            assert max(dense) <= (2 * cp + 2) * c * c, \
                f"cp={cp}: dense score entries per rank {dense} > (2cp+2)c² = {(2 * cp + 2) * c * c}"
            assert max(dense) <= 1.25 * min(dense), f"cp={cp}: zig-zag work unbalanced: {dense}"
        else:  # the naive split: rank cp-1 does ~(2cp-1)x the work of rank 0
            assert max(dense) >= 2 * min(dense), f"cp={cp}: contiguous split {dense}"
