"""Tests for rl-13. References: a slow float64 loop straight from the V-trace definition as a sum
(vs_s = V_s + sum_t gamma^(t-s) (c_s ... c_{t-1}) delta_t, stopping at the first done), the on-policy case
(rho = c = 1: discounted n-step returns), torchrl 0.14's `vtrace_advantage_estimate` (the field's
implementation), and one real Ray run in which a rollout actor is `ray.kill`ed in the middle of a trajectory.

The fast tests (V-trace, loss, admission rules) come first; the Ray run last, graded by several tests."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from pytest_hpccourse.runtimes.ray.drills import ray_cluster, remote  # noqa: F401 - ray_cluster is a fixture

F64 = torch.float64


# ---- random inputs and the slow references ---------------------------------------------------------------
def _inputs(T, B, seed, p_done=0.2, lag=0.6, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    target = -torch.rand(T, B, generator=g, dtype=F64) * 2.0 - 0.05
    behaviour = target + lag * torch.randn(T, B, generator=g, dtype=F64)   # ratios on both sides of 1
    rewards = torch.randn(T, B, generator=g, dtype=F64)
    values = 2 * torch.randn(T, B, generator=g, dtype=F64) + 0.5
    boot = 2 * torch.randn(B, generator=g, dtype=F64) + 0.5
    dones = torch.rand(T, B, generator=g) < p_done
    return [x.to(dtype) for x in (behaviour, target, rewards, values, boot)] + [dones]


def slow_vtrace(behaviour, target, rewards, values, boot, dones, gamma, rho_bar, c_bar):
    """Sum form of V-trace in Python floats: for each s, add gamma^(t-s) (prod c) delta_t up to the first done."""
    mu, pi, r, v = (x.to(F64).tolist() for x in (behaviour, target, rewards, values))
    bt, d = boot.to(F64).tolist(), dones.tolist()
    T, B = len(r), len(r[0])
    vs = [[0.0] * B for _ in range(T)]
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        ratio = [np.exp(pi[t][b] - mu[t][b]) for t in range(T)]
        rho = [min(rho_bar, x) for x in ratio]
        c = [min(c_bar, x) for x in ratio]
        v_next = [v[t + 1][b] if t + 1 < T else bt[b] for t in range(T)]
        delta = [rho[t] * (r[t][b] + (0.0 if d[t][b] else gamma * v_next[t]) - v[t][b]) for t in range(T)]
        for s in range(T):
            total, weight = 0.0, 1.0
            for t in range(s, T):
                total += weight * delta[t]
                if d[t][b]:
                    break
                weight *= gamma * c[t]
            vs[s][b] = v[s][b] + total
        for s in range(T):
            nxt = 0.0 if d[s][b] else gamma * (vs[s + 1][b] if s + 1 < T else bt[b])
            adv[s][b] = rho[s] * (r[s][b] + nxt - v[s][b])
    return torch.tensor(vs, dtype=F64), torch.tensor(adv, dtype=F64)


def _check(got, want, dtype, rtol=1e-10, atol=1e-10, what=""):
    vs, adv = got
    assert isinstance(vs, torch.Tensor) and isinstance(adv, torch.Tensor), "return (vs, pg_advantages) tensors"
    assert vs.dtype == dtype and adv.dtype == dtype, f"{what}: dtype {vs.dtype}/{adv.dtype}, expected {dtype}"
    assert vs.shape == want[0].shape and adv.shape == want[1].shape, f"{what}: shapes {vs.shape}/{adv.shape}"
    torch.testing.assert_close(vs.detach().to(F64), want[0], rtol=rtol, atol=atol, msg=lambda m: f"{what} vs: {m}")
    torch.testing.assert_close(adv.detach().to(F64), want[1], rtol=rtol, atol=atol,
                               msg=lambda m: f"{what} pg_advantages: {m}")


# (T, B, seed, gamma, rho_bar, c_bar, p_done): odd shapes, T = 1, rho_bar < 1, c_bar below and above rho_bar
CASES = [
    (7, 5, 0, 0.9, 1.0, 1.0, 0.2),
    (1, 3, 1, 0.97, 1.0, 1.0, 0.3),
    (13, 2, 2, 0.99, 0.5, 0.5, 0.15),
    (9, 4, 3, 0.8, 1.0, 0.3, 0.2),
    (6, 3, 4, 0.95, 0.7, 2.0, 0.25),
    (11, 1, 5, 0.9, 3.0, 1.0, 0.1),
]


# ---- part 1: V-trace (fast) ------------------------------------------------------------------------------
@pytest.mark.points(2)
def test_vtrace_equals_the_definition(lesson):
    """float64 inputs: rtol/atol 1e-10 (T <= 13 fused multiply-adds, the reference sums the same terms)."""
    m = lesson.load("impala.py")
    for T, B, seed, gamma, rho_bar, c_bar, p_done in CASES:
        args = _inputs(T, B, seed, p_done=p_done)
        got = m.vtrace(*args, gamma, rho_bar, c_bar)
        _check(got, slow_vtrace(*args, gamma, rho_bar, c_bar), F64, what=f"T={T} B={B} rho_bar={rho_bar} c_bar={c_bar}")


def test_vtrace_done_in_the_middle_and_at_the_last_step(lesson):
    m = lesson.load("impala.py")
    behaviour, target, rewards, values, boot, _ = _inputs(6, 4, 11)
    dones = torch.zeros(6, 4, dtype=torch.bool)
    dones[2, 0] = True                      # mid-trajectory: the trace stops, the value after it is not used
    dones[5, 1] = True                      # at the last step: V(s_T) is not bootstrapped
    dones[2, 2] = dones[3, 2] = True        # two in a row
    dones[:, 3] = True                      # every step ends an episode: vs_t = V_t + rho_t (r_t - V_t)
    for rho_bar, c_bar in ((1.0, 1.0), (0.6, 0.9)):
        got = m.vtrace(behaviour, target, rewards, values, boot, dones, 0.9, rho_bar, c_bar)
        want = slow_vtrace(behaviour, target, rewards, values, boot, dones, 0.9, rho_bar, c_bar)
        _check(got, want, F64, what=f"dones at the edges, rho_bar={rho_bar}")
        rho = torch.exp(target - behaviour).clamp(max=rho_bar)
        torch.testing.assert_close(got[0][:, 3], values[:, 3] + rho[:, 3] * (rewards[:, 3] - values[:, 3]))
        torch.testing.assert_close(got[1][5, 1], rho[5, 1] * (rewards[5, 1] - values[5, 1]))


def test_on_policy_vtrace_is_the_n_step_return(lesson):
    """mu = pi and rho_bar = c_bar = 1: vs_t is the discounted return up to the episode end or s_T (then
    + gamma^k V(s_T)), and pg_advantage_t = vs_t - V_t (GAE with lambda = 1)."""
    m = lesson.load("impala.py")
    _, target, rewards, values, boot, dones = _inputs(10, 3, 21, p_done=0.15)
    gamma = 0.93
    r, d, bt = rewards.tolist(), dones.tolist(), boot.tolist()
    ret = torch.empty(10, 3, dtype=F64)
    for b in range(3):
        for s in range(10):
            g, k = 0.0, s
            while True:
                g += gamma ** (k - s) * r[k][b]
                if d[k][b] or k == 9:
                    break
                k += 1
            if not d[k][b]:
                g += gamma ** (k - s + 1) * bt[b]
            ret[s, b] = g
    vs, adv = m.vtrace(target, target, rewards, values, boot, dones, gamma, 1.0, 1.0)
    torch.testing.assert_close(vs, ret, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(adv, ret - values, rtol=1e-10, atol=1e-10)


def test_vtrace_keeps_dtype_reads_only_and_carries_no_graph(lesson):
    m = lesson.load("impala.py")
    args = _inputs(8, 5, 31, dtype=torch.float32)
    args = [a.requires_grad_(True) if a.is_floating_point() else a for a in args]
    before = [a.detach().clone() for a in args]
    first = m.vtrace(*args, 0.9, 0.8, 0.6)
    second = m.vtrace(*args, 0.9, 0.8, 0.6)
    for a, b in zip(args, before):
        assert torch.equal(a.detach(), b), "vtrace changed one of its inputs"
    assert not first[0].requires_grad and not first[1].requires_grad, \
        "vs and pg_advantages are targets: they must carry no autograd graph (no gradient through them)"
    want = slow_vtrace(*[a.detach() for a in args], 0.9, 0.8, 0.6)
    _check(first, want, torch.float32, rtol=1e-5, atol=1e-5, what="float32")  # fp32: ~1e-6 relative per op
    for x, y in zip(first, second):
        assert torch.equal(x, y), "a second call gave another result"


@pytest.mark.requires("torchrl")
def test_vtrace_equals_torchrl(lesson):
    """torchrl's vtrace_advantage_estimate: [B, T, 1] (time_dim=-2), log_pi = target, log_mu = behaviour
    (rho = exp(log_pi - log_mu)), next_state_value[t] = V_{t+1}, done = terminated = our dones; returns (advantage, vs)."""
    from torchrl.objectives.value.functional import vtrace_advantage_estimate

    m = lesson.load("impala.py")
    for T, B, seed, gamma, rho_bar, c_bar, p_done in CASES:
        mu, pi, r, v, boot, d = _inputs(T, B, seed + 100, p_done=p_done)
        nxt = torch.cat([v[1:], boot[None]])
        bt = lambda x: x.transpose(0, 1).unsqueeze(-1)  # noqa: E731 - [T, B] -> [B, T, 1]
        adv_ref, vs_ref = vtrace_advantage_estimate(gamma, bt(pi), bt(mu), bt(v), bt(nxt), bt(r), bt(d),
                                                    terminated=bt(d), rho_thresh=rho_bar, c_thresh=c_bar)
        got = m.vtrace(mu, pi, r, v, boot, d, gamma, rho_bar, c_bar)
        unb = lambda x: x.squeeze(-1).transpose(0, 1)  # noqa: E731
        # torchrl builds gamma * (1 - done) from an int tensor, i.e. in float32: 0.9 -> 0.8999999762, so the
        # oracle is only float32-accurate (~1e-7 relative per step); 2e-6 covers T <= 13 steps of it
        _check(got, (unb(vs_ref), unb(adv_ref)), F64, rtol=2e-6, atol=2e-6, what=f"torchrl T={T} B={B}")


# ---- part 2: the loss ------------------------------------------------------------------------------------
def _batch(m, cfg, T, B, seed, lag_scale=1.5):
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, cfg.n_states, size=(T, B))
    actions = rng.integers(0, 2, size=(T, B))
    dones = rng.random((T, B)) < 0.2
    rewards = dones * 1.0 + 0.1 * rng.standard_normal((T, B))
    old = m.initial_params(cfg) + lag_scale * rng.standard_normal((cfg.n_states, 3))  # the stale policy
    logits = old[obs, :2]
    mu = (logits - np.logaddexp(logits[..., 0], logits[..., 1])[..., None])
    behaviour = np.take_along_axis(mu, actions[..., None], -1)[..., 0]
    return m.Batch(torch.tensor(obs), torch.tensor(actions), torch.tensor(rewards), torch.tensor(dones),
                   torch.tensor(behaviour), torch.tensor(rng.integers(0, cfg.n_states, size=B)))


def reference_loss(params, batch, cfg, vtrace_fn=slow_vtrace):
    logp = torch.log_softmax(params[batch.obs, :2], -1)
    target = logp.gather(-1, batch.actions[..., None])[..., 0]
    values, boot = params[batch.obs, 2], params[batch.last_obs, 2]
    vs, adv = vtrace_fn(batch.behaviour_logp, target.detach(), batch.rewards, values.detach(), boot.detach(),
                        batch.dones, cfg.gamma, cfg.rho_bar, cfg.c_bar)
    ent = -(logp.exp() * logp).sum(-1).mean()
    loss = -(adv * target).mean() + cfg.value_coef * 0.5 * ((vs - values) ** 2).mean() - cfg.entropy_coef * ent
    return loss, vs, adv


@pytest.mark.points(2)
def test_loss_uses_the_corrected_ratios(lesson):
    """A batch acted by a stale policy (log pi - log mu of order 1, so rho_bar and c_bar both clip): loss and
    d loss / d params equal the reference (float64, rtol 1e-9); vs and pg_advantages are V-trace's."""
    m = lesson.load("impala.py")
    for T, B, seed, rho_bar, c_bar in ((6, 5, 0, 1.0, 1.0), (9, 3, 1, 0.7, 1.0), (1, 4, 2, 1.0, 0.5)):
        cfg = m.Config(rho_bar=rho_bar, c_bar=c_bar, gamma=0.95)
        batch = _batch(m, cfg, T, B, seed)
        base = torch.tensor(m.initial_params(cfg) + np.random.default_rng(seed + 50).normal(0, 0.5, (cfg.n_states, 3)))
        p1, p2 = base.clone().requires_grad_(True), base.clone().requires_grad_(True)
        loss, vs, adv = m.impala_loss(p1, batch, cfg)
        loss.backward()
        want, want_vs, want_adv = reference_loss(p2, batch, cfg)
        want.backward()
        torch.testing.assert_close(vs.detach(), want_vs, rtol=1e-9, atol=1e-9, msg=lambda s: "vs: " + s)
        torch.testing.assert_close(adv.detach(), want_adv, rtol=1e-9, atol=1e-9, msg=lambda s: "pg_adv: " + s)
        torch.testing.assert_close(loss.detach(), want.detach(), rtol=1e-9, atol=1e-12, msg=lambda s: "loss: " + s)
        torch.testing.assert_close(p1.grad, p2.grad, rtol=1e-9, atol=1e-12, msg=lambda s: "gradient: " + s)
        # the learner that ignores the behaviour policy (ratios taken as 1) must differ on this batch
        on_policy = m.Batch(batch.obs, batch.actions, batch.rewards, batch.dones,
                            torch.log_softmax(base[batch.obs, :2], -1).gather(-1, batch.actions[..., None])[..., 0],
                            batch.last_obs)
        naive, _, _ = reference_loss(base.clone(), on_policy, cfg)
        assert abs(float(naive.detach()) - float(want.detach())) > 1e-3, "test batch does not separate corrected from uncorrected"


