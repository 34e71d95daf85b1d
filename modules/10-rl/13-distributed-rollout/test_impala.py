"""Tests for rl-13. References: a slow float64 loop straight from the V-trace definition as a sum
(vs_s = V_s + sum_t gamma^(t-s) (c_s ... c_{t-1}) delta_t, stopping at the first done), the on-policy case
(rho = c = 1: discounted n-step returns), torchrl 0.14's `vtrace_advantage_estimate` (the field's
implementation), and one real Ray run in which a rollout actor is `ray.kill`ed in the middle of a trajectory.

The fast tests (V-trace, loss, admission rules) come first; three small Ray runs last, graded by several tests."""

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
def _traj(m, cfg, actor, seq, version, incarnation=0, seed=0):
    rng = np.random.default_rng([seed, actor, seq, incarnation])
    T = cfg.unroll
    return m.Trajectory(actor, seq, version, incarnation, rng.integers(0, cfg.n_states, T), rng.integers(0, 2, T),
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
        ((0, 0, 1, 1), "duplicate"), # (0, 0) re-sampled by a restarted process (incarnation 1): the same name
        ((0, 1, 0), "buffered"),     # lag 1
        ((2, 5, 1), "trained"),      # version 1 -> 2
        ((1, 1, 0), "buffered"),     # lag 2 == max_lag: still allowed
        ((3, 0, 2), "trained"),      # version 2 -> 3
        ((1, 2, 0), "stale"),        # lag 3 > max_lag
        ((1, 2, 3, 1), "duplicate"), # the first copy of (1, 2) was dropped as stale: a later copy is still a duplicate
        ((1, 3, 1), "buffered"),     # lag 2
        ((2, 6, 3), "trained"),
    ]
    for (actor, seq, version, *inc), want in script:
        got = lr.add(_traj(m, cfg, actor, seq, version, *inc))
        assert got == want, (f"add(actor={actor}, seq={seq}, version={version}, incarnation={inc[0] if inc else 0}) "
                             f"at learner version {lr.version}: {got!r}, expected {want!r}")
    assert published == [1, 2, 3, 4]
    assert [u.keys for u in lr.log] == [[(0, 0), (1, 0)], [(0, 1), (2, 5)], [(1, 1), (3, 0)], [(1, 3), (2, 6)]]
    for u in lr.log:
        assert all(u.version - v <= cfg.max_lag for v in u.traj_versions)
    assert lr.buffer == []


# ---- the Ray runs: rollout processes killed for real, a failing sample, the restart budget ------------------
# Three runs of `run`, with actors whose behaviour is scripted per (actor id, incarnation, k-th call):
#   "error":  one actor raises ValueError in its 3rd call, max_restarts=1: the error propagates, nothing restarts;
#   "kill":   actor 0 hangs in the 4th call of incarnation 0 and again of incarnation 1, each time killed by the
#             test (ray.kill), max_restarts=2; actor 1 makes its 6th and later calls wait until actor 0 hangs,
#             so those trajectories can reach the learner only while actor 0 hangs;
#   "budget": actor 0 of two hangs in its 4th call and is killed, max_restarts=0: the RayActorError propagates.
# The order in which a driver sends the seqs is free: the script counts calls, not seqs.
IN_FLIGHT = 2
GATE_FROM = 6            # actor 1 of the "kill" run: calls >= 6 wait for actor 0 to hang
GATE_WAIT = 90.0         # s an actor's gated calls wait at most, in all
PROGRESS_WAIT = 5.0      # s the test waits for a gated trajectory to reach the learner before it kills anyway
SETTLE_WAIT = 2.0        # s it waits for the replies of the calls a process finished before it kills the process
MAX_SENDS = 3            # x the work items: a run that sends more calls is stopped (a loop resending forever)
RUN_DEADLINE = 120.0     # s: a run still sending calls after this is stopped (a backstop: a loaded 2-core machine
                         # takes ~50 s for the "kill" run, an idle one ~3 s)
DEAD_WAIT = 5.0          # s for ray.kill (asynchronous, lands in milliseconds here) to take effect


