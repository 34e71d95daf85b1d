"""runtime-09: NCCL's ring search on a topology graph.

The model follows NCCL v2.27.3-1:
* nodes GPU, NVS (NVSwitch), PCI (PCIe switch), CPU (a socket / NUMA node), NIC; links NVL, PCI,
  SYS (between CPUs), full duplex: each direction has the link's bandwidth (`src/graph/topo.h`);
* a path between two nodes is the route with the fewest hops, the widest among those
  (`src/graph/paths.cc` ncclTopoSetPaths, lines 36-110); its bandwidth is the smallest link
  bandwidth on it and its type the worst hop type (PATH_* in `topo.h` lines 56-97);
* a GPU may reach a NIC through a peer GPU over NVLink (PXN, `paths.cc` lines 691-712);
* a ring sends `bw` over every path it uses; a directed link used by several paths must carry all
  of them, and a PCI link on a PHB path that starts at a GPU carries 6/5 of it (Intel CPUs split P2P
  traffic into 64 B TLPs: INTEL_P2P_OVERHEAD, `topo.h` line 37, applied in `search.cc` followPath).
  The ring's bandwidth is the largest `bw` every link can carry (NCCL tries speeds from a table;
  here it is computed exactly). The search returns the ring with the largest bandwidth.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

# Path types, src/graph/topo.h lines 56-97 (smaller is better)
LOC, NVL, NVB, PIX, PXB, PXN, PHB, SYS = 0, 1, 2, 4, 5, 6, 8, 9
LOC_BW = 5000.0  # topo.h line 15: the bandwidth of "no hop"
INTEL_P2P_OVERHEAD = 6 / 5


@dataclass
class Topo:
    """A node graph. `kind[name]` in GPU/NVS/PCI/CPU/NIC; `links[(u, v)] = (type, GB/s)` holds both
    directions of each link; `nic_bw[nic]` is the NIC's network port, GB/s per direction."""

    kind: dict[str, str] = field(default_factory=dict)
    links: dict[tuple[str, str], tuple[str, float]] = field(default_factory=dict)
    nic_bw: dict[str, float] = field(default_factory=dict)
    paths: dict[tuple[str, str], Path] = field(default_factory=dict, repr=False)  # cache of path()

    def add(self, name: str, kind: str, port_bw: float = 0.0) -> Topo:
        self.kind[name] = kind
        if kind == "NIC":
            self.nic_bw[name] = port_bw
        return self

    def connect(self, u: str, v: str, ltype: str, bw: float) -> Topo:
        self.links[(u, v)] = self.links[(v, u)] = (ltype, bw)
        self.paths.clear()
        return self

    def neighbours(self, u: str) -> list[str]:
        return [b for (a, b) in self.links if a == u]

    @property
    def gpus(self) -> list[str]:
        return sorted(n for n, k in self.kind.items() if k == "GPU")

    @property
    def nics(self) -> list[str]:
        return sorted(n for n, k in self.kind.items() if k == "NIC")


@dataclass(frozen=True)
class Path:
    hops: tuple[tuple[str, str], ...]  # directed links, first to last
    bw: float  # GB/s
    type: int  # one of LOC ... SYS


def hop_type(topo: Topo, u: str, v: str, relay: bool) -> int:
    """Type of one hop u -> v (paths.cc lines 90-100); relay: u is a GPU in the middle of the path."""
    ltype = topo.links[(u, v)][0]
    if ltype == "NVL":
        return NVB if relay else NVL
    if ltype == "SYS":
        return SYS
    if "CPU" in (topo.kind[u], topo.kind[v]):
        return PHB  # a PCI hop into or out of the CPU's root complex
    if topo.kind[u] == topo.kind[v] == "PCI":
        return PXB  # switch to switch
    return PIX


def route(topo: Topo, src: str, dst: str) -> tuple[str, ...]:
    """Nodes of the route src .. dst: fewest hops, then the widest; None when unreachable.
    Only GPUs may end a route; a GPU in the middle is allowed as NVLink GPU -> GPU -> GPU (NVB).
    Equal candidates: the first found, neighbours in the order their links were added."""
    best = {src: (math.inf, (src,))}
    frontier = [src]
    while frontier and dst not in best:
        level: dict[str, tuple[float, tuple[str, ...]]] = {}
        for u in frontier:
            bw_u, nodes_u = best[u]
            for v in topo.neighbours(u):
                if v in best:
                    continue
                if u != src and topo.kind[u] in ("GPU", "NIC"):
                    nvb = (len(nodes_u) == 2 and v == dst and topo.kind[src] == topo.kind[v] == "GPU"
                           and topo.links[(nodes_u[0], u)][0] == topo.links[(u, v)][0] == "NVL")
                    if not nvb:
                        continue
                bw = min(bw_u, topo.links[(u, v)][1])
                if v not in level or bw > level[v][0]:
                    level[v] = (bw, nodes_u + (v,))
        best.update(level)
        frontier = list(level)
    return best[dst][1] if dst in best else None


def path(topo: Topo, src: str, dst: str) -> Path:
    """path_along(route(src, dst)), cached on the topology."""
    if (src, dst) not in topo.paths:
        topo.paths[(src, dst)] = Path((), LOC_BW, LOC) if src == dst else path_along(topo, route(topo, src, dst))
    return topo.paths[(src, dst)]


