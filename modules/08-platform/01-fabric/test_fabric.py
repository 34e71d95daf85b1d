"""Tests for platform-01.

Fabric sizes are checked against hand-counted examples and against an explicit construction (every
switch and port listed); the ECMP simulation against the closed form m(1-(1-1/m)^n) with a tolerance
of 4 standard errors from the exact variance, and the expected maximum load against an exact
generating-function computation. A recording hash function checks that every flow is hashed once and
that the uplink is hash % m (not round-robin, not a perfect split).
"""

import math
from fractions import Fraction

import numpy as np
import pytest


@pytest.fixture
def f(lesson):
    return lesson.load("fabric.py")


def explicit_three_tier(radix, down):
    """List every switch with its ports in use, and every host; count them."""
    half = radix // 2
    leaves = [(p, i) for p in range(radix) for i in range(half)]
    spines = [(p, i) for p in range(radix) for i in range(half)]
    cores = [(i, j) for i in range(half) for j in range(half)]
    hosts = [(lf, h) for lf in leaves for h in range(down)]
    leaf_up = [(lf, sp) for lf in leaves for sp in spines if sp[0] == lf[0]]
    spine_up = [(sp, c) for sp in spines for c in cores if c[0] == sp[1]]
    for sp in spines:  # every pod switch: half down + half up
        assert sum(1 for lk in leaf_up if lk[1] == sp) == half and sum(1 for lk in spine_up if lk[0] == sp) == half
    for c in cores:  # one port per pod
        assert sum(1 for lk in spine_up if lk[1] == c) == radix
    return len(hosts), len(leaves) + len(spines) + len(cores), len(leaf_up)


