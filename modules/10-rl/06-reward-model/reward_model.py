"""rl-06: a Bradley–Terry reward model, trained on preferences drawn from a known utility.

A reward model r(x) turns pairwise human preferences into a scalar score. Bradley–Terry (1952) models
a preference as

    P(a ≻ b) = σ(r(a) − r(b)),

so training minimises the negative log-likelihood of the observed (chosen, rejected) pairs:

    L = mean_i −log σ(r(chosen_i) − r(rejected_i) − m_i),

with an optional per-pair margin m_i (Llama 2: larger for "significantly better" pairs) and an optional
centring term c·mean((r_chosen + r_rejected)²) (TRL's `center_rewards_coefficient`), because only
reward *differences* enter the likelihood: r and r + const fit the data equally well.

Given here: the synthetic preference data (items x ∈ R^d, a known utility u(x), labels sampled with
P(a ≻ b) = σ(u(a) − u(b))), Llama 2's graded margins, and two small reward models.
To write: `reward_loss`, `preference_accuracy`, `train_reward_model`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

# ---------------------------------------------------------------------------------------------
# Synthetic preferences from a known utility (given).
# ---------------------------------------------------------------------------------------------

Utility = Callable[[torch.Tensor], torch.Tensor]  # [n, d] float64 -> [n] float64


def sample_preferences(n_pairs: int, d: int, utility: Utility, generator: torch.Generator,
                       dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """n_pairs labelled pairs: items a, b ~ N(0, I_d); a is chosen with probability σ(u(a) − u(b)).

    Returns (chosen, rejected), each [n_pairs, d] of `dtype`. All randomness comes from `generator`.
    """
    a = torch.randn(n_pairs, d, generator=generator, dtype=torch.float64)
    b = torch.randn(n_pairs, d, generator=generator, dtype=torch.float64)
    p_a = torch.sigmoid(utility(a) - utility(b))
    a_wins = (torch.rand(n_pairs, generator=generator, dtype=torch.float64) < p_a)[:, None]
    chosen, rejected = torch.where(a_wins, a, b), torch.where(a_wins, b, a)
    return chosen.to(dtype), rejected.to(dtype)


# Llama 2 (Touvron et al. 2023, §3.2.2): the rater also says how much better the chosen answer is.
LLAMA2_MARGIN_LARGE = {"significantly better": 3.0, "better": 2.0, "slightly better": 1.0,
                       "negligibly better / unsure": 0.0}


def graded_margins(gap: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """A simulated rater's grade, as Llama 2's large margin: |gap| ≥ 3 → 3, ≥ 2 → 2, ≥ 1 → 1, else 0,
    times `scale`; `gap` = u(chosen) − u(rejected) (the rater sees how different the two answers are)."""
    return gap.abs().floor().clamp(max=3.0) * scale


class LinearReward(nn.Module):
    """r(x) = w·x + b. The BT loss is convex in (w, b) and does not depend on b at all."""

    def __init__(self, d: int, generator: torch.Generator) -> None:
        super().__init__()
        self.linear = nn.Linear(d, 1)
        with torch.no_grad():
            self.linear.weight.copy_(0.1 * torch.randn(1, d, generator=generator))
            self.linear.bias.copy_(torch.randn(1, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [n, d] -> rewards [n]."""
        return self.linear(x).squeeze(-1)


class MLPReward(nn.Module):
    """A one-hidden-layer scalar head: the shape of a real RM's value head on top of features."""

    def __init__(self, d: int, hidden: int, generator: torch.Generator) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        with torch.no_grad():
            for layer in (self.net[0], self.net[2]):
                bound = layer.in_features ** -0.5
                layer.weight.copy_((2 * torch.rand(layer.weight.shape, generator=generator) - 1) * bound)
                layer.bias.copy_((2 * torch.rand(layer.bias.shape, generator=generator) - 1) * bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [n, d] -> rewards [n]."""
        return self.net(x).squeeze(-1)


# ---------------------------------------------------------------------------------------------
# The Bradley–Terry loss, the accuracy metric and the training loop (to write).
# ---------------------------------------------------------------------------------------------


def reward_loss(r_chosen: torch.Tensor, r_rejected: torch.Tensor, margin: torch.Tensor | None = None,
                center_coef: float | None = None) -> torch.Tensor:
    """mean_i −log σ(r_chosen_i − r_rejected_i − margin_i)  [+ center_coef · mean_i (r_chosen_i + r_rejected_i)²].

    r_chosen, r_rejected, margin: [n] (n ≥ 1), same dtype; margin None means 0, center_coef None means no
    centring term. Returns a 0-dim tensor. Must stay finite and exact for any reward gap (±100 in float32).
    """
    ### HINT: −log σ(z) for z of either sign without exp overflowing or σ rounding to 0; TRL's line is in the README
    ### BEGIN SOLUTION
    gap = r_chosen - r_rejected
    if margin is not None:
        gap = gap - margin
    loss = -F.logsigmoid(gap).mean()
    if center_coef is not None:
        loss = loss + center_coef * torch.mean((r_chosen + r_rejected) ** 2)
    return loss
    ### END SOLUTION


def preference_accuracy(r_chosen: torch.Tensor, r_rejected: torch.Tensor) -> float:
    """Fraction of pairs with r_chosen > r_rejected (strictly: a tie counts as wrong, as TRL's metric)."""
    ### BEGIN SOLUTION
    return (r_chosen > r_rejected).double().mean().item()
    ### END SOLUTION


def train_reward_model(model: nn.Module, chosen: torch.Tensor, rejected: torch.Tensor,
                       optimizer: torch.optim.Optimizer, steps: int, margin: torch.Tensor | None = None,
                       center_coef: float | None = None) -> list[float]:
    """`steps` full-batch steps of `optimizer` on reward_loss(model(chosen), model(rejected), margin, center_coef).

    chosen, rejected: [n, d]; model maps [n, d] -> [n]. Each step: gradients of this step's loss only, one
    optimizer.step(). Returns the loss of each step, computed before that step's update (length `steps`).
    """
    ### HINT: both answers of a pair are scored by the same network, and the gradient flows through both scores
    ### BEGIN SOLUTION
    n = chosen.shape[0]
    losses = []
    for _ in range(steps):
        rewards = model(torch.cat([chosen, rejected]))  # one forward, as TRL's RewardTrainer does
        loss = reward_loss(rewards[:n], rewards[n:], margin, center_coef)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
    ### END SOLUTION
