"""train-14: cross-mesh resharding — plan the point-to-point transfers that move a tensor from one
1-D mesh layout to another (different TP size, different shard dim, overlapping ranks) and run them."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import torch
import torch.distributed as dist

Box = tuple[tuple[int, int], ...]  # (start, stop) per tensor dim, in global indices


@dataclass(frozen=True)
class Layout:
    """A tensor on a 1-D mesh: Shard(dim) over `mesh` (global ranks in mesh order), or Replicate if dim is None."""

    mesh: tuple[int, ...]
    dim: int | None


@dataclass(frozen=True)
class Transfer:
    """`box` of the global tensor goes from rank `src` to rank `dst` (src == dst: a local copy)."""

    src: int
    dst: int
    box: Box


def chunk_range(n: int, parts: int, i: int) -> tuple[int, int]:
    """[start, stop) of piece i when torch.chunk splits n elements into `parts` (DTensor's Shard rule)."""
    ### HINT: every piece but the last non-empty ones has the same size; trailing pieces may be empty
    ### BEGIN SOLUTION
    size = -(-n // parts)
    return min(i * size, n), min((i + 1) * size, n)
    ### END SOLUTION


def local_box(shape: tuple[int, ...], layout: Layout, rank: int) -> Box | None:
    """The part of the global tensor that `rank` holds under `layout`; None if rank is not in the mesh."""
    if rank not in layout.mesh:
        return None
    box = [(0, n) for n in shape]
    if layout.dim is not None:
        box[layout.dim] = chunk_range(shape[layout.dim], len(layout.mesh), layout.mesh.index(rank))
    return tuple(box)


def intersect(a: Box, b: Box) -> Box:
    """The overlap of two boxes (possibly empty: some stop <= start)."""
    return tuple((max(a0, b0), min(a1, b1)) for (a0, a1), (b0, b1) in zip(a, b))


def numel(box: Box) -> int:
    return prod(max(0, stop - start) for start, stop in box)


def relative(box: Box, base: Box) -> tuple[slice, ...]:
    """Slices that select global `box` inside a local tensor that holds global `base`."""
    return tuple(slice(s - b, e - b) for (s, e), (b, _) in zip(box, base))


def plan_reshard(shape: tuple[int, ...], src: Layout, dst: Layout) -> list[Transfer]:
    """Transfers that build every destination shard: each destination element arrives exactly once,
    from a rank that holds it under `src`; an element the destination rank already holds is a local
    copy (src == dst); no transfer is empty."""
    plan: list[Transfer] = []
    ### BEGIN SOLUTION
    for d in dst.mesh:
        want = local_box(shape, dst, d)
        if numel(want) == 0:
            continue
        if src.dim is None:  # replicated source: a local copy if d holds it, else one holder sends it all
            owner = d if d in src.mesh else src.mesh[dst.mesh.index(d) % len(src.mesh)]
            plan.append(Transfer(owner, d, want))
            continue
        for s in src.mesh:
            piece = intersect(want, local_box(shape, src, s))
            if numel(piece) > 0:
                plan.append(Transfer(s, d, piece))
    ### END SOLUTION
    return plan


def run_plan(plan: list[Transfer], shape: tuple[int, ...], src: Layout, dst: Layout, rank: int,
             src_local: torch.Tensor | None, out: torch.Tensor | None) -> None:
    """This rank's part of `plan` with point-to-point ops (isend/irecv or batch_isend_irecv): send the
    pieces it owns, receive its pieces into `out` (its destination shard, pre-filled), copy local pieces."""
    src_box, dst_box = local_box(shape, src, rank), local_box(shape, dst, rank)
    ### BEGIN SOLUTION
    works, arrivals = [], []
    for t in plan:
        if t.src == rank and t.dst == rank:
            out[relative(t.box, dst_box)] = src_local[relative(t.box, src_box)]
        elif t.src == rank:
            works.append(dist.isend(src_local[relative(t.box, src_box)].contiguous(), t.dst))
        elif t.dst == rank:
            buf = torch.empty([e - s for s, e in t.box], dtype=out.dtype)
            works.append(dist.irecv(buf, t.src))
            arrivals.append((t.box, buf))
    for w in works:
        w.wait()
    for box, buf in arrivals:
        out[relative(box, dst_box)] = buf
    ### END SOLUTION


def reshard(shape: tuple[int, ...], src: Layout, dst: Layout, rank: int,
            src_local: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """Run on every rank of the process group (also ranks in neither mesh): returns this rank's
    destination shard, or None if it is not in the destination mesh."""
    dst_box = local_box(shape, dst, rank)
    out = None
    if dst_box is not None:
        out = torch.full([e - s for s, e in dst_box], -7777, dtype=dtype)  # poison: unwritten stays visible
    run_plan(plan_reshard(shape, src, dst), shape, src, dst, rank, src_local, out)
    return out
