"""rl-05: PPO (Schulman et al. 2017) for discrete actions on CartPole-v1, gymnasium 1.x vector envs.

One PPO iteration: collect T steps from E envs with the current policy (the "old" policy), compute GAE
advantages, then run `update_epochs` passes over the T*E rows in shuffled minibatches, minimising

    loss = policy_loss - ent_coef * entropy + vf_coef * value_loss

on each minibatch, and stop early once a minibatch's approximate KL(old || new) exceeds `target_kl`.

The vector env runs with `autoreset_mode=NEXT_STEP` (the gymnasium 1.x default, chosen explicitly here):
the step that ends an episode returns the episode's LAST observation with terminated/truncated set; the
NEXT `step()` call ignores the action of that env, resets it and returns the reset observation with reward
0 and terminated = truncated = False. That row is no transition of the MDP: `valid` is False there and
every loss, statistic and advantage normalisation skips it.

Masks are bool tensors of the same shape as the values they select; a loss is the mean over valid rows
("token-mean" in verl's words): sum over valid rows / number of valid rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# ---------------------------------------------------------------------------------------------
# Given: masked mean, the agent, action sampling, GAE, the environment and the training loop.
# ---------------------------------------------------------------------------------------------


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `x` over the entries where the bool `mask` is True (values elsewhere never enter, not even NaN)."""
    return torch.where(mask, x, torch.zeros((), dtype=x.dtype)).sum() / mask.sum()


def _layer(n_in: int, n_out: int, std: float) -> nn.Linear:
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.zeros_(layer.bias)
    return layer


class Agent(nn.Module):
    """Separate actor and critic MLPs (64-64 tanh, orthogonal init as in CleanRL's ppo.py).

    actor(obs [N, obs_dim]) -> logits [N, n_actions];  critic(obs [N, obs_dim]) -> values [N, 1].
    """

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.actor = nn.Sequential(_layer(obs_dim, hidden, 2**0.5), nn.Tanh(),
                                   _layer(hidden, hidden, 2**0.5), nn.Tanh(),
                                   _layer(hidden, n_actions, 0.01))
        self.critic = nn.Sequential(_layer(obs_dim, hidden, 2**0.5), nn.Tanh(),
                                    _layer(hidden, hidden, 2**0.5), nn.Tanh(),
                                    _layer(hidden, 1, 1.0))


