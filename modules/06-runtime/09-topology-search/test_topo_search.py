"""Tests for runtime-09: paths, PXN, ring bandwidth and the ring search.

The oracle is written here independently of the lesson file: it enumerates every shortest route
between two nodes (NCCL v2.27.3-1 src/graph/paths.cc lines 36-110: fewest hops, then widest; a GPU
in the middle only as an NVLink GPU -> GPU -> GPU hop), types each hop (paths.cc lines 90-100, PATH_*
of src/graph/topo.h lines 56-97), applies the PXN rule (paths.cc lines 691-712) and the link
accounting of src/graph/search.cc followPath (every path of a ring loads its directed links, PCI
links of a PHB path from a GPU by 6/5), and finds the best ring by trying every GPU order and NIC
(branch and bound for 8 GPUs). The topologies use NCCL's own bandwidth constants (topo.h, topo.cc):
NVLink 4 (SM90) 20.6 GB/s per link x 18 links, PCIe width x rate / 80 (Gen5 x16 = 48, Gen4 x16 = 24,
Gen3 x16 = 12 = PCI_BW),
Sapphire Rapids UPI 22 (SRP_QPI_BW), a 400 Gb/s NIC 50 GB/s.
"""

import itertools
import math
import random
from collections import defaultdict

import pytest

LOC, NVL, NVB, PIX, PXB, PXN, PHB, SYS = 0, 1, 2, 4, 5, 6, 8, 9
NVLINK_H100 = 18 * 20.6
GEN5, GEN4, GEN3, UPI, NIC400 = 48.0, 24.0, 12.0, 22.0, 50.0


@pytest.fixture
def ts(lesson):
    return lesson.load("topo_search.py")


# ---------------------------------------------------------------------------------------------
# Topologies (built through the lesson's Topo API; the oracle reads only kind / links / nic_bw)
# ---------------------------------------------------------------------------------------------
def dgx_h100(ts, uplink=GEN4):
    """8 H100 on NVSwitch, 8 PCIe Gen5 switches each holding one GPU and its 400G NIC, 4 per socket;
    the switches' uplinks to the CPU are Gen4 x16 (narrower than the GPU and NIC ports)."""
    t = ts.Topo().add("cpu0", "CPU").add("cpu1", "CPU").add("nvs", "NVS").connect("cpu0", "cpu1", "SYS", UPI)
    for i in range(8):
        sw, g, n = f"sw{i}", f"gpu{i}", f"nic{i}"
        t.add(sw, "PCI").add(g, "GPU").add(n, "NIC", NIC400)
        t.connect(sw, f"cpu{i // 4}", "PCI", uplink).connect(g, sw, "PCI", GEN5).connect(n, sw, "PCI", GEN5)
        t.connect(g, "nvs", "NVL", NVLINK_H100)
    return t


def pcie_box(ts):
    """2 sockets, one Gen4 switch per socket, 4 GPUs per switch, no NVLink, no NIC."""
    t = ts.Topo().add("cpu0", "CPU").add("cpu1", "CPU").connect("cpu0", "cpu1", "SYS", UPI)
    for s in range(2):
        t.add(f"sw{s}", "PCI").connect(f"sw{s}", f"cpu{s}", "PCI", GEN4)
        for j in range(4):
            g = f"gpu{4 * s + j}"
            t.add(g, "GPU").connect(g, f"sw{s}", "PCI", GEN4)
    return t


def cross_socket(ts):
    """4 GPUs straight under 2 CPUs (0, 2 on cpu0; 1, 3 on cpu1); NVLink bridges 0-1 and 2-3 cross the sockets."""
    t = ts.Topo().add("cpu0", "CPU").add("cpu1", "CPU").connect("cpu0", "cpu1", "SYS", UPI)
    for g in range(4):
        t.add(f"gpu{g}", "GPU").connect(f"gpu{g}", f"cpu{g % 2}", "PCI", GEN4)
    return t.connect("gpu0", "gpu1", "NVL", 4 * 20.6).connect("gpu2", "gpu3", "NVL", 4 * 20.6)


def pxn_box(ts):
    """4 NVLink-connected GPUs; the only NIC sits under gpu0's switch; gpu1-3 share another switch;
    both switches hang off the CPU by Gen3 x16."""
    t = ts.Topo().add("cpu0", "CPU").add("sw0", "PCI").add("sw1", "PCI").add("nic0", "NIC", 25.0)
    t.connect("sw0", "cpu0", "PCI", GEN3).connect("sw1", "cpu0", "PCI", GEN3).connect("nic0", "sw0", "PCI", GEN4)
    for g in range(4):
        t.add(f"gpu{g}", "GPU").connect(f"gpu{g}", "sw0" if g == 0 else "sw1", "PCI", GEN4)
    for a, b in itertools.combinations(range(4), 2):
        t.connect(f"gpu{a}", f"gpu{b}", "NVL", 2 * 20.6)
    return t


