"""Tests for runtime-07: the learner's caching-allocator simulator against the real allocator on an H200.

Oracle: `allocator_traces_h200.json`, recorded by `benchmarks/allocator_h200.py` with torch 2.11.0+cu130 on an
NVIDIA H200: for 35 traces under three PYTORCH_CUDA_ALLOC_CONF settings, torch.cuda.memory_stats() after every
step (requested / allocated / active / reserved bytes, segment count) and torch.cuda.memory_snapshot() at the
end. The simulator must reproduce every step exactly. The final segments are compared as a multiset: the
driver's choice of virtual addresses (which segment lies below which) is not part of the policy.
Worked examples derived from the constants in c10/cuda/CUDACachingAllocator.cpp cover thresholds that the
recorded traces do not hit, and invariants are checked on fresh random traces.
"""

import json
import random

import pytest

KiB, MiB = 1 << 10, 1 << 20
COLUMNS = ("requested_bytes", "allocated_bytes", "active_bytes", "reserved_bytes", "segment")
_CACHE = {}


@pytest.fixture
def ca(lesson):
    return lesson.load("caching_allocator.py")


@pytest.fixture
def h200(lesson):
    key = str(lesson.path("allocator_traces_h200.json"))
    if key not in _CACHE:
        _CACHE[key] = json.loads(lesson.path("allocator_traces_h200.json").read_text())
    return _CACHE[key]


def canon(segments):
    """Segments as a sorted list of (pool, total, blocks) so that address order does not matter."""
    return sorted((s["pool"], s["total_size"], tuple(tuple(b) for b in s["blocks"])) for s in segments)


def fmt(n):
    return f"{n} B ({n / MiB:.4f} MiB)"


def check_trace(ca, name, conf, rec):
    rows, segments = ca.replay(rec["trace"], conf)
    assert len(rows) == len(rec["trace"]), f"{name}: replay returned {len(rows)} rows"
    for i, (got, want) in enumerate(zip(rows, rec["steps"])):
        want = dict(zip(COLUMNS, want))
        for k in COLUMNS:
            if got.get(k) != want[k]:
                steps = rec["trace"][max(0, i - 3): i + 1]
                raise AssertionError(
                    f"[{conf or 'default'}] {name}, step {i} {rec['trace'][i]}: {k} = {fmt(got.get(k, -1))}, "
                    f"the H200 has {fmt(want[k])}\n  last steps: {steps}\n  yours: {got}\n  H200:  {want}")
    assert canon(segments) == canon(rec["segments"]), (
        f"[{conf or 'default'}] {name}: final segments differ\n  yours: {canon(segments)}\n"
        f"  H200:  {canon(rec['segments'])}")


def traces(h200, prefix):
    for cfg in h200["configs"].values():
        for name, rec in cfg["traces"].items():
            if name.startswith(prefix):
                yield name, cfg["PYTORCH_CUDA_ALLOC_CONF"], rec


def run(ca, conf, sizes_and_frees):
    """Replay a short trace written as [n, ...] (alloc n bytes) / ["free", i] (free the i-th alloc)."""
    trace, nid = [], 0
    for s in sizes_and_frees:
        if isinstance(s, int):
            trace.append(["alloc", nid, s])
            nid += 1
        else:
            trace.append(list(s))
    rows, segments = ca.replay(trace, conf)
    return rows[-1], canon(segments)