def _scripted(m):
    """A RolloutActor whose k-th sample call does what `script[(actor id, incarnation, k)]` says: ("hang",
    marker) leaves the file marker and sleeps until the test kills the process; ("gate", marker) waits for
    that file first; ("raise",) raises ValueError. Every call that returns or raises first appends
    "seq monotonic-time" to fin-<actor>-<incarnation> (CLOCK_MONOTONIC is one clock for all processes)."""

    class Scripted(m.RolloutActor):
        def __init__(self, actor_id, incarnation, cfg, store, script, log_dir):
            super().__init__(actor_id, incarnation, cfg, store)
            self.script, self.log_dir, self.calls = script, Path(log_dir), 0
            self.gate_until = None

        def _finished(self, seq):
            with open(self.log_dir / f"fin-{self.actor_id}-{self.incarnation}", "a") as f:
                f.write(f"{seq} {time.monotonic()!r}\n")

        def sample(self, seq):
            self.calls += 1
            what = self.script.get((self.actor_id, self.incarnation, self.calls), ("",))
            if what[0] == "hang":
                (self.log_dir / what[1]).touch()
                time.sleep(120)
            elif what[0] == "gate":
                self.gate_until = self.gate_until or time.monotonic() + GATE_WAIT
                while not (self.log_dir / what[1]).exists() and time.monotonic() < self.gate_until:
                    time.sleep(0.005)
            elif what[0] == "raise":
                self._finished(seq)
                raise ValueError(f"scripted failure: actor {self.actor_id} seq {seq}")
            traj = super().sample(seq)
            traj.call = self.calls
            self._finished(seq)
            return traj

    return Scripted


class _Sends:
    """Wraps an actor handle's `sample` method: records every call sent (time, actor, incarnation, seq) and
    stops a run that sends far more calls than there is work, or runs past RUN_DEADLINE."""

    def __init__(self, method, spawn, key):
        self.method, self.spawn, self.key = method, spawn, key

    def remote(self, *args, **kwargs):
        sp = self.spawn
        with sp.lock:
            if len(sp.sent) >= sp.max_sends or time.monotonic() > sp.deadline:
                raise RuntimeError(f"test watchdog: run stopped after {len(sp.sent)} sample calls "
                                   f"({sp.max_sends // MAX_SENDS} work items) and {time.monotonic() - sp.started:.0f} s")
            sp.sent.append((time.monotonic(), *self.key, args[0] if args else kwargs.get("seq")))
        return self.method.remote(*args, **kwargs)

    def options(self, **kwargs):
        return _Sends(self.method.options(**kwargs), self.spawn, self.key)

    def __getattr__(self, name):
        return getattr(self.method, name)


class Spawner:
    """spawn(i) for run(): a new scripted RolloutActor for actor id i, numbered by incarnation."""

    def __init__(self, actor_cls, cfg, store, script, log_dir, work_items):
        self.cls, self.cfg, self.store, self.script, self.log_dir = actor_cls, cfg, store, script, str(log_dir)
        self.incarnations = Counter()
        self.handles, self.all, self.sent = {}, [], []
        self.lock = threading.Lock()
        self.max_sends = MAX_SENDS * work_items
        self.started = time.monotonic()
        self.deadline = self.started + RUN_DEADLINE

    def __call__(self, i):
        with self.lock:
            inc = self.incarnations[i]
            self.incarnations[i] += 1
        h = remote(self.cls, num_cpus=0, max_restarts=0).remote(i, inc, self.cfg, self.store, self.script,
                                                                 self.log_dir)
        h.sample = _Sends(h.sample, self, (i, inc))
        with self.lock:
            self.handles[(i, inc)] = h
            self.all.append(h)
        return h


def _killer(spawn, tmp: Path, plan, delivered, stop: threading.Event, log: list):
    """plan: [(marker, (actor, incarnation), wait)]: once the marker appears, ray.kill that process for real.
    First every call it finished must have reached learner.add (up to SETTLE_WAIT s), so that no reply is
    lost in flight, and with wait another actor's gated trajectory too (up to PROGRESS_WAIT s)."""
    import ray

    def ready(key, wait):
        fin = tmp / f"fin-{key[0]}-{key[1]}"
        n_fin = len(fin.read_text().splitlines()) if fin.exists() else 0
        trajs = [t for _, t, _ in list(delivered)]
        got = sum((t.actor_id, t.incarnation) == key for t in trajs)
        return got >= n_fin and (not wait or any(_gated(t) for t in trajs))

    for marker, key, wait in plan:
        while not (tmp / marker).exists():
            if stop.is_set():
                return
            time.sleep(0.01)
        until = time.monotonic() + (PROGRESS_WAIT if wait else SETTLE_WAIT)
        while not stop.is_set() and time.monotonic() < until and not ready(key, wait):
            time.sleep(0.01)
        with spawn.lock:
            h = spawn.handles[key]
        ray.kill(h, no_restart=True)
        log.append(time.monotonic())


def _gated(traj) -> bool:
    return traj.actor_id != 0 and getattr(traj, "call", 0) >= GATE_FROM


