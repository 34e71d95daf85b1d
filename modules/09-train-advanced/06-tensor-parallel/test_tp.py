"""Tests for train-06. Reference: the unsharded MLP / attention (defined here, attention through
torch's scaled_dot_product_attention) in float64; every rank must reproduce its output, the input
gradient and its own slice of every weight gradient, with one all-reduce per block and direction."""


import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pytest_hpccourse.runtimes.ray.collectives import record_collectives
from pytest_hpccourse.runtimes.ray.drills import drill_once

B, S, H, HEADS, FFN = 2, 5, 12, 4, 20  # head dim 3; FFN/t and heads/t stay whole for t = 1, 2, 4
CASES = {"mlp": ("mlp",), "attn": ("attn",), "layer": ("attn", "mlp")}  # blocks, in order


class RefMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(H, FFN), nn.Linear(FFN, H)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class RefAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = HEADS
        self.qkv, self.out = nn.Linear(H, 3 * H), nn.Linear(H, H)

    def forward(self, x):
        q, k, v = (t.view(B, S, HEADS, H // HEADS).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(ctx.transpose(1, 2).reshape(B, S, H))


def make_reference(seed):
    torch.manual_seed(seed)
    return {"mlp": RefMLP().double(), "attn": RefAttention().double()}


def run_case(case, blocks, x):
    """A block alone, or a pre-norm-free layer: x + attn(x), then + mlp(.)."""
    if len(CASES[case]) == 1:
        return blocks[CASES[case][0]](x)
    for name in CASES[case]:
        x = x + blocks[name](x)
    return x


def inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, S, H, generator=g, dtype=torch.float64),
            torch.randn(B, S, H, generator=g, dtype=torch.float64))


def expected_shards(ref, rank, world, grad=False, blocks=("mlp", "attn")):
    """Rank r's slice of each parameter (or of its gradient) of `blocks`, by the README layout."""
    val = (lambda p: p.grad) if grad else (lambda p: p.detach())
    out = {}
    if "mlp" in blocks:
        fc1, fc2 = ref["mlp"].fc1, ref["mlp"].fc2
        out |= {"mlp.w1": val(fc1.weight).chunk(world, 0)[rank], "mlp.b1": val(fc1.bias).chunk(world)[rank],
                "mlp.w2": val(fc2.weight).chunk(world, 1)[rank], "mlp.b2": val(fc2.bias)}
    if "attn" in blocks:
        qkv, o = ref["attn"].qkv, ref["attn"].out
        out |= {"attn.w_qkv": torch.cat([w.chunk(world, 0)[rank] for w in val(qkv.weight).split(H)]),
                "attn.b_qkv": torch.cat([b.chunk(world)[rank] for b in val(qkv.bias).split(H)]),
                "attn.w_out": val(o.weight).chunk(world, 1)[rank], "attn.b_out": val(o.bias)}
    return out


def test_shards_follow_the_megatron_layout(lesson):
    tp = lesson.load("tp.py")
    ref = make_reference(seed=3)
    for world in (1, 2, 4):
        for rank in range(world):
            want = expected_shards(ref, rank, world)
            got = {f"mlp.{n}": p for n, p in tp.ParallelMLP(ref["mlp"], rank, world).named_parameters()}
            got |= {f"attn.{n}": p for n, p in
                    tp.ParallelAttention(ref["attn"], rank, world).named_parameters()}
            assert sorted(got) == sorted(want), f"parameters must be named {sorted(want)}, got {sorted(got)}"
            for name, w in want.items():
                assert got[name].shape == w.shape and torch.equal(got[name].detach(), w), \
                    f"t={world}, rank {rank}: {name} is not this rank's shard (shape {tuple(got[name].shape)}, want {tuple(w.shape)})"
            full = {p.untyped_storage().data_ptr() for m in ref.values() for p in m.parameters()}
            shared = [n for n, p in got.items() if p.untyped_storage().data_ptr() in full]
            assert not shared, (f"t={world}, rank {rank}: {shared} share memory with the full model's parameters "
                                f"(an alias, not a copy: training the TP layer would change the full model)")


