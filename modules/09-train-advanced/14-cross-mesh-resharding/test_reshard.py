"""Tests for train-14.

Plans: checked element by element against numpy ownership masks (each destination element exactly
once, from a rank that holds it, nothing sent that the destination already holds, so the bytes equal
the minimum). Runs: 4 gloo ranks (Ray actors) execute the plans; data against slices of the global
tensor, wire bytes per rank against the minimum, results against DTensor `redistribute` where it applies.
"""

import random

import numpy as np
import pytest
import torch

from pytest_hpccourse.runtimes.ray.collectives import record_collectives
from pytest_hpccourse.runtimes.ray.drills import run_ranks


@pytest.fixture(scope="module")
def rs(lesson):
    return lesson.load("reshard.py")


def ref_chunks(n, parts):
    """torch.chunk itself, padded with empty pieces to `parts` (what DTensor's Shard does)."""
    idx = torch.arange(n)
    pieces = [(int(c[0]), int(c[-1]) + 1) for c in torch.chunk(idx, parts) if len(c)] if n else []
    return pieces + [(n, n)] * (parts - len(pieces))


def ref_slices(shape, mesh, dim, rank):
    if rank not in mesh:
        return None
    sl = [slice(0, n) for n in shape]
    if dim is not None:
        sl[dim] = slice(*ref_chunks(shape[dim], len(mesh))[mesh.index(rank)])
    return tuple(sl)


def holds(shape, mesh, dim, rank):
    """Boolean mask over the global tensor: the elements `rank` holds."""
    mask = np.zeros(shape, dtype=bool)
    sl = ref_slices(shape, mesh, dim, rank)
    if sl is not None:
        mask[sl] = True
    return mask


def min_bytes_received(shape, src, dst, rank, itemsize):
    """Elements of rank's destination shard that it does not already hold under the source layout."""
    need = holds(shape, dst[0], dst[1], rank) & ~holds(shape, src[0], src[1], rank)
    return int(need.sum()) * itemsize


def check_plan(rs, shape, src, dst):
    plan = rs.plan_reshard(shape, rs.Layout(*src), rs.Layout(*dst))
    got = {r: np.zeros(shape, dtype=np.int64) for r in range(8)}
    for t in plan:
        sl = tuple(slice(a, b) for a, b in t.box)
        piece = np.zeros(shape, dtype=bool)
        piece[sl] = True
        assert piece.sum() > 0, f"{src}->{dst}: empty transfer {t}"
        assert (piece <= holds(shape, src[0], src[1], t.src)).all(), f"{src}->{dst}: rank {t.src} sends {t.box} it does not hold"
        if t.src != t.dst:
            assert not (piece & holds(shape, src[0], src[1], t.dst)).any(), \
                f"{src}->{dst}: {t} sends rank {t.dst} elements it already holds"
        got[t.dst] += piece
    for r in range(8):
        want = holds(shape, dst[0], dst[1], r)
        assert (got[r] == want).all(), f"shape {shape} {src}->{dst}: rank {r} receives elements {got[r].sum()} times " \
                                       f"(max {got[r].max()}), wants each of {want.sum()} once"
    wire = sum(rs.numel(t.box) for t in plan if t.src != t.dst)
    assert wire == sum(min_bytes_received(shape, src, dst, r, 1) for r in range(8)), f"{src}->{dst}: {wire} elements moved"


MESHES = [(0, 1), (0, 1, 2), (1, 2, 3), (0, 1, 2, 3), (3, 1), (2, 0, 1), (1, 2, 3, 4, 5), (0,), (4, 5, 6, 7)]


def test_chunk_ranges_follow_torch_chunk(rs):
    for n in [0, 1, 2, 3, 5, 7, 10, 13]:
        for parts in [1, 2, 3, 4, 5, 6]:
            assert [rs.chunk_range(n, parts, i) for i in range(parts)] == ref_chunks(n, parts), (n, parts)


@pytest.mark.points(2)
def test_plans_deliver_every_element_once_with_minimal_bytes(rs):
    rng = random.Random(14)
    for _ in range(160):
        ndim = rng.choice([1, 2, 2, 3])
        shape = tuple(rng.choice([1, 2, 3, 5, 6, 7, 9, 11]) for _ in range(ndim))
        src = (rng.choice(MESHES), rng.choice([None] + list(range(ndim))))
        dst = (rng.choice(MESHES), rng.choice([None] + list(range(ndim))))
        check_plan(rs, shape, src, dst)