SCRIPTS = {  # name: (n_actors, per_actor, max_restarts, script, kill plan)
    "error": (1, 4, 1, {(0, 0, 3): ("raise",)}, []),
    "kill": (2, 10, 2,
             {(0, 0, 4): ("hang", "hang-0-0"), (0, 1, 4): ("hang", "hang-0-1")}
             | {(1, 0, k): ("gate", "hang-0-0") for k in range(GATE_FROM, 11)},
             [("hang-0-0", (0, 0), True), ("hang-0-1", (0, 1), False)]),
    "budget": (2, 5, 0, {(0, 0, 4): ("hang", "hang-0-0")}, [("hang-0-0", (0, 0), False)]),
}


def _scenario(m, tmp: Path, name: str):
    import ray

    n_actors, per_actor, max_restarts, script, plan = SCRIPTS[name]
    cfg = m.Config(step_time=0.002, max_lag=1, batch_size=4)
    store = remote(m.ParamStore, num_cpus=0).remote(m.initial_params(cfg))
    spawn = Spawner(_scripted(m), cfg, store, script, tmp, n_actors * per_actor)
    learner = m.Learner(cfg, lambda v, p: ray.get(store.publish.remote(v, p)))
    delivered = []
    real_add = learner.add

    def add(traj):                          # records every delivery and what the learner made of it
        out = real_add(traj)
        delivered.append((time.monotonic(), traj, out))
        return out

    learner.add = add
    stop, killed = threading.Event(), []
    watcher = threading.Thread(target=_killer, args=(spawn, tmp, plan, delivered, stop, killed))
    watcher.start()
    try:
        restarts, error = m.run(spawn, learner, n_actors, per_actor, IN_FLIGHT, max_restarts), None
    except Exception as e:  # noqa: BLE001 - the tests look at what came out
        restarts, error = None, e
    finally:
        stop.set()
        watcher.join()
    ray.kill(store, no_restart=True)
    finished = Counter()                    # (actor, seq) -> how many processes finished a call for it
    fin_times = {}                          # (actor, incarnation) -> sorted times its calls finished
    for f in tmp.glob("fin-*"):
        _, a, inc = f.name.split("-")
        rows = [line.split() for line in f.read_text().splitlines()]
        fin_times[(int(a), int(inc))] = sorted(float(t) for _, t in rows)
        finished.update((int(a), int(s)) for s, _ in rows)
    return {"cfg": cfg, "learner": learner, "delivered": delivered, "spawn": spawn, "restarts": restarts,
            "error": error, "killed": killed, "plan": plan, "n": (n_actors, per_actor),
            "finished": finished, "fin_times": fin_times}


_done: dict = {}


@pytest.fixture(scope="module")
def scenario(lesson, ray_cluster, tmp_path_factory):  # noqa: F811
    m = lesson.load("impala.py")

    def get(name):
        if name not in _done:
            _done[name] = _scenario(m, tmp_path_factory.mktemp(name), name)
        return m, _done[name]

    yield get
    _done.clear()


def _ok(r):
    if r["error"] is not None:
        raise AssertionError(f"run raised {type(r['error']).__name__}: {str(r['error'])[:400]}")
    assert len(r["killed"]) == len(r["plan"]), "an actor never reached the call in which the test kills it"
    return r


def _check_in_flight(r):
    """At every call sent to a process: calls sent to it so far - its calls that had finished <= IN_FLIGHT."""
    per: dict = {}
    for t, a, inc, seq in r["spawn"].sent:
        per.setdefault((a, inc), []).append((t, seq))
    for key, sends in per.items():
        fins = r["fin_times"].get(key, [])
        for n, (t, seq) in enumerate(sends, 1):
            outstanding = n - sum(1 for f in fins if f < t)
            assert outstanding <= IN_FLIGHT, \
                f"actor {key[0]} (incarnation {key[1]}): sending seq {seq} made {outstanding} calls outstanding, in_flight = {IN_FLIGHT}"


def _check_all_dead(name, r):
    import ray

    until = time.monotonic() + DEAD_WAIT  # ray.kill is asynchronous: give it time to land
    alive = list(r["spawn"].all)
    while alive:
        still = []
        for actor in alive:
            try:
                ray.get(actor.pid.remote(), timeout=30)
                still.append(actor)
            except ray.exceptions.RayActorError:
                pass
        alive = still
        assert not alive or time.monotonic() < until, \
            f"{name}: {len(alive)} rollout actor(s) still alive {DEAD_WAIT:.0f} s after run returned or raised"
        time.sleep(0.2 if alive else 0)


