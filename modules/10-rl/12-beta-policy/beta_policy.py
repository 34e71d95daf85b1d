"""rl-12: a Beta policy head for bounded continuous actions (Chou, Maturana & Scherer, ICML 2017).

A policy network outputs two unconstrained numbers per action dimension d, alpha_raw_d and beta_raw_d. The action
distribution is a Beta on the unit interval, mapped affinely onto the Box [low_d, high_d]:

    alpha = softplus(alpha_raw) + 1,  beta = softplus(beta_raw) + 1        (both >= 1: unimodal, bounded density)
    x ~ Beta(alpha, beta)  on (0, 1)                                        (the "unit sample"; stored in the buffer)
    action = low + (high - low) * x                                         (what the env sees; never outside the Box)

    log pi = sum_d [ (alpha - 1) log x + (beta - 1) log(1 - x) - log B(alpha, beta) - log(high - low) ]
    log B(alpha, beta) = lgamma(alpha) + lgamma(beta) - lgamma(alpha + beta)

Shapes: alpha_raw, beta_raw, x, action: [B, D]; low, high: [D] (per dimension, any bounds with low < high);
log-probs and entropies: [B]. One floating dtype throughout (float32 or float64).
Edge rule: every unit sample is clamped into [EPS, 1 - EPS], EPS = torch.finfo(dtype).eps, both where it is drawn
and where its log-prob is taken, so x = 0 or x = 1 exactly has the finite log-prob of the nearest clamped point.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def concentrations(alpha_raw: torch.Tensor, beta_raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(alpha, beta), both >= 1, from the head's unconstrained outputs (same shape, differentiable)."""
    ### BEGIN SOLUTION
    return F.softplus(alpha_raw) + 1.0, F.softplus(beta_raw) + 1.0
    ### END SOLUTION


def clamp_unit(x: torch.Tensor) -> torch.Tensor:
    """x clamped into [EPS, 1 - EPS] with EPS = torch.finfo(x.dtype).eps; a new tensor, x is left unchanged."""
    ### BEGIN SOLUTION
    eps = torch.finfo(x.dtype).eps
    return x.clamp(eps, 1.0 - eps)
    ### END SOLUTION


def log_beta_function(alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """Elementwise log B(alpha, beta), finite for alpha, beta up to 1e3 and beyond (float32 too)."""
    ### HINT: B(alpha, beta) = Gamma(alpha) Gamma(beta) / Gamma(alpha + beta); Gamma(35) already overflows float32
    ### BEGIN SOLUTION
    return torch.lgamma(alpha) + torch.lgamma(beta) - torch.lgamma(alpha + beta)
    ### END SOLUTION


def log_prob(
    alpha_raw: torch.Tensor, beta_raw: torch.Tensor, x: torch.Tensor, low: torch.Tensor, high: torch.Tensor
) -> torch.Tensor:
    """log pi(action) [B] of the action low + x (high - low), from its unit sample x [B, D]; density in env units."""
    ### HINT: clamp first; four terms per dimension, the last one the affine map's log-Jacobian; then reduce over D
    ### BEGIN SOLUTION
    alpha, beta = concentrations(alpha_raw, beta_raw)
    x = clamp_unit(x)
    per_dim = (alpha - 1.0) * torch.log(x) + (beta - 1.0) * torch.log1p(-x) - log_beta_function(alpha, beta)
    return (per_dim - torch.log(high - low)).sum(dim=-1)
    ### END SOLUTION


def sample(
    alpha_raw: torch.Tensor,
    beta_raw: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(action [B, D] in [low, high], x [B, D] in [EPS, 1 - EPS]): one draw per row, no autograd graph.

    Every random number comes from `generator` (e.g. two torch._standard_gamma(..., generator=generator) draws).
    """
    ### HINT: a Beta(a, b) draw is G_a / (G_a + G_b) with independent standard Gamma draws; float32 can round it to 1
    ### BEGIN SOLUTION
    with torch.no_grad():
        alpha, beta = concentrations(alpha_raw, beta_raw)
        g_alpha = torch._standard_gamma(alpha, generator=generator)
        g_beta = torch._standard_gamma(beta, generator=generator)
        x = clamp_unit(g_alpha / (g_alpha + g_beta))
        action = low + x * (high - low)
    return action, x
    ### END SOLUTION


def entropy(alpha_raw: torch.Tensor, beta_raw: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """Differential entropy [B] of the action distribution in env units (closed form, differentiable)."""
    ### HINT: H = log B - (alpha - 1) psi(alpha) - (beta - 1) psi(beta) + (alpha + beta - 2) psi(alpha + beta), per dim
    ### BEGIN SOLUTION
    alpha, beta = concentrations(alpha_raw, beta_raw)
    total = alpha + beta
    per_dim = (
        log_beta_function(alpha, beta)
        - (alpha - 1.0) * torch.digamma(alpha)
        - (beta - 1.0) * torch.digamma(beta)
        + (total - 2.0) * torch.digamma(total)
    )
    return (per_dim + torch.log(high - low)).sum(dim=-1)
    ### END SOLUTION


def mean_action(alpha_raw: torch.Tensor, beta_raw: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """The deterministic evaluation action [B, D]: the mean of the action distribution, low + E[x] (high - low)."""
    ### BEGIN SOLUTION
    alpha, beta = concentrations(alpha_raw, beta_raw)
    return low + alpha / (alpha + beta) * (high - low)
    ### END SOLUTION


def reinforce_gradient(
    alpha_raw: torch.Tensor,
    beta_raw: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
    reward_fn: Callable[[torch.Tensor], torch.Tensor],
    n_samples: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Score-function (REINFORCE) estimate of the gradient of E[reward_fn(action)] for a one-state bandit.

    alpha_raw, beta_raw: [D] (the policy's parameters); reward_fn maps actions [N, D] to rewards [N].
    Draws n_samples actions with `sample` and returns (d/d alpha_raw, d/d beta_raw) of
    (1/n) sum_i reward_fn(action_i) * log pi(action_i), no baseline: two tensors of shape [D].
    """
    ### BEGIN SOLUTION
    alpha_raw = alpha_raw.detach().requires_grad_(True)
    beta_raw = beta_raw.detach().requires_grad_(True)
    a_rows = alpha_raw.expand(n_samples, -1)
    b_rows = beta_raw.expand(n_samples, -1)
    action, x = sample(a_rows, b_rows, low, high, generator)
    rewards = reward_fn(action)
    surrogate = (rewards * log_prob(a_rows, b_rows, x, low, high)).mean()
    g_alpha, g_beta = torch.autograd.grad(surrogate, (alpha_raw, beta_raw))
    return g_alpha, g_beta
    ### END SOLUTION
