"""Tests for train-04. Reference: the same model trained in one process on the whole batch
(float64), which data parallelism with averaged gradients must reproduce step for step."""

import random

import pytest
import torch
from torch import nn

from pytest_hpccourse.runtimes.ray.collectives import record_collectives
from pytest_hpccourse.runtimes.ray.drills import drill_once


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
    """Identity whose backward writes a marker into the collective log."""

    @staticmethod
    def forward(ctx, x, box):
        ctx.box = box
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if ctx.box[0] is not None:  # None in the single-process reference
            ctx.box[0].mark("probe")
        return grad, None


class Probed(nn.Module):
    def __init__(self):
        super().__init__()
        self.box = [None]

    def forward(self, x):
        return _Probe.apply(x, self.box)


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
    # every collective of the learner's code is logged with the phase it was issued (and waited) in
    with record_collectives() as recorder:
        return {cap: train_with_cap(rank, world_size, ddp_mod, x, y, cap, recorder) for cap in caps}


def train_with_cap(rank, world_size, ddp_mod, x, y, cap, recorder):
    model = make_model(seed=rank)  # different on purpose: the wrapper must broadcast rank 0's
    params = list(model.parameters())
    for i, p in enumerate(params):
        # Registered before the wrapper's hooks, so it runs first: "gradient i is complete".
        p.register_post_accumulate_grad_hook(lambda _p, i=i: recorder.mark("ready", i))
    model[1].box[0] = recorder
    recorder.phase = "init"
    ddp = ddp_mod.BucketedDDP(model, bucket_cap_bytes=cap)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    per_rank = x.shape[0] // world_size
    xs, ys = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
    steps = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        ddp.fired.clear()
        first = len(recorder.events)
        recorder.phase = "forward"
        loss = nn.functional.mse_loss(ddp(xs), ys)
        recorder.phase = "backward"
        loss.backward()
        recorder.phase = "finish"
        ddp.finish_gradient_sync()
        recorder.phase = "step"
        opt.step()
        # markers stay tuples; collectives become (op, numel, phase, async, ((method, phase), ...))
        log = [e if isinstance(e, tuple) else (e.op, e.numel, e.phase, e.async_op, tuple(e.touched))
               for e in recorder.events[first:]]
        steps.append({"log": log, "fired": [i for b in ddp.fired for i in ddp.buckets[b]]})
    return {"params": [p.detach() for p in model.parameters()], "steps": steps,
            "sizes": [p.numel() * p.element_size() for p in params],
            "numels": [p.numel() for p in params]}


def expected_backward_log(sizes, numels, cap):
    """Gradients land last parameter first; a bucket's all-reduce follows its last gradient at once."""
    buckets = reference_buckets(sizes, cap)
    left = [len(b) for b in buckets]
    bucket_of = {i: k for k, b in enumerate(buckets) for i in b}
    log = []
    for i in reversed(range(len(sizes))):
        log.append(("ready", i))
        left[bucket_of[i]] -= 1
        if left[bucket_of[i]] == 0:
            log.append(("all_reduce", sum(numels[j] for j in buckets[bucket_of[i]])))
        # (the probe marker is checked separately)
    return log


def check_overlap(res, cap, rank):
    """The all-reduces are launched async inside backward, one per bucket, each the moment its last
    gradient lands, and waited for only in finish_gradient_sync."""
    want = expected_backward_log(res["sizes"], res["numels"], cap)
    for step, st in enumerate(res["steps"]):
        where = f"rank {rank}, cap {cap} B, step {step}"
        log = st["log"]
        blocking = [e for e in log if len(e) == 5 and e[2] == "backward" and not e[3]]
        assert not blocking, (f"{where}: {blocking[0][0]} issued with async_op=False inside a gradient "
                              "hook: backward stalls until the communication is over (no overlap)")
        early = [(e[0], t) for e in log if len(e) == 5 for t in e[4] if t[1] == "backward"]
        assert not early, (f"{where}: work.{early[0][1][0]}() called during backward: waiting for a "
                           "bucket inside backward stalls it; wait for all of them in finish_gradient_sync")
        got = [e if len(e) == 2 else (e[0], e[1]) for e in log
               if e[0] == "ready" or (len(e) == 5 and e[2] == "backward")]
        assert got == want, (f"{where}: during backward, expected gradients and bucket all-reduces "
                             f"in the order {want}, got {got}")
        late = [e[0] for e in log if len(e) == 5 and e[2] != "backward"]
        assert not late, f"{where}: collectives issued outside backward: {late}"
        for e in (e for e in log if len(e) == 5):
            waits = [name for name, phase in e[4] if name in ("wait", "get_future", "synchronize")]
            assert waits and all(phase == "finish" for _, phase in e[4]), \
                f"{where}: every bucket's work must be waited for in finish_gradient_sync, got {e[4]}"
        assert st["fired"] == list(range(len(res["sizes"])))[::-1], \
            f"{where}: self.fired must list the buckets in launch order, got parameter order {st['fired']}"


CAPS = [400, 1, 10**9]  # float64 bytes of (w1, b1, w2, b2, w3, b3) = 728, 104, 1144, 88, 264, 24


def run_drill(lesson, world_size):
    """One Ray run per (learner source, world size), shared by the tests that grade it."""
    x, y = make_data(world_size, per_rank=5, seed=world_size)  # fixed seed: the same data on every call
    return x, y, drill_once(lesson, "ddp.py", train_rank, world_size, x, y, CAPS, timeout=60)


@pytest.mark.points(2)
@pytest.mark.parametrize("world_size", [2, 3])
def test_matches_single_process_training(lesson, ray_cluster, world_size):
    x, y, per_rank = run_drill(lesson, world_size)
    want = train_reference(x, y)
    for cap in CAPS:
        for rank, res in enumerate(r[cap] for r in per_rank):
            for got, ref in zip(res["params"], want):
                # sums of 2-3 float64 gradients in another order: ~1e-16 relative per step
                torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12,
                                           msg=f"rank {rank}, cap {cap}: parameters differ")


@pytest.mark.points(2)
@pytest.mark.parametrize("world_size", [2, 3])
def test_all_reduce_overlaps_backward(lesson, ray_cluster, world_size):
    _, _, per_rank = run_drill(lesson, world_size)
    for cap in CAPS:
        for rank, res in enumerate(r[cap] for r in per_rank):
            check_overlap(res, cap, rank)
            if cap == 400:  # 4 buckets: [b3 w3 b2], [w2], [b1], [w1]
                for st in res["steps"]:
                    before = st["log"][:st["log"].index(("probe",))]
                    launched = sum(1 for e in before if e[0] == "all_reduce")
                    assert launched >= 2, (f"rank {rank}: only {launched} bucket(s) launched when "
                                           "backward reached layer 1: no overlap")