def random_topo(ts, rng):
    """A random tree of CPUs / PCI switches with GPUs and NICs as leaves, plus random NVLinks."""
    t = ts.Topo()
    ncpu = rng.choice([1, 2])
    for c in range(ncpu):
        t.add(f"cpu{c}", "CPU")
    if ncpu == 2:
        t.connect("cpu0", "cpu1", "SYS", round(rng.uniform(8, 40), 3))
    parents = [f"cpu{c}" for c in range(ncpu)]
    for s in range(rng.randint(0, 3)):
        up = rng.choice(parents)
        t.add(f"sw{s}", "PCI").connect(f"sw{s}", up, "PCI", round(rng.uniform(10, 50), 3))
        parents.append(f"sw{s}")
    ngpu = rng.randint(3, 6)
    for g in range(ngpu):
        t.add(f"gpu{g}", "GPU").connect(f"gpu{g}", rng.choice(parents), "PCI", round(rng.uniform(10, 50), 3))
    for n in range(rng.choice([0, 0, 1, 2])):
        t.add(f"nic{n}", "NIC", round(rng.uniform(10, 60), 3))
        t.connect(f"nic{n}", rng.choice(parents), "PCI", round(rng.uniform(10, 50), 3))
    for a, b in itertools.combinations(range(ngpu), 2):
        if rng.random() < 0.35:
            t.connect(f"gpu{a}", f"gpu{b}", "NVL", round(rng.uniform(15, 150), 3))
    return t


