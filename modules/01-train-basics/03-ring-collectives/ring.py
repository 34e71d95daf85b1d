"""train-03: ring reduce-scatter + ring all-gather = all-reduce.

Every rank holds a 1-D tensor of the same length S and talks only to its ring neighbours through a
`comm` (see pytest_hpccourse.runtimes.ray.drills.Comm): `comm.send(dst, tensor)` (asynchronous, copies),
`comm.recv(src)` (blocks for the next message from src), `comm.rank`, `comm.world_size`.

The tensor is cut into N = world_size contiguous chunks (`chunk_bounds`). Convention used below,
the same as NCCL's ring: rank r sends to r + 1 and receives from r - 1 (mod N), and after the
reduce-scatter rank r owns the fully reduced chunk (r + 1) % N.
"""

from __future__ import annotations

import torch


def chunk_bounds(n: int, world_size: int) -> list[tuple[int, int]]:
    """[start, end) of each of the world_size chunks of range(n); the first n % world_size chunks
    are one element longer (chunks may be empty when n < world_size)."""
    base, extra = divmod(n, world_size)
    bounds, start = [], 0
    for i in range(world_size):
        end = start + base + (1 if i < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def ring_reduce_scatter(comm, x: torch.Tensor) -> tuple[int, torch.Tensor]:
    """Sum x over all ranks; returns (own, values) where own = (rank + 1) % N is the chunk this
    rank ends up owning and values is that chunk of the global sum. x is not modified."""
    r, n = comm.rank, comm.world_size
    right, left = (r + 1) % n, (r - 1) % n
    bounds = chunk_bounds(x.numel(), n)
    acc = x.detach().clone()  # partial sums accumulate here; the caller's tensor stays intact
    ### HINT: N - 1 steps; at step t send chunk (r - t) % N, receive and accumulate chunk (r - t - 1) % N
    ### BEGIN SOLUTION
    for step in range(n - 1):
        send_idx = (r - step) % n  # the chunk that has collected `step + 1` contributions here
        recv_idx = (r - step - 1) % n  # the chunk the left neighbour is sending us right now
        lo, hi = bounds[send_idx]
        comm.send(right, acc[lo:hi])
        lo, hi = bounds[recv_idx]
        acc[lo:hi] += comm.recv(left)
    own = (r + 1) % n  # received last, at step N - 2: it now holds all N contributions
    lo, hi = bounds[own]
    return own, acc[lo:hi].clone()
    ### END SOLUTION


def ring_all_gather(comm, out: torch.Tensor, own: int) -> torch.Tensor:
    """`out` already holds this rank's finished chunk `own`; fill in every other chunk, in place,
    by passing chunks around the ring. Returns out."""
    r, n = comm.rank, comm.world_size
    right, left = (r + 1) % n, (r - 1) % n
    bounds = chunk_bounds(out.numel(), n)
    ### HINT: the same ring walk, shifted so that step 0 sends `own`; overwrite instead of add
    ### BEGIN SOLUTION
    for t in range(n - 1):
        send_idx = (own - t) % n  # own at t = 0, then whatever arrived at step t - 1
        recv_idx = (own - t - 1) % n  # the left neighbour owns chunk own - 1
        lo, hi = bounds[send_idx]
        comm.send(right, out[lo:hi])
        lo, hi = bounds[recv_idx]
        out[lo:hi] = comm.recv(left)
    return out
    ### END SOLUTION


def ring_all_reduce(comm, x: torch.Tensor) -> torch.Tensor:
    """All-reduce (sum) = reduce-scatter, then all-gather of the reduced chunks."""
    own, values = ring_reduce_scatter(comm, x)
    out = torch.full_like(x, float("nan"))  # poisoned: the all-gather must write every chunk
    lo, hi = chunk_bounds(x.numel(), comm.world_size)[own]
    out[lo:hi] = values
    return ring_all_gather(comm, out, own)
