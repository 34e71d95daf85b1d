"""Tests for train-10. Reference: a dense, single-process MoE written here in plain loops
(float64): every expert applied to the tokens routed to it, capacity filled choice-major in token
order, the Switch aux loss from its definition, and the router gradient by autograd through that
dense computation. The distributed layer runs on Ray actors forming a gloo group; every
torch.distributed call is recorded to check the all-to-all volumes."""

import math

import pytest
import torch
import torch.distributed as dist

from pytest_hpccourse.runtimes.ray.collectives import record_collectives
from pytest_hpccourse.runtimes.ray.drills import drill_once


def ref_route(probs, k, cap):
    """Lists: experts[t][j], keep[t][j]; the priority is (choice j, token t)."""
    t_count, e_count = probs.shape
    experts = [sorted(range(e_count), key=lambda e, t=t: -float(probs[t, e]))[:k] for t in range(t_count)]
    fill, keep = [0] * e_count, [[False] * k for _ in range(t_count)]
    for j in range(k):
        for t in range(t_count):
            e = experts[t][j]
            if fill[e] < cap:
                fill[e] += 1
                keep[t][j] = True
    return experts, keep


def ref_capacity(t, e, k, cf):
    return math.ceil(t * k * cf / e)


def ref_moe(x, w_router, w1_all, w2_all, k, cf, alpha):
    """Dense MoE on one rank's tokens: (out, aux, experts, keep); differentiable in w_router."""
    probs = torch.softmax(x @ w_router, dim=1)
    e_count = probs.shape[1]
    experts, keep = ref_route(probs.detach(), k, ref_capacity(x.shape[0], e_count, k, cf))
    rows = []
    for t in range(x.shape[0]):
        acc = torch.zeros(x.shape[1], dtype=x.dtype)
        for j in range(k):
            if keep[t][j]:
                e = experts[t][j]
                acc = acc + probs[t, e] * (torch.tanh(x[t] @ w1_all[e]) @ w2_all[e])
        rows.append(acc)
    picked = torch.zeros(e_count, dtype=x.dtype)
    for t in range(x.shape[0]):
        for e in experts[t]:
            picked[e] += 1
    f = picked / (x.shape[0] * k)
    aux = alpha * e_count * (f * probs.mean(dim=0)).sum()
    return torch.stack(rows), aux, experts, keep


# ---------------------------------------------------------------------------- pure functions
def test_route_capacity_and_priority(lesson):
    mod = lesson.load("expert_parallel.py")
    g = torch.Generator().manual_seed(3)
    for t_count, e_count, k, cf in ((17, 4, 1, 1.0), (17, 4, 2, 1.0), (23, 6, 2, 0.5), (9, 3, 3, 1.0),
                                    (1, 5, 2, 1.0), (30, 8, 2, 1.25), (12, 4, 2, 4.0)):
        logits = torch.randn(t_count, e_count, generator=g, dtype=torch.float64) * 2
        logits[:, 0] += 1.5  # a hot expert: drops happen
        probs = torch.softmax(logits, dim=1)
        cap = ref_capacity(t_count, e_count, k, cf)
        assert mod.capacity(t_count, e_count, k, cf) == cap
        experts, gates, keep = mod.route(probs, k, cap)
        want_e, want_keep = ref_route(probs, k, cap)
        where = f"T={t_count}, E={e_count}, k={k}, cap={cap}"
        assert experts.tolist() == want_e, f"{where}: top-k experts differ"
        torch.testing.assert_close(gates, probs.gather(1, experts), rtol=0, atol=0)
        assert keep.dtype == torch.bool and keep.tolist() == want_keep, \
            f"{where}: kept choices differ (priority: all first choices in token order, then second...)"
        per_expert = torch.zeros(e_count, dtype=torch.long).index_add_(0, experts[keep], torch.ones(int(keep.sum()), dtype=torch.long))
        assert int(per_expert.max()) <= cap, f"{where}: an expert got {int(per_expert.max())} > capacity {cap}"


