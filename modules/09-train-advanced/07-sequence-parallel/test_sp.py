"""Tests for train-07. Reference: the unsharded block (defined here) in float64; each rank must
reproduce its tokens of the output and of the input gradient, its slices of the TP weight gradients
and the full gradients of the replicated parameters, with one all-gather and one reduce-scatter of
the whole activation per direction, and keeping LayerNorm / dropout activations for s/t tokens only."""


import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pytest_hpccourse.runtimes.ray.collectives import record_collectives
from pytest_hpccourse.runtimes.ray.drills import drill_once

S, B, H, FFN, P = 8, 3, 12, 40, 0.25  # FFN/t != H for t = 2, 4: a saved [s, b, ffn/t] is not [s, b, h]
ELEM = 8  # float64
GATHER = ("all_gather", "all_gather_into_tensor")
SCATTER = ("reduce_scatter", "reduce_scatter_tensor")


def keep_mask(s, b, h, seed=0):
    """The spec's dropout mask for the whole sequence (lowbias32 of the global index)."""
    x = (torch.arange(s * b * h, dtype=torch.int64).view(s, b, h) + seed * 0x9E3779B9) & 0xFFFFFFFF
    for mul in (0x7FEB352D, 0x846CA68B):
        x = ((x ^ (x >> 16)) * mul) & 0xFFFFFFFF
    return (x ^ (x >> 16)) >= int(P * 2**32)


class RefBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(H), nn.Linear(H, FFN), nn.Linear(FFN, H)

    def forward(self, x):
        y = self.fc2(F.gelu(self.fc1(self.norm(x))))
        return x + y * keep_mask(*x.shape).to(x.dtype) / (1 - P)


EPS = {21: 1e-5, 22: 1e-2}  # LayerNorm eps per seed: the default, and one the block must copy from the model


def make_reference(seed):
    torch.manual_seed(seed)
    ref = RefBlock().double()
    ref.norm.eps = EPS[seed]
    with torch.no_grad():  # LayerNorm starts at (1, 0): make its gradients non-trivial to compare
        ref.norm.weight.uniform_(0.5, 1.5)
        ref.norm.bias.normal_()
    return ref


def inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(S, B, H, generator=g, dtype=torch.float64),
            torch.randn(S, B, H, generator=g, dtype=torch.float64))


def _rank(rank, world, sp, seeds):
    results = []
    local = S // world
    with record_collectives() as log:
        for seed in seeds:
            block = sp.SequenceParallelBlock(make_reference(seed), rank, world)
            params = {id(p) for p in block.parameters()}
            x, dy = inputs(seed)
            x = x[rank * local:(rank + 1) * local].clone().requires_grad_()
            dy = dy[rank * local:(rank + 1) * local]
            saved = []

            def pack(t, saved=saved, params=params):
                if id(t) not in params:
                    saved.append((tuple(t.shape), t.numel(), t.untyped_storage().data_ptr()))
                return t

            first = len(log.events)
            log.phase = "forward"
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                y = block(x)
            log.phase = "backward"
            y.backward(dy)
            log.phase = "sync"
            block.sync_sequence_parallel_grads()
            log.phase = ""
            grads = {n: p.grad for n, p in block.named_parameters()}
            events = [(e.op, e.nbytes, e.phase) for e in log.events[first:] if not isinstance(e, tuple)]
            results.append((y.detach(), x.grad, grads, events, saved))
    return results


SEEDS = (21, 22)


def run_drill(lesson, world):
    """One Ray run per (learner source, world size), shared by the tests that grade it."""
    return drill_once(lesson, "sp.py", _rank, world, SEEDS, timeout=60)