def sample_actions(logits: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One action per row of `logits` [N, A], drawn from softmax(logits) with `gen`: int64 [N]."""
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=gen).squeeze(-1)


def log_prob_of(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[a] per row: logits [N, A], actions int64 [N] -> [N]."""
    return F.log_softmax(logits, dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)


@dataclass
class EnvState:
    """What carries over from one rollout to the next."""

    obs: torch.Tensor   # [E, obs_dim] float32: the observation the next step acts on
    done: torch.Tensor  # [E] bool: the last step() ended an episode, so the next step() is a reset step


@dataclass
class Rollout:
    """T steps of E envs, time-major: row [t, e] is the t-th step() call of env e."""

    obs: torch.Tensor         # [T, E, obs_dim] float32: the observation the action was chosen on
    actions: torch.Tensor     # [T, E] int64
    logprobs: torch.Tensor    # [T, E] float32: log pi_old(a | obs)
    values: torch.Tensor      # [T, E] float32: V_old(obs)
    rewards: torch.Tensor     # [T, E] float32: what step() returned
    terminated: torch.Tensor  # [T, E] bool: what step() returned
    truncated: torch.Tensor   # [T, E] bool: what step() returned
    valid: torch.Tensor       # [T, E] bool: False exactly on the reset steps of NEXT_STEP mode
    next_value: torch.Tensor  # [E] float32: V_old of the observation after the last row


@dataclass
class Batch:
    """A rollout flattened to N = T*E rows (row t*E + e), with advantages and returns."""

    obs: torch.Tensor         # [N, obs_dim]
    actions: torch.Tensor     # [N] int64
    logprobs: torch.Tensor    # [N] log pi_old
    values: torch.Tensor      # [N] V_old
    advantages: torch.Tensor  # [N] GAE, not normalised
    returns: torch.Tensor     # [N] advantages + values
    valid: torch.Tensor       # [N] bool


@dataclass
class PPOConfig:
    num_envs: int = 8
    num_steps: int = 256            # T per rollout: a batch of T*E rows
    total_steps: int = 81_920       # env steps over the whole run (all envs together): 40 iterations
    lr: float = 1e-3                # Adam, annealed linearly to 0
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    clip_coef: float = 0.2          # epsilon, both sides of the ratio
    clip_ratio_c: float | None = None  # dual-clip bound c > 1 for A < 0 (Ye et al. 2020); None = off
    clip_vloss: float | None = 0.2  # value clip range around V_old; None = plain MSE
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = None  # KL early stop; None = off
    norm_adv: bool = True           # per-minibatch advantage normalisation


def compute_gae(r: Rollout, gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over a NEXT_STEP rollout: (advantages, returns), both [T, E].

    The observation after row t is the one stored at row t+1 (row T-1: the rollout's next observation). After a
    done row that is the episode's final observation, so V(s_{t+1}) bootstraps a truncated episode correctly and is
    multiplied by 0 after a terminated one. The trace stops at every done row, so the reset row after it (valid =
    False, reward 0) never flows into a real transition's advantage; the values computed on reset rows themselves
    are meaningless and must be masked.
    """
    next_values = torch.cat([r.values[1:], r.next_value.unsqueeze(0)])
    not_terminated = (~r.terminated).to(r.values.dtype)
    not_done = (~(r.terminated | r.truncated)).to(r.values.dtype)
    deltas = r.rewards + gamma * next_values * not_terminated - r.values
    advantages = torch.empty_like(r.values)
    running = torch.zeros_like(r.values[0])
    for t in range(r.values.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * lam * not_done[t] * running
        advantages[t] = running
    return advantages, advantages + r.values


def flatten(r: Rollout, advantages: torch.Tensor, returns: torch.Tensor) -> Batch:
    """[T, E, ...] -> [T*E, ...], row t*E + e."""
    return Batch(obs=r.obs.flatten(0, 1), actions=r.actions.flatten(), logprobs=r.logprobs.flatten(),
                 values=r.values.flatten(), advantages=advantages.flatten(), returns=returns.flatten(),
                 valid=r.valid.flatten())


def make_envs(num_envs: int, env_id: str = "CartPole-v1") -> gym.vector.SyncVectorEnv:
    """E copies of `env_id` in one process, autoreset mode NEXT_STEP (set explicitly)."""
    return gym.vector.SyncVectorEnv([lambda: gym.make(env_id) for _ in range(num_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)


def train(cfg: PPOConfig, seed: int) -> tuple[Agent, list[dict]]:
    """The whole PPO run; all randomness from `seed`: the agent's init (under a forked global RNG), the envs'
    reset seeds (seed, seed+1, ...), and one torch.Generator for action sampling and minibatch permutations."""
    gen = torch.Generator().manual_seed(seed)
    envs = make_envs(cfg.num_envs)
    obs, _ = envs.reset(seed=seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        agent = Agent(envs.single_observation_space.shape[0], int(envs.single_action_space.n))
    optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.lr, eps=1e-5)
    state = EnvState(torch.as_tensor(obs, dtype=torch.float32), torch.zeros(cfg.num_envs, dtype=torch.bool))
    iterations = cfg.total_steps // (cfg.num_envs * cfg.num_steps)
    history = []
    for it in range(iterations):
        optimizer.param_groups[0]["lr"] = cfg.lr * (1.0 - it / iterations)
        rollout, state = collect_rollout(envs, agent, state, cfg.num_steps, gen)
        advantages, returns = compute_gae(rollout, cfg.gamma, cfg.gae_lambda)
        history.append(ppo_update(agent, optimizer, flatten(rollout, advantages, returns), cfg, gen))
    envs.close()
    return agent, history


# ---------------------------------------------------------------------------------------------
# Your part: the loss pieces, the NEXT_STEP rollout and the minibatch update.
# ---------------------------------------------------------------------------------------------


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                clip_low: float = 0.2, clip_high: float = 0.2,
                clip_ratio_c: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate as a loss to minimise: (loss, clipfrac), both 0-d tensors.

    All inputs have one shape; `mask` is bool. ratio r = exp(logp - old_logp); per row
        L = max(-A * r, -A * clip(r, 1 - clip_low, 1 + clip_high))
    and with dual-clip (clip_ratio_c = c > 1) rows with A < 0 take min(L, -A * c).
    loss = mean of L over valid rows; clipfrac = fraction of valid rows where the clipped term is strictly the
    larger of the two (dual-clip does not change it). Gradients flow to `logp` only.
    """
    ### HINT: work in the loss's sign convention (minimise −A·r); the pessimistic bound is the larger loss
    ### BEGIN SOLUTION
    ratio = torch.exp(logp - old_logp)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(loss_unclipped, loss_clipped)
    clipfrac = masked_mean((loss_clipped > loss_unclipped).to(logp.dtype), mask)
    if clip_ratio_c is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * clip_ratio_c), loss)
    return masked_mean(loss, mask), clipfrac
    ### END SOLUTION


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               clip_range: float | None = 0.2) -> torch.Tensor:
    """0.5 * mean over valid rows of max((V - R)^2, (V_clip - R)^2), V_clip = V clipped to
    [V_old - clip_range, V_old + clip_range]; with clip_range None: 0.5 * mean of (V - R)^2. A 0-d tensor."""
    ### HINT: the clip keeps the NEW prediction near the OLD one; the max makes the loss pessimistic, like the policy's
    ### BEGIN SOLUTION
    loss_unclipped = (values - returns) ** 2
    if clip_range is None:
        return 0.5 * masked_mean(loss_unclipped, mask)
    values_clipped = torch.clamp(values, old_values - clip_range, old_values + clip_range)
    loss_clipped = (values_clipped - returns) ** 2
    return 0.5 * masked_mean(torch.maximum(loss_unclipped, loss_clipped), mask)
    ### END SOLUTION


