"""Tests for platform-07: checkpoint intervals against their closed forms, the simulation against Daly's exact
expected time, and the formula's interval against the simulated optimum.

Statistical tolerance: a simulated mean must lie within 4 standard errors (estimated from the same runs) of the exact
expectation, sum over segments of M * e^(R/M) * (e^(L/M) - 1); each configuration uses 2000-4000 runs, so one
standard error is 0.2-0.6 % of the mean, and every modelling error tested here moves the mean by 3 % or more.
The optimum is flat, so the interval test compares costs, not argmins: the simulated cost at Daly's interval must be
within 2 % of the cheapest simulated cost over a grid of 13 intervals (0.3x to 3x); at delta = M/2 Young's interval
costs about 5 % more than the optimum.
"""

import math

import numpy as np
import pytest


@pytest.fixture
def ci(lesson):
    return lesson.load("checkpoint_interval.py")


def daly_ref(delta, m):
    if delta >= 2 * m:
        return m
    r = delta / (2 * m)
    return math.sqrt(2 * delta * m) * (1 + math.sqrt(r) / 3 + r / 9) - delta


def expected_ref(work, tau, delta, restart, m):
    """Exact expectation, segment by segment (a shorter last segment included), with failures during restarts."""
    n_full = int(math.floor(work / tau + 1e-9))
    rest = work - n_full * tau
    lengths = [tau + delta] * n_full + ([rest + delta] if rest > 1e-9 * tau else [])
    return sum(m * math.exp(restart / m) * math.expm1(length / m) for length in lengths)


@pytest.mark.points(1)
def test_young_daly_and_system_mtbf(ci):
    assert math.isclose(ci.system_mtbf(50_000.0, 10_000), 5.0, rel_tol=1e-12)
    assert math.isclose(ci.system_mtbf(8.0, 1), 8.0, rel_tol=1e-12)
    for delta, m in [(1 / 60, 5.0), (0.1, 3.0), (0.25, 24.0), (0.5, 1.0), (1.0, 0.7), (3.0, 1.6), (0.02, 1e4)]:
        assert math.isclose(ci.young_interval(delta, m), math.sqrt(2 * delta * m), rel_tol=1e-12), (delta, m)
        got, want = ci.daly_interval(delta, m), daly_ref(delta, m)
        assert math.isclose(got, want, rel_tol=1e-12), f"daly_interval({delta}, {m}) = {got}, expected {want}"
    for delta, m in [(2.0, 1.0), (5.0, 1.0), (2.0 * 3.3, 3.3)]:  # delta >= 2M: checkpoint once per MTBF
        assert math.isclose(ci.daly_interval(delta, m), m, rel_tol=1e-12), f"delta={delta} >= 2M={2 * m}"
    assert math.isclose(ci.daly_interval(1.98, 1.0), daly_ref(1.98, 1.0), rel_tol=1e-12), "just below delta = 2M"
    for m_min, tau_paper in [(24 * 60, 117.0), (6 * 60, 57.0), (15, 9.1)]:  # Daly 2006, Figs. 3-5: delta = 5 min
        got = ci.daly_interval(5.0, m_min)
        assert abs(got - tau_paper) <= 0.01 * tau_paper, f"M={m_min} min: {got:.2f} min, Daly's paper reports {tau_paper}"
    for n in (1_000, 16_384):  # MTBF shrinks as 1/N, so the interval shrinks about as 1/sqrt(N)
        m = ci.system_mtbf(50_677.0, n)
        assert math.isclose(ci.daly_interval(5 / 60, m), daly_ref(5 / 60, 50_677.0 / n), rel_tol=1e-12), n


SIM_CASES = [  # work, tau, delta, restart, mtbf, runs
    (100.0, 2.0, 0.25, 0.5, 5.0, 2000),
    (60.0, 1.5, 0.5, 2.0, 3.0, 2000),   # long restarts: failures during a restart matter (+17 % if ignored)
    (40.0, 4.0, 1.0, 0.5, 3.0, 2000),   # long checkpoints: failures during a checkpoint matter
    (23.5, 2.0, 0.1, 0.3, 4.0, 3000),   # work not a multiple of tau: a shorter last segment
    (6.0, 0.25, 1 / 60, 0.05, 50.0, 4000),  # rare failures
]


@pytest.mark.points(2)
def test_simulation_matches_daly_exact_expected_time(ci):
    for i, (work, tau, delta, restart, m, n) in enumerate(SIM_CASES):
        x = np.asarray(ci.simulate_wall_time(work, tau, delta, restart, m, n, np.random.default_rng(100 + i)))
        where = f"work={work}, tau={tau}, delta={delta}, restart={restart}, mtbf={m}"
        assert x.shape == (n,) and np.all(np.isfinite(x)), f"{where}: got shape {x.shape}, expected ({n},), finite"
        floor = expected_ref(work, tau, delta, restart, 1e30)
        assert np.all(x >= floor - 1e-9), f"{where}: a run took {x.min()} h < {floor} h, the failure-free time"
        want = expected_ref(work, tau, delta, restart, m)
        se = x.std(ddof=1) / math.sqrt(n)
        assert se > 0, f"{where}: every run took the same time {x[0]}"
        assert abs(x.mean() - want) <= 4 * se, (
            f"{where}: simulated mean {x.mean():.4f} h, Daly's exact expectation {want:.4f} h, "
            f"difference {(x.mean() - want) / se:.1f} standard errors (SE {se:.4f} h)")
    raw = ci.simulate_wall_time(23.5, 2.0, 0.1, 0.3, 1e12, 50, np.random.default_rng(1))
    assert isinstance(raw, np.ndarray) and raw.dtype == np.float64, \
        f"simulate_wall_time must return a float64 array, got {type(raw).__name__} {getattr(raw, 'dtype', '')}"
    x = np.asarray(raw)
    assert np.allclose(x, 23.5 + 12 * 0.1, rtol=1e-12, atol=0), f"no failures: every run takes 24.7 h, got {x[:5]}"
    a = ci.simulate_wall_time(20.0, 1.0, 0.1, 0.2, 2.0, 300, np.random.default_rng(7))
    b = ci.simulate_wall_time(20.0, 1.0, 0.1, 0.2, 2.0, 300, np.random.default_rng(7))
    c = ci.simulate_wall_time(20.0, 1.0, 0.1, 0.2, 2.0, 300, np.random.default_rng(8))
    assert np.array_equal(a, b) and not np.array_equal(a, c), "every random number must come from the rng argument"


@pytest.mark.points(1)
def test_daly_interval_is_near_the_simulated_optimum(ci):
    for j, (work, delta, restart, m) in enumerate([(30.0, 0.5, 0.1, 1.0), (40.0, 5 / 60, 0.25, 2.0)]):
        tau_d = ci.daly_interval(delta, m)
        grid = tau_d * np.geomspace(0.3, 3.0, 13)
        cost = [ci.simulate_wall_time(work, t, delta, restart, m, 2000, np.random.default_rng(1000 * j + i)).mean()
                for i, t in enumerate([tau_d, *grid])]
        best = min(cost)
        assert cost[0] <= 1.02 * best, (
            f"delta={delta}, M={m}: simulated cost at tau={tau_d:.3f} is {cost[0]:.3f} h, "
            f"{100 * (cost[0] / best - 1):.1f} % above the best on the grid ({best:.3f} h)")
