"""rl-11: the tanh-squashed Gaussian policy of SAC (Haarnoja et al. 2018, Appendix C), with bounds.

A policy head outputs, per state and action dimension d, a mean mean_d and a log standard deviation log_std_d.
One action is drawn in three steps (reparameterisation: the noise does not depend on the parameters):

    u = mean + exp(log_std) * eps,   eps ~ N(0, I) from the generator handed in   (pre-tanh sample, R^D)
    a = tanh(u)                                                                    ((-1, 1)^D)
    action = low + (a + 1) / 2 * (high - low)                                       ([low, high]^D)

Change of variables: the density of the action is the Gaussian density of u divided by |d action / d u|,
a product over the dimensions because every step is elementwise:

    log pi(action) = sum_d [ log N(u_d; mean_d, std_d) - log(1 - tanh(u_d)^2) - log((high_d - low_d) / 2) ]

The tanh term must stay exact where tanh(u) itself rounds to +-1 (see the README).
Shapes: mean, log_std, u, action: [B, D]; low, high: [D]; log-probs and entropies: [B]. One dtype throughout.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

LOG_STD_MIN = -20.0  # SB3 / Spinning Up: the head's raw log_std is clamped into [LOG_STD_MIN, LOG_STD_MAX]
LOG_STD_MAX = 2.0
HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def tanh_log_abs_det_jacobian(u: torch.Tensor) -> torch.Tensor:
    """Elementwise log|d tanh(u) / du| = log(1 - tanh(u)^2), accurate for every finite u (|u| = 20 and beyond)."""
    ### HINT: rewrite 1 - tanh(u)^2 with exponentials of -2u only; never form tanh(u) (it rounds to +-1)
    ### BEGIN SOLUTION
    return 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
    ### END SOLUTION


def clamp_log_std(log_std: torch.Tensor) -> torch.Tensor:
    """The head's raw log_std clamped into [LOG_STD_MIN, LOG_STD_MAX]; a new tensor, the input is left unchanged."""
    ### BEGIN SOLUTION
    return log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
    ### END SOLUTION


def squash_to_bounds(a: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """Map a in [-1, 1] ([B, D]) affinely onto [low, high] ([D] each); the result never leaves [low, high]."""
    ### HINT: a = -1 -> low, a = +1 -> high; in float32 the affine map can round one ulp past a bound
    ### BEGIN SOLUTION
    action = low + (a + 1.0) * (0.5 * (high - low))
    return torch.clamp(action, low, high)
    ### END SOLUTION


def log_prob_from_pre_tanh(
    mean: torch.Tensor, log_std: torch.Tensor, u: torch.Tensor, low: torch.Tensor, high: torch.Tensor
) -> torch.Tensor:
    """log pi(action) [B] of the action that the pre-tanh value u [B, D] maps to; log_std is the raw head output."""
    ### HINT: three terms per dimension (Gaussian, tanh, affine), then a sum over the action dimensions
    ### BEGIN SOLUTION
    log_std = clamp_log_std(log_std)
    z = (u - mean) * torch.exp(-log_std)
    log_normal = -0.5 * z * z - log_std - HALF_LOG_2PI
    log_scale = torch.log(0.5 * (high - low))
    return (log_normal - tanh_log_abs_det_jacobian(u) - log_scale).sum(dim=-1)
    ### END SOLUTION


def sample(
    mean: torch.Tensor, log_std: torch.Tensor, low: torch.Tensor, high: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(action [B, D] in [low, high], u [B, D], log pi(action) [B]), differentiable in mean and log_std.

    eps is exactly torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device), one call.
    """
    ### HINT: u must stay a function of mean and log_std in the autograd graph; the only randomness is eps
    ### BEGIN SOLUTION
    eps = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
    u = mean + torch.exp(clamp_log_std(log_std)) * eps
    action = squash_to_bounds(torch.tanh(u), low, high)
    return action, u, log_prob_from_pre_tanh(mean, log_std, u, low, high)
    ### END SOLUTION


def log_prob_of_action(
    mean: torch.Tensor, log_std: torch.Tensor, action: torch.Tensor, low: torch.Tensor, high: torch.Tensor
) -> torch.Tensor:
    """log pi(action) [B] for an action given in env units (e.g. read back from a replay buffer).

    Inverts the affine map to y in [-1, 1], clamps y into [-1 + e, 1 - e] with e = torch.finfo(dtype).eps,
    then u = atanh(y). Use log_prob_from_pre_tanh instead whenever u is at hand.
    """
    ### HINT: the clamp keeps atanh finite for actions exactly on a bound
    ### BEGIN SOLUTION
    y = 2.0 * (action - low) / (high - low) - 1.0
    e = torch.finfo(action.dtype).eps
    u = torch.atanh(y.clamp(-1.0 + e, 1.0 - e))
    return log_prob_from_pre_tanh(mean, log_std, u, low, high)
    ### END SOLUTION


def entropy_estimate(
    mean: torch.Tensor,
    log_std: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
    n_samples: int,
    generator: torch.Generator,
) -> torch.Tensor:
    """Monte-Carlo estimate of the entropy -E[log pi(action)] of each row's squashed policy: [B].

    n_samples independent draws per row, all noise from `generator`; the tanh term has no closed form.
    """
    ### HINT: average -log pi over n_samples reparameterised draws per row (one [n_samples, B, D] draw is fine)
    ### BEGIN SOLUTION
    eps = torch.randn((n_samples, *mean.shape), generator=generator, dtype=mean.dtype, device=mean.device)
    u = mean + torch.exp(clamp_log_std(log_std)) * eps
    return -log_prob_from_pre_tanh(mean, log_std, u, low, high).mean(dim=0)
    ### END SOLUTION