def entropy(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over valid rows of the entropy of softmax(logits): logits [..., A] (finite), mask [...]. 0-d.
    Must stay finite when a probability underflows to 0 (logits that differ by thousands)."""
    ### BEGIN SOLUTION
    logp = F.log_softmax(logits, dim=-1)
    return masked_mean(-(logp.exp() * logp).sum(-1), mask)
    ### END SOLUTION


def approx_kl(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """k3 estimate of KL(pi_old || pi_new) from actions sampled by pi_old: mean over valid rows of
    (r - 1) - log r, r = exp(logp - old_logp). 0-d, always >= 0."""
    ### BEGIN SOLUTION
    log_ratio = logp - old_logp
    return masked_mean(torch.exp(log_ratio) - 1.0 - log_ratio, mask)
    ### END SOLUTION


def normalize_advantages(advantages: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(A - mean) / (std + eps) with mean and the unbiased (n - 1) std over the valid rows only; same shape as A.
    Values at invalid rows: anything finite. Needs at least 2 valid rows."""
    ### BEGIN SOLUTION
    n = mask.sum()
    mean = masked_mean(advantages, mask)
    var = masked_mean((advantages - mean) ** 2, mask) * n / (n - 1)
    return (advantages - mean) / (var.sqrt() + eps)
    ### END SOLUTION


def collect_rollout(envs: gym.vector.VectorEnv, agent: Agent, state: EnvState, num_steps: int,
                    gen: torch.Generator) -> tuple[Rollout, EnvState]:
    """`num_steps` steps of every env with the current policy, without gradients; returns the rollout and the
    state the next rollout starts from. Per step exactly one `sample_actions(logits [E, A], gen)` call;
    `envs.step` gets the actions as a numpy int64 array. valid[t, e] is False iff the previous step() of env e
    (possibly the last one of the previous rollout, `state.done`) ended an episode."""
    ### HINT: a row is a reset step iff the env's previous step() returned terminated or truncated; carry that flag
    ### BEGIN SOLUTION
    obs, done = state.obs, state.done
    rows: dict[str, list[torch.Tensor]] = {k: [] for k in
                                           ("obs", "actions", "logprobs", "values", "rewards", "terminated",
                                            "truncated", "valid")}
    for _ in range(num_steps):
        with torch.no_grad():
            logits = agent.actor(obs)
            value = agent.critic(obs).squeeze(-1)
        action = sample_actions(logits, gen)
        next_obs, reward, terminated, truncated, _ = envs.step(action.numpy())
        step = {"obs": obs, "actions": action, "logprobs": log_prob_of(logits, action), "values": value,
                "rewards": torch.as_tensor(reward, dtype=torch.float32),
                "terminated": torch.as_tensor(terminated), "truncated": torch.as_tensor(truncated),
                "valid": ~done}  # the step after a done only resets that env: no transition of the MDP
        for k, v in step.items():
            rows[k].append(v)
        done = torch.as_tensor(np.logical_or(terminated, truncated))
        obs = torch.as_tensor(next_obs, dtype=torch.float32)
    with torch.no_grad():
        next_value = agent.critic(obs).squeeze(-1)
    rollout = Rollout(**{k: torch.stack(v) for k, v in rows.items()}, next_value=next_value)
    return rollout, EnvState(obs, done)
    ### END SOLUTION


def ppo_update(agent: Agent, optimizer: torch.optim.Optimizer, batch: Batch, cfg: PPOConfig,
               gen: torch.Generator) -> dict:
    """`cfg.update_epochs` epochs over the batch; `batch` is read-only.

    Each epoch: perm = torch.randperm(N, generator=gen); its minibatches are perm.chunk(cfg.num_minibatches), in
    order. Per minibatch (rows idx, mask = batch.valid[idx]):
      1. forward: logits = agent.actor(obs[idx]), values = agent.critic(obs[idx]).squeeze(-1)
      2. kl = approx_kl(new logp, old logp, mask) (no gradient); append it to stats["approx_kl"];
         if cfg.target_kl is not None and kl > cfg.target_kl: stop the whole update here, without this step
      3. advantages: normalize_advantages(batch.advantages[idx], mask) if cfg.norm_adv
      4. loss = policy_loss(..., clip_low = clip_high = cfg.clip_coef, cfg.clip_ratio_c)
                - cfg.ent_coef * entropy(logits, mask) + cfg.vf_coef * value_loss(..., cfg.clip_vloss)
      5. optimizer.zero_grad(); loss.backward(); clip_grad_norm_(agent.parameters(), cfg.max_grad_norm);
         optimizer.step(); append the policy clipfrac to stats["clipfrac"]
    Returns {"approx_kl": [float, ...], "clipfrac": [float, ...], "updates": int, "early_stop": bool}.
    """
    ### HINT: the KL of a minibatch is measured on its forward pass, before its own optimizer step
    ### BEGIN SOLUTION
    stats: dict = {"approx_kl": [], "clipfrac": [], "updates": 0, "early_stop": False}
    n = batch.valid.shape[0]
    for _ in range(cfg.update_epochs):
        perm = torch.randperm(n, generator=gen)
        for idx in perm.chunk(cfg.num_minibatches):
            mask = batch.valid[idx]
            logits = agent.actor(batch.obs[idx])
            values = agent.critic(batch.obs[idx]).squeeze(-1)
            logp = log_prob_of(logits, batch.actions[idx])
            with torch.no_grad():
                kl = approx_kl(logp, batch.logprobs[idx], mask).item()
            stats["approx_kl"].append(kl)
            if cfg.target_kl is not None and kl > cfg.target_kl:
                stats["early_stop"] = True
                return stats
            adv = batch.advantages[idx]
            if cfg.norm_adv:
                adv = normalize_advantages(adv, mask)
            pg_loss, clipfrac = policy_loss(logp, batch.logprobs[idx], adv, mask, cfg.clip_coef, cfg.clip_coef,
                                            cfg.clip_ratio_c)
            v_loss = value_loss(values, batch.values[idx], batch.returns[idx], mask, cfg.clip_vloss)
            loss = pg_loss - cfg.ent_coef * entropy(logits, mask) + cfg.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm)
            optimizer.step()
            stats["clipfrac"].append(clipfrac.item())
            stats["updates"] += 1
    return stats
    ### END SOLUTION