def _rank(rank, world, tp, seeds):
    results = {}
    with record_collectives() as log:
        for case, seed in seeds.items():
            ref = make_reference(seed)
            blocks = {"mlp": tp.ParallelMLP(ref["mlp"], rank, world),
                      "attn": tp.ParallelAttention(ref["attn"], rank, world)}
            x, dy = inputs(seed)
            x.requires_grad_()
            first = len(log.events)
            log.phase = "forward"
            y = run_case(case, blocks, x)
            log.phase = "backward"
            y.backward(dy)
            log.phase = ""
            grads = {f"{b}.{n}": p.grad for b in CASES[case] for n, p in blocks[b].named_parameters()}
            events = [(e.op, e.numel, e.phase) for e in log.events[first:] if not isinstance(e, tuple)]
            results[case] = (y.detach(), x.grad, grads, events)
    # f and g called directly: neither may write into the tensor it was handed (README hints)
    g = torch.Generator().manual_seed(100 + rank)
    partial = torch.randn(B, S, H, generator=g, dtype=torch.float64)
    grad = torch.randn(B, S, H, generator=g, dtype=torch.float64)
    x = torch.randn(B, S, H, generator=g, dtype=torch.float64, requires_grad=True)
    partial0, grad0 = partial.clone(), grad.clone()
    tp.ReduceFromTensorParallel.apply(partial)
    tp.CopyToTensorParallel.apply(x).backward(grad)
    results["untouched"] = (torch.equal(partial, partial0), torch.equal(grad, grad0))
    return results


SEEDS = {"mlp": 11, "attn": 12, "layer": 13}


def run_drill(lesson, world):
    """One Ray run per (learner source, world size), shared by the tests that grade it."""
    return drill_once(lesson, "tp.py", _rank, world, SEEDS, timeout=60)


@pytest.mark.parametrize("world", [2, 4])
def test_f_and_g_leave_their_arguments_alone(lesson, ray_cluster, world):
    for rank, res in enumerate(run_drill(lesson, world)):
        forward_input, backward_grad = res["untouched"]
        assert forward_input, f"t={world}, rank {rank}: g's forward wrote into the partial sum it was given"
        assert backward_grad, f"t={world}, rank {rank}: f's backward wrote into the gradient it was given"


@pytest.mark.parametrize("world", [2, 4])
def test_forward_and_backward_match_the_unsharded_model(lesson, ray_cluster, world):
    per_rank = run_drill(lesson, world)
    for case, seed in SEEDS.items():
        ref = make_reference(seed)
        x, dy = inputs(seed)
        x.requires_grad_()
        y = run_case(case, ref, x)
        y.backward(dy)
        for rank, res in enumerate(r[case] for r in per_rank):
            got_y, got_dx, grads, _ = res
            where = f"t={world}, rank {rank}, {case}"
            # float64, partial sums of t shards added in another order: ~1e-15 relative
            torch.testing.assert_close(got_y, y.detach(), rtol=1e-10, atol=1e-12, msg=f"{where}: output")
            assert got_dx is not None, f"{where}: the input received no gradient"
            torch.testing.assert_close(got_dx, x.grad, rtol=1e-10, atol=1e-12,
                                       msg=f"{where}: input gradient (is f summing it over ranks?)")
            want = expected_shards(ref, rank, world, grad=True, blocks=CASES[case])
            for name, g in grads.items():
                assert g is not None, f"{where}: {name} received no gradient"
                torch.testing.assert_close(g, want[name], rtol=1e-10, atol=1e-12,
                                           msg=f"{where}: gradient of {name}")


@pytest.mark.parametrize("world", [2, 4])
def test_one_all_reduce_per_block_in_each_direction(lesson, ray_cluster, world):
    per_rank = run_drill(lesson, world)
    for case in SEEDS:
        blocks = len(CASES[case])
        for rank, res in enumerate(r[case] for r in per_rank):
            events = res[3]
            for phase in ("forward", "backward"):
                got = [(op, numel) for op, numel, ph in events if ph == phase]
                want = [("all_reduce", B * S * H)] * blocks
                assert got == want, (f"t={world}, rank {rank}, {case}, {phase}: expected exactly "
                                     f"{blocks} all-reduce(s) of b*s*h = {B * S * H} elements "
                                     f"(one per block), got {got}")
            stray = [e for e in events if e[2] not in ("forward", "backward")]
            assert not stray, f"t={world}, rank {rank}: collectives outside forward/backward: {stray}"
