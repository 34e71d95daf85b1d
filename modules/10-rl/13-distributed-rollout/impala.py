"""rl-13: an IMPALA-style actor–learner on Ray, with V-trace off-policy correction (Espeholt et al. 2018).

Rollout actors (Ray actors) pull the newest policy weights by version from a parameter store, unroll a
toy chain MDP for `unroll` steps and return a `Trajectory` tagged (actor id, seq, policy version). The
learner (this process) admits trajectories (dedupe by (actor, seq), drop those more than `max_lag`
versions old), trains on batches with the V-trace loss and publishes version + 1. An actor whose process
dies is replaced; every trajectory it finished before it died is still trained on, exactly once.

Time-major tensors: [T, B] = [unroll steps, trajectories in the batch].
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

N_ACTIONS = 2  # 0: left, 1: right


@dataclass(frozen=True)
class Config:
    n_states: int = 5           # chain 0 .. n-1; reaching n-1 pays 1 and ends the episode
    slip: float = 0.1           # probability that the env flips the chosen action
    unroll: int = 6             # T: steps per trajectory
    gamma: float = 0.9
    rho_bar: float = 1.0        # clip of the importance weight in the TD errors and the pg advantage
    c_bar: float = 1.0          # clip of the importance weight in the trace
    batch_size: int = 4         # trajectories per learner update
    max_lag: int = 2            # a trajectory may be trained on while learner.version - traj.version <= max_lag
    lr: float = 0.5
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    step_time: float = 0.0      # seconds one env step takes (a simulator is slow; 0 in unit tests)
    seed: int = 0


def initial_params(cfg: Config) -> np.ndarray:
    """[n_states, 3] float64: columns 0, 1 are the action logits of each state, column 2 is V(state)."""
    return np.random.default_rng([cfg.seed, 7]).normal(0.0, 0.1, size=(cfg.n_states, N_ACTIONS + 1))


@dataclass
class Trajectory:
    actor_id: int
    seq: int                    # the actor's work item number: (actor_id, seq) names a trajectory
    version: int                # policy version whose weights chose the actions
    incarnation: int            # which process of this actor id produced it (0, then 1 after a restart, ...)
    obs: np.ndarray             # [T] int64 states s_0 .. s_{T-1}
    actions: np.ndarray         # [T] int64
    rewards: np.ndarray         # [T] float64
    dones: np.ndarray           # [T] bool: the episode terminated at step t (no value after it)
    behaviour_logp: np.ndarray  # [T] float64 log mu(a_t | s_t), mu = the policy of `version`
    last_obs: int               # s_T, the state the unroll stopped in (bootstrap value V(s_T))


@dataclass
class Batch:
    obs: torch.Tensor             # [T, B] int64
    actions: torch.Tensor         # [T, B] int64
    rewards: torch.Tensor         # [T, B] float64
    dones: torch.Tensor           # [T, B] bool
    behaviour_logp: torch.Tensor  # [T, B] float64
    last_obs: torch.Tensor        # [B] int64


def stack(trajs: list[Trajectory]) -> Batch:
    """Trajectories side by side, time-major."""
    def col(name: str, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(np.stack([getattr(t, name) for t in trajs], axis=1), dtype=dtype)

    return Batch(col("obs", torch.int64), col("actions", torch.int64), col("rewards", torch.float64),
                 col("dones", torch.bool), col("behaviour_logp", torch.float64),
                 torch.tensor([t.last_obs for t in trajs], dtype=torch.int64))


class ParamStore:
    """Ray actor (given): the newest policy weights and their version."""

    def __init__(self, params: np.ndarray) -> None:
        self.version, self.params = 0, params

    def publish(self, version: int, params: np.ndarray) -> None:
        if version <= self.version:
            raise ValueError(f"version {version} published after version {self.version}")
        self.version, self.params = version, params

    def pull(self, have: int) -> tuple[int, np.ndarray] | None:
        """(version, weights) when newer than version `have`, else None: the weights travel only when they changed."""
        return None if have == self.version else (self.version, self.params)


class RolloutActor:
    """Ray actor (given): one rollout worker. Its env runs on across calls; each `sample` call is one trajectory."""

    def __init__(self, actor_id: int, incarnation: int, cfg: Config, store) -> None:
        self.actor_id, self.incarnation, self.cfg, self.store = actor_id, incarnation, cfg, store
        self.rng = np.random.default_rng([cfg.seed, actor_id, incarnation])
        self.state = 0
        self.version, self.params = -1, np.zeros((cfg.n_states, N_ACTIONS + 1))

    def pid(self) -> int:
        return os.getpid()

    def _sync(self) -> None:
        import ray

        new = ray.get(self.store.pull.remote(self.version))
        if new is not None:
            self.version, self.params = new

    def sample(self, seq: int) -> Trajectory:
        """Unroll `cfg.unroll` steps with the newest weights; the trajectory is finished when this call returns."""
        self._sync()
        T, cfg = self.cfg.unroll, self.cfg
        obs, actions = np.zeros(T, np.int64), np.zeros(T, np.int64)
        rewards, dones, logp = np.zeros(T), np.zeros(T, bool), np.zeros(T)
        for t in range(T):
            logits = self.params[self.state, :N_ACTIONS]
            log_probs = logits - np.logaddexp.reduce(logits)
            a = int(self.rng.choice(N_ACTIONS, p=np.exp(log_probs)))
            move = a if self.rng.random() >= cfg.slip else 1 - a
            obs[t], actions[t], logp[t] = self.state, a, log_probs[a]
            self.state = min(max(self.state + (1 if move == 1 else -1), 0), cfg.n_states - 1)
            if self.state == cfg.n_states - 1:
                rewards[t], dones[t], self.state = 1.0, True, 0
            if cfg.step_time:
                time.sleep(cfg.step_time)
        return Trajectory(self.actor_id, seq, self.version, self.incarnation, obs, actions, rewards, dones,
                          logp, self.state)


# ------------------------------------------------------------------------------------------------
# Your part 1: V-trace


def vtrace(
    behaviour_logp: torch.Tensor,
    target_logp: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(vs, pg_advantages), both [T, B] in the dtype of `values`, carrying no autograd graph.

    behaviour_logp, target_logp, rewards, values: float [T, B]; bootstrap_value: [B] = V(s_T);
    dones: bool [T, B], the episode terminated at step t. With rho_t = min(rho_bar, pi/mu),
    c_t = min(c_bar, pi/mu), disc_t = gamma * (1 - done_t), V_{t+1} = values[t+1] (bootstrap_value at t = T-1):
        delta_t         = rho_t * (r_t + disc_t * V_{t+1} - V_t)
        vs_t - V_t      = delta_t + disc_t * c_t * (vs_{t+1} - V_{t+1}),      vs_T - V_T = 0
        pg_advantage_t  = rho_t * (r_t + disc_t * vs_{t+1} - V_t),            vs_T = bootstrap_value
    """
    ### HINT: every rho_t, c_t and delta_t at once; then one backward pass over t carrying vs_{t+1} - V_{t+1}
    ### BEGIN SOLUTION
    with torch.no_grad():
        ratio = torch.exp(target_logp - behaviour_logp)
        rho = ratio.clamp(max=rho_bar)
        c = ratio.clamp(max=c_bar)
        disc = gamma * (~dones).to(values.dtype)
        next_values = torch.cat([values[1:], bootstrap_value.unsqueeze(0)])
        deltas = rho * (rewards + disc * next_values - values)
        vs_minus_v = torch.empty_like(values)
        carry = torch.zeros_like(bootstrap_value)
        for t in range(values.shape[0] - 1, -1, -1):
            carry = deltas[t] + disc[t] * c[t] * carry
            vs_minus_v[t] = carry
        vs = vs_minus_v + values
        vs_next = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)])
        pg_advantages = rho * (rewards + disc * vs_next - values)
    return vs, pg_advantages
    ### END SOLUTION