# ---------------------------------------------------------------- on 4 gloo ranks

CASES = [  # (shape, (src mesh, src dim), (dst mesh, dst dim)); ranks 0..3
    ((7, 5), ((0, 1), 0), ((1, 2, 3), 0)),  # TP 2 -> TP 3, overlapping meshes, uneven rows
    ((9, 6), ((0, 1), 1), ((0, 1, 2, 3), 0)),  # column shards -> row shards, TP 2 -> 4
    ((5, 11), ((0, 1, 2, 3), 0), ((0, 1, 2, 3), 1)),  # Shard(0) -> Shard(1): DTensor does this one
    ((6, 7), ((0, 1), None), ((0, 1, 2), 1)),  # replicated -> sharded: ranks 0, 1 copy locally
    ((7, 5), ((0, 1, 2, 3), 0), ((0, 1, 2, 3), None)),  # Shard(0) -> Replicate: DTensor does this one
    ((3, 5), ((0, 1, 2, 3), 0), ((3, 2), 0)),  # rank 3 holds no rows (torch.chunk gives 3 pieces)
    ((4, 3, 5), ((0, 1, 2), 2), ((3, 1), 0)),  # 3-D, mesh given out of rank order
]


def global_tensor(i, shape):
    g = torch.Generator().manual_seed(1400 + i)
    if i % 3 == 2:  # integers: an exact check that no value was summed or scaled
        return torch.randint(0, 1000, shape, generator=g)
    return torch.randn(shape, generator=g, dtype=torch.float64 if i % 2 else torch.float32)


def reshard_rank(rank, world_size, rs, cases):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    results = []
    for i, (shape, src, dst) in enumerate(cases):
        full = global_tensor(i, shape)
        sl = ref_slices(shape, src[0], src[1], rank)
        local = None if sl is None else full[sl].clone()
        with record_collectives() as log:
            out = rs.reshard(shape, rs.Layout(*src), rs.Layout(*dst), rank, local, full.dtype)
        ops = [(e.op, e.nbytes) for e in log.collectives]
        results.append((out, ops))
    mesh = DeviceMesh("cpu", list(range(world_size)))
    dtensor = {}
    for i, (shape, src, dst) in enumerate(cases):
        if src[0] == dst[0] == tuple(range(world_size)) and src[1] is not None:
            d = distribute_tensor(global_tensor(i, shape), mesh, [Shard(src[1])])
            target = Replicate() if dst[1] is None else Shard(dst[1])
            dtensor[i] = d.redistribute(mesh, [target]).to_local().clone()
    return results, dtensor


@pytest.mark.requires("ray")
@pytest.mark.points(2)
def test_reshard_on_gloo_ranks_moves_minimal_bytes(rs, ray_cluster):
    per_rank = run_ranks(reshard_rank, 4, rs, CASES, timeout=90)
    for i, (shape, src, dst) in enumerate(CASES):
        full = global_tensor(i, shape)
        for rank, (results, dtensor) in enumerate(per_rank):
            out, ops = results[i]
            sl = ref_slices(shape, dst[0], dst[1], rank)
            where = f"case {i} {shape} {src}->{dst}, rank {rank}"
            if sl is None:
                assert out is None, where
            else:
                assert out is not None and out.dtype == full.dtype, where
                assert torch.equal(out, full[sl]), f"{where}: wrong data (-7777 = never written)"
            bad = [op for op, _ in ops if op not in ("send", "recv", "isend", "irecv", "batch_isend_irecv")]
            assert not bad, f"{where}: uses {bad}; resharding here is point-to-point"
            if i in dtensor:
                assert torch.equal(dtensor[i], out), f"{where}: differs from DTensor redistribute"
        total = sum(sum(sum(nb) for _, nb in per_rank[r][0][i][1]) for r in range(4))
        need = 2 * sum(min_bytes_received(shape, src, dst, r, full.element_size()) for r in range(4))
        assert total == need, f"case {i} {src}->{dst}: {total} B on the wire (sent + received), minimum {need} B"