def test_aux_loss_is_the_switch_formula(lesson):
    mod = lesson.load("expert_parallel.py")
    g = torch.Generator().manual_seed(4)
    for t_count, e_count, k in ((19, 4, 1), (19, 6, 2), (5, 8, 3)):
        probs = torch.softmax(torch.randn(t_count, e_count, generator=g, dtype=torch.float64), dim=1)
        probs.requires_grad_(True)
        experts = probs.detach().topk(k, dim=1).indices
        aux = mod.load_balancing_loss(probs, experts, 0.01)
        # Megatron-core form: sum_i (sum_t p_ti) * tokens_i * E * alpha / (k * T^2)
        tokens = torch.bincount(experts.reshape(-1), minlength=e_count).double()
        want = (probs.sum(0) * tokens).sum() * e_count * 0.01 / (k * t_count * t_count)
        torch.testing.assert_close(aux, want, rtol=1e-12, atol=0)
        (grad,) = torch.autograd.grad(aux, probs)
        torch.testing.assert_close(grad, (tokens * e_count * 0.01 / (k * t_count * t_count)).expand(t_count, -1))
    # perfectly balanced routing with uniform probs: the loss equals alpha (its minimum)
    probs = torch.full((8, 4), 0.25, dtype=torch.float64)
    experts = torch.arange(8).remainder(4)[:, None]
    torch.testing.assert_close(mod.load_balancing_loss(probs, experts, 0.3), torch.tensor(0.3, dtype=torch.float64))


def make_weights(ep, e_local, h, f, seed):
    g = torch.Generator().manual_seed(seed)
    e_count = ep * e_local
    w_router = torch.randn(h, e_count, generator=g, dtype=torch.float64)
    w_router[0, :2] += torch.tensor([2.5, 1.5], dtype=torch.float64)  # x[:, 0] = 1: experts 0, 1 are hot
    w1 = torch.randn(e_count, h, f, generator=g, dtype=torch.float64) * 0.7
    w2 = torch.randn(e_count, f, h, generator=g, dtype=torch.float64) * 0.7
    return w_router, w1, w2


def make_tokens(t_count, h, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t_count, h, generator=g, dtype=torch.float64)
    x[:, 0] = 1.0
    return x


def run_layer(mod, x, w_router, w1, w2, k, cf, alpha, probe):
    """Forward + backward of (out * probe).sum() + aux; returns out, aux, router grad."""
    w_router = w_router.clone().requires_grad_(True)
    out, aux = mod.moe_layer(x, w_router, w1, w2, k, cf, alpha)
    ((out * probe).sum() + aux).backward()
    return out.detach(), aux.detach(), w_router.grad


def reference_layer(x, w_router, w1_all, w2_all, k, cf, alpha, probe):
    w_router = w_router.clone().requires_grad_(True)
    out, aux, experts, keep = ref_moe(x, w_router, w1_all, w2_all, k, cf, alpha)
    ((out * probe).sum() + aux).backward()
    return out.detach(), aux.detach(), w_router.grad, experts, keep


CASES = [(1, 1.0), (2, 1.25), (2, 0.5), (2, 8.0)]  # (top_k, capacity factor): drops ... dropless


def test_single_rank_layer_equals_dense_reference(lesson, monkeypatch):
    """ep = 1 in this process: all_to_all_single is a copy (the splits must match)."""
    mod = lesson.load("expert_parallel.py")

    def a2a(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):
        assert output.shape == input.shape, "ep = 1: the all-to-all must move every row to itself"
        output.copy_(input)

    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 1)
    monkeypatch.setattr(dist, "all_to_all_single", a2a)
    w_router, w1, w2 = make_weights(1, 5, 6, 7, seed=1)
    for i, (k, cf) in enumerate(CASES):
        x = make_tokens(21, 6, seed=10 + i)
        probe = make_tokens(21, 6, seed=50 + i)
        got = run_layer(mod, x, w_router, w1, w2, k, cf, 0.02, probe)
        want = reference_layer(x, w_router, w1, w2, k, cf, 0.02, probe)
        for name, a, b in zip(("out", "aux", "router grad"), got, want[:3]):
            # float64; the same terms summed in another order
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=f"k={k}, cf={cf}: {name}")


# ---------------------------------------------------------------------------- the EP drill
TOKENS = [13, 1, 9, 11]  # tokens per rank: uneven, one rank with a single token
H, F = 5, 7