# ---- part 3: admission (fast) ----------------------------------------------------------------------------
def _traj(m, cfg, actor, seq, version, seed=0):
    rng = np.random.default_rng([seed, actor, seq])
    T = cfg.unroll
    return m.Trajectory(actor, seq, version, 0, rng.integers(0, cfg.n_states, T), rng.integers(0, 2, T),
                        rng.random(T), rng.random(T) < 0.2, -rng.random(T) - 0.1, int(rng.integers(cfg.n_states)))


def test_learner_dedupes_by_actor_and_seq_and_bounds_the_lag(lesson):
    m = lesson.load("impala.py")
    cfg = m.Config(batch_size=2, max_lag=2)
    published = []
    lr = m.Learner(cfg, lambda v, p: published.append(v))
    script = [
        ((0, 0, 0), "buffered"),
        ((1, 0, 0), "trained"),      # another actor's seq 0 is another trajectory; version 0 -> 1
        ((0, 0, 0), "duplicate"),    # (0, 0) again: a retried or re-sent work item
        ((0, 1, 0), "buffered"),     # lag 1
        ((2, 5, 1), "trained"),      # version 1 -> 2
        ((1, 1, 0), "buffered"),     # lag 2 == max_lag: still allowed
        ((3, 0, 2), "trained"),      # version 2 -> 3
        ((1, 2, 0), "stale"),        # lag 3 > max_lag
        ((1, 2, 3), "duplicate"),    # the first copy of (1, 2) was dropped as stale: a later copy is still a duplicate
        ((1, 3, 1), "buffered"),     # lag 2
        ((2, 6, 3), "trained"),
    ]
    for (actor, seq, version), want in script:
        got = lr.add(_traj(m, cfg, actor, seq, version))
        assert got == want, f"add(actor={actor}, seq={seq}, version={version}) at learner version {lr.version}: {got!r}, expected {want!r}"
    assert published == [1, 2, 3, 4]
    assert [u.keys for u in lr.log] == [[(0, 0), (1, 0)], [(0, 1), (2, 5)], [(1, 1), (3, 0)], [(1, 3), (2, 6)]]
    for u in lr.log:
        assert all(u.version - v <= cfg.max_lag for v in u.traj_versions)
    assert lr.buffer == []


