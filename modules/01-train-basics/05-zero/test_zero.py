"""Tests for train-05. Reference: torch.optim.AdamW on the unsharded model in one process on the
whole batch; the sharded optimizer on N Ray ranks must give the same parameters after k steps, hold
1/N of the optimizer state, and drop the full gradients (ZeRO-2)."""


import pytest
import torch
from torch import nn

from pytest_hpccourse.runtimes.ray.collectives import record_collectives
from pytest_hpccourse.runtimes.ray.drills import drill_once


def test_shard_bounds(lesson):
    zero = lesson.load("zero.py")
    for numel in [1, 2, 5, 7, 113, 1000, 1001, 4097]:
        for world in range(1, 9):
            bounds = [zero.shard_bounds(numel, world, r) for r in range(world)]
            length = bounds[0][1] - bounds[0][0]
            assert length * world >= numel > (length - 1) * world, f"shard length of {numel}/{world}"
            assert all(hi - lo == length for lo, hi in bounds), "shards must have equal length"
            assert [b[0] for b in bounds] == [r * length for r in range(world)], "shards must tile the vector"


def make_model(dtype):
    torch.manual_seed(0)
    # 6·11 + 11 + 11·3 + 3 = 113 parameters: not divisible by 2, 3 or 4
    return nn.Sequential(nn.Linear(6, 11), nn.Tanh(), nn.Linear(11, 3)).to(dtype)


def make_data(world_size, dtype):
    g = torch.Generator().manual_seed(world_size)
    x = torch.randn(4 * world_size, 6, generator=g).to(dtype)
    y = torch.randn(4 * world_size, 3, generator=g).to(dtype)
    return x, y


STEPS = 4
HPARAMS = {"lr": 0.05, "betas": (0.8, 0.95), "eps": 1e-8, "weight_decay": 0.1}


def train_reference(dtype, x, y):
    model = make_model(dtype)
    opt = torch.optim.AdamW(model.parameters(), **HPARAMS)
    for _ in range(STEPS):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach() for p in model.parameters()]


def _bytes(tensors):
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


# every spelling torch 2.13 offers, all (output, input): the list form, the flat-tensor form and the
# newer *_single names
REDUCE_SCATTER = ("reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single")
ALL_GATHER = ("all_gather", "all_gather_into_tensor", "all_gather_single")


def wire_bytes(event, world_size):
    """Bytes one rank sends for a collective with the ring algorithm (train-03)."""
    op, *sizes = event
    n = world_size
    if op in REDUCE_SCATTER:  # (output, input): N-1 chunks of output
        return (n - 1) * sizes[0]
    if op in ALL_GATHER:  # (output, input): N-1 chunks of input
        return (n - 1) * sizes[1]
    if op == "all_reduce":
        return 2 * (n - 1) * sizes[0] / n
    return sum(sizes)


def train_rank(rank, world_size, zero_mod, data):
    # every collective of the learner's code is logged with the bytes of its tensor arguments
    with record_collectives() as recorder:
        return {dtype: train_dtype(rank, world_size, zero_mod, x, y, recorder)
                for dtype, (x, y) in data.items()}


def train_dtype(rank, world_size, zero_mod, x, y, recorder):
    model = make_model(x.dtype)
    opt = zero_mod.ZeroAdamW(model.parameters(), **HPARAMS)
    per_rank = x.shape[0] // world_size
    xs, ys = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
    freed, comms = [], []
    for _ in range(STEPS):
        nn.functional.mse_loss(model(xs), ys).backward()
        first = len(recorder.events)
        opt.step()
        # (op, bytes of its first and second tensor arguments): reduce-scatter and all-gather
        # give (output, input)
        comms.append([(e.op, *e.nbytes[:2]) for e in recorder.events[first:]])
        freed.append(all(p.grad is None for p in model.parameters()))
    states = [t for s in opt.inner.state.values() for t in s.values() if torch.is_tensor(t)]
    return {
        "params": [p.detach() for p in model.parameters()],
        "grads_freed": freed,
        "comms": comms,
        "optimizer_bytes": _bytes([opt.master] + states),
        "state_entries": len(opt.inner.state),
        "updated_numel": sum(p.numel() for g in opt.inner.param_groups for p in g["params"]),
    }