def ep_rank(rank, world_size, mod, e_local, cases):
    w_router, w1, w2 = make_weights(world_size, e_local, H, F, seed=world_size)
    mine = slice(rank * e_local, (rank + 1) * e_local)
    x = make_tokens(TOKENS[rank], H, seed=100 * world_size + rank)
    probe = make_tokens(TOKENS[rank], H, seed=200 * world_size + rank)
    results = []
    for k, cf in cases:
        with record_collectives() as log:
            out, aux, grad = run_layer(mod, x, w_router, w1[mine].clone(), w2[mine].clone(), k, cf, 0.02, probe)
        results.append({"out": out, "aux": aux, "grad": grad,
                        "calls": [(e.op, e.nbytes) for e in log.collectives]})
    return results




def run_drill(lesson, ep, e_local):
    """One Ray run per (learner source, ep), shared by the tests that grade it."""
    return drill_once(lesson, "expert_parallel.py", ep_rank, ep, e_local, CASES, timeout=60)


def reference_all(ep, e_local, k, cf):
    w_router, w1, w2 = make_weights(ep, e_local, H, F, seed=ep)
    per_rank = []
    for rank in range(ep):
        x = make_tokens(TOKENS[rank], H, seed=100 * ep + rank)
        probe = make_tokens(TOKENS[rank], H, seed=200 * ep + rank)
        per_rank.append(reference_layer(x, w_router, w1, w2, k, cf, 0.02, probe))
    return per_rank


EP = [(2, 3), (4, 2)]  # (ranks, experts per rank)


@pytest.mark.points(2)
@pytest.mark.parametrize(("ep", "e_local"), EP)
def test_ep_layer_equals_dense_reference(lesson, ray_cluster, ep, e_local):
    per_rank = run_drill(lesson, ep, e_local)
    for i, (k, cf) in enumerate(CASES):
        want = reference_all(ep, e_local, k, cf)
        for rank in range(ep):
            res = per_rank[rank][i]
            where = f"ep={ep}, rank {rank}, k={k}, cf={cf}"
            for name in ("out", "aux", "grad"):
                ref = {"out": want[rank][0], "aux": want[rank][1], "grad": want[rank][2]}[name]
                # float64, the same terms in another order: ~1e-15 relative
                torch.testing.assert_close(res[name], ref, rtol=1e-10, atol=1e-12, msg=f"{where}: {name}")


@pytest.mark.points(2)
@pytest.mark.parametrize(("ep", "e_local"), EP)
def test_all_to_all_moves_exactly_the_kept_choices(lesson, ray_cluster, ep, e_local):
    per_rank = run_drill(lesson, ep, e_local)
    e_count = ep * e_local
    for i, (k, cf) in enumerate(CASES):
        want = reference_all(ep, e_local, k, cf)
        kept = [[(e // e_local) for t, row in enumerate(w[3]) for j, e in enumerate(row) if w[4][t][j]] for w in want]
        for rank in range(ep):
            sent = len(kept[rank])
            recv = sum(dests.count(rank) for dests in kept)
            calls = per_rank[rank][i]["calls"]
            where = f"ep={ep}, rank {rank}, k={k}, cf={cf}: sends {sent} kept rows, receives {recv}"
            other = [op for op, _ in calls if op not in ("all_to_all_single", "all_to_all")]
            assert not other, f"{where}: only all-to-all may move tokens, saw {other}"
            row = H * 8
            payload = [nb for op, nb in calls if op == "all_to_all_single" and len(nb) >= 2]
            assert (recv * row, sent * row) in [nb[:2] for nb in payload], \
                f"{where}: no dispatch all_to_all_single of ({recv * row}, {sent * row}) bytes; calls {calls}"
            assert (sent * row, recv * row) in [nb[:2] for nb in payload], \
                f"{where}: no combine all_to_all_single of ({sent * row}, {recv * row}) bytes; calls {calls}"
            total = sum(sum(nb) for _, nb in calls)
            meta = total - 2 * (sent + recv) * row
            # counts per expert both ways, plus at most one int64 per row each way (e.g. expert ids)
            assert 0 <= meta <= 4 * e_count * 8 + 2 * 8 * (sent + recv), \
                f"{where}: {total} B moved, {meta} B beyond the kept rows: dropped or duplicated rows travel"
