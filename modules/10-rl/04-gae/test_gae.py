"""Tests for rl-04. References: a slow per-env, per-start-step Python sum straight from the definition
A_t = Σ_l (γλ)^l δ_{t+l} (float64, stops at the first episode end), the λ = 1 Monte-Carlo return minus the
baseline, torchrl 0.14's `generalized_advantage_estimate` (the field's implementation), and a real CartPole
vector env in gymnasium's default NEXT_STEP autoreset mode, split into episodes observation by observation."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch

F64 = torch.float64


# ---- rollouts and references ---------------------------------------------------------------------------
def _rollout(T, N, seed, dtype=F64, p_term=0.12, p_trunc=0.12, consistent=True):
    """A random [T, N] rollout. consistent: next_values[t] = values[t+1] wherever step t is not an episode end
    (what a real rollout gives); at an episode end next_values[t] is the value of the true final observation."""
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(T, N, generator=g, dtype=F64)
    values = 2 * torch.randn(T, N, generator=g, dtype=F64) + 1
    final = 2 * torch.randn(T, N, generator=g, dtype=F64) + 1
    terminated = torch.rand(T, N, generator=g) < p_term
    truncated = torch.rand(T, N, generator=g) < p_trunc
    next_values = final.clone()
    if consistent:
        done = terminated | truncated
        next_values[:-1] = torch.where(done[:-1], final[:-1], values[1:])
    return rewards.to(dtype), values.to(dtype), next_values.to(dtype), terminated, truncated


def slow_gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    """Per env, per start step: A_t = Σ_{k=t}^{end} (γλ)^{k−t} δ_k, end = first episode end at or after t
    (or the last row). float64 Python arithmetic; no recursion, no vectorisation."""
    r, v, nv = (x.to(F64).tolist() for x in (rewards, values, next_values))
    te, tr = terminated.tolist(), truncated.tolist()
    T, N = len(r), len(r[0])
    adv = [[0.0] * N for _ in range(T)]
    for n in range(N):
        for t in range(T):
            total, weight = 0.0, 1.0
            for k in range(t, T):
                boot = 0.0 if te[k][n] else nv[k][n]
                total += weight * (r[k][n] + gamma * boot - v[k][n])
                if te[k][n] or tr[k][n]:
                    break
                weight *= gamma * lam
            adv[t][n] = total
    return torch.tensor(adv, dtype=F64)


def mc_minus_baseline(rewards, values, next_values, terminated, truncated, gamma):
    """λ = 1: discounted rewards up to the episode end, plus γ^k·V(next) unless it terminated, minus V(s_t)."""
    r, v, nv = (x.to(F64).tolist() for x in (rewards, values, next_values))
    te, tr = terminated.tolist(), truncated.tolist()
    T, N = len(r), len(r[0])
    out = [[0.0] * N for _ in range(T)]
    for n in range(N):
        for t in range(T):
            ret, k = 0.0, t
            while True:
                ret += gamma ** (k - t) * r[k][n]
                if te[k][n] or tr[k][n] or k == T - 1:
                    break
                k += 1
            if not te[k][n]:
                ret += gamma ** (k - t + 1) * nv[k][n]
            out[t][n] = ret - v[t][n]
    return torch.tensor(out, dtype=F64)


def _check(adv, ret, want, values, dtype, rtol, atol):
    assert isinstance(adv, torch.Tensor) and isinstance(ret, torch.Tensor), "return (advantages, returns) tensors"
    assert adv.dtype == dtype and ret.dtype == dtype, f"dtype {adv.dtype}/{ret.dtype}, expected {dtype}"
    assert adv.shape == values.shape and ret.shape == values.shape
    torch.testing.assert_close(adv.to(F64), want, rtol=rtol, atol=atol, msg=lambda m: "advantages: " + m)
    torch.testing.assert_close(ret.to(F64), want + values.to(F64), rtol=rtol, atol=atol,
                               msg=lambda m: "returns (= advantages + values): " + m)


# float64: the learner's recursion and the reference sum differ only in rounding order (~T·1e-16 relative).
TOL64 = dict(rtol=1e-10, atol=1e-10)


def _tol32(want):
    # float32 recursion: ~3 roundings of 2^-24 per step, T ≤ 64 steps, each error damped by γλ ≤ 1:
    # |err| ≲ 3·64·6e-8·max|A| ≈ 1.1e-5·max|A|; a wrong bootstrap or cut moves an entry by O(1).
    return dict(rtol=2e-5, atol=2e-5 * (1.0 + want.abs().max().item()))


# ---- the fastest tests that catch a wrong recursion come first ----------------------------------------
def test_truncation_bootstraps_and_termination_does_not(lesson):
    gae = lesson.load("gae.py")
    # env 0 is truncated after step 1, env 1 terminated after step 1, env 2 runs on; identical numbers otherwise.
    rewards = torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [0.5, 0.5, 0.5]], dtype=F64)
    values = torch.tensor([[3.0, 3.0, 3.0], [4.0, 4.0, 4.0], [6.0, 6.0, 6.0]], dtype=F64)
    next_values = torch.tensor([[4.0, 4.0, 4.0], [10.0, 10.0, 6.0], [8.0, 8.0, 8.0]], dtype=F64)
    terminated = torch.tensor([[False, False, False], [False, True, False], [False, False, False]])
    truncated = torch.tensor([[False, False, False], [True, False, False], [False, False, False]])
    gamma, lam = 0.5, 0.5
    adv, ret = gae.compute_gae(rewards, values, next_values, terminated, truncated, gamma, lam)
    want = slow_gae(rewards, values, next_values, terminated, truncated, gamma, lam)
    # by hand: row 2 (a new episode in envs 0 and 1) is 0.5 + 0.5·8 − 6 = −1.5 everywhere;
    # row 1: truncated 2 + 0.5·10 − 4 = 3 (bootstrap, trace cut); terminated 2 − 4 = −2; running 2 + 3 − 4 − 0.375 = 0.625
    torch.testing.assert_close(want[1], torch.tensor([3.0, -2.0, 0.625], dtype=F64))
    _check(adv, ret, want, values, F64, **TOL64)


@pytest.mark.parametrize("T, N, seed", [(7, 5, 0), (13, 3, 1), (33, 2, 2), (64, 11, 3)])
def test_matches_slow_reference_on_mixed_episode_ends(lesson, T, N, seed):
    gae = lesson.load("gae.py")
    r, v, nv, te, tr = _rollout(T, N, seed)
    assert (te & tr).any() or T < 13, "the rollout should hold a step that is both terminated and truncated"
    gamma, lam = 0.97, 0.9
    adv, ret = gae.compute_gae(r, v, nv, te, tr, gamma, lam)
    _check(adv, ret, slow_gae(r, v, nv, te, tr, gamma, lam), v, F64, **TOL64)


def test_next_values_is_used_at_every_step(lesson):
    gae = lesson.load("gae.py")
    # next_values independent of values[t+1] everywhere: the contract says V(s_{t+1}) is next_values[t], always.
    r, v, nv, te, tr = _rollout(19, 6, seed=4, consistent=False)
    adv, ret = gae.compute_gae(r, v, nv, te, tr, 0.95, 0.8)
    _check(adv, ret, slow_gae(r, v, nv, te, tr, 0.95, 0.8), v, F64, **TOL64)


@pytest.mark.parametrize("T, N, seed", [(50, 7, 5), (9, 33, 6)])
def test_float32_stays_float32_and_accurate(lesson, T, N, seed):
    gae = lesson.load("gae.py")
    r, v, nv, te, tr = _rollout(T, N, seed, dtype=torch.float32)
    adv, ret = gae.compute_gae(r, v, nv, te, tr, 0.99, 0.95)
    want = slow_gae(r, v, nv, te, tr, 0.99, 0.95)  # float64 from the same float32 inputs
    _check(adv, ret, want, v, torch.float32, **_tol32(want))


def _flags(kind, T, N, seed):
    """terminated / truncated patterns of the edge cases."""
    g = torch.Generator().manual_seed(seed)
    none = torch.zeros(T, N, dtype=torch.bool)
    last = none.clone()
    last[-1] = True
    coin = torch.rand(T, N, generator=g) < 0.5
    return {
        "no-done": (none, none),
        "terminated-at-last-row": (last, none),
        "truncated-at-last-row": (none, last),
        "all-terminated": (~none, none),
        "all-truncated": (none, ~none),
        "all-done-mixed": (coin, ~coin),
        "both-flags-everywhere": (~none, ~none),
    }[kind]


@pytest.mark.parametrize("kind", ["no-done", "terminated-at-last-row", "truncated-at-last-row", "all-terminated",
                                  "all-truncated", "all-done-mixed", "both-flags-everywhere"])
def test_edge_cases(lesson, kind):
    gae = lesson.load("gae.py")
    for T, N in [(1, 1), (1, 6), (8, 1), (12, 5)]:
        r, v, nv, _, _ = _rollout(T, N, seed=7 * T + N, consistent=False)
        te, tr = _flags(kind, T, N, seed=T + N)
        adv, ret = gae.compute_gae(r, v, nv, te, tr, 0.9, 0.7)
        want = slow_gae(r, v, nv, te, tr, 0.9, 0.7)
        if kind.startswith(("all", "both")) or T == 1:
            # every row ends an episode (or is the only row): the advantage is the one-step TD error
            torch.testing.assert_close(want, r + 0.9 * nv * (~te) - v, **TOL64)
        _check(adv, ret, want, v, F64, **TOL64)


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_lambda_zero_is_the_td_error(lesson, gamma):
    gae = lesson.load("gae.py")
    r, v, nv, te, tr = _rollout(21, 4, seed=8)
    adv, ret = gae.compute_gae(r, v, nv, te, tr, gamma, 0.0)
    _check(adv, ret, r + gamma * nv * (~te) - v, v, F64, **TOL64)


@pytest.mark.parametrize("gamma", [1.0, 0.95])
def test_lambda_one_is_the_monte_carlo_return_minus_the_baseline(lesson, gamma):
    gae = lesson.load("gae.py")
    r, v, nv, te, tr = _rollout(40, 5, seed=9, p_term=0.06, p_trunc=0.06)
    adv, ret = gae.compute_gae(r, v, nv, te, tr, gamma, 1.0)
    _check(adv, ret, mc_minus_baseline(r, v, nv, te, tr, gamma), v, F64, **TOL64)


def test_inputs_unchanged_and_no_hidden_state(lesson):
    gae = lesson.load("gae.py")
    # strided inputs (views of [N, T] buffers, as a batch-major buffer would hand them over)
    inputs = [x.T.contiguous().T for x in _rollout(17, 9, seed=10)]
    assert not inputs[0].is_contiguous()
    before = [x.clone() for x in inputs]
    first = gae.compute_gae(*inputs, 0.98, 0.92)
    for name, x, b in zip(("rewards", "values", "next_values", "terminated", "truncated"), inputs, before):
        assert torch.equal(x, b), f"compute_gae modified its input {name}"
    other = _rollout(17, 9, seed=11)
    gae.compute_gae(*other, 0.5, 0.5)
    # the first call's results are the caller's own tensors: a later call must not overwrite them
    _check(*first, slow_gae(*before, 0.98, 0.92), before[1], F64, **TOL64)
    second = gae.compute_gae(*inputs, 0.98, 0.92)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1]), "a second call gave other results"
    for a, b in zip(first, second):
        assert a.data_ptr() != b.data_ptr(), "compute_gae returned the same storage twice: results must be new tensors"
    _check(*first, slow_gae(*before, 0.98, 0.92), before[1], F64, **TOL64)


# ---- the technique: one loop over time, none over envs -------------------------------------------------
def _lines_executed(path, fn, *args):
    """Python lines executed inside the file `path` while fn(*args) runs (sys.settrace, deterministic)."""
    target = os.path.realpath(path)
    same: dict[str, bool] = {}
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def global_(frame, event, arg):
        name = frame.f_code.co_filename
        if name not in same:
            same[name] = os.path.realpath(name) == target
        return local if same[name] else None

    old = sys.gettrace()
    sys.settrace(global_)
    try:
        fn(*args)
    finally:
        sys.settrace(old)
    return count


@pytest.mark.points(8)
def test_vectorised_over_envs(lesson):
    gae = lesson.load("gae.py")
    source = lesson.path("gae.py").read_text()
    for name in ("torchrl", "verl", "stable_baselines3"):
        assert name not in source, f"gae.py must compute GAE itself, not call {name}"
    T = 16
    narrow = _rollout(T, 1, seed=12)
    wide = _rollout(T, 300, seed=12)
    lines_1 = _lines_executed(gae.__file__, gae.compute_gae, *narrow, 0.99, 0.95)
    lines_300 = _lines_executed(gae.__file__, gae.compute_gae, *wide, 0.99, 0.95)
    assert lines_1 > 0, "no line of gae.py ran"
    # vectorised: the same Python lines run whatever N is (O(T)); a loop over envs runs 300 times as many.
    assert lines_300 <= 2 * lines_1 + 50, (
        f"compute_gae executed {lines_1} Python lines of gae.py for N = 1 and {lines_300} for N = 300 (T = {T}): "
        "the work per step must be tensor operations over all envs, not a Python loop over envs")
    adv, _ = gae.compute_gae(*wide, 0.99, 0.95)
    torch.testing.assert_close(adv, slow_gae(*wide, 0.99, 0.95), **TOL64)


# ---- the field's implementation ----------------------------------------------------------------------
def _torchrl_gae(gamma, lam, rewards, values, next_values, terminated, truncated):
    from torchrl.objectives.value.functional import generalized_advantage_estimate

    def lay(x):  # our time-major [T, N] -> torchrl's [*batch, T, F] = [N, T, 1]
        return x.T.unsqueeze(-1)

    adv, target = generalized_advantage_estimate(
        gamma, lam, lay(values), lay(next_values), lay(rewards),
        done=lay(terminated | truncated), terminated=lay(terminated), time_dim=-2)
    return adv.squeeze(-1).T, target.squeeze(-1).T


@pytest.mark.requires("torchrl")
@pytest.mark.parametrize("dtype", [F64, torch.float32], ids=["fp64", "fp32"])
@pytest.mark.parametrize("T, N, seed, gamma, lam", [(29, 6, 13, 0.984375, 0.9375), (5, 17, 14, 1.0, 0.5),
                                                     (48, 3, 15, 0.875, 1.0)])
def test_matches_torchrl(lesson, dtype, T, N, seed, gamma, lam):
    gae = lesson.load("gae.py")
    r, v, nv, te, tr = _rollout(T, N, seed, dtype=dtype)
    want_adv, want_ret = _torchrl_gae(gamma, lam, r, v, nv, te, tr)
    # torchrl takes done = terminated | truncated for the trace and terminated for the bootstrap, as we do
    torch.testing.assert_close(want_adv.to(F64), slow_gae(r, v, nv, te, tr, gamma, lam),
                               **(TOL64 if dtype == F64 else _tol32(want_adv.to(F64))))
    adv, ret = gae.compute_gae(r, v, nv, te, tr, gamma, lam)
    tol = TOL64 if dtype == F64 else _tol32(want_adv.to(F64))
    _check(adv, ret, want_adv.to(F64), v, dtype, **tol)
    torch.testing.assert_close(ret.to(F64), want_ret.to(F64), **tol)


# ---- a real vector env in gymnasium's default NEXT_STEP autoreset mode --------------------------------
W = np.array([0.5, -1.0, 3.0, 0.7])


def _value(obs):
    """A fixed stand-in for a critic: V(obs) = 5 + w·obs, float64."""
    return 5.0 + np.asarray(obs, dtype=np.float64) @ W


def next_step_rollout(T, N, seed, max_steps):
    """CartPole-v1 ×N, NEXT_STEP autoreset. Row t is the step from obs[t] to obs[t+1]; in this mode the step that
    ends an episode returns the episode's final observation, and the step after it is an autoreset row
    (action ignored, reward 0, both flags False, obs[t+1] = the reset observation) that is no transition."""
    import gymnasium as gym

    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=max_steps)] * N,
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    rng = np.random.default_rng(seed)
    obs, _ = envs.reset(seed=seed)
    observations, rewards, terminated, truncated = [obs], [], [], []
    for _ in range(T):
        obs, r, te, tr, _ = envs.step(rng.integers(0, 2, size=N))
        observations.append(obs)
        rewards.append(r)
        terminated.append(te)
        truncated.append(tr)
    envs.close()
    return (np.stack(observations), np.stack(rewards).astype(np.float64), np.stack(terminated),
            np.stack(truncated))


def _episode_advantages(observations, rewards, terminated, truncated, gamma, lam):
    """Per env, cut the rows into episodes (skipping autoreset rows) and compute each transition's advantage from
    the observations themselves; returns {(t, n): A}."""
    T, N = rewards.shape
    out = {}
    for n in range(N):
        episode = []  # rows t of the current episode
        for t in range(T):
            if t > 0 and (terminated[t - 1, n] or truncated[t - 1, n]):
                continue  # autoreset row
            episode.append(t)
            if terminated[t, n] or truncated[t, n] or t == T - 1:
                for i, start in enumerate(episode):
                    total = 0.0
                    for j, k in enumerate(episode[i:]):
                        boot = 0.0 if terminated[k, n] else _value(observations[k + 1, n])
                        total += (gamma * lam) ** j * (rewards[k, n] + gamma * boot - _value(observations[k, n]))
                    out[(start, n)] = total
                episode = []
    return out


@pytest.mark.requires("gymnasium")
def test_next_step_cartpole_rollout(lesson):
    gae = lesson.load("gae.py")
    T, N, gamma, lam = 90, 5, 0.99, 0.95
    observations, rewards, terminated, truncated = next_step_rollout(T, N, seed=3, max_steps=20)
    assert terminated.sum() >= 3 and truncated.sum() >= 3, "the rollout should end episodes both ways"
    values_all = torch.from_numpy(_value(observations))  # [T + 1, N]
    # NEXT_STEP: obs[t+1] is the observation step t really reached (the final one at an episode end)
    adv, ret = gae.compute_gae(torch.from_numpy(rewards), values_all[:-1], values_all[1:],
                               torch.from_numpy(terminated), torch.from_numpy(truncated), gamma, lam)
    want = _episode_advantages(observations, rewards, terminated, truncated, gamma, lam)
    got = {key: adv[key].item() for key in want}
    assert len(want) == T * N - int((terminated | truncated)[:-1].sum())  # every row but the autoreset ones
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-10, abs=1e-10), f"advantage at (t, n) = {key}"