# ---------------------------------------------------------------------------------------------
# Oracle
# ---------------------------------------------------------------------------------------------
class Oracle:
    def __init__(self, t):
        self.kind, self.links, self.nic_bw = dict(t.kind), dict(t.links), dict(t.nic_bw)
        self.adj = defaultdict(list)
        for a, b in self.links:
            self.adj[a].append(b)
        self.gpus = sorted(n for n, k in self.kind.items() if k == "GPU")
        self.nics = sorted(n for n, k in self.kind.items() if k == "NIC")
        self._paths = {}

    def _may_pass(self, prev, node, nxt, src, dst):
        if self.kind[node] not in ("GPU", "NIC"):
            return True
        return (self.kind[node] == "GPU" and prev == src and nxt == dst and self.kind[src] == "GPU"
                and self.kind[dst] == "GPU" and self.links[(src, node)][0] == "NVL"
                and self.links[(node, dst)][0] == "NVL")

    def _walk(self, nodes, length, src, dst, found):
        """Every relay-respecting simple route of exactly `length` hops that extends `nodes` to dst."""
        if len(nodes) == length + 1:
            if nodes[-1] == dst:
                found.append(tuple(nodes))
            return
        for nxt in self.adj[nodes[-1]]:
            if nxt in nodes:
                continue
            if len(nodes) >= 2 and not self._may_pass(nodes[-2], nodes[-1], nxt, src, dst):
                continue
            self._walk(nodes + [nxt], length, src, dst, found)

    def routes(self, src, dst):
        """All shortest routes src -> dst that respect the relay rule."""
        for length in range(1, len(self.kind)):
            found = []
            self._walk([src], length, src, dst, found)
            if found:
                return found
        return []

    def hop_type(self, u, v, src):
        lt = self.links[(u, v)][0]
        if lt == "NVL":
            return NVB if u != src and self.kind[u] == "GPU" else NVL
        if lt == "SYS":
            return SYS
        if self.kind[u] == "CPU" or self.kind[v] == "CPU":
            return PHB
        if self.kind[u] == "PCI" and self.kind[v] == "PCI":
            return PXB
        return PIX

    def path(self, src, dst):
        """(hops, bw, type); asserts the widest shortest route is unique (no ties in the test topologies)."""
        if (src, dst) in self._paths:
            return self._paths[(src, dst)]
        if src == dst:
            return (), 5000.0, LOC
        routes = self.routes(src, dst)
        assert routes, f"no route {src} -> {dst}"
        scored = sorted(((min(self.links[h][1] for h in zip(r, r[1:])), r) for r in routes), reverse=True)
        if len(scored) > 1:
            assert scored[0][0] > scored[1][0], f"oracle: tie between routes {scored[0][1]} and {scored[1][1]}"
        bw, r = scored[0]
        hops = tuple(zip(r, r[1:]))
        out = (hops, bw, max(self.hop_type(u, v, src) for u, v in hops))
        self._paths[(src, dst)] = out
        return out

    def local_gpu(self, nic):
        return min(self.gpus, key=lambda g: (-self.path(g, nic)[1], self.path(g, nic)[2], g))

    def gpu_nic(self, g, nic):
        direct = self.path(g, nic)
        p = self.local_gpu(nic)
        if p != g:
            pn, gp = self.path(p, nic), self.path(g, p)
            if pn[2] <= PXB and gp[2] <= NVL and (pn[1] > direct[1] or direct[2] > PXB):
                return gp[0] + pn[0], min(gp[1], pn[1]), PXN
        return direct

    def hops_of(self, order, nic):
        if nic is None:
            return [self.path(a, b) for a, b in zip(order, order[1:] + order[:1])] if len(order) > 1 else []
        return ([self.path(nic, order[0])] + [self.path(a, b) for a, b in zip(order, order[1:])]
                + [self.gpu_nic(order[-1], nic)])

    def load_bw(self, paths, nic):
        load = defaultdict(float)
        for hops, _, ptype in paths:
            for h in hops:
                heavy = ptype == PHB and self.kind[hops[0][0]] == "GPU" and self.links[h][0] == "PCI"
                load[h] += 1.2 if heavy else 1.0
        bw = min([self.links[h][1] / x for h, x in load.items()] or [5000.0])
        return min(bw, self.nic_bw[nic]) if nic is not None else bw

    def ring_bw(self, order, nic=None):
        return self.load_bw(self.hops_of(list(order), nic), nic)

    def optimum(self):
        """Best ring bandwidth: every order (rotations of a closed ring skipped) and every NIC."""
        best = -1.0
        nics = self.nics or [None]
        for nic in nics:
            first_choices = self.gpus if nic is not None else self.gpus[:1]
            for first in first_choices:
                rest = [g for g in self.gpus if g != first]
                if len(self.gpus) <= 6:
                    for perm in itertools.permutations(rest):
                        best = max(best, self.ring_bw([first, *perm], nic))
                else:
                    best = max(best, self._bnb([first], rest, nic, best))
        return best

    def _bnb(self, chain, rest, nic, best):
        partial = ([self.path(nic, chain[0])] if nic is not None else []) + [self.path(a, b) for a, b in zip(chain, chain[1:])]
        if self.load_bw(partial, nic) <= best:
            return best  # adding hops only adds load
        if not rest:
            return max(best, self.ring_bw(chain, nic))
        for g in rest:
            best = self._bnb(chain + [g], [x for x in rest if x != g], nic, best)
        return best


def random_topos(ts, count, seed):
    """Random topologies whose widest shortest routes are unique (ties would make the route a matter of taste)."""
    rng, out = random.Random(seed), []
    while len(out) < count:
        t = random_topo(ts, rng)
        o = Oracle(t)
        try:
            for a in o.gpus + o.nics:
                for b in o.gpus + o.nics:
                    o.path(a, b)
        except AssertionError:
            continue
        out.append(t)
    return out


def named(ts):
    return {"dgx_h100": dgx_h100(ts), "pcie_box": pcie_box(ts), "cross_socket": cross_socket(ts), "pxn_box": pxn_box(ts),
            "dgx_h100_gen5_uplinks": dgx_h100(ts, uplink=GEN5)}  # direct GPU -> NIC paths as wide as PXN, but via the CPU


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------
def test_paths_have_nccl_bandwidth_and_type(ts):
    for name, t in list(named(ts).items()) + [(f"random #{i}", t) for i, t in enumerate(random_topos(ts, 25, seed=1))]:
        o = Oracle(t)
        ends = o.gpus + o.nics
        for a in ends:
            for b in ends:
                if a == b:
                    continue
                hops, bw, ptype = o.path(a, b)
                got = ts.path(t, a, b)
                assert tuple(got.hops) == hops, f"{name}: path {a} -> {b} takes {got.hops}, the widest shortest route is {hops}"
                assert math.isclose(got.bw, bw), f"{name}: path {a} -> {b} bandwidth {got.bw}, want {bw} (smallest link)"
                assert got.type == ptype, f"{name}: path {a} -> {b} type {got.type}, want {ptype} (worst hop)"


