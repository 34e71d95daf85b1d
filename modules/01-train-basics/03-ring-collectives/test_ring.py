"""Tests for train-03.

Two transports run the same learner code: threads in this process (fast, many world sizes) and
Ray actors through pytest_hpccourse.runtimes.ray.drills.run_actors (the real thing: separate processes,
every message serialized). References: a float64 sum of all ranks' inputs, and the exact byte count
a ring must send.
"""

import itertools
import queue
import threading
from collections import Counter

import pytest
import torch

from pytest_hpccourse.runtimes.ray.drills import run_actors


class ThreadComm:
    """The Comm interface over in-process queues (one FIFO per directed pair of ranks)."""

    def __init__(self, rank, world_size, pipes):
        self.rank, self.world_size, self._pipes = rank, world_size, pipes
        self.bytes_sent = 0
        self.messages_to = Counter()

    def send(self, dst, tensor):
        assert isinstance(tensor, torch.Tensor) and dst != self.rank
        self.bytes_sent += tensor.numel() * tensor.element_size()
        self.messages_to[dst] += 1
        self._pipes[self.rank, dst].put(tensor.detach().clone())  # a copy, like the network

    def recv(self, src):
        return self._pipes[src, self.rank].get(timeout=20)

    def stats(self):
        return {"bytes_sent": self.bytes_sent, "messages_to": dict(self.messages_to)}


def run_threads(fn, world_size, *args):
    pipes = {(i, j): queue.Queue() for i in range(world_size) for j in range(world_size)}
    results, errors = [None] * world_size, []

    def body(rank):
        try:
            results[rank] = fn(ThreadComm(rank, world_size, pipes), *args)
        except BaseException as e:  # noqa: BLE001
            errors.append((rank, e))

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a rank is stuck (waiting for a message never sent)"
    if errors:
        rank, e = errors[0]
        raise AssertionError(f"rank {rank} raised {e!r}") from e
    return results


def make_inputs(world_size, n, kind, seed):
    g = torch.Generator().manual_seed(seed)
    if kind == "int":  # integer-valued float64: every summation order gives the exact sum
        return [torch.randint(-1000, 1000, (n,), generator=g).double() for _ in range(world_size)]
    return [torch.randn(n, generator=g) * 10 for _ in range(world_size)]


# Rank functions: module level, shipped to the actors by value together with the learner module.
def all_reduce_rank(comm, ring, inputs):
    before = comm.stats()  # the counters are cumulative over the comm's lifetime
    x = inputs[comm.rank].clone()
    out = ring.ring_all_reduce(comm, x)
    after = comm.stats()
    stats = {"bytes_sent": after["bytes_sent"] - before["bytes_sent"],
             "messages_to": {k: v - before["messages_to"].get(k, 0)
                             for k, v in after["messages_to"].items()
                             if v != before["messages_to"].get(k, 0)}}
    return out, torch.equal(x, inputs[comm.rank]), stats


def all_reduce_many_rank(comm, ring, cases):
    """Several all-reduces in one call (one actor round trip per world size)."""
    return [all_reduce_rank(comm, ring, inputs) for inputs in cases]


def all_gather_rank(comm, ring, chunks_by_rank, n):
    own = (comm.rank + 1) % comm.world_size
    lo, hi = ring.chunk_bounds(n, comm.world_size)[own]
    out = torch.full((n,), float("nan"), dtype=torch.float64)  # poison everything but our chunk
    out[lo:hi] = chunks_by_rank[comm.rank]
    return ring.ring_all_gather(comm, out, own), comm.stats()


def expected_bytes(n, world_size, rank, elem):
    """Bytes a ring all-reduce sends from `rank`: every chunk except one per phase, once each.
    Reduce-scatter skips chunk (r+1) % N (it arrives last), all-gather skips (r+2) % N."""
    sizes = [hi - lo for lo, hi in _bounds(n, world_size)]
    return elem * (2 * n - sizes[(rank + 1) % world_size] - sizes[(rank + 2) % world_size])


def _bounds(n, world_size):  # independent of the lesson file
    base, extra = divmod(n, world_size)
    starts = [i * base + min(i, extra) for i in range(world_size + 1)]
    return list(itertools.pairwise(starts))


def check_all_reduce(results, inputs, kind, world_size):
    want = torch.stack([x.double() for x in inputs]).sum(0)
    n = want.numel()
    first = results[0][0]
    for rank, (out, untouched, stats) in enumerate(results):
        assert untouched, f"rank {rank}: the input tensor was modified"
        assert not torch.isnan(out).any(), f"rank {rank}: some chunks were never gathered"
        if kind == "int":
            assert torch.equal(out, want), f"rank {rank}: wrong sum"
        else:  # fp32 sums of N values of magnitude ~10: a few ulps
            torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-4)
        assert torch.equal(out, first), "ranks disagree: each chunk must be reduced once, then copied"
        elem = inputs[0].element_size()
        assert stats["bytes_sent"] == expected_bytes(n, world_size, rank, elem)
        # the 2(N-1)/N·S of the textbook, up to one chunk of rounding per phase
        assert abs(stats["bytes_sent"] - 2 * (world_size - 1) / world_size * n * elem) <= 2 * elem
        right = (rank + 1) % world_size
        assert stats["messages_to"] == {right: 2 * (world_size - 1)}, "a ring talks to its right neighbour only"


SIZES = [1, 2, 5, 7, 64, 1001]  # below N, not divisible by N, and larger


@pytest.mark.parametrize("world_size", [2, 3, 4, 5, 7])
@pytest.mark.parametrize("kind", ["int", "fp32"])
def test_all_reduce_threads(lesson, world_size, kind):
    ring = lesson.load("ring.py")
    for n in SIZES:
        inputs = make_inputs(world_size, n, kind, seed=world_size * 1000 + n)
        results = run_threads(all_reduce_rank, world_size, ring, inputs)
        check_all_reduce(results, inputs, kind, world_size)


@pytest.mark.parametrize("world_size", [2, 3, 6])
def test_all_gather_fills_every_chunk(lesson, world_size):
    ring = lesson.load("ring.py")
    for n in [1, 4, 13, 100]:
        full = make_inputs(1, n, "int", seed=n)[0]
        bounds = _bounds(n, world_size)
        chunks = [full[slice(*bounds[(r + 1) % world_size])] for r in range(world_size)]
        results = run_threads(all_gather_rank, world_size, ring, chunks, n)
        for rank, (out, stats) in enumerate(results):
            assert torch.equal(out, full), f"rank {rank}, n={n}: gathered tensor differs"
            sizes = [hi - lo for lo, hi in bounds]
            assert stats["bytes_sent"] == 8 * (n - sizes[(rank + 2) % world_size])


@pytest.mark.points(3)
@pytest.mark.parametrize("world_size", [2, 3])
def test_all_reduce_on_ray_actors(lesson, ray_cluster, world_size):
    ring = lesson.load("ring.py")
    cases = [(kind, make_inputs(world_size, n, kind, seed=7 * n + world_size))
             for kind in ["int", "fp32"] for n in SIZES]
    per_rank = run_actors(all_reduce_many_rank, world_size, ring, [c[1] for c in cases], timeout=60)
    for i, (kind, inputs) in enumerate(cases):
        check_all_reduce([per_rank[r][i] for r in range(world_size)], inputs, kind, world_size)