@pytest.mark.points(1)
def test_worked_examples_at_the_thresholds(ca):
    """Thresholds the recorded traces do not hit, each derived by hand from CUDACachingAllocator.cpp."""
    A, F = "active_allocated", "inactive"
    # 11 MiB: own 12 MiB segment (>= kMinLargeAlloc, rounded up to kRoundLarge); the remainder of exactly 1 MiB
    # is not > kSmallSize, so the block is NOT split and all 12 MiB count as allocated.
    st, seg = run(ca, "", [11 * MiB])
    assert (st["allocated_bytes"], st["reserved_bytes"]) == (12 * MiB, 12 * MiB), f"11 MiB request: {st}"
    assert seg == [("large", 12 * MiB, ((12 * MiB, A),))], f"11 MiB request: {seg}"
    # 11 MiB - 512 B: remainder 1 MiB + 512 B > 1 MiB: split.
    st, seg = run(ca, "", [11 * MiB - 512])
    assert seg == [("large", 12 * MiB, ((11 * MiB - 512, A), (MiB + 512, F)))], f"11 MiB - 512 B request: {seg}"
    # the second request leaves exactly 1 MiB of the 20 MiB segment: it stays with the block
    st, seg = run(ca, "", [MiB + 512, 18 * MiB - 512])
    assert seg == [("large", 20 * MiB, ((MiB + 512, A), (19 * MiB - 512, A)))], (
        f"1 MiB + 512 B, then 18 MiB - 512 B: a large-pool remainder of exactly 1 MiB is not split off: {seg}")
    # small pool: a remainder of exactly 512 B is split off (>= kMinBlockSize)
    st, seg = run(ca, "", [MiB, MiB - 512])
    assert seg == [("small", 2 * MiB, ((MiB, A), (MiB - 512, A), (512, F)))], f"small pool, 512 B remainder: {seg}"
    # 10 MiB - 512 B is below kMinLargeAlloc: a 20 MiB segment, split
    st, seg = run(ca, "", [10 * MiB - 512])
    assert seg == [("large", 20 * MiB, ((10 * MiB - 512, A), (10 * MiB + 512, F)))], f"10 MiB - 512 B: {seg}"
    # max_split_size_mb:20: a 20 MiB request is not split; once cached, the block is oversize and a 2 MiB
    # request must not cut it: a second segment
    st, seg = run(ca, "max_split_size_mb:20", [20 * MiB, ("free", 0), 2 * MiB])
    assert seg == sorted([("large", 20 * MiB, ((20 * MiB, F),)), ("large", 20 * MiB, ((2 * MiB, A), (18 * MiB, F)))]), (
        f"max_split_size_mb:20, 20 MiB freed, then 2 MiB: {seg}")
    # oversize reuse: a request >= max_split_size takes a cached block only if it is < request + 20 MiB, unsplit
    st, seg = run(ca, "max_split_size_mb:20", [60 * MiB, ("free", 0), 41 * MiB])
    assert seg == [("large", 60 * MiB, ((60 * MiB, A),))], f"max_split_size_mb:20, 41 MiB into a cached 60 MiB: {seg}"
    st, seg = run(ca, "max_split_size_mb:20", [60 * MiB, ("free", 0), 40 * MiB])
    assert seg == sorted([("large", 40 * MiB, ((40 * MiB, A),)), ("large", 60 * MiB, ((60 * MiB, F),))]), (
        f"max_split_size_mb:20, 40 MiB would waste 20 MiB of a cached 60 MiB block: {seg}")
    # a request of exactly max_split_size is oversize too (both rules are >=): it may reuse a cached block only if
    # that block is < request + 20 MiB, and the block it takes is never cut
    st, seg = run(ca, "max_split_size_mb:20", [30 * MiB, ("free", 0), 20 * MiB])
    assert seg == [("large", 30 * MiB, ((30 * MiB, A),))], (
        f"max_split_size_mb:20, a 20 MiB request into a cached 30 MiB block: taken whole, not cut: {seg}")
    st, seg = run(ca, "max_split_size_mb:20", [45 * MiB, ("free", 0), 20 * MiB])
    assert seg == sorted([("large", 20 * MiB, ((20 * MiB, A),)), ("large", 46 * MiB, ((46 * MiB, F),))]), (
        f"max_split_size_mb:20, a 20 MiB request must not take a cached 46 MiB block (26 MiB >= 20 MiB wasted): {seg}")
    # without max_split_size the same 41 MiB request cuts the cached block
    st, seg = run(ca, "", [60 * MiB, ("free", 0), 41 * MiB])
    assert seg == [("large", 60 * MiB, ((41 * MiB, A), (19 * MiB, F)))], f"default, 41 MiB into a cached 60 MiB: {seg}"


@pytest.mark.points(1)
def test_single_requests_match_h200(ca, h200):
    cases = list(traces(h200, "single_"))
    assert len(cases) == 57
    for name, conf, rec in cases:
        check_trace(ca, name, conf, rec)


@pytest.mark.points(1)
def test_hand_traces_match_h200(ca, h200):
    """Splitting and reuse in the small pool, a 20 MiB segment split for several requests, >= 10 MiB requests
    with own segments, fragmentation and empty_cache."""
    cases = [c for p in ("small_split_reuse", "large_split", "big_own_segment", "fragmentation")
             for c in traces(h200, p)]
    assert len(cases) == 8
    for name, conf, rec in cases:
        check_trace(ca, name, conf, rec)


@pytest.mark.points(2)
def test_random_traces_match_h200(ca, h200):
    """12 random traces of 80 steps (1 B .. 48 MiB, frees, empty_cache) under the three configurations."""
    cases = list(traces(h200, "random_"))
    assert len(cases) == 36
    for name, conf, rec in cases:
        check_trace(ca, name, conf, rec)


