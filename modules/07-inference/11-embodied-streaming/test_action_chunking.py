"""Tests for infer-11 (a): temporal ensembling and the streaming controller.

Reference: a brute-force ensemble that keeps every chunk ever received and, for tick t, averages the
actions of all chunks covering t in start order with weights exp(-m * i) (ACT, Zhao et al., RSS 2023, §IV-A,
Algorithm 2),
in float64. The learner's code does the same arithmetic on the same float64 values, in another order:
rtol = 1e-12.
"""

import numpy as np
import pytest


def _brute_force(chunks, t, k, m):
    """chunks: every (start, chunk) received so far."""
    live = [c[t - s] for s, c in sorted(chunks, key=lambda sc: sc[0]) if s <= t < s + k]
    if not live:
        return None
    w = np.exp(-m * np.arange(len(live)))
    return sum(wi * a for wi, a in zip(w, live)) / w.sum()


@pytest.mark.parametrize("k,m", [(1, 0.1), (5, 0.0), (5, 0.1), (7, 2.0)])
def test_ensemble_matches_brute_force(lesson, k, m):
    mod = lesson.load("action_chunking.py")
    rng = np.random.default_rng(k * 10 + int(10 * m))
    ens = mod.TemporalEnsembler(k, m)
    # chunks start at increasing ticks with random gaps (some ticks are covered by nobody) and arrive late
    starts = np.cumsum(rng.integers(1, 4, size=40))
    arrivals = np.maximum.accumulate(starts + rng.integers(0, 3, size=40))
    received, pending = [], list(zip(starts.tolist(), arrivals.tolist()))
    checked = raised = 0
    for t in range(int(starts[0]), int(arrivals[-1]) + k + 2):
        while pending and pending[0][1] <= t:
            s, _ = pending.pop(0)
            chunk = rng.normal(size=(k, 3)) + 5.0  # never near zero
            ens.add_chunk(s, chunk)
            received.append((s, chunk))
        want = _brute_force(received, t, k, m)
        if want is None:
            with pytest.raises(mod.NoActionError):
                ens.action(t)
            raised += 1
        else:
            np.testing.assert_allclose(ens.action(t), want, rtol=1e-12, err_msg=f"tick {t}")
            checked += 1
        may_cover = sum(1 for s, _ in received if s + k > t)  # chunks that can still cover t or a later tick
        assert len(ens.chunks) <= may_cover, (
            f"tick {t}: {len(ens.chunks)} chunks held, only {may_cover} can still cover a tick: drop the ones "
            "that ended (memory must stay O(k / latency))")
    assert checked >= 10 and raised > 0


def test_a_chunk_handed_in_before_its_first_tick_covers_nothing_yet(lesson):
    mod = lesson.load("action_chunking.py")
    k, m = 4, 0.5
    a, b, c = (np.arange(k * 2, dtype=np.float64).reshape(k, 2) + off for off in (10.0, 20.0, 30.0))
    ens = mod.TemporalEnsembler(k, m)
    ens.add_chunk(0, a)
    ens.add_chunk(3, b)  # covers ticks 3..6, handed in at tick 0
    for t in (0, 1, 2):
        np.testing.assert_allclose(ens.action(t), a[t], rtol=1e-12, err_msg=f"tick {t}: only chunk 0 covers it")
    w = np.exp(-m)
    np.testing.assert_allclose(ens.action(3), (a[3] + w * b[0]) / (1 + w), rtol=1e-12, err_msg="tick 3")
    np.testing.assert_allclose(ens.action(5), b[2], rtol=1e-12, err_msg="tick 5")
    ens.add_chunk(9, c)
    with pytest.raises(mod.NoActionError):
        ens.action(7)  # b ended at 6, c starts at 9
    assert len(ens.chunks) <= 1, f"{len(ens.chunks)} chunks held at tick 7; only the one starting at 9 is still usable"
    np.testing.assert_allclose(ens.action(9), c[0], rtol=1e-12, err_msg="tick 9")


def _run(mod, k, latency, m, ticks, seed, noise=0.3):
    """Drive the controller for `ticks` ticks; returns (actions, engine, every chunk the engine handed out)."""
    rng = np.random.default_rng(seed)

    def policy(t, obs):  # a smooth target trajectory seen through a noisy policy (one error per query)
        ticks_ = np.arange(t, t + k)[:, None]
        return np.hstack([np.sin(0.1 * ticks_), np.cos(0.07 * ticks_)]) + rng.normal(scale=noise, size=2) + obs

    def obs(t):
        return np.array([0.5, -0.25]) + 0.01 * t

    chunks = []

    class RecordingEngine(mod.SimulatedEngine):
        def submit(self, t, o):
            assert np.array_equal(o, obs(t)), f"the query submitted at tick {t} carries another tick's observation"
            super().submit(t, o)

        def poll(self, t):
            got = super().poll(t)
            chunks.extend(got)
            return got

    engine = RecordingEngine(policy, latency, obs(-latency))
    ctrl = mod.StreamingController(engine, k, m)
    actions = [ctrl.tick(t, obs(t)) for t in range(ticks)]
    return np.array(actions), engine, chunks


@pytest.mark.parametrize("k,latency", [(2, 1), (6, 3), (7, 3), (20, 3)])
def test_controller_never_waits_and_keeps_the_engine_busy(lesson, k, latency):
    # k >= 2 * latency: with the engine resubmitted the tick it frees up, every tick is covered
    mod = lesson.load("action_chunking.py")
    m, T = 0.1, 40
    actions, engine, chunks = _run(mod, k, latency, m, T, seed=k + latency)
    assert engine.submitted == list(range(-latency, T, latency)), \
        "submit on the observation of the very tick the engine frees up (never leave it idle)"
    for t in range(T):  # each action uses every chunk that had arrived by tick t, including this tick's
        arrived = [(s, c) for s, c in chunks if s + latency <= t]
        np.testing.assert_allclose(actions[t], _brute_force(arrived, t, k, m), rtol=1e-12, err_msg=f"tick {t}")


def test_tick_without_any_chunk_raises(lesson):
    # k < 2 * latency cannot cover every tick: the controller must say so, not replay a stale action
    mod = lesson.load("action_chunking.py")
    with pytest.raises(mod.NoActionError):
        _run(mod, 3, 2, 0.1, 10, seed=1)


def test_ensemble_is_smoother_than_switching_chunks(lesson):
    # each query carries its own error: plain chunk execution jumps whenever it switches chunks,
    # the ensemble averages ~k/latency overlapping chunks
    mod = lesson.load("action_chunking.py")
    k, latency, T = 16, 2, 120
    actions, _, chunks = _run(mod, k, latency, 0.05, T, seed=7)
    smooth_step = np.abs(np.diff(actions, axis=0)).max()
    # plain chunk execution: run the oldest chunk that still covers the tick, switch when it ends
    plain = [next(c[t - s] for s, c in chunks if s <= t < s + k) for t in range(T)]
    switch_step = np.abs(np.diff(np.array(plain), axis=0)).max()
    assert smooth_step < 0.5 * switch_step, (smooth_step, switch_step)
