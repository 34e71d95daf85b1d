"""cute-07 tests: PipelineState follows CUTLASS's operator++; the producer/consumer protocol never reads a stage
before its tile landed, never overwrites or releases a stage too early, never deadlocks and consumes every tile
once in order, under seeded random and fixed adversarial interleavings with jittered latencies; and its makespan
is exactly the ideal overlap of the model (closed form below), including the serialized S = 1 case.

Model (sim.py): a TMA load takes L time units and any number may be in flight; the MMA on a tile takes C; waits,
arrivals and issuing a load take no time. With S stages and K tiles the consumer finishes at
    T(S, K, L, C) = max(L + K*C,  L + floor((K-1)/S)*(L+C) + ((K-1) mod S + 1)*C)
(first term: the consumer is busy from the first arrival on; second: each stage turns around once per L + C, so a
lap of S tiles costs L + C when S*C < L + C). S = 1 gives K*(L + C); S >= 1 + L/C gives L + K*C.
"""

import itertools
import random

import pytest


def ideal_makespan(S, K, L, C):
    laps, rest = divmod(K - 1, S)
    return max(L + K * C, L + laps * (L + C) + (rest + 1) * C)


@pytest.fixture
def sim(lesson):
    return lesson.load("sim.py")


@pytest.fixture
def pl(lesson):
    return lesson.load("pipeline.py")


def check_run(run, S, K, what):
    assert run.order == list(range(K)), f"{what}: tiles consumed in order {run.order}, expected 0..{K - 1} once each"
    tiles = [tile for _, tile, _ in run.loads]
    assert tiles == list(range(K)), f"{what}: TMA loads issued for tiles {tiles}, expected 0..{K - 1} once each"
    stages = [stage for _, _, stage in run.loads]
    assert stages == [k % S for k in range(K)], f"{what}: tiles went to stages {stages}, a ring uses k mod S"


# ------------------------------------------------------------------------------------------------------------


