"""runtime-08: NCCL's all-reduce algorithms as schedules, and the cost model that picks one.

A schedule is a list of steps; a step is a list of `Transfer`s that happen at the same time.
The buffer of every rank is cut into chunks (`chunk_bounds`): p chunks for the ring, 2 halves for
the double binary tree (chunk t travels on tree t). Semantics of one step, for every transfer:
the source's chunk is read as it was at the start of the step, then written into the destination's
chunk: "reduce" adds it (dst += src), "copy" overwrites it (dst = src). After the last step every
rank must hold the sum over all ranks.

Cost model: NCCL v2.27.3-1 `src/graph/tuning.cc` (ncclTopoTuneModel, ncclTopoGetAlgoTime) and the
selection loop of `src/enqueue.cc` (topoGetAlgoInfo), restricted to all-reduce with the Tree and
Ring algorithms (no NVLS / CollNet / PAT), one graph for both algorithms, and LL128 enabled exactly
when the GPUs talk over NVLink (compute capability >= 7.0). Times in microseconds, sizes in bytes,
bandwidths in GB/s (1 GB/s = 1000 bytes/us).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple


class Transfer(NamedTuple):
    src: int
    dst: int
    chunk: int
    op: str  # "reduce": dst += src | "copy": dst = src


def chunk_bounds(n: int, nchunks: int) -> list[tuple[int, int]]:
    """[start, end) of each chunk of range(n); the first n % nchunks chunks are one longer."""
    base, extra = divmod(n, nchunks)
    bounds, start = [], 0
    for i in range(nchunks):
        end = start + base + (1 if i < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


# ---------------------------------------------------------------------------------------------
# Ring
# ---------------------------------------------------------------------------------------------
def ring_allreduce(p: int) -> list[list[Transfer]]:
    """Ring all-reduce over p ranks, p chunks: 2(p-1) steps (reduce-scatter, then all-gather),
    in every step each rank r sends one chunk to (r + 1) % p. No steps for p == 1.
    (Any chunk rotation is accepted; NCCL's runRing starts rank r with chunk r - 1.)"""
    ### HINT: after p - 1 reduce steps every rank owns exactly one fully reduced chunk; the all-gather starts by sending it
    ### BEGIN SOLUTION
    steps = []
    for s in range(p - 1):  # reduce-scatter: chunk (r - 1 - s) has s + 1 contributions on rank r
        steps.append([Transfer(r, (r + 1) % p, (r - 1 - s) % p, "reduce") for r in range(p)])
    for s in range(p - 1):  # all-gather: rank r owns chunk r (as in NCCL's runRing), sends it first
        steps.append([Transfer(r, (r + 1) % p, (r - s) % p, "copy") for r in range(p)])
    return steps
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------
# Double binary tree (NCCL v2.27.3-1 src/graph/trees.cc)
# ---------------------------------------------------------------------------------------------
def btree(nranks: int, rank: int) -> tuple[int, int, int]:
    """(parent, down0, down1) of `rank` in NCCL's binary tree (ncclGetBtree): rooted at 0, -1 = none."""
    ### HINT: everything follows from the lowest set bit of rank; rank 0's single child is the largest power of two < nranks
    ### BEGIN SOLUTION
    bit = 1
    while bit < nranks and not bit & rank:  # lowest set bit (for rank 0: first power of 2 >= nranks)
        bit <<= 1
    if rank == 0:
        return -1, -1, (bit >> 1 if nranks > 1 else -1)
    up = (rank ^ bit) | (bit << 1)  # xx01[0] -> xx10[0], xx11[0] -> xx10[0]
    if up >= nranks:
        up = rank ^ bit  # the right spine: parent is xx00[0]
    lowbit = bit >> 1
    down0 = rank - lowbit if lowbit else -1
    while lowbit and rank + lowbit >= nranks:  # shrink the right child until it exists
        lowbit >>= 1
    down1 = rank + lowbit if lowbit else -1
    return up, down0, down1
    ### END SOLUTION


def dtree(nranks: int, rank: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(tree0, tree1) of `rank`, each (parent, down0, down1) as ncclGetDtree builds them:
    tree 0 is btree; tree 1 is its mirror (nranks even) or its shift by one rank (nranks odd)."""
    ### HINT: map rank into the btree's numbering, ask btree, map every returned rank back (keep -1 as -1)
    ### BEGIN SOLUTION
    t0 = btree(nranks, rank)
    if nranks % 2 == 1:
        to_bt, from_bt = (lambda r: (r - 1) % nranks), (lambda r: (r + 1) % nranks)
    else:
        to_bt = from_bt = lambda r: nranks - 1 - r
    t1 = tuple(-1 if r == -1 else from_bt(r) for r in btree(nranks, to_bt(rank)))
    return t0, t1
    ### END SOLUTION


def tree_allreduce(p: int) -> list[list[Transfer]]:
    """Double-binary-tree all-reduce over p ranks, 2 chunks: chunk t is reduced up tree t to its
    root, then broadcast back down. Both trees run in the same steps. No steps for p == 1."""
    ### HINT: a rank may forward its partial sum only once every child's has arrived; a tree of depth H needs 2H steps
    ### BEGIN SOLUTION
    parents = [[dtree(p, r)[t][0] for r in range(p)] for t in (0, 1)]
    depth = [[0] * p for _ in (0, 1)]
    for t in (0, 1):
        for r in range(p):
            q = r
            while parents[t][q] != -1:  # walk up to the root
                q = parents[t][q]
                depth[t][r] += 1
    height = max(max(d) for d in depth)
    steps: list[list[Transfer]] = [[] for _ in range(2 * height)]
    for t in (0, 1):
        for r in range(p):
            d = depth[t][r]
            if d:
                steps[height - d].append(Transfer(r, parents[t][r], t, "reduce"))  # deepest first
                steps[height + d - 1].append(Transfer(parents[t][r], r, t, "copy"))  # root first
    return steps
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------
# Cost model (NCCL v2.27.3-1 src/graph/tuning.cc), all-reduce only
# ---------------------------------------------------------------------------------------------
ALGOS = ("tree", "ring")  # NCCL_ALGO_TREE = 0, NCCL_ALGO_RING = 1
PROTOS = ("LL", "LL128", "Simple")  # NCCL_PROTO_LL = 0, LL128 = 1, SIMPLE = 2

# tuning.cc lines 134-137: base latencies (us)
BASE_LAT = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
# tuning.cc lines 143-156: hardware latencies (us) per hop, by link kind
HW_LAT = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)},
}
# tuning.cc lines 165-189: caps (GB/s), rows Volta/Ampere/Hopper/Blackwell, columns 1 node/2 nodes/more
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
PER_CH_MAX_RING_LL128_BW = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (73.4, 73.4, 73.4))
PER_CH_MAX_TREE_LL128_BW = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (73.4, 73.4, 58.0))
PER_CH_MAX_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (77.4, 82.8, 72.0))
# tuning.cc lines 548-552: tree all-reduce correction, index log2(nbytes / 64) = 0..22
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)


@dataclass(frozen=True)
class Topo:
    """What ncclTopoTuneModel reads: ranks, nodes, the searched graph (channels and per-channel
    bandwidths inside a node / across nodes), the intra-node link kind, GPU and CPU."""

    n_ranks: int
    n_nodes: int
    n_channels: int
    bw_intra: float  # GB/s per channel (graph->bwIntra)
    bw_inter: float  # GB/s per channel (graph->bwInter)
    nvlink: bool = True  # graph->typeIntra == LINK_NVL, else PCI
    compcap: int = 90  # 70 Volta, 80 Ampere, 90 Hopper, 100 Blackwell
    amd_cpu: bool = False
    latency_inter: float = 0.0  # graph->latencyInter (us)


def table_index(topo: Topo) -> tuple[int, int, int]:
    """(row by compute capability, row of LL_MAX_BW, column by node count) as tuning.cc 232-236."""
    cc = 3 if topo.compcap >= 100 else 2 if topo.compcap >= 90 else 1 if topo.compcap >= 80 else 0
    col = topo.n_nodes - 1 if topo.n_nodes <= 2 else 2
    ll_row = cc if topo.n_nodes == 1 else 1 if topo.amd_cpu else 0  # multi-node: the CPU decides
    return cc, ll_row, col


def latency(topo: Topo, algo: str, proto: str) -> float:
    """All-reduce latency (us) of (algo, proto), tuning.cc lines 329-360."""
    p = PROTOS.index(proto)
    intra = HW_LAT["nvlink" if topo.nvlink else "pci"][algo][p]
    ppn = topo.n_ranks / topo.n_nodes
    inter = HW_LAT["net"]["tree" if ppn == 1 else algo][p] + topo.latency_inter
    if proto == "Simple":
        inter += topo.latency_inter  # the flush
    lat = BASE_LAT[algo][p]
    if algo == "tree":
        return lat + 2 * ((topo.n_ranks // topo.n_nodes - 1) * intra + (topo.n_nodes.bit_length() - 1) * inter)
    nsteps = 2 * (topo.n_ranks - 1)
    if topo.n_nodes == 1:
        return lat + nsteps * intra
    overhead = (2.0 if topo.amd_cpu else 1.0) * (3 if proto == "Simple" else 1)  # network post overhead
    inter_steps = 2 * (topo.n_nodes - 1)
    return lat + (nsteps - inter_steps) * max(intra, overhead) + inter_steps * inter


def bandwidth(topo: Topo, algo: str, proto: str) -> float:
    """All-reduce algorithm bandwidth (GB/s) of (algo, proto), tuning.cc lines 266-327; 0.0 when
    the protocol is disabled (LL128 off PCI-only boxes, tuning.cc 455-465)."""
    if proto == "LL128" and not (topo.nvlink and topo.compcap >= 70):
        return 0.0
    cc, ll_row, col = table_index(topo)
    bus = topo.n_channels * (topo.bw_intra if topo.n_nodes <= 2 else topo.bw_inter)
    ### HINT: LL carries 4 B of data per 8 B store, LL128 120 B per 128 B line; caps from the tables; bus -> algorithm bandwidth last
    ### BEGIN SOLUTION
    nch = topo.n_channels
    if algo == "ring":
        if proto == "LL":
            bus = min(LL_MAX_BW[ll_row][col], bus * 0.5)
        elif proto == "LL128":
            bus = min(bus * 0.92, nch * PER_CH_MAX_RING_LL128_BW[cc][col])
        return bus * topo.n_ranks / (2 * (topo.n_ranks - 1))  # ratio nRanks / nsteps
    bus = min(bus * 0.92, nch * PER_CH_MAX_TREE_BW[cc][col])
    if proto == "LL":
        bus = min(bus / 3.8, LL_MAX_BW[ll_row][col])
    elif proto == "LL128":
        bus = min(bus * (7 / 9 if topo.n_nodes == 1 else 120 / 128), nch * PER_CH_MAX_TREE_LL128_BW[cc][col])
    return bus * 0.5
    ### END SOLUTION


def algo_time(topo: Topo, algo: str, proto: str, nbytes: int) -> float:
    """Predicted time (us) of one all-reduce of nbytes, ncclTopoGetAlgoTime (tuning.cc 554-571),
    one operation (numPipeOps = 1); -1.0 when the protocol is disabled."""
    bw, lat = bandwidth(topo, algo, proto), latency(topo, algo, proto)
    ### HINT: time = latency + bytes / (1000 * GB/s); two size-dependent corrections sit in ncclTopoGetAlgoTime
    ### BEGIN SOLUTION
    if bw == 0:
        return -1.0
    log_size = (nbytes >> 6).bit_length() - 1  # log2i(nbytes >> 6), -1 for 0
    if algo == "tree" and 0 <= log_size < 23:
        bw *= TREE_CORRECTION[PROTOS.index(proto)][log_size]
    if (algo == "ring" and proto == "Simple" and topo.n_nodes > 1
            and nbytes // (topo.n_channels * topo.n_ranks) >= 64):
        lat *= 1.9 if topo.compcap < 80 else 1.4  # plateau effect of the ring
    return lat + nbytes / (1000 * bw)
    ### END SOLUTION


def choose(topo: Topo, nbytes: int) -> tuple[str, str]:
    """The (algo, proto) NCCL runs an all-reduce of nbytes with: the smallest algo_time, scanned
    tree before ring and LL, LL128, Simple within each (a tie keeps the first). One rank: ring/Simple."""
    if topo.n_ranks == 1:
        return "ring", "Simple"
    ### BEGIN SOLUTION
    best, best_time = None, math.inf
    for algo in ALGOS:
        for proto in PROTOS:
            t = algo_time(topo, algo, proto, nbytes)
            if 0 <= t < best_time:
                best, best_time = (algo, proto), t
    return best
    ### END SOLUTION