@pytest.mark.parametrize("k", [4, 6, 8, 48])
def test_fat_tree_counts_match_al_fares(f, k):
    got = f.fat_tree(k, 100.0)
    hosts, switches, _ = explicit_three_tier(k, k // 2) if k <= 8 else (k**3 // 4, 5 * k * k // 4, 0)
    assert (got.hosts, got.switches) == (hosts, switches)
    assert got.hosts * 4 == k**3 and got.switches * 4 == 5 * k * k
    assert got.oversubscription == 1.0 and got.bisection_gbps == pytest.approx(k**3 / 8 * 100.0, rel=1e-12)


@pytest.mark.parametrize("radix,down,hs,us", [(8, 3, 100.0, 100.0), (8, 4, 200.0, 400.0), (6, 2, 400.0, 400.0)])
def test_three_tier_matches_explicit_construction(f, radix, down, hs, us):
    got = f.three_tier(radix, down, hs, us)
    hosts, switches, leaf_up = explicit_three_tier(radix, down)
    assert (got.hosts, got.switches) == (hosts, switches)
    assert got.oversubscription == pytest.approx(hosts * hs / (leaf_up * us), rel=1e-12)
    assert got.bisection_gbps == pytest.approx(min(hosts * hs, leaf_up * us) / 2, rel=1e-12)
    ft = f.fat_tree(radix, hs)
    assert f.three_tier(radix, radix // 2, hs, hs) == ft  # the non-blocking 3-tier is the fat tree


def test_leaf_spine_hand_counted(f):
    # 64-port 400G switches, 32 down / 32 up: 64 leaves x 32 hosts, 32 spines, non-blocking
    a = f.leaf_spine(64, 32, 400.0, 400.0)
    assert (a.hosts, a.switches, a.oversubscription, a.bisection_gbps) == (2048, 96, 1.0, 2048 * 400.0 / 2)
    # 48 x 200G hosts, 16 x 400G uplinks per leaf: 1.5 : 1, the cut is limited by the uplinks
    b = f.leaf_spine(64, 48, 200.0, 400.0)
    assert (b.hosts, b.switches) == (3072, 80)
    assert b.oversubscription == pytest.approx(1.5, rel=1e-12)
    assert b.bisection_gbps == pytest.approx(64 * 16 * 400.0 / 2, rel=1e-12)
    # more uplink than downlink capacity: bisection limited by the hosts
    c = f.leaf_spine(9, 3, 100.0, 100.0)
    assert (c.hosts, c.switches) == (27, 15) and c.oversubscription == pytest.approx(0.5)
    assert c.bisection_gbps == pytest.approx(27 * 100.0 / 2)


def test_rail_optimized_keeps_same_index_gpus_one_switch_apart(f):
    servers, g, down = 37, 8, 32
    for rail in (True, False):
        pairs = [((s, i), (t, i)) for i in range(g) for s in range(servers) for t in range(s + 1, servers)]
        far = sum(f.switch_hops(a, b, g, down, rail) == 3 for a, b in pairs)
        if rail:  # 37 servers > 32 ports: rail i has two leaves, servers 0..31 and 32..36
            assert far == g * 32 * 5
        else:
            assert far > len(pairs) * 0.8
    assert f.leaf_of(33, 5, g, down, True) == (5, 1)
    assert f.leaf_of(3, 5, g, down, False) == (0, 0) and f.leaf_of(4, 0, g, down, False) == (0, 1)
    assert f.switch_hops((2, 3), (2, 6), g, down, True) == 0
    assert f.switch_hops((0, 3), (31, 3), g, down, True) == 1
    assert f.switch_hops((0, 3), (0 + 1, 4), g, down, True) == 3  # different rails meet at a spine


def test_non_rail_servers_straddle_leaves(f):
    """Non-rail: NIC ports are numbered server by server; with 12 ports per leaf and 8 NICs per server,
    server 1's NICs 0-3 sit on leaf 0 and NICs 4-7 on leaf 1."""
    g, down, servers = 8, 12, 7
    ports = [(s, i) for s in range(servers) for i in range(g)]  # consecutive host ports, leaf = port // down
    leaf = {nic: (0, k // down) for k, nic in enumerate(ports)}
    for s, i in ports:
        assert f.leaf_of(s, i, g, down, False) == leaf[(s, i)], (s, i)
    pairs = [((s, i), (t, j)) for (s, i) in ports for (t, j) in ports if s < t]
    want = sum(1 if leaf[a] == leaf[b] else 3 for a, b in pairs)
    assert sum(f.switch_hops(a, b, g, down, False) for a, b in pairs) == want


def test_collision_stats_on_crafted_loads(f):
    assert f.collision_stats(np.array([0, 2, 0, 1])) == (2, 2, pytest.approx(2 / 3))
    assert f.collision_stats(np.array([3, 1, 1, 2, 0])) == (4, 3, pytest.approx(4 / 5))
    assert f.collision_stats(np.array([1, 1, 1])) == (3, 1, pytest.approx(1.0))


def test_link_loads_hash_every_flow_once_and_take_it_modulo_m(f):
    calls = []

    def by_sport(flow):
        calls.append(flow)
        return flow[2] * 7 + 3

    rng = np.random.default_rng(5)
    flows = f.random_flows(rng, 101)
    loads = np.full(13, -99)
    loads = f.link_loads(flows, 13, by_sport)
    assert sorted(calls) == sorted(flows) and len(calls) == 101
    want = np.bincount([(fl[2] * 7 + 3) % 13 for fl in flows], minlength=13)
    np.testing.assert_array_equal(np.asarray(loads), want)


def exact_distinct_var(n, m):
    q1, q2 = (1 - 1 / m) ** n, (1 - 2 / m) ** n
    mean = m * (1 - q1)
    return m * q1 + m * (m - 1) * q2 - (m * q1) ** 2, mean


def exact_expected_max(n, m):
    """E[max load] of n balls in m bins: P(max <= c) = n!/m^n [x^n] (sum_{j<=c} x^j/j!)^m."""
    def p_le(c):
        poly = [Fraction(0)] * (n + 1)
        poly[0] = Fraction(1)
        base = [Fraction(1, math.factorial(j)) if j <= c else Fraction(0) for j in range(n + 1)]
        for _ in range(m):
            poly = [sum(poly[i] * base[t - i] for i in range(t + 1)) for t in range(n + 1)]
        return poly[n] * math.factorial(n) / Fraction(m) ** n
    return float(sum(1 - p_le(c) for c in range(n)))


@pytest.mark.points(2)
@pytest.mark.parametrize("n,m", [(8, 8), (5, 16), (20, 7)])
def test_simulated_collisions_match_closed_forms(f, n, m):
    var, mean = exact_distinct_var(n, m)
    assert f.expected_distinct(n, m) == pytest.approx(mean, rel=1e-12)
    trials = 1000
    distinct, max_load, tput = f.simulate(n, m, trials, seed=11 + n)
    tol = 4 * math.sqrt(var / trials)  # 4 standard errors of the mean
    assert abs(distinct - mean) < tol, f"simulated {distinct:.3f} vs m(1-(1-1/m)^n) = {mean:.3f} ± {tol:.3f}"
    assert tput == pytest.approx(distinct / min(n, m), rel=1e-12)
    emax = exact_expected_max(n, m)
    assert abs(max_load - emax) < 4 * math.sqrt(n / trials), f"E[max load] {max_load:.3f} vs exact {emax:.3f}"