# ------------------------------------------------------------------------------------------------
# Your part 2: the learner's loss


def impala_loss(params: torch.Tensor, batch: Batch, cfg: Config) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, vs, pg_advantages) for one batch; `params` [n_states, 3] float64 is the learner's current policy.

    target log pi(a_t|s_t) and V(s_t), V(s_T) come from `params`; mu is the batch's behaviour_logp. With the
    V-trace targets (cfg.gamma, cfg.rho_bar, cfg.c_bar), means over all T*B steps:
        loss = -mean(pg_adv * log pi(a_t|s_t)) + value_coef * 0.5 * mean((vs - V(s_t))^2) - entropy_coef * mean(H(pi(.|s_t)))
    Gradients flow through log pi, V(s_t) and the entropy only; vs and pg_adv are constants.
    """
    ### HINT: the importance weight compares the policy being trained with the one that acted
    ### BEGIN SOLUTION
    log_probs = torch.log_softmax(params[batch.obs, :N_ACTIONS], dim=-1)        # [T, B, 2]
    target_logp = log_probs.gather(-1, batch.actions.unsqueeze(-1)).squeeze(-1)
    values = params[batch.obs, N_ACTIONS]
    bootstrap = params[batch.last_obs, N_ACTIONS]
    vs, pg_adv = vtrace(batch.behaviour_logp, target_logp.detach(), batch.rewards, values.detach(),
                        bootstrap.detach(), batch.dones, cfg.gamma, cfg.rho_bar, cfg.c_bar)
    pg_loss = -(pg_adv * target_logp).mean()
    value_loss = 0.5 * ((vs - values) ** 2).mean()
    entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
    loss = pg_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy
    return loss, vs, pg_adv
    ### END SOLUTION


# ------------------------------------------------------------------------------------------------
# Your part 3: admitting trajectories


@dataclass
class Update:
    version: int                        # the version trained (params_before), version + 1 published after
    keys: list[tuple[int, int]]         # (actor_id, seq) of the batch, in batch order
    traj_versions: list[int]
    params_before: np.ndarray
    loss: float


@dataclass
class Learner:
    cfg: Config
    publish: Callable[[int, np.ndarray], None]   # publish(version, weights) to the parameter store
    params: np.ndarray = None                    # type: ignore[assignment]
    version: int = 0
    buffer: list[Trajectory] = field(default_factory=list)
    seen: set[tuple[int, int]] = field(default_factory=set)
    log: list[Update] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.params is None:
            self.params = initial_params(self.cfg)

    def update(self, batch: list[Trajectory]) -> None:
        """Given: one SGD step on impala_loss, version + 1, publish the new weights."""
        p = torch.tensor(self.params, dtype=torch.float64, requires_grad=True)
        loss, _, _ = impala_loss(p, stack(batch), self.cfg)
        loss.backward()
        self.log.append(Update(self.version, [(t.actor_id, t.seq) for t in batch], [t.version for t in batch],
                               self.params.copy(), float(loss.detach())))
        self.params = self.params - self.cfg.lr * p.grad.numpy()
        self.version += 1
        self.publish(self.version, self.params.copy())

    def add(self, traj: Trajectory) -> str:
        """Admit one delivered trajectory; returns what happened to it:
        "duplicate": its (actor_id, seq) was delivered before (whatever became of that copy): ignored;
        "stale":     self.version - traj.version > cfg.max_lag: dropped;
        "buffered":  kept in self.buffer;
        "trained":   kept, and the buffer reached cfg.batch_size: self.update(buffer), then the buffer is empty.
        """
        ### HINT: the first copy of a key decides its fate; the lag is measured against the version about to be trained
        ### BEGIN SOLUTION
        key = (traj.actor_id, traj.seq)
        if key in self.seen:
            return "duplicate"
        self.seen.add(key)
        if self.version - traj.version > self.cfg.max_lag:
            return "stale"
        self.buffer.append(traj)
        if len(self.buffer) < self.cfg.batch_size:
            return "buffered"
        batch, self.buffer = self.buffer, []
        self.update(batch)
        return "trained"
        ### END SOLUTION


# ------------------------------------------------------------------------------------------------
# Your part 4: the actor–learner loop on Ray


def run(spawn: Callable[[int], object], learner: Learner, n_actors: int, per_actor: int, in_flight: int,
        max_restarts: int) -> int:
    """Drive `n_actors` rollout actors until every work item (actor i, seq s), s < per_actor, has been
    delivered to `learner.add` once; returns the number of restarts.

    spawn(i) gives a new RolloutActor handle for actor id i. Keep at most `in_flight` `sample(seq)` calls
    outstanding per actor and hand each result to `learner.add` as soon as it is ready (`ray.wait`). When an
    actor's process dies (`ray.get` raises `RayActorError` for each of its outstanding calls), replace it with
    one new `spawn(i)` — one restart however many of its calls fail — and send the failed seqs to the new
    actor; a restart beyond `max_restarts` in all is not made: the RayActorError propagates (no spawn). Any
    other exception propagates as `ray.get` raised it (no restart). No actor outlives the call.
    """
    import ray
    from ray.exceptions import RayActorError

    ### HINT: remember, for every outstanding call, which actor id, which seq and which handle it went to
    ### BEGIN SOLUTION
    actors = [spawn(i) for i in range(n_actors)]
    todo = [list(range(per_actor)) for _ in range(n_actors)]
    pending: dict = {}                           # ObjectRef -> (actor id, seq, handle it was sent to)
    restarts = 0

    def submit(i: int) -> None:
        while todo[i] and sum(1 for a, _, _ in pending.values() if a == i) < in_flight:
            seq = todo[i].pop(0)
            pending[actors[i].sample.remote(seq)] = (i, seq, actors[i])

    try:
        for i in range(n_actors):
            submit(i)
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            i, seq, handle = pending.pop(ref)
            try:
                traj = ray.get(ref)
            except RayActorError:
                if handle is actors[i]:          # the first failure of this process: replace it once
                    restarts += 1
                    if restarts > max_restarts:
                        raise
                    actors[i] = spawn(i)
                todo[i] = sorted(todo[i] + [seq])
            else:
                learner.add(traj)
            submit(i)
    finally:
        for a in actors:
            ray.kill(a, no_restart=True)
    return restarts
    ### END SOLUTION