NUMEL = 113


def run_drill(lesson, world_size):
    """One Ray run per (learner source, world size), shared by the tests that grade it."""
    data = {dt: make_data(world_size, dt) for dt in (torch.float64, torch.float32)}  # fixed seeds
    return data, drill_once(lesson, "zero.py", train_rank, world_size, data, timeout=60)


@pytest.mark.points(2)
@pytest.mark.parametrize("world_size", [2, 3])
def test_matches_unsharded_adamw(lesson, ray_cluster, world_size):
    data, results = run_drill(lesson, world_size)
    shard = -(-NUMEL // world_size)
    for dtype, tol in [(torch.float64, 1e-10), (torch.float32, 1e-5)]:
        want = train_reference(dtype, *data[dtype])
        for rank, res in enumerate(r[dtype] for r in results):
            for got, ref in zip(res["params"], want):
                # float64: only the order of the gradient sum differs; float32: a few ulps of the
                # sum, amplified at most by Adam's 1/sqrt(v) over 4 steps of lr 0.05
                torch.testing.assert_close(got, ref, rtol=tol, atol=tol,
                                           msg=f"rank {rank} {dtype}: parameters differ from AdamW")
            assert res["grads_freed"] == [True] * STEPS, "ZeRO-2 drops the full gradients after step"
            assert res["state_entries"] == 1 and res["updated_numel"] == shard, \
                "AdamW must see only this rank's shard"
            elem = torch.empty((), dtype=dtype).element_size()
            # master shard + exp_avg + exp_avg_sq (+ AdamW's 4-byte float32 `step` scalar)
            assert res["optimizer_bytes"] == 3 * elem * shard + 4
            if dtype == torch.float32:  # the 12Ψ/N of the ZeRO paper, up to one padding element
                assert res["optimizer_bytes"] <= 12 * NUMEL / world_size + 12 + 4


@pytest.mark.points(2)
@pytest.mark.parametrize("world_size", [2, 3])
def test_step_moves_one_reduce_scatter_and_one_all_gather(lesson, ray_cluster, world_size):
    _, results = run_drill(lesson, world_size)
    shard = -(-NUMEL // world_size)
    for dtype in (torch.float64, torch.float32):
        elem = torch.empty((), dtype=dtype).element_size()
        for rank, res in enumerate(r[dtype] for r in results):
            for step, events in enumerate(res["comms"]):
                where = f"rank {rank} {dtype} step {step}"
                ops = [e[0] for e in events]
                assert "all_reduce" not in ops, (
                    f"{where}: all_reduce in step(): every rank receives the whole summed gradient "
                    "(2(N-1)/N of it on the wire, N times the bytes it keeps); ZeRO reduce-scatters it")
                scatter = [e for e in events if e[0] in REDUCE_SCATTER]
                gather = [e for e in events if e[0] in ALL_GATHER]
                assert len(scatter) == 1 and len(gather) == 1 and len(events) == 2, \
                    f"{where}: expected one reduce-scatter and one all-gather per step, got {ops}"
                assert scatter[0][1:] == (shard * elem, world_size * shard * elem), \
                    f"{where}: the reduce-scatter must take the padded flat gradient to one shard"
                assert gather[0][1:] == (world_size * shard * elem, shard * elem), \
                    f"{where}: the all-gather must take one updated shard to the padded flat vector"
                # ring cost per rank: exactly one all-reduce's worth, 2(N-1)/N of the padded vector
                sent = sum(wire_bytes(e, world_size) for e in events)
                assert sent == 2 * (world_size - 1) * shard * elem, f"{where}: {sent} bytes sent"
