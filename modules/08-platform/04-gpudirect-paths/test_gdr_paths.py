"""Tests for platform-04.

Reference: a slow, independent enumeration of every simple path (depth-first, PCIe switches and CPUs as
the only intermediate nodes), the hop rules written as a table, and brute force over all NICs. Random
topologies are trees of PCIe switches under two sockets joined by one SYS link, so the kept path is
unique and every comparison is exact (bandwidths are small integers: min() is exact in float64).
"""

import random

import pytest

PCIE5_X16 = 64.0  # GB/s per direction: 32 GT/s x 16 lanes / 8 (a given parameter, 128b/130b ignored)
NVLINK = 450.0  # GB/s per direction: 900 GB/s bidirectional per H200 (docs/hardware.md)
NIC400 = 50.0  # 400 Gb/s
NIC200 = 25.0  # 200 Gb/s


@pytest.fixture
def m(lesson):
    return lesson.load("gdr_paths.py")


def build(m, kinds, links, nic_bw, mem_bw):
    return m.Topology(dict(kinds), [m.Link(*lk) for lk in links], dict(nic_bw), dict(mem_bw))


# ---------- the independent reference ----------
RANK = {"LOC": 0, "NVL": 1, "PIX": 2, "PXB": 3, "PHB": 4, "SYS": 5}
HOP = {  # (link kind, frozenset of the two node kinds) -> type; anything else with PCI is PIX
    ("PCI", frozenset({"PCI"})): "PXB",
    ("PCI", frozenset({"CPU", "PCI"})): "PHB",
    ("PCI", frozenset({"CPU", "GPU"})): "PHB",
    ("PCI", frozenset({"CPU", "NIC"})): "PHB",
}


def ref_hop(kinds, lk):
    if lk[2] in ("NVL", "SYS"):
        return lk[2]
    return HOP.get(("PCI", frozenset({kinds[lk[0]], kinds[lk[1]]})), "PIX")


def ref_paths(kinds, links, src, dst):
    out = []

    def dfs(n, seen, hops):
        if n == dst:
            out.append(hops)
            return
        if n != src and kinds[n] not in ("PCI", "CPU"):
            return
        for lk in links:
            if n in lk[:2]:
                o = lk[1] if lk[0] == n else lk[0]
                if o not in seen:
                    dfs(o, seen | {o}, hops + [lk])

    dfs(src, {src}, [])
    return out


def ref_path(kinds, links, src, dst):
    cands = ref_paths(kinds, links, src, dst)
    fewest = min(len(h) for h in cands)
    hops = max((h for h in cands if len(h) == fewest), key=lambda h: min(lk[3] for lk in h))
    t = max((ref_hop(kinds, lk) for lk in hops), key=RANK.__getitem__)
    return t, min(lk[3] for lk in hops), len(hops)


def ref_local_cpu(kinds, links, gpu):
    cpus = [c for c, k in kinds.items() if k == "CPU"]
    return min(cpus, key=lambda c: (len(min(ref_paths(kinds, links, gpu, c), key=len)), c))


def ref_plan(kinds, links, nic_bw, mem_bw, gpu, nic, level="PXB"):
    t, bw, _ = ref_path(kinds, links, gpu, nic)
    if RANK[t] <= RANK[level]:
        return (nic, True, t, min(bw, nic_bw[nic]), 0.0)
    cpu = ref_local_cpu(kinds, links, gpu)
    b1, b2 = ref_path(kinds, links, gpu, cpu)[1], ref_path(kinds, links, cpu, nic)[1]
    return (nic, False, t, min(b1, b2, nic_bw[nic], mem_bw[cpu] / 2), 2.0)


def ref_best(kinds, links, nic_bw, mem_bw, gpu, level="PXB"):
    nics = sorted(n for n, k in kinds.items() if k == "NIC")
    plans = [ref_plan(kinds, links, nic_bw, mem_bw, gpu, n, level) for n in nics]
    return min(plans, key=lambda p: (-p[3], not p[1], RANK[p[2]], p[0]))


def as_tuple(plan):
    return (plan.nic, plan.gdr, plan.path_type, plan.bw, plan.host_bytes_per_byte)


# ---------- fixed topologies with hand-computed answers ----------
def dgx_like():
    """Two sockets; under each, four PCIe switches; switch i holds GPU i and NIC i (DGX H100 style).
    GPUs are also NVLinked in a ring (traffic must never be relayed through a GPU)."""
    kinds = {"cpu0": "CPU", "cpu1": "CPU"}
    links = [("cpu0", "cpu1", "SYS", 40.0)]
    for i in range(8):
        sw, cpu = f"sw{i}", f"cpu{i // 4}"
        kinds.update({sw: "PCI", f"gpu{i}": "GPU", f"nic{i}": "NIC"})
        links += [(cpu, sw, "PCI", PCIE5_X16), (sw, f"gpu{i}", "PCI", PCIE5_X16),
                  (sw, f"nic{i}", "PCI", PCIE5_X16)]
        links.append((f"gpu{i}", f"gpu{(i + 1) % 8}", "NVL", NVLINK))
    nic_bw = {f"nic{i}": NIC400 for i in range(8)}
    return kinds, links, nic_bw, {"cpu0": 300.0, "cpu1": 300.0}