@pytest.mark.points(1)
def test_pipeline_state_advance_matches_cutlass(pl):
    """sm90_pipeline.hpp: ++ moves index and count by one; index wraps at Stages and the phase flips on the wrap.
    After n steps from (i0, p0, c0): index (i0+n) % S, phase p0 ^ (((i0+n) // S) & 1), count c0 + n."""
    for S in range(1, 10):
        for i0, p0, c0 in [(0, 0, 0), (0, 1, 0), (S - 1, 0, 5), (S // 2, 1, 17)]:
            st = pl.PipelineState(S, i0, p0, c0)
            for n in range(1, 3 * S + 3):
                st.advance()
                want = ((i0 + n) % S, p0 ^ (((i0 + n) // S) & 1), c0 + n)
                got = (st.index, st.phase, st.count)
                assert got == want, f"Stages={S}, start {(i0, p0, c0)}, after {n} advances: {got}, CUTLASS gives {want}"
    for S in (1, 2, 7):
        st = pl.make_producer_start_state(S)
        assert (st.stages, st.index, st.phase, st.count) == (S, 0, 1, 0), (
            f"make_producer_start_state: {st!r}; CUTLASS starts the producer at index 0, phase 1, count 0")


def jitter(rng, lo, hi, K):
    values = [rng.randint(lo, hi) for _ in range(K)]
    return lambda tile: values[tile]


@pytest.mark.points(2)
def test_no_hazard_under_random_interleavings(sim, pl):
    rng = random.Random(7)
    for case in range(150):
        S, K = rng.randint(1, 6), rng.randint(1, 24)
        lo_l, hi_l = rng.choice([(0, 3), (0, 30), (10, 40)])  # loads faster or much slower than compute
        lo_c, hi_c = rng.choice([(0, 3), (1, 10), (10, 40)])
        what = f"case {case}: S={S}, K={K}, L in [{lo_l},{hi_l}], C in [{lo_c},{hi_c}], random policy"
        run = sim.run_pipeline(pl, S, K, jitter(rng, lo_l, hi_l, K), jitter(rng, lo_c, hi_c, K),
                               policy="random", seed=case, tile_bytes=(8192, 32768, 49152)[case % 3])
        check_run(run, S, K, what + f", {(8192, 32768, 49152)[case % 3]} bytes per tile")


@pytest.mark.points(1)
def test_no_hazard_under_adversarial_orders(sim, pl):
    """Fixed tie-break orders (the producer always first, the consumer always first, TMA completions last) with
    zero and extreme latencies, where a missing wait shows up at once."""
    rng = random.Random(11)
    for policy in ("fifo", "producer-first", "consumer-first", "producer-last"):
        for S, K, (L, C) in itertools.product((1, 2, 3, 5), (1, 2, 6, 11), [(0, 0), (0, 5), (5, 0), (1, 9), (9, 1)]):
            run = sim.run_pipeline(pl, S, K, L, C, policy=policy)
            check_run(run, S, K, f"S={S}, K={K}, L={L}, C={C}, policy {policy}")
        for case in range(10):
            S, K = rng.randint(1, 4), rng.randint(2, 16)
            run = sim.run_pipeline(pl, S, K, jitter(rng, 0, 12, K), jitter(rng, 0, 12, K), policy=policy)
            check_run(run, S, K, f"jittered case {case}, S={S}, K={K}, policy {policy}")


@pytest.mark.points(2)
def test_makespan_is_the_ideal_overlap(sim, pl):
    rng = random.Random(3)
    cases = list(itertools.product(range(1, 7), (1, 2, 3, 5, 8, 13), (1, 2, 4, 9), (1, 3, 7)))
    for i, (S, K, L, C) in enumerate(cases):
        policy = ("fifo", "random", "consumer-first", "producer-last")[i % 4]
        run = sim.run_pipeline(pl, S, K, L, C, policy=policy, seed=rng.randrange(1 << 30))
        check_run(run, S, K, f"S={S}, K={K}, L={L}, C={C}")
        want = ideal_makespan(S, K, L, C)
        assert run.makespan == want, (
            f"S={S}, K={K}, L={L}, C={C}: makespan {run.makespan}, the ideal overlap of S stages is {want}")


@pytest.mark.points(1)
def test_one_stage_serializes_and_enough_stages_hide_the_latency(sim, pl):
    for K, L, C in [(1, 4, 3), (7, 10, 2), (12, 3, 5), (9, 20, 1)]:
        one = sim.run_pipeline(pl, 1, K, L, C).makespan
        assert one == K * (L + C), f"S=1, K={K}, L={L}, C={C}: {one}, one stage serializes to K*(L+C) = {K * (L + C)}"
        need = 1 + -(-L // C)  # smallest S with (S-1)*C >= L
        hidden = sim.run_pipeline(pl, need, K, L, C).makespan
        assert hidden == L + K * C, f"S={need}: {hidden}, with enough stages only one load latency shows: {L + K * C}"
        if K > need:
            short = sim.run_pipeline(pl, need - 1, K, L, C).makespan
            assert short > hidden, f"S={need - 1} should not hide the latency L={L} behind C={C}"


@pytest.mark.points(1)
def test_barrier_phases_count_the_laps(sim, pl):
    """After the run each full and each empty barrier of stage s has completed exactly one phase per tile that went
    through s (ceil((K - s)/S)): one producer arrival + the tile's bytes, one consumer release."""
    for S, K in [(1, 5), (3, 7), (4, 4), (4, 13), (6, 2)]:
        run = sim.run_pipeline(pl, S, K, 3, 2, policy="random", seed=S * 100 + K, tile_bytes=1024 * (S + K))
        for s in range(S):
            laps = len(range(s, K, S))
            assert (run.full[s].phase, run.full[s].pending, run.full[s].tx) == (laps, 1, 0), (
                f"S={S}, K={K}: full[{s}] is {run.full[s]!r}, expected {laps} completed phases and no extra arrivals")
            assert run.empty[s].phase == laps, f"S={S}, K={K}: empty[{s}] is {run.empty[s]!r}, expected {laps} releases"