def test_gpu_to_nic_paths_use_pxn_where_nccl_does(ts):
    cases = list(named(ts).items()) + [(f"random #{i}", t) for i, t in enumerate(random_topos(ts, 25, seed=2))]
    pxn_seen = 0
    for name, t in cases:
        o = Oracle(t)
        for g in o.gpus:
            for n in o.nics:
                hops, bw, ptype = o.gpu_nic(g, n)
                got = ts.gpu_nic_path(t, g, n)
                pxn_seen += ptype == PXN
                assert (tuple(got.hops), got.type) == (hops, ptype), \
                    f"{name}: {g} -> {n} goes {got.hops} typed {got.type}; NCCL's rule gives {hops} typed {ptype}"
                assert math.isclose(got.bw, bw), f"{name}: {g} -> {n} bandwidth {got.bw}, want {bw}"
    assert pxn_seen >= 8, "the test topologies must exercise PXN"


@pytest.mark.points(2)
def test_ring_bandwidth_is_the_link_bottleneck(ts):
    rng = random.Random(3)
    for name, t in list(named(ts).items()) + [(f"random #{i}", t) for i, t in enumerate(random_topos(ts, 25, seed=3))]:
        o = Oracle(t)
        for _ in range(12):
            order = o.gpus[:]
            rng.shuffle(order)
            for nic in [None] + o.nics:
                want = o.ring_bw(order, nic)
                got = ts.ring_bandwidth(t, order, nic)
                assert math.isclose(got, want, rel_tol=1e-9), \
                    f"{name}: ring {order} via {nic}: {got} GB/s, the bottleneck is {want} GB/s"


def check_search(ts, t, name, want=None):
    o = Oracle(t)
    bw, ring, nic = ts.search_ring(t)
    assert sorted(ring) == o.gpus, f"{name}: the ring {ring} must visit every GPU exactly once"
    assert (nic is None) == (not o.nics) and (nic is None or nic in o.nics), f"{name}: ring leaves through {nic!r}"
    recomputed = o.ring_bw(ring, nic)
    assert math.isclose(bw, recomputed, rel_tol=1e-9), f"{name}: reported {bw} GB/s, the ring {ring} via {nic} gives {recomputed}"
    best = o.optimum() if want is None else want
    assert math.isclose(recomputed, best, rel_tol=1e-9), f"{name}: found {recomputed} GB/s ({ring} via {nic}), the best ring has {best}"


@pytest.mark.points(2)
@pytest.mark.parametrize("name", ["dgx_h100", "pcie_box", "cross_socket", "pxn_box", "dgx_h100_gen5_uplinks"])
def test_search_finds_the_best_ring_on_given_topologies(ts, name):
    check_search(ts, named(ts)[name], name)


@pytest.mark.points(2)
def test_search_finds_the_best_ring_on_random_topologies(ts):
    for i, t in enumerate(random_topos(ts, 40, seed=4)):
        check_search(ts, t, f"random #{i}")


def test_worked_examples_of_the_readme(ts):
    """README numbers, from the oracle: PXN lifts the DGX ring from 24 to 48 GB/s (pxn_box: 12 to 24), an
    interleaved ring on the PCIe box gets a quarter of the socket link, the cross-socket box must avoid it."""
    o = Oracle(dgx_h100(ts))
    assert math.isclose(o.optimum(), GEN5)
    assert math.isclose(o.ring_bw([f"gpu{i}" for i in range(8)], "nic0"), GEN5)  # gpu7 -> nic0 is PXN through gpu0
    assert o.gpu_nic("gpu7", "nic0")[2] == PXN and o.path("gpu7", "nic0")[2] == SYS
    assert math.isclose(o.ring_bw([f"gpu{i}" for i in range(8)]), NVLINK_H100)
    for topo, without in [(dgx_h100(ts), GEN4), (pxn_box(ts), GEN3)]:
        no_pxn = Oracle(topo)
        no_pxn.gpu_nic = no_pxn.path  # what the rings are worth without PXN
        assert math.isclose(no_pxn.optimum(), without)
    box = Oracle(pcie_box(ts))
    assert math.isclose(box.optimum(), UPI)
    assert math.isclose(box.ring_bw([f"gpu{i}" for i in (0, 4, 1, 5, 2, 6, 3, 7)]), UPI / 4)
    c = Oracle(cross_socket(ts))
    assert math.isclose(c.ring_bw(["gpu0", "gpu1", "gpu2", "gpu3"]), UPI / 2)
    assert math.isclose(c.optimum(), GEN4 / 1.2)
    assert math.isclose(Oracle(pxn_box(ts)).optimum(), GEN4)
    check_search(ts, dgx_h100(ts), "dgx_h100 (README)", want=GEN5)