def cross_socket(mem_bw=300.0):
    """GPU0 on a root port of socket 0 next to a 200G NIC; a 400G NIC sits on socket 1."""
    kinds = {"cpu0": "CPU", "cpu1": "CPU", "gpu0": "GPU", "nicA": "NIC", "nicB": "NIC"}
    links = [("cpu0", "cpu1", "SYS", 40.0), ("cpu0", "gpu0", "PCI", PCIE5_X16),
             ("cpu1", "nicA", "PCI", PCIE5_X16), ("cpu0", "nicB", "PCI", PCIE5_X16)]
    return kinds, links, {"nicA": NIC400, "nicB": NIC200}, {"cpu0": mem_bw, "cpu1": mem_bw}


def two_level():
    """A switch under a switch: GPU under swA, NIC under swB, both under swTop (PXB), a slow x8 link."""
    kinds = {"cpu0": "CPU", "swTop": "PCI", "swA": "PCI", "swB": "PCI", "gpu0": "GPU", "nic0": "NIC",
             "nic1": "NIC"}
    links = [("cpu0", "swTop", "PCI", PCIE5_X16), ("swTop", "swA", "PCI", PCIE5_X16),
             ("swTop", "swB", "PCI", 32.0), ("swA", "gpu0", "PCI", PCIE5_X16),
             ("swB", "nic0", "PCI", PCIE5_X16), ("cpu0", "nic1", "PCI", PCIE5_X16)]
    return kinds, links, {"nic0": NIC400, "nic1": NIC400}, {"cpu0": 300.0}


def test_path_types_and_bandwidth_on_hand_built_topologies(m):
    t = build(m, *dgx_like())
    cases = [("gpu0", "nic0", "PIX", 64.0, 2), ("gpu0", "nic1", "PHB", 64.0, 4),
             ("gpu0", "nic5", "SYS", 40.0, 5), ("gpu3", "cpu0", "PHB", 64.0, 2)]
    t2 = build(m, *two_level())
    cases2 = [("gpu0", "nic0", "PXB", 32.0, 4), ("gpu0", "nic1", "PHB", 64.0, 4)]
    for topo, cs in ((t, cases), (t2, cases2)):
        for src, dst, typ, bw, hops in cs:
            p = m.find_path(topo, src, dst)
            assert (p.type, p.bw, p.hops) == (typ, bw, hops), f"{src}->{dst}: got {p}"
            assert p.nodes[0] == src and p.nodes[-1] == dst
            assert all(topo.kinds[n] in ("PCI", "CPU") for n in p.nodes[1:-1]), f"relayed: {p.nodes}"


def test_dgx_like_each_gpu_gets_the_nic_under_its_own_switch(m):
    t = build(m, *dgx_like())
    for i in range(8):
        p = m.best_nic(t, f"gpu{i}")
        assert as_tuple(p) == (f"nic{i}", True, "PIX", NIC400, 0.0), f"gpu{i}: {p}"
    # a NIC behind the CPU: same 50 GB/s through the bounce, but an extra copy through DRAM
    assert as_tuple(m.nic_plan(t, "gpu0", "nic2")) == ("nic2", False, "PHB", NIC400, 2.0)


def test_gdr_level_boundary_follows_nccl_net_gdr_level(m):
    t = build(m, *two_level())
    assert as_tuple(m.nic_plan(t, "gpu0", "nic0")) == ("nic0", True, "PXB", 32.0, 0.0)
    assert as_tuple(m.nic_plan(t, "gpu0", "nic0", gdr_level="PIX")) == ("nic0", False, "PXB", 32.0, 2.0)
    assert as_tuple(m.nic_plan(t, "gpu0", "nic1", gdr_level="PHB")) == ("nic1", True, "PHB", 50.0, 0.0)
    # default level: nic1 is PHB -> bounce at 50 GB/s beats GDR through the x8 link at 32 GB/s
    assert as_tuple(m.best_nic(t, "gpu0")) == ("nic1", False, "PHB", 50.0, 2.0)


def test_cross_socket_bounce_is_limited_by_the_socket_link_and_dram(m):
    t = build(m, *cross_socket())
    assert as_tuple(m.nic_plan(t, "gpu0", "nicA")) == ("nicA", False, "SYS", 40.0, 2.0)
    assert as_tuple(m.best_nic(t, "gpu0")) == ("nicA", False, "SYS", 40.0, 2.0)
    t = build(m, *cross_socket(mem_bw=40.0))  # DRAM carries every byte twice: 20 GB/s for both NICs
    assert as_tuple(m.nic_plan(t, "gpu0", "nicA")) == ("nicA", False, "SYS", 20.0, 2.0)
    assert as_tuple(m.best_nic(t, "gpu0")) == ("nicB", False, "PHB", 20.0, 2.0)