# ---- the Ray run: an actor killed for real in the middle of a trajectory ----------------------------------
N_ACTORS, PER_ACTOR, IN_FLIGHT, KILL = 3, 10, 2, (0, 3)


class Spawner:
    """spawn(i) for run(): a new RolloutActor for actor id i, numbered by incarnation."""

    def __init__(self, m, cfg, store):
        self.m, self.cfg, self.store = m, cfg, store
        self.incarnations = Counter()
        self.current, self.all = {}, []
        self.lock = threading.Lock()

    def __call__(self, i):
        with self.lock:
            inc = self.incarnations[i]
            self.incarnations[i] += 1
            h = remote(self.m.RolloutActor, num_cpus=0, max_restarts=0).remote(i, inc, self.cfg, self.store)
            self.current[i] = h
            self.all.append(h)
            return h


def _killer(spawn, marker: Path, stop: threading.Event, log: list):
    """Waits until the actor is stuck halfway through its trajectory, then kills its process for real."""
    import ray

    while not stop.is_set():
        if marker.exists():
            with spawn.lock:
                h = spawn.current[KILL[0]]
            ray.kill(h, no_restart=True)
            log.append(time.monotonic())
            return
        time.sleep(0.01)


def _scenario(m, tmp: Path, n_actors, per_actor, max_restarts, step_time=0.002):
    import ray

    cfg = m.Config(step_time=step_time, hang_at=KILL, signal_dir=str(tmp), max_lag=1, batch_size=4)
    store = remote(m.ParamStore, num_cpus=0).remote(m.initial_params(cfg))
    spawn = Spawner(m, cfg, store)
    learner = m.Learner(cfg, lambda v, p: ray.get(store.publish.remote(v, p)))
    delivered = []
    real_add = learner.add

    def add(traj):                          # records every delivery and what the learner made of it
        out = real_add(traj)
        delivered.append((traj, out))
        return out

    learner.add = add
    stop, killed = threading.Event(), []
    watcher = threading.Thread(target=_killer, args=(spawn, tmp / f"hang-{KILL[0]}-{KILL[1]}", stop, killed))
    watcher.start()
    try:
        restarts, error = m.run(spawn, learner, n_actors, per_actor, IN_FLIGHT, max_restarts), None
    except Exception as e:  # noqa: BLE001 - the tests look at what came out
        restarts, error = None, e
    finally:
        stop.set()
        watcher.join()
    ray.kill(store, no_restart=True)
    return {"cfg": cfg, "learner": learner, "delivered": delivered, "spawn": spawn, "restarts": restarts,
            "error": error, "killed": killed}