def round_size_oracle(n, d):
    """Closed form: the least value >= n on the grid of multiples of 512 B, or (with d > 1 and n > 512*d)
    on the grid 2^k * (1 + j/d), powers of two included."""
    if n < 512:
        return 512
    if d > 1 and n > 512 * d:
        k = n.bit_length() - 1
        return min(v for v in (2 ** k + j * (2 ** k // d) for j in range(d + 1)) if v >= n)
    return (n + 511) // 512 * 512


@pytest.mark.points(1)
def test_round_size_and_segment_size(ca):
    rng = random.Random(607)
    sizes = [1, 511, 512, 513, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4097, MiB - 1, MiB, MiB + 1,
             10 * MiB - 513, 10 * MiB - 512, 10 * MiB - 1, 10 * MiB, 10 * MiB + 1, 3 * MiB + 7]
    sizes += [int(2 ** rng.uniform(0, 33)) for _ in range(400)]
    for d in (0, 1, 2, 4, 8, 16):
        divisions = [d] * 16
        for n in sizes:
            got = ca.round_size(n, divisions)
            assert got == round_size_oracle(n, d), f"round_size({n}, divisions={d}) = {got}, want {round_size_oracle(n, d)}"
    # per-interval divisions: only sizes in [4 MiB, 8 MiB) use 4 divisions
    divisions = [0] * 16
    divisions[2] = 4
    for n in sizes:
        d = 4 if 4 * MiB <= n < 8 * MiB else 0
        assert ca.round_size(n, divisions) == round_size_oracle(n, d), f"round_size({n}) with divisions only in [4, 8) MiB"
    for size in sorted({ca.round_size(n, [0] * 16) for n in sizes}):
        want = 2 * MiB if size <= MiB else 20 * MiB if size < 10 * MiB else -(-size // (2 * MiB)) * 2 * MiB
        assert ca.allocation_size(size) == want, f"allocation_size({size}) = {ca.allocation_size(size)}, want {want}"


def random_trace(rng, steps, max_log2):
    live, trace, nid = [], [], 0
    for _ in range(steps):
        r = rng.random()
        if r < 0.04:
            trace.append(["empty_cache"])
        elif live and r < 0.47:
            trace.append(["free", live.pop(rng.randrange(len(live)))])
        else:
            n = int(2 ** rng.uniform(0, max_log2))
            if rng.random() < 0.25:
                n = max(512, n // MiB * MiB or n // 512 * 512)
            trace.append(["alloc", nid, n])
            live.append(nid)
            nid += 1
    return trace


def check_invariants(ca, conf, trace, where):
    alloc = ca.CachingAllocator(conf)
    held, requested = {}, {s[1]: s[2] for s in trace if s[0] == "alloc"}
    for i, step in enumerate(trace):
        where_i = f"{where} step {i} {step}"
        if step[0] == "alloc":
            b = held[step[1]] = alloc.malloc(step[2])
            assert b.allocated and b.size >= step[2] and b.size % 512 == 0, f"{where_i}: block {b.size} B"
        elif step[0] == "free":
            alloc.free(held.pop(step[1]))
        else:
            before = canon(alloc.snapshot())
            alloc.empty_cache()
            kept = [s for s in before if any(state != "inactive" for _, state in s[2])]
            assert canon(alloc.snapshot()) == kept, (
                f"{where_i}: empty_cache must release exactly the fully free segments\n  before: {before}\n"
                f"  after:  {canon(alloc.snapshot())}")
        st, segs = alloc.stats(), alloc.snapshot()
        assert st["allocated_bytes"] == sum(b.size for b in held.values()), f"{where_i}: allocated bytes"
        assert st["requested_bytes"] == sum(requested[k] for k in held), f"{where_i}: requested bytes"
        assert st["allocated_bytes"] <= st["reserved_bytes"] == sum(s["total_size"] for s in segs), f"{where_i}: {st}"
        assert st["segment"] == len(segs)
        for s in segs:
            sizes = [b[0] for b in s["blocks"]]
            states = [b[1] for b in s["blocks"]]
            assert sum(sizes) == s["total_size"], f"{where_i}: blocks do not tile their segment: {s}"
            assert all(x > 0 and x % 512 == 0 for x in sizes), f"{where_i}: block sizes {sizes}"
            assert not any(a == b == "inactive" for a, b in zip(states, states[1:])), (
                f"{where_i}: two adjacent free blocks were not coalesced: {s}")
            assert s["pool"] == "large" or s["total_size"] == 2 * MiB, f"{where_i}: small-pool segment {s}"


@pytest.mark.points(1)
def test_invariants_on_new_random_traces(ca):
    rng = random.Random(2026)
    confs = ["", "max_split_size_mb:20", "max_split_size_mb:64", "roundup_power2_divisions:8",
             "max_split_size_mb:40,roundup_power2_divisions:2"]
    for k in range(25):
        conf = confs[k % len(confs)]
        trace = random_trace(rng, 160, 27.5 if k % 2 else 21.0)
        check_invariants(ca, conf, trace, f"[{conf or 'default'}] random trace {k}")