@pytest.mark.requires("ray")
@pytest.mark.timeout(240)
def test_other_errors_propagate_and_no_actor_outlives_run(scenario):
    """A ValueError raised inside sample is no actor death: run raises it (as ray.get gives it), restarts
    nothing though max_restarts=1, and kills every actor before it raises."""
    import ray

    _, r = scenario("error")
    err = r["error"]
    assert isinstance(err, ValueError) and "scripted failure" in str(err), \
        f"the ValueError raised in sample must propagate out of run, got {err!r}"
    assert not isinstance(err, ray.exceptions.RayActorError)
    assert r["spawn"].incarnations == Counter({0: 1}), \
        f"spawned {dict(r['spawn'].incarnations)}: an exception inside sample is not a dead process, nothing restarts"
    _check_in_flight(r)
    _check_all_dead("error", r)


@pytest.mark.requires("ray")
@pytest.mark.timeout(240)
@pytest.mark.points(2)
def test_killed_actor_is_replaced_and_nothing_finished_is_lost(scenario):
    _, r = scenario("kill")
    _ok(r)
    assert r["restarts"] == 2, f"run reported {r['restarts']} restarts for two killed processes"
    assert r["spawn"].incarnations == Counter({0: 3, 1: 1}), \
        f"spawned {dict(r['spawn'].incarnations)}: each killed process is replaced once, however many of its calls fail"
    n_actors, per_actor = r["n"]
    want = {(i, s) for i in range(n_actors) for s in range(per_actor)}
    got = Counter((traj.actor_id, traj.seq) for _, traj, _ in r["delivered"])
    assert set(got) == want, f"work items never delivered: {sorted(want - set(got))}; unexpected: {sorted(set(got) - want)}"
    twice = sorted(k for k, n in got.items() if n > 1)
    assert not twice, f"handed to learner.add more than once: {twice}"
    redone = sorted(k for k, n in r["finished"].items() if n > 1)
    assert not redone, f"a call that had returned was sent again (finished by two processes): {redone}"
    for _, traj, out in r["delivered"]:
        assert out in ("buffered", "trained", "stale"), f"delivery of {(traj.actor_id, traj.seq)} was {out!r}"
    incs = Counter(traj.incarnation for _, traj, _ in r["delivered"] if traj.actor_id == 0)
    assert incs == Counter({0: 3, 1: 3, 2: 4}), f"actor 0's trajectories by incarnation: {dict(incs)}"


@pytest.mark.requires("ray")
@pytest.mark.timeout(240)
def test_calls_in_flight_are_capped_and_results_taken_as_they_come(scenario):
    """At most IN_FLIGHT calls outstanding per process; while actor 0 hangs, actor 1's trajectories (made
    only after it hung) reach learner.add: ray.wait hands over whichever call is ready first."""
    _, r = scenario("kill")
    _ok(r)
    _check_in_flight(r)
    first_kill = r["killed"][0]
    early = [traj for t, traj, _ in r["delivered"] if t < first_kill and _gated(traj)]
    assert early, (f"no trajectory of actor 1 reached learner.add in the {PROGRESS_WAIT:.0f} s actor 0 hung: "
                   "results must be handled as they come (ray.wait, num_returns=1), not after every call in flight")


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
    kept = sum(out in ("buffered", "trained") for _, _, out in r["delivered"])
    assert len(keys) == kept - len(lr.buffer), "a kept trajectory was neither trained nor left in the buffer"


@pytest.mark.requires("ray")
@pytest.mark.timeout(240)
def test_every_update_was_the_vtrace_loss_on_its_batch(scenario):
    m, r = scenario("kill")
    _ok(r)
    lr, cfg = r["learner"], r["cfg"]
    by_key = {}
    for _, traj, _ in r["delivered"]:
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
    """max_restarts=0: the RayActorError propagates, and the budget is checked before spawning (no new
    process); no actor of the "kill" and "budget" runs is alive after run."""
    import ray

    _, r = scenario("budget")
    assert len(r["killed"]) == 1, "actor 0 never reached the call in which the test kills it"
    assert isinstance(r["error"], ray.exceptions.RayActorError), \
        f"max_restarts=0: the actor's death must propagate, got {r['error']!r}"
    assert r["spawn"].incarnations == Counter({0: 1, 1: 1}), \
        f"spawned {dict(r['spawn'].incarnations)}: over the budget, run raises without spawning a replacement"
    _check_all_dead("budget", r)
    _check_all_dead("kill", scenario("kill")[1])