def path_along(topo: Topo, nodes: tuple[str, ...]) -> Path:
    """The Path through `nodes` (at least two): hops, bandwidth (smallest link) and type (worst hop)."""
    src = nodes[0]
    ### HINT: one hop per consecutive pair of nodes; a hop leaving a GPU that is not the source is a relay
    ### BEGIN SOLUTION
    hops = tuple(zip(nodes, nodes[1:]))
    bw = min(topo.links[h][1] for h in hops)
    ptype = max(hop_type(topo, u, v, relay=u != src and topo.kind[u] == "GPU") for u, v in hops)
    return Path(hops, bw, ptype)
    ### END SOLUTION


def local_gpu(topo: Topo, nic: str) -> str:
    """The GPU closest to a NIC (topo.cc ncclTopoGetLocal): widest path, then best type, then name."""
    return min(topo.gpus, key=lambda g: (-path(topo, g, nic).bw, path(topo, g, nic).type, g))


def gpu_nic_path(topo: Topo, gpu: str, nic: str) -> Path:
    """Path GPU -> NIC: direct, or PXN through the NIC's local GPU (paths.cc lines 691-712) when that
    peer sits at most PXB from the NIC, is NVLink-connected to us (type <= NVL), and either has a
    wider path to the NIC than ours or ours goes through a CPU (type > PXB). A PXN path is typed PXN."""
    direct = path(topo, gpu, nic)
    peer = local_gpu(topo, nic)
    ### HINT: the PXN path is our path to the peer followed by the peer's path to the NIC
    ### BEGIN SOLUTION
    if peer == gpu:
        return direct
    to_peer, peer_nic = path(topo, gpu, peer), path(topo, peer, nic)
    if peer_nic.type <= PXB and to_peer.type <= NVL and (peer_nic.bw > direct.bw or direct.type > PXB):
        return Path(to_peer.hops + peer_nic.hops, min(to_peer.bw, peer_nic.bw), PXN)
    return direct
    ### END SOLUTION


def ring_paths(topo: Topo, ring: list[str], nic: str | None = None) -> list[Path]:
    """Paths of a ring through `ring` (GPU names in order). Without a NIC the ring is closed:
    g0 -> g1 -> ... -> g[-1] -> g0. With a NIC it enters and leaves the node there:
    nic -> g0 -> ... -> g[-1] -> nic (the last hop may be PXN)."""
    ### BEGIN SOLUTION
    inner = [path(topo, a, b) for a, b in zip(ring, ring[1:])]
    if nic is None:
        return inner + ([path(topo, ring[-1], ring[0])] if len(ring) > 1 else [])
    return [path(topo, nic, ring[0])] + inner + [gpu_nic_path(topo, ring[-1], nic)]
    ### END SOLUTION


def paths_bandwidth(topo: Topo, paths: list[Path], nic: str | None = None) -> float:
    """The largest bw every directed link can carry when each path sends bw (6/5 bw on the PCI
    links of a PHB path that starts at a GPU), capped by the NIC's port; LOC_BW for no hops."""
    ### HINT: sum the load per directed link first; the answer is a minimum of capacity / load
    ### BEGIN SOLUTION
    load: dict[tuple[str, str], float] = defaultdict(float)
    for p in paths:
        from_gpu = bool(p.hops) and topo.kind[p.hops[0][0]] == "GPU"
        for h in p.hops:
            pci_penalty = p.type == PHB and from_gpu and topo.links[h][0] == "PCI"
            load[h] += INTEL_P2P_OVERHEAD if pci_penalty else 1.0
    bw = min((topo.links[h][1] / n for h, n in load.items()), default=LOC_BW)
    return min(bw, topo.nic_bw[nic]) if nic is not None else bw
    ### END SOLUTION


def ring_bandwidth(topo: Topo, ring: list[str], nic: str | None = None) -> float:
    return paths_bandwidth(topo, ring_paths(topo, ring, nic), nic)


def search_ring(topo: Topo) -> tuple[float, list[str], str | None]:
    """(bandwidth, ring, nic) of a ring through every GPU once with the largest ring_bandwidth.
    Without NICs nic is None; with NICs the ring enters and leaves through one NIC (rail-aligned)."""
    gpus = topo.gpus
    nics = topo.nics or [None]
    ### HINT: adding hops never raises a bandwidth, so a partial ring no better than the best so far can be dropped
    ### BEGIN SOLUTION
    best = (-1.0, None, None)

    def extend(chain: list[str], nic: str | None, partial: list[Path]) -> None:
        nonlocal best
        if paths_bandwidth(topo, partial, nic) <= best[0]:
            return  # cannot beat the best ring found so far
        if len(chain) == len(gpus):
            bw = ring_bandwidth(topo, chain, nic)
            if bw > best[0]:
                best = (bw, list(chain), nic)
            return
        for g in [g for g in gpus if g not in chain]:
            extend(chain + [g], nic, partial + [path(topo, chain[-1], g)])

    for nic in nics:
        firsts = gpus if nic is not None else gpus[:1]  # a closed ring can start anywhere
        for g in firsts:
            extend([g], nic, [path(topo, nic, g)] if nic is not None else [])
    return best
    ### END SOLUTION
