"""rl-03: REINFORCE with a learned state-value baseline.

The policy-gradient theorem turns ∇J(θ) into an expectation we can sample:
    ∇J(θ) = E[ Σ_t ∇log π_θ(a_t|s_t) · (G_t − b(s_t)) ]
G_t is the reward-to-go (only rewards from step t on: an action cannot change the past), and b(s_t) is a
baseline that depends on the state only, so it changes the variance of the estimate but not its mean.
Here b is a small value network trained by regression onto G_t.

Layout of a batch (time-major, as a vector env produces it): rows are time steps t = 0..T-1, columns are
environments n = 0..N-1. `terminated[t, n] | truncated[t, n]` marks the LAST step of an episode.
`mask[t, n]` marks the steps that belong to the episode a column contributes (the given `collect`
keeps exactly one complete episode per column); masked-out entries hold arbitrary finite junk.

You write `reward_to_go`, `policy_loss` and `value_loss`; `collect` and `train` are given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn


def reward_to_go(rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor,
                 gamma: float) -> torch.Tensor:
    """Discounted reward-to-go of every step, cut at episode ends.

    rewards (T, N) float; terminated, truncated (T, N) bool; 0 <= gamma <= 1; T >= 1.
    Returns G (T, N), same dtype as rewards: G[t] = rewards[t] + gamma * G[t + 1], except that the sum stops
    after a step where terminated or truncated is True, and after the last row (nothing beyond the window).
    The inputs are not modified.
    """
    ### HINT: walk the rows backwards with one running sum per column; an episode end must stop the sum
    ### BEGIN SOLUTION
    ends = terminated | truncated
    returns = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = rewards[t] + gamma * torch.where(ends[t], 0.0, running)
        returns[t] = running
    return returns
    ### END SOLUTION


def policy_loss(logp: torch.Tensor, returns: torch.Tensor, baseline: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
    """REINFORCE surrogate: -(1/N) Σ_{t,n: mask} logp[t, n] · (returns[t, n] − baseline[t, n]).

    logp (T, N): log π(a_t|s_t) of the actions taken, differentiable w.r.t. the policy parameters;
    returns, baseline (T, N); mask (T, N) bool. N = logp.shape[1] episodes (one per column): the loss is the
    sum over each episode's steps, averaged over episodes. The baseline only shifts the returns: no gradient
    may flow from this loss into it. Returns a 0-dim tensor.
    """
    ### HINT: the advantage must be a constant for autograd; masked entries must contribute exactly 0
    ### BEGIN SOLUTION
    advantage = returns - baseline.detach()
    per_step = torch.where(mask, logp * advantage, 0.0)
    return -per_step.sum() / logp.shape[1]
    ### END SOLUTION


def value_loss(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Baseline regression: 0.5 · mean over the masked steps of (values − returns)².

    values (T, N): the value network's b(s_t), differentiable; returns (T, N) the regression targets;
    mask (T, N) bool with at least one True. Returns a 0-dim tensor.
    """
    ### HINT: average over the valid steps only, not over all T·N entries
    ### BEGIN SOLUTION
    error = torch.where(mask, values - returns, 0.0)
    return 0.5 * error.pow(2).sum() / mask.sum()
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------------------
# Given: batch collection and the training loop.


def mlp(n_in: int, n_out: int, hidden: int = 32) -> nn.Module:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, n_out))


def make_envs(num_envs: int):
    """CartPole-v1 as gymnasium's own numpy-vectorised env (`CartPoleVectorEnv`, 500-step time limit).

    Its autoreset mode is fixed to NEXT_STEP: the step() after an episode's last step ignores the action
    and returns the reset observation with reward 0 and terminated = truncated = False. `collect` masks
    every row after a column's first episode, so such reset rows never reach the losses.
    """
    import gymnasium as gym

    envs = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")
    if envs.metadata["autoreset_mode"] != gym.vector.AutoresetMode.NEXT_STEP:
        raise RuntimeError(f"expected NEXT_STEP autoreset, got {envs.metadata['autoreset_mode']}")
    return envs


@dataclass
class Batch:
    obs: torch.Tensor         # (T, N, 4) observation each action was chosen on
    actions: torch.Tensor     # (T, N) int64
    rewards: torch.Tensor     # (T, N) float32
    terminated: torch.Tensor  # (T, N) bool
    truncated: torch.Tensor   # (T, N) bool
    mask: torch.Tensor        # (T, N) bool: the steps of each column's first episode


def first_episode_mask(terminated: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """True for the rows up to and including each column's first episode end."""
    ends = (terminated | truncated).long()
    return (ends.cumsum(0) - ends) == 0


def collect(envs, policy: nn.Module, seed: int | None) -> Batch:
    """One complete episode per env, all started by one reset; runs until every env has finished once."""
    obs, _ = envs.reset(seed=seed)
    finished = np.zeros(envs.num_envs, dtype=bool)
    rows: list[tuple] = []
    while not finished.all():
        o = torch.as_tensor(obs)
        with torch.no_grad():
            a = torch.distributions.Categorical(logits=policy(o)).sample()
        obs, r, term, trunc, _ = envs.step(a.numpy())
        rows.append((o, a, torch.as_tensor(r), torch.as_tensor(term), torch.as_tensor(trunc)))
        finished |= term | trunc
    o, a, r, term, trunc = (torch.stack(x) for x in zip(*rows))
    return Batch(o, a, r, term, trunc, first_episode_mask(term, trunc))


@dataclass
class TrainResult:
    solved: bool
    updates: int                   # policy updates done (each on num_envs episodes)
    env_steps: int                 # steps inside the counted episodes
    batch_means: list[float] = field(default_factory=list)  # mean undiscounted return of each batch


def train(seed: int, *, max_updates: int = 80, num_envs: int = 32, gamma: float = 0.99, lr: float = 1e-2,
          target: float = 195.0, window: int = 3) -> TrainResult:
    """REINFORCE with a learned baseline on CartPole-v1.

    Each update: collect num_envs episodes with the current (stochastic) policy, one gradient step of Adam on
    policy_loss + value_loss. Solved as soon as the mean undiscounted return over the episodes of the last
    `window` batches (window · num_envs episodes) is >= target; stops there or after max_updates.
    """
    torch.manual_seed(seed)
    envs = make_envs(num_envs)
    policy, value = mlp(4, 2), mlp(4, 1)
    opt = torch.optim.Adam([*policy.parameters(), *value.parameters()], lr=lr)
    means: list[float] = []
    steps = 0
    for update in range(max_updates):
        batch = collect(envs, policy, seed if update == 0 else None)
        returns = reward_to_go(batch.rewards, batch.terminated, batch.truncated, gamma)
        logp = torch.distributions.Categorical(logits=policy(batch.obs)).log_prob(batch.actions)
        values = value(batch.obs).squeeze(-1)
        loss = policy_loss(logp, returns, values, batch.mask) + value_loss(values, returns, batch.mask)
        opt.zero_grad()
        loss.backward()
        opt.step()
        means.append(float(torch.where(batch.mask, batch.rewards, 0.0).sum(0).mean()))
        steps += int(batch.mask.sum())
        if len(means) >= window and sum(means[-window:]) / window >= target:
            envs.close()
            return TrainResult(True, update + 1, steps, means)
    envs.close()
    return TrainResult(False, max_updates, steps, means)


if __name__ == "__main__":
    torch.set_num_threads(1)
    for s in (0, 1, 2):
        res = train(s)
        print(f"seed {s}: solved={res.solved} after {res.updates} updates, {res.env_steps} env steps, "
              f"last batch means {[round(m) for m in res.batch_means[-3:]]}")
