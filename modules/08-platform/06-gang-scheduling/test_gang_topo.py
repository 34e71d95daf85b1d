"""platform-06 tests: placements checked against brute force on small random clusters (validity,
required level, preferred level, feasibility), BestFit's tightest domain, fragmentation against a
topology-unaware first-fit on fixed workloads, and no partial gang ever bound at Permit."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

LEVELS = ("block", "rack", "nvl", "node")


def random_cluster(rng: random.Random, max_nodes: int = 40):
    topo, free = [], []
    for b in range(rng.randint(1, 3)):
        for r in range(rng.randint(1, 3)):
            for v in range(rng.randint(1, 2)):
                for _ in range(rng.randint(1, 4)):
                    if len(topo) < max_nodes:
                        topo.append((b, (b, r), (b, r, v)))
                        free.append(rng.choice([0, 1, 2, 3, 4, 6, 7, 8, 8, 8]))
    return topo, free


def key(topo, i, level):
    return (*topo[i], i) if level == "node" else topo[i][: LEVELS.index(level) + 1]


def span_level(topo, nodes) -> str | None:
    """The lowest level at which all the nodes share one domain (None: several blocks)."""
    for level in reversed(LEVELS):
        if len({key(topo, i, level) for i in nodes}) == 1:
            return level
    return None


def valid(free, placement, gpus) -> bool:
    return all(c * gpus <= free[i] for i, c in Counter(placement).items())


def brute_lowest_level(free, topo, n, gpus, levels) -> str | None | bool:
    """Over every assignment of n pods to nodes: the first of `levels` (None = anywhere) at which
    some valid assignment stays inside one domain; False if none."""
    good = [p for p in itertools.combinations_with_replacement(range(len(free)), n) if valid(free, p, gpus)]
    for level in levels:
        if any(level is None or len({key(topo, i, level) for i in p}) == 1 for p in good):
            return level
    return False


def level_order(job) -> list:
    if job.required:
        return [job.required]
    start = LEVELS.index(job.preferred or "node")
    return [*LEVELS[start::-1], None]


def random_job(m, rng, free_total):
    gpus = rng.choice([1, 2, 4, 8])
    n = rng.randint(1, 4)
    u = rng.random()
    if u < 0.4:
        return m.Job(n, gpus, required=rng.choice(LEVELS))
    if u < 0.8:
        return m.Job(n, gpus, preferred=rng.choice(LEVELS))
    return m.Job(n, gpus)  # neither: preferred defaults to "node"


@pytest.mark.points(1)
def test_placements_match_brute_force(lesson):
    m = lesson.load("gang_topo.py")
    rng = random.Random(6)
    for trial in range(250):
        topo, free = random_cluster(rng, max_nodes=6)
        job = random_job(m, rng, sum(free))
        before = list(free)
        got = m.place_gang(free, topo, job)
        assert free == before, "place_gang must not modify free"
        want = brute_lowest_level(free, topo, job.n_pods, job.gpus, level_order(job))
        ctx = f"trial {trial}: free={free} topo={topo} job={job}"
        if want is False:
            assert got is None, f"{ctx}: no valid placement exists, got {got}"
            continue
        assert got is not None, f"{ctx}: a placement exists (level {want}) but got None"
        assert len(got) == job.n_pods and valid(free, got, job.gpus), f"{ctx}: invalid placement {got}"
        lvl = span_level(topo, got)
        rank = {lv: k for k, lv in enumerate([*LEVELS[::-1], None])}  # node < nvl < rack < block < None
        assert rank[lvl] <= rank[want], f"{ctx}: pods span {lvl}, but one {want} domain holds them"


@pytest.mark.points(1)
def test_bestfit_takes_the_tightest_domain(lesson):
    m = lesson.load("gang_topo.py")
    rng = random.Random(61)
    for trial in range(200):
        topo, free = random_cluster(rng)
        job = random_job(m, rng, sum(free))
        got = m.place_gang(free, topo, job)
        if got is None:
            continue
        for lvl in level_order(job):  # the level at which the gang is admitted
            caps = Counter()
            for i in range(len(free)):
                caps[key(topo, i, lvl) if lvl else ()] += free[i] // job.gpus
            fitting = [c for c in caps.values() if c >= job.n_pods]
            if fitting:
                break
        if lvl is None:
            continue
        doms = {key(topo, i, lvl) for i in got}
        assert len(doms) == 1, f"trial {trial}: job {job} should sit in one {lvl}, spans {doms}"
        mine = caps[doms.pop()]
        assert mine == min(fitting), (f"trial {trial}: job {job} placed in a {lvl} with room for {mine} pods; "
                                      f"the tightest {lvl} that fits has room for {min(fitting)}")
    # one hand-made case: two NVLink domains with 16 and 8 free GPUs, a gang of 8 x 1 GPU
    topo = [(0, (0, 0), (0, 0, 0))] * 2 + [(0, (0, 0), (0, 0, 1))] * 2
    got = m.place_gang([8, 8, 4, 4], topo, m.Job(8, 1, required="nvl"))
    assert sorted(got) == [2] * 4 + [3] * 4, f"expected the 8-GPU domain (nodes 2, 3), got {got}"


def stranded(topo, free, total=8) -> int:
    """Free GPUs inside NVLink domains that are partly used: what a later NVLink-bound gang cannot use."""
    per = {}
    for i, f in enumerate(free):
        used, fr = per.get(topo[i][2], (0, 0))
        per[topo[i][2]] = (used + total - f, fr + f)
    return sum(fr for used, fr in per.values() if used and fr)


def first_fit(free, job):
    out, f = [], list(free)
    for i in range(len(f)):
        while len(out) < job.n_pods and f[i] >= job.gpus:
            f[i] -= job.gpus
            out.append(i)
    return out if len(out) == job.n_pods else None


def run_workload(place, topo, jobs, rng) -> tuple[int, int]:
    """Admit jobs in order (each running job ends with probability 0.1 per arrival); returns
    (sum of stranded GPUs sampled after each arrival, gangs split over several NVLink domains)."""
    free = [8] * len(topo)
    running, total, split = [], 0, 0
    for job in jobs:
        for r in list(running):
            if rng.random() < 0.1:
                running.remove(r)
                for i in r[0]:
                    free[i] += r[1]
        got = place(free, job)
        if got is not None:
            assert valid(free, got, job.gpus)
            for i in got:
                free[i] -= job.gpus
            running.append((got, job.gpus))
            split += len({topo[i][2] for i in got}) > 1
        total += stranded(topo, free)
    return total, split


@pytest.mark.points(1)
def test_fragmentation_below_topology_unaware_first_fit(lesson):
    m = lesson.load("gang_topo.py")
    topo = [(b, (b, r), (b, r, v)) for b in range(2) for r in range(2) for v in range(2) for _ in range(4)]
    mine, base = [0, 0], [0, 0]
    for seed in range(6):
        rng = random.Random(seed)
        jobs = [m.Job(rng.choice([1, 2, 4, 8, 16]), rng.choice([1, 2, 4]), preferred="nvl")
                for _ in range(120)]
        a = run_workload(lambda f, j: m.place_gang(f, topo, j), topo, jobs, random.Random(seed))
        b = run_workload(lambda f, j: first_fit(f, j), topo, jobs, random.Random(seed))
        mine, base = [x + y for x, y in zip(mine, a)], [x + y for x, y in zip(base, b)]
    assert mine[0] < 0.85 * base[0], f"stranded GPUs: topology-aware {mine[0]} vs first-fit {base[0]}"
    assert mine[1] < 0.5 * base[1], f"gangs split over NVLink domains: {mine[1]} vs first-fit {base[1]}"


def simulate_pods(m, rng):
    """Pods of several PodGroups arrive interleaved; each is assumed on the first node with room
    (reserving its GPUs) and goes through Permit; a pod that fits nowhere makes its group's waiting
    pods unreserved (the plugin's PostFilter rejection). Returns per-group bound counts after every event."""
    free = [8] * rng.randint(2, 6)
    groups = {f"g{k}": (rng.randint(1, 5), rng.choice([2, 4, 8])) for k in range(rng.randint(2, 5))}
    mins = {g: rng.randint(1, n) for g, (n, _) in groups.items()}
    cs = m.Coscheduler(dict(mins))
    pods = [(g, f"{g}-{i}") for g, (n, _) in groups.items() for i in range(n)]
    rng.shuffle(pods)
    where, bound, history = {}, Counter(), []
    for g, pod in pods:
        gpus = groups[g][1]
        node = next((i for i, f in enumerate(free) if f >= gpus), None)
        if node is None:
            for p in cs.reject(g):
                free[where.pop(p)] += gpus
        else:
            free[node] -= gpus
            where[pod] = node
            for p in cs.permit(g, pod):
                assert p in where and p not in bound, f"{p} allowed twice or never assumed"
                bound[p] = 1
        history.append({h: sum(1 for p in bound if p.startswith(h + "-")) for h in groups})
    for g in groups:  # Permit timeout at the end: everything still waiting is unreserved
        for p in cs.reject(g):
            free[where.pop(p)] += groups[g][1]
    used = sum(groups[p.split("-")[0]][1] for p in bound)
    return mins, history, used, free, groups


@pytest.mark.points(1)
def test_permit_never_binds_a_partial_gang(lesson):
    m = lesson.load("gang_topo.py")
    rng = random.Random(9)
    for trial in range(150):
        mins, history, used, free, groups = simulate_pods(m, rng)
        for step, counts in enumerate(history):
            for g, c in counts.items():
                assert c == 0 or c >= mins[g], (f"trial {trial} event {step}: group {g} has {c} pods bound, "
                                                f"min_member {mins[g]}: a partial gang")
        assert sum(8 - f for f in free) == used, f"trial {trial}: GPUs of rejected pods were not given back"
        last = history[-1]
        for g, (n, _) in groups.items():
            if last[g] and n >= mins[g]:
                assert last[g] >= mins[g]
    cs = m.Coscheduler({"a": 3})
    assert cs.permit("a", "a-0") == [] and cs.permit("a", "a-1") == []
    assert sorted(cs.permit("a", "a-2")) == ["a-0", "a-1", "a-2"], "the third pod completes the quorum of 3"
    assert cs.permit("a", "a-3") == ["a-3"], "after the quorum, later pods of the group bind at once"
    assert cs.reject("a") == [], "a group that reached its quorum has no waiting pods to unreserve"
    assert cs.permit("a", "a-4") == ["a-4"], "a rejection does not make a running gang wait for a second quorum"
    cs = m.Coscheduler({"b": 2})
    assert cs.permit("b", "b-0") == [] and cs.reject("b") == ["b-0"]
    assert cs.permit("b", "b-1") == [], "b-0 was unreserved: it no longer counts toward the quorum"
    assert sorted(cs.permit("b", "b-2")) == ["b-1", "b-2"]
    assert cs.reject("b") == [] and cs.reject("nobody") == []
