"""platform-01: sizing a spine-leaf / fat-tree fabric, rail-optimized placement, ECMP collisions.

Conventions: every switch has `radix` ports of one speed class per role; a 2-tier leaf-spine connects
every leaf to every spine with one link; bandwidths in Gb/s. Bisection bandwidth: the bandwidth across
the worst cut into two equal halves of the hosts = half of the smaller of (host injection, leaf uplink
capacity) for these symmetric fabrics.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

FiveTuple = tuple[int, int, int, int, int]  # src ip, dst ip, src port, dst port, protocol


@dataclass(frozen=True)
class Fabric:
    hosts: int
    switches: int
    oversubscription: float  # leaf downlink capacity / leaf uplink capacity (1.0 = non-blocking)
    bisection_gbps: float


def fat_tree(k: int, link_gbps: float) -> Fabric:
    """Al-Fares et al. k-ary fat tree (k even): k pods of k/2 edge + k/2 aggregation switches,
    (k/2)^2 core switches, k/2 hosts per edge switch; non-blocking."""
    ### BEGIN SOLUTION
    hosts = k**3 // 4
    switches = k * k + (k // 2) ** 2  # k pods x k switches + core = 5k^2/4
    return Fabric(hosts, switches, 1.0, hosts * link_gbps / 2)
    ### END SOLUTION


def leaf_spine(radix: int, down: int, host_gbps: float, up_gbps: float) -> Fabric:
    """The largest 2-tier fabric of radix-port switches whose leaves use `down` ports for hosts and
    the other radix - down ports as uplinks, one to each spine."""
    ### BEGIN SOLUTION
    up = radix - down
    leaves, spines = radix, up  # each spine port reaches one leaf
    hosts = leaves * down
    oversub = down * host_gbps / (up * up_gbps)
    bisection = min(hosts * host_gbps, leaves * up * up_gbps) / 2
    return Fabric(hosts, leaves + spines, oversub, bisection)
    ### END SOLUTION


def three_tier(radix: int, down: int, host_gbps: float, up_gbps: float) -> Fabric:
    """Fat-tree shaped 3 tiers of radix-port switches: radix pods; a pod has radix/2 leaves and radix/2
    spines (pod switches); each leaf has `down` (<= radix/2) host ports and radix/2 uplinks, one to each
    spine of its pod; each spine has radix/2 uplinks to the (radix/2)^2 super-spines. The oversubscription
    sits at the leaves only."""
    ### BEGIN SOLUTION
    half = radix // 2
    leaves = radix * half
    hosts = leaves * down
    switches = leaves + radix * half + half * half
    oversub = down * host_gbps / (half * up_gbps)
    bisection = min(hosts * host_gbps, leaves * half * up_gbps) / 2
    return Fabric(hosts, switches, oversub, bisection)
    ### END SOLUTION


def leaf_of(server: int, gpu: int, gpus_per_server: int, down: int, rail: bool) -> tuple[int, int]:
    """(group, index) of the leaf the NIC of `gpu` on `server` plugs into, leaves having `down` host ports.
    rail=True (rail-optimized, DGX SuperPOD style): NIC i of every server goes to rail i, and rail i has
    its own leaves: group = gpu, index = server // down. rail=False (all NICs of a server on consecutive
    ports of the same leaves): group = 0, index = (server * gpus_per_server + gpu) // down."""
    ### BEGIN SOLUTION
    if rail:
        return gpu, server // down
    return 0, (server * gpus_per_server + gpu) // down
    ### END SOLUTION


def switch_hops(a: tuple[int, int], b: tuple[int, int], gpus_per_server: int, down: int, rail: bool) -> int:
    """Switches a message from (server, gpu) a to b crosses in a 2-tier fabric: 0 inside a server
    (NVLink), 1 when both NICs sit on the same leaf, else 3 (leaf, spine, leaf)."""
    if a[0] == b[0]:
        return 0
    la = leaf_of(a[0], a[1], gpus_per_server, down, rail)
    lb = leaf_of(b[0], b[1], gpus_per_server, down, rail)
    return 1 if la == lb else 3


def ecmp_hash(flow: FiveTuple) -> int:
    """The switch's hash of a flow's 5-tuple (CRC32 here; real ASICs use CRC variants with seeds)."""
    return zlib.crc32(np.asarray(flow, dtype=np.int64).tobytes())


def random_flows(rng: np.random.Generator, n: int) -> list[FiveTuple]:
    """n RoCEv2 flows (UDP dst port 4791) between random hosts with random source ports."""
    ips = rng.integers(0, 2**32, size=(n, 2))
    sports = rng.integers(49152, 65536, size=n)
    return [(int(s), int(d), int(p), 4791, 17) for (s, d), p in zip(ips, sports, strict=True)]


def link_loads(flows: Sequence[FiveTuple], m: int, hash_fn: Callable[[FiveTuple], int] = ecmp_hash) -> np.ndarray:
    """Number of flows on each of the m equal-cost uplinks: flow f takes uplink hash_fn(f) % m."""
    ### BEGIN SOLUTION
    loads = np.zeros(m, dtype=np.int64)
    for f in flows:
        loads[hash_fn(f) % m] += 1
    return loads
    ### END SOLUTION


def collision_stats(loads: np.ndarray) -> tuple[int, int, float]:
    """(distinct uplinks used, max flows on one uplink, throughput fraction). Every flow wants a full
    uplink; flows sharing an uplink split it, so the aggregate is one uplink per used link and the
    fraction is that over the ideal min(n, m)."""
    ### BEGIN SOLUTION
    n, m = int(loads.sum()), len(loads)
    used = int(np.count_nonzero(loads))
    return used, int(loads.max()), used / min(n, m)
    ### END SOLUTION


def expected_distinct(n: int, m: int) -> float:
    """Closed form: expected number of distinct uplinks n uniformly hashed flows use among m."""
    ### BEGIN SOLUTION
    return m * (1.0 - (1.0 - 1.0 / m) ** n)
    ### END SOLUTION


def simulate(n: int, m: int, trials: int, seed: int,
             hash_fn: Callable[[FiveTuple], int] = ecmp_hash) -> tuple[float, float, float]:
    """Mean (distinct uplinks, max load, throughput fraction) over `trials` random sets of n flows."""
    rng = np.random.default_rng(seed)
    stats = np.array([collision_stats(link_loads(random_flows(rng, n), m, hash_fn)) for _ in range(trials)])
    return tuple(float(x) for x in stats.mean(axis=0))
