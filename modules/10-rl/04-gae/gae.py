"""rl-04: vectorised Generalized Advantage Estimation (Schulman et al. 2015) over a [T, N] rollout.

Time-major rollout of N vector-env copies, T steps each. Row t of every tensor describes the transition
s_t --a_t--> s_{t+1} of each env:

    rewards[t, n]      r_t
    values[t, n]       V(s_t)
    next_values[t, n]  V(s_{t+1}), the observation the transition really reached: at a truncated step the
                       value of the episode's final observation (not of the reset one), at the last row the
                       bootstrap value of the observation the rollout stopped at
    terminated[t, n]   s_{t+1} is terminal: no value after it
    truncated[t, n]    the episode was cut after this step (time limit): s_{t+1} still has a value

    delta_t = r_t + gamma * V(s_{t+1}) * (1 - terminated_t) - V(s_t)
    A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1},   done_t = terminated_t or truncated_t
    returns = A + V
"""

from __future__ import annotations

import torch


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), both [T, N] in the dtype of `values`; the inputs are left unchanged.

    rewards, values, next_values: float [T, N] (one dtype); terminated, truncated: bool [T, N].
    One Python loop over time, none over envs: each step updates all N envs with tensor operations.
    """
    ### HINT: every δ_t at once; then walk t from the last row back, one [N] row per step; the trace stops at every done
    ### BEGIN SOLUTION
    not_terminated = (~terminated).to(values.dtype)
    not_done = (~(terminated | truncated)).to(values.dtype)
    deltas = rewards + gamma * next_values * not_terminated - values
    advantages = torch.empty_like(values)
    running = torch.zeros_like(values[0])
    for t in range(values.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * lam * not_done[t] * running
        advantages[t] = running
    return advantages, advantages + values
    ### END SOLUTION