def reference(seed, rank, world):
    ref = make_reference(seed)
    x, dy = inputs(seed)
    x.requires_grad_()
    y = ref(x)
    y.backward(dy)
    rows = slice(rank * S // world, (rank + 1) * S // world)
    grads = {"norm_w": ref.norm.weight.grad, "norm_b": ref.norm.bias.grad, "b2": ref.fc2.bias.grad,
             "w1": ref.fc1.weight.grad.chunk(world, 0)[rank], "b1": ref.fc1.bias.grad.chunk(world)[rank],
             "w2": ref.fc2.weight.grad.chunk(world, 1)[rank]}
    return y.detach()[rows], x.grad[rows], grads


@pytest.mark.points(2)
@pytest.mark.parametrize("world", [2, 4])
def test_matches_the_unsharded_block(lesson, ray_cluster, world):
    per_rank = run_drill(lesson, world)
    for i, seed in enumerate(SEEDS):
        for rank, res in enumerate(r[i] for r in per_rank):
            y, dx, grads, _, _ = res
            want_y, want_dx, want_grads = reference(seed, rank, world)
            where = f"t={world}, rank {rank}, seed {seed}"
            # float64; sums of t partials in another order: ~1e-15 relative
            torch.testing.assert_close(y, want_y, rtol=1e-10, atol=1e-12, msg=f"{where}: output tokens")
            assert dx is not None, f"{where}: the input shard received no gradient"
            torch.testing.assert_close(dx, want_dx, rtol=1e-10, atol=1e-12, msg=f"{where}: input gradient")
            for name, want in want_grads.items():
                got = grads.get(name)
                assert got is not None, f"{where}: {name} has no gradient"
                hint = " (replicated: all-reduce its gradient over the TP group)" \
                    if name in ("norm_w", "norm_b", "b2") else ""
                torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12,
                                           msg=f"{where}: gradient of {name}{hint}")


def _family(op):
    return "all_gather" if op in GATHER else "reduce_scatter" if op in SCATTER else op


@pytest.mark.points(2)
@pytest.mark.parametrize("world", [2, 4])
def test_gather_and_reduce_scatter_replace_the_all_reduces(lesson, ray_cluster, world):
    full, part = S * B * H * ELEM, S * B * H * ELEM // world
    gather, scatter = ("all_gather", (full, part)), ("reduce_scatter", (part, full))
    per_rank = run_drill(lesson, world)
    for rank, runs in enumerate(per_rank):
        for seed, (_, _, _, events, saved) in zip(SEEDS, runs, strict=True):
            where = f"t={world}, rank {rank}, seed {seed}"
            phase = {ph: [(_family(op), nb) for op, nb, p in events if p == ph]
                     for ph in ("forward", "backward", "sync", "")}
            assert phase["forward"] == [gather, scatter], (
                f"{where}: forward must be one all-gather of the normed shard ({part} -> {full} bytes) "
                f"then one reduce-scatter of the partial sums ({full} -> {part} bytes); got {phase['forward']}")
            back = sorted(phase["backward"])
            assert back in ([gather, scatter], [gather, gather, scatter]), (
                f"{where}: backward must be the conjugates, one all-gather and one reduce-scatter of the "
                f"same sizes (a second all-gather only to re-gather a shard you saved); got {phase['backward']}")
            sync = phase["sync"]
            assert {op for op, _ in sync} == {"all_reduce"} and sum(nb[0] for _, nb in sync) == 3 * H * ELEM, (
                f"{where}: after backward only the replicated parameters' gradients (3*h = {3 * H} elements "
                f"in all) should be all-reduced; got {sync}")
            assert not phase[""], f"{where}: collectives outside forward/backward/sync: {phase['']}"
            # Activation memory (README): among the tensors saved for backward, those with s*b*h elements
            # (the whole sequence at full width) may occupy one storage only: fc1's gathered input, however
            # often it is saved. [s, b, ffn/t] tensors inside the TP region (GELU's input, fc2's input) are
            # not counted (ffn/t != h here); LayerNorm's input and the dropout mask must be s/t tokens.
            full_seq = {ptr for _, numel, ptr in saved if numel == S * B * H}
            assert len(full_seq) <= 1, (
                f"{where}: {len(full_seq)} different full-sequence [s, b, h] activations saved for backward "
                f"(shapes {[sh for sh, n, _ in saved if n == S * B * H]}): LayerNorm and dropout must run "
                "on this rank's s/t tokens")