_done: dict = {}


@pytest.fixture(scope="module")
def scenario(lesson, ray_cluster, tmp_path_factory):  # noqa: F811
    m = lesson.load("impala.py")

    def get(name):
        if name not in _done:
            tmp = tmp_path_factory.mktemp(name)
            if name == "kill":
                _done[name] = _scenario(m, tmp, N_ACTORS, PER_ACTOR, max_restarts=1)
            else:  # "budget": the same kill with no restart allowed
                _done[name] = _scenario(m, tmp, 1, 5, max_restarts=0)
        return m, _done[name]

    yield get
    _done.clear()


def _ok(r):
    if r["error"] is not None:
        raise AssertionError(f"run raised {type(r['error']).__name__}: {str(r['error'])[:400]}")
    assert r["killed"], "the actor never reached the point where the test kills it"
    return r




@pytest.mark.requires("ray")
@pytest.mark.timeout(240)
@pytest.mark.points(2)
def test_killed_actor_is_replaced_and_nothing_finished_is_lost(scenario):
    _, r = scenario("kill")
    _ok(r)
    assert r["restarts"] == 1, f"run reported {r['restarts']} restarts for one killed actor"
    assert r["spawn"].incarnations == Counter({0: 2, 1: 1, 2: 1}), \
        f"spawned {dict(r['spawn'].incarnations)}: the killed actor is replaced once, however many of its calls fail"
    first = {}
    for traj, out in r["delivered"]:
        key = (traj.actor_id, traj.seq)
        if key not in first:
            first[key] = (traj, out)
    want = {(i, s) for i in range(N_ACTORS) for s in range(PER_ACTOR)}
    assert set(first) == want, f"work items never delivered: {sorted(want - set(first))}; unexpected: {sorted(set(first) - want)}"
    for (i, s), (traj, out) in first.items():
        assert out in ("buffered", "trained", "stale"), f"first delivery of {(i, s)} was {out!r}"
        if i == KILL[0]:
            # seqs < 3 finished (their calls returned) before the kill: kept from incarnation 0, never redone
            want_inc = 0 if s < KILL[1] else 1
            assert traj.incarnation == want_inc, f"actor {i} seq {s} came from incarnation {traj.incarnation}"


