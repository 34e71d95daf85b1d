"""platform-04: GPU -> NIC data paths, GPUDirect RDMA eligibility and NIC affinity.

A node's PCIe/NVLink topology is a graph: GPUs, NICs, PCIe switches ("PCI") and CPU sockets ("CPU",
one root complex + its memory each), joined by links of kind "NVL" (NVLink), "PCI" (a PCIe link) or
"SYS" (the inter-socket link, UPI/xGMI). Bandwidths are GB/s per direction.

The classification follows NCCL's `ncclTopoSetPaths` (src/graph/paths.cc): a path's type is the
worst (largest) hop type along it, a path's bandwidth is its slowest link, and the path NCCL keeps
is the one with the fewest hops (ties: the larger bandwidth). GPUs and NICs are end points here:
traffic is never forwarded through them (we leave out NCCL's PXN / NVB relays).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

# NCCL's path types, nearest first (the subset used here; NCCL interleaves NVB, C2C, P2C, PXN).
PATH_TYPES = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
LEVEL = {name: i for i, name in enumerate(PATH_TYPES)}
DEFAULT_GDR_LEVEL = "PXB"  # ncclTopoCheckGdr: int netGdrLevel = PATH_PXB


@dataclass(frozen=True)
class Link:
    a: str
    b: str
    kind: str  # "NVL" | "PCI" | "SYS"
    bw: float  # GB/s per direction

    def other(self, n: str) -> str:
        return self.b if n == self.a else self.a


@dataclass
class Topology:
    kinds: dict[str, str]  # node -> "GPU" | "NIC" | "PCI" | "CPU"
    links: list[Link]
    nic_bw: dict[str, float] = field(default_factory=dict)  # NIC port speed, GB/s
    mem_bw: dict[str, float] = field(default_factory=dict)  # CPU socket DRAM bandwidth, GB/s

    def neighbors(self, n: str) -> list[tuple[str, Link]]:
        return [(lk.other(n), lk) for lk in self.links if n in (lk.a, lk.b)]

    def of_kind(self, kind: str) -> list[str]:
        return sorted(n for n, k in self.kinds.items() if k == kind)


@dataclass(frozen=True)
class Path:
    type: str  # one of PATH_TYPES
    bw: float  # bottleneck bandwidth, GB/s
    nodes: tuple[str, ...]  # src ... dst

    @property
    def hops(self) -> int:
        return len(self.nodes) - 1


@dataclass(frozen=True)
class Plan:
    nic: str
    gdr: bool  # True: the NIC DMAs GPU memory directly; False: bounce through host memory
    path_type: str  # type of the GPU -> NIC path
    bw: float  # achievable GB/s for one GPU streaming through this NIC
    host_bytes_per_byte: float  # DRAM traffic per payload byte: 0 with GDR, 2 with a bounce


def local_cpu(topo: Topology, gpu: str) -> str:
    """The CPU socket closest (fewest links) to `gpu`: where its host buffers live."""
    seen, queue = {gpu: 0}, deque([gpu])
    while queue:
        n = queue.popleft()
        if topo.kinds[n] == "CPU":
            return n
        for m, _ in topo.neighbors(n):
            if m not in seen and (topo.kinds[m] in ("PCI", "CPU") or n == gpu):
                seen[m] = seen[n] + 1
                queue.append(m)
    raise ValueError(f"{gpu} reaches no CPU")


def hop_type(topo: Topology, a: str, b: str, link: Link) -> str:
    """Type of one hop a -> b over `link`, NCCL's rules: NVLink is NVL, a PCIe link is PIX, a PCIe link
    between two PCIe switches is PXB, a PCIe link that touches a CPU is PHB, the socket link is SYS."""
    ### BEGIN SOLUTION
    if link.kind == "NVL":
        return "NVL"
    if link.kind == "SYS":
        return "SYS"
    if "CPU" in (topo.kinds[a], topo.kinds[b]):
        return "PHB"
    if topo.kinds[a] == "PCI" and topo.kinds[b] == "PCI":
        return "PXB"
    return "PIX"
    ### END SOLUTION


def find_path(topo: Topology, src: str, dst: str) -> Path:
    """The path NCCL keeps from src to dst: fewest hops, ties broken by the larger bottleneck bandwidth, then
    by the nearer path type, then by the predecessor node whose name sorts first (decided per node, at the BFS
    level where it is first reached); only PCIe switches and CPUs may be intermediate nodes.
    Raises ValueError when dst is unreachable."""
    if src == dst:
        return Path("LOC", float("inf"), (src,))
    ### HINT: breadth-first by hop count; keep, per node, the best (bw, type, nodes) found at its level
    ### BEGIN SOLUTION
    best: dict[str, Path] = {src: Path("LOC", float("inf"), (src,))}
    frontier = [src]
    while frontier and dst not in best:
        level: dict[str, tuple[tuple, Path]] = {}
        for n in frontier:
            if n != src and topo.kinds[n] not in ("PCI", "CPU"):
                continue  # GPUs and NICs do not forward
            p = best[n]
            for m, lk in topo.neighbors(n):
                if m in best:
                    continue
                t = max(p.type, hop_type(topo, n, m, lk), key=LEVEL.__getitem__)
                cand = Path(t, min(p.bw, lk.bw), p.nodes + (m,))
                key = (-cand.bw, LEVEL[cand.type], n)  # larger bw, then nearer type, then first-named predecessor
                if m not in level or key < level[m][0]:
                    level[m] = (key, cand)
        best.update({m: cand for m, (_, cand) in level.items()})
        frontier = list(level)
    if dst not in best:
        raise ValueError(f"no path {src} -> {dst}")
    return best[dst]
    ### END SOLUTION


def nic_plan(topo: Topology, gpu: str, nic: str, gdr_level: str = DEFAULT_GDR_LEVEL) -> Plan:
    """How `gpu` would send through `nic`. GDR when the GPU -> NIC path type is at most `gdr_level`
    (NCCL_NET_GDR_LEVEL); bandwidth = min(path, NIC port). Otherwise the data is bounced through a host
    buffer on the GPU's local CPU: GPU -> host memory, then host memory -> NIC, and DRAM carries every
    byte twice (written, then read), so bandwidth = min(GPU->CPU path, CPU->NIC path, NIC port, mem_bw/2)."""
    ### BEGIN SOLUTION
    direct = find_path(topo, gpu, nic)
    if LEVEL[direct.type] <= LEVEL[gdr_level]:
        return Plan(nic, True, direct.type, min(direct.bw, topo.nic_bw[nic]), 0.0)
    cpu = local_cpu(topo, gpu)
    up, down = find_path(topo, gpu, cpu), find_path(topo, cpu, nic)
    bw = min(up.bw, down.bw, topo.nic_bw[nic], topo.mem_bw[cpu] / 2)
    return Plan(nic, False, direct.type, bw, 2.0)
    ### END SOLUTION


def best_nic(topo: Topology, gpu: str, gdr_level: str = DEFAULT_GDR_LEVEL) -> Plan:
    """The NIC `gpu` should use: the largest bandwidth; ties go to GDR over a bounce, then to the
    nearer path type, then to the NIC that sorts first by name. Raises ValueError when the topology has no
    NIC (and, like find_path, when a NIC cannot be reached)."""
    ### BEGIN SOLUTION
    plans = [nic_plan(topo, gpu, nic, gdr_level) for nic in topo.of_kind("NIC")]
    return min(plans, key=lambda p: (-p.bw, not p.gdr, LEVEL[p.path_type], p.nic))
    ### END SOLUTION
