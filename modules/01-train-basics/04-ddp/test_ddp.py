"""Tests for train-04. Reference: the same model trained in one process on the whole batch
(float64), which data parallelism with averaged gradients must reproduce step for step."""

import random

import pytest
import torch
from torch import nn

from pytest_hpccourse.distributed import run_ranks


def reference_buckets(sizes, cap):
    """Independent reference: scan from the last index, greedy first-fit with the cap."""
    order = list(range(len(sizes)))[::-1]
    buckets = []
    for i in order:
        if buckets and sum(sizes[j] for j in buckets[-1]) + sizes[i] <= cap:
            buckets[-1].append(i)
        else:
            buckets.append([i])
    return buckets


def test_build_buckets(lesson):
    ddp = lesson.load("ddp.py")
    rng = random.Random(11)
    assert ddp.build_buckets([], 100) == []
    assert ddp.build_buckets([500], 100) == [[0]]  # bigger than the cap: alone
    assert ddp.build_buckets([10, 20, 30], 60) == [[2, 1, 0]]  # exactly at the cap
    assert ddp.build_buckets([10, 20, 30], 59) == [[2, 1], [0]]
    for _ in range(200):
        sizes = [rng.choice([4, 8, 24, 100, 1000, 4096]) * rng.randint(1, 9) for _ in range(rng.randint(1, 12))]
        cap = rng.choice([1, 64, 500, 4000, 10**9])
        assert ddp.build_buckets(sizes, cap) == reference_buckets(sizes, cap), (sizes, cap)


class _Probe(torch.autograd.Function):
    """Identity whose backward records how many buckets had been launched at that moment."""

    @staticmethod
    def forward(ctx, x, log, ddp_box):
        ctx.log, ctx.ddp_box = log, ddp_box
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if ctx.ddp_box[0] is not None:  # None in the single-process reference
            ctx.log.append(len(ctx.ddp_box[0].fired))
        return grad, None, None


class Probed(nn.Module):
    def __init__(self):
        super().__init__()
        self.log, self.ddp_box = [], [None]

    def forward(self, x):
        return _Probe.apply(x, self.log, self.ddp_box)


def make_model(seed):
    torch.manual_seed(seed)
    # Probe sits after the first layer: when backward reaches it, layers 2 and 3 are done.
    return nn.Sequential(nn.Linear(7, 13), Probed(), nn.Tanh(), nn.Linear(13, 11), nn.Tanh(),
                         nn.Linear(11, 3)).double()


def make_data(world_size, per_rank, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(world_size * per_rank, 7, generator=g, dtype=torch.float64)
    y = torch.randn(world_size * per_rank, 3, generator=g, dtype=torch.float64)
    return x, y


STEPS, LR = 3, 0.1


def train_reference(x, y):
    model = make_model(seed=0)  # rank 0's initialization, which DDP broadcasts
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    for _ in range(STEPS):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach() for p in model.parameters()]


def train_rank(rank, world_size, ddp_mod, x, y, caps):
    return {cap: train_with_cap(rank, world_size, ddp_mod, x, y, cap) for cap in caps}


def train_with_cap(rank, world_size, ddp_mod, x, y, cap):
    model = make_model(seed=rank)  # different on purpose: the wrapper must broadcast rank 0's
    ddp = ddp_mod.BucketedDDP(model, bucket_cap_bytes=cap)
    probe = model[1]
    probe.ddp_box[0] = ddp
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    per_rank = x.shape[0] // world_size
    xs, ys = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
    launched_in_backward, fire_orders = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        ddp.fired.clear()
        nn.functional.mse_loss(ddp(xs), ys).backward()
        launched_in_backward.append(len(ddp.fired))
        fire_orders.append([i for b in ddp.fired for i in ddp.buckets[b]])
        ddp.finish_gradient_sync()
        opt.step()
    return {"params": [p.detach() for p in model.parameters()], "buckets": ddp.buckets,
            "launched_in_backward": launched_in_backward, "fire_orders": fire_orders,
            "at_probe": probe.log}


@pytest.mark.points(3)
@pytest.mark.parametrize("world_size", [2, 3])
def test_matches_single_process_training(lesson, ray_cluster, world_size):
    ddp_mod = lesson.load("ddp.py")
    x, y = make_data(world_size, per_rank=5, seed=world_size)
    want = train_reference(x, y)
    n_params = len(want)
    # float64 bytes of (w1, b1, w2, b2, w3, b3) = 728, 104, 1144, 88, 264, 24
    caps = [400, 1, 10**9]
    per_rank = run_ranks(train_rank, world_size, ddp_mod, x, y, caps, timeout=60)
    for cap in caps:
        for rank, res in enumerate(r[cap] for r in per_rank):
            for got, ref in zip(res["params"], want):
                # sums of 2-3 float64 gradients in another order: ~1e-16 relative per step
                torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12,
                                           msg=f"rank {rank}, cap {cap}: parameters differ")
            n_buckets = len(res["buckets"])
            assert res["launched_in_backward"] == [n_buckets] * STEPS, \
                "every bucket's all-reduce must be launched during backward, not after it"
            for order in res["fire_orders"]:
                assert order == list(range(n_params))[::-1], \
                    f"buckets must fire last-layer-first, got parameter order {order}"
            if cap == 400:  # 4 buckets: [w3 b3 ... ] fire before backward reaches layer 1
                assert all(k >= 2 for k in res["at_probe"]), \
                    f"no overlap: only {res['at_probe']} buckets launched when backward reached layer 1"