def tie_topology():
    """A graph with a cycle: gpu0 -> nic0 in 3 hops three ways, all at 64 GB/s: through the root complex (PHB)
    or through swY or swZ (switch to switch: PXB). The nearer type wins, then the predecessor named first."""
    kinds = {"cpu0": "CPU", "sw0": "PCI", "swY": "PCI", "swZ": "PCI", "gpu0": "GPU", "nic0": "NIC"}
    links = [("cpu0", "sw0", "PCI", PCIE5_X16), ("sw0", "gpu0", "PCI", PCIE5_X16), ("cpu0", "nic0", "PCI", PCIE5_X16),
             ("sw0", "swZ", "PCI", PCIE5_X16), ("swZ", "nic0", "PCI", PCIE5_X16),
             ("sw0", "swY", "PCI", PCIE5_X16), ("swY", "nic0", "PCI", PCIE5_X16)]
    return kinds, links, {"nic0": NIC400}, {"cpu0": 300.0}


def test_ties_unreachable_and_no_nic(m):
    kinds, links, nic_bw, mem_bw = tie_topology()
    for order in (links, links[::-1], links[3:] + links[:3]):
        t = build(m, kinds, order, nic_bw, mem_bw)
        p = m.find_path(t, "gpu0", "nic0")
        assert (p.type, p.bw, p.nodes) == ("PXB", 64.0, ("gpu0", "sw0", "swY", "nic0")), \
            f"equal hops and bandwidth: keep the nearer type, then the predecessor named first; got {p}"
        assert as_tuple(m.best_nic(t, "gpu0")) == ("nic0", True, "PXB", NIC400, 0.0)
    # nicX hangs only off a GPU (GPUs do not forward), nicQ off nothing at all
    kinds = {"cpu0": "CPU", "sw0": "PCI", "gpu0": "GPU", "gpu1": "GPU", "nicX": "NIC", "nicQ": "NIC"}
    links = [("cpu0", "sw0", "PCI", PCIE5_X16), ("sw0", "gpu0", "PCI", PCIE5_X16), ("sw0", "gpu1", "PCI", PCIE5_X16),
             ("gpu1", "nicX", "PCI", PCIE5_X16)]
    t = build(m, kinds, links, {"nicX": NIC400, "nicQ": NIC400}, {"cpu0": 300.0})
    for dst in ("nicX", "nicQ"):
        with pytest.raises(ValueError):
            m.find_path(t, "gpu0", dst)
    with pytest.raises(ValueError):
        m.best_nic(t, "gpu0")
    kinds = {"cpu0": "CPU", "sw0": "PCI", "gpu0": "GPU"}
    t = build(m, kinds, [("cpu0", "sw0", "PCI", PCIE5_X16), ("sw0", "gpu0", "PCI", PCIE5_X16)], {}, {"cpu0": 300.0})
    with pytest.raises(ValueError):
        m.best_nic(t, "gpu0")  # no NIC at all: an error, not None


# ---------- random trees against the reference ----------
def random_topology(rng):
    kinds = {"cpu0": "CPU", "cpu1": "CPU"}
    links = [("cpu0", "cpu1", "SYS", float(rng.choice([20, 40, 62])))]
    parents = ["cpu0", "cpu1"]
    for i in range(rng.randint(2, 7)):
        sw = f"sw{i}"
        kinds[sw] = "PCI"
        links.append((rng.choice(parents), sw, "PCI", float(rng.choice([16, 32, 64]))))
        parents.append(sw)
    for prefix, kind, n in (("gpu", "GPU", rng.randint(1, 5)), ("nic", "NIC", rng.randint(1, 5))):
        for i in range(n):
            kinds[f"{prefix}{i}"] = kind
            links.append((rng.choice(parents), f"{prefix}{i}", "PCI", float(rng.choice([16, 32, 64]))))
    rng.shuffle(links)
    nic_bw = {n: float(rng.choice([12.5, 25, 50])) for n, k in kinds.items() if k == "NIC"}
    return kinds, links, nic_bw, {"cpu0": float(rng.choice([40, 80, 300])), "cpu1": 300.0}


@pytest.mark.points(2)
def test_random_topologies_match_the_reference_and_brute_force(m):
    rng = random.Random(2024)
    for trial in range(60):
        kinds, links, nic_bw, mem_bw = random_topology(rng)
        t = build(m, kinds, links, nic_bw, mem_bw)
        gpus = sorted(n for n, k in kinds.items() if k == "GPU")
        nics = sorted(n for n, k in kinds.items() if k == "NIC")
        for g in gpus:
            for n in nics:
                p = m.find_path(t, g, n)
                assert (p.type, p.bw, p.hops) == ref_path(kinds, links, g, n), f"trial {trial} {g}->{n}"
                for level in ("PIX", "PXB", "PHB"):
                    got = as_tuple(m.nic_plan(t, g, n, gdr_level=level))
                    assert got == ref_plan(kinds, links, nic_bw, mem_bw, g, n, level), (trial, g, n, level)
            assert as_tuple(m.best_nic(t, g)) == ref_best(kinds, links, nic_bw, mem_bw, g), (trial, g)