@pytest.mark.requires("ray")
@pytest.mark.timeout(240)
def test_no_trajectory_trained_twice_and_the_lag_bound_held(scenario):
    _, r = scenario("kill")
    _ok(r)
    lr, cfg = r["learner"], r["cfg"]
    keys = [k for u in lr.log for k in u.keys]
    dup = [k for k, n in Counter(keys).items() if n > 1]
    assert not dup, f"trained twice: {dup}"
    assert len(lr.log) >= 2, f"only {len(lr.log)} updates"
    for u in lr.log:
        lags = [u.version - v for v in u.traj_versions]
        assert all(0 <= x <= cfg.max_lag for x in lags), f"update at version {u.version} trained lags {lags}"
    kept = sum(out in ("buffered", "trained") for _, out in r["delivered"])
    assert len(keys) == kept - len(lr.buffer), "a kept trajectory was neither trained nor left in the buffer"


@pytest.mark.requires("ray")
@pytest.mark.timeout(240)
def test_every_update_was_the_vtrace_loss_on_its_batch(scenario):
    m, r = scenario("kill")
    _ok(r)
    lr, cfg = r["learner"], r["cfg"]
    by_key = {}
    for traj, _ in r["delivered"]:
        by_key.setdefault((traj.actor_id, traj.seq), traj)
    params_of = {0: m.initial_params(cfg)} | {u.version: u.params_before for u in lr.log}
    for u in lr.log:
        trajs = [by_key[k] for k in u.keys]
        for t in trajs:  # the version tag is honest: mu is the policy of that version
            logits = params_of[t.version][t.obs, :2]
            mu = np.take_along_axis(logits - np.logaddexp(logits[:, 0], logits[:, 1])[:, None], t.actions[:, None], 1)[:, 0]
            np.testing.assert_allclose(t.behaviour_logp, mu, rtol=1e-12, atol=1e-12)
        want, _, _ = reference_loss(torch.tensor(u.params_before), m.stack(trajs), cfg)
        assert abs(u.loss - float(want)) <= 1e-9 * max(1.0, abs(float(want))), \
            f"update at version {u.version}: loss {u.loss}, V-trace loss {float(want)}"


@pytest.mark.requires("ray")
@pytest.mark.timeout(240)
def test_restart_budget_and_no_actor_outlives_run(scenario):
    import ray

    _, r = scenario("budget")
    assert isinstance(r["error"], ray.exceptions.RayActorError), \
        f"max_restarts=0: the actor's death must propagate, got {r['error']!r}"
    assert r["spawn"].incarnations == Counter({0: 1})
    _, k = scenario("kill")
    for name, res in (("budget", r), ("kill", k)):
        for actor in res["spawn"].all:
            deadline = time.monotonic() + 20  # ray.kill is asynchronous: give it time to land
            while True:
                try:
                    ray.get(actor.pid.remote(), timeout=60)
                except ray.exceptions.RayActorError:
                    break
                assert time.monotonic() < deadline, f"{name}: a rollout actor is still alive after run returned"
                time.sleep(0.5)

