"""rl-10: GRPO — group-relative advantages, the clipped objective with k3 KL, and loss aggregation.

Conventions follow verl 0.9.1 (`verl/trainer/ppo/core_algos.py`): `compute_grpo_outcome_advantage`,
`compute_policy_loss_vanilla` (without dual-clip), `kl_penalty(..., "k3")` and `agg_loss`.
Shapes: B responses, T response positions (right padding); `mask[i, t] = 1` on real tokens.
"""

from __future__ import annotations

import torch

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def group_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor,
                     eps: float = 1e-6, scale_by_std: bool = True) -> torch.Tensor:
    """GRPO outcome advantages broadcast to tokens: [B] rewards, [B] int group ids, [B, T] mask -> [B, T].

    A group of k >= 2 responses: (r - mean) / (std + eps) with the unbiased std (k - 1 in the denominator),
    or r - mean when `scale_by_std` is False (Dr. GRPO). A group of one response: mean 0 and std 1 (verl),
    so its advantage is r / (1 + eps) (or r). The scalar is multiplied by the mask; dtype = rewards.dtype.
    """
    ### HINT: group statistics come from the responses of the same group only; a std of 0 must give 0, not NaN
    ### BEGIN SOLUTION
    scalars = torch.empty_like(rewards)
    for g in torch.unique(group_ids):
        members = group_ids == g
        r = rewards[members]
        if r.numel() == 1:
            mean, std = torch.zeros_like(r[0]), torch.ones_like(r[0])
        else:
            mean, std = r.mean(), r.std(unbiased=True)
        if scale_by_std:
            scalars[members] = (r - mean) / (std + eps)
        else:
            scalars[members] = r - mean
    return scalars.unsqueeze(-1) * mask.to(rewards.dtype)
    ### END SOLUTION


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || pi_ref) on tokens sampled from pi: exp(d) - d - 1 with d = ref_logp - logp."""
    ### BEGIN SOLUTION
    d = ref_logp - logp
    return torch.exp(d) - d - 1
    ### END SOLUTION


def grpo_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor, advantages: torch.Tensor,
                    clip_low: float, clip_high: float, beta: float) -> torch.Tensor:
    """Per-token GRPO loss [B, T] (to be minimised; no mask applied here):
    -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A) + beta * k3(logp, ref_logp),
    ratio = exp(logp - old_logp). Differentiable in `logp`; old_logp, ref_logp, advantages are constants."""
    ### HINT: the pessimistic (smaller) surrogate wins; clip_high > clip_low is DAPO's clip-higher
    ### BEGIN SOLUTION
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    surrogate = torch.minimum(ratio * advantages, clipped * advantages)
    return -surrogate + beta * k3_kl(logp, ref_logp)
    ### END SOLUTION


def aggregate_loss(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str, max_len: int | None = None) -> torch.Tensor:
    """Scalar loss from a [B, T] loss matrix; padding (mask 0) never counts, whatever it holds.

    token-mean:              sum over real tokens / number of real tokens in the batch
    seq-mean-token-mean:     mean over non-empty rows of (row's token sum / row's token count)
    seq-mean-token-sum:      mean over non-empty rows of the row's token sum
    seq-mean-token-sum-norm: seq-mean-token-sum / max_len (a fixed constant; None -> T)
    A row with no real token is left out of every row count.
    """
    ### HINT: the only thing that changes between modes is the weight each real token gets
    ### BEGIN SOLUTION
    m = mask.to(loss_mat.dtype)
    masked = torch.where(mask.bool(), loss_mat, torch.zeros_like(loss_mat))
    row_sum = masked.sum(-1)
    row_len = m.sum(-1)
    nonempty = row_len > 0
    if mode == "token-mean":
        return row_sum.sum() / row_len.sum()
    if mode == "seq-mean-token-mean":
        return (row_sum[nonempty] / row_len[nonempty]).mean()
    if mode == "seq-mean-token-sum":
        return row_sum[nonempty].mean()
    if mode == "seq-mean-token-sum-norm":
        return row_sum[nonempty].mean() / (loss_mat.shape[-1] if max_len is None else max_len)
    raise ValueError(f"unknown loss aggregation mode {mode!r}; expected one of {AGG_MODES}")
    ### END SOLUTION
