"""train-02: activation recomputation, selective and full, under a memory budget.

Three ways to run one transformer block, from most memory to most recompute:
- "none":      plain autograd; the a·s²·b attention probabilities are saved for backward.
- "selective": the attention core softmax(q kᵀ)·v is an `AttentionCore` that saves only q, k, v
               and recomputes the probabilities in backward (Korthikanti et al. 2022).
- "full":      the whole block runs under `torch.utils.checkpoint`: only its input is saved and
               the block's forward runs again during backward.
`plan_recompute` picks a mode per layer so the saved bytes fit a budget at the least recompute.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

MODES = ("none", "selective", "full")


def causal_probs(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """softmax(q kᵀ · scale) with a causal mask; q, k are (b, a, s, d) -> (b, a, s, s)."""
    s = q.shape[-2]
    future = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax((q @ k.transpose(-2, -1) * scale).masked_fill(future, float("-inf")), dim=-1)


def attention_plain(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """The same attention core through ordinary autograd (saves the probabilities)."""
    return causal_probs(q, k, scale) @ v


class AttentionCore(torch.autograd.Function):
    """out = causal_probs(q, k, scale) @ v, keeping only q, k, v for backward."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
        ### HINT: save only what backward cannot cheaply rebuild; plain Python values go on ctx
        ### BEGIN SOLUTION
        p = causal_probs(q, k, scale)  # autograd is off inside forward: nothing else is kept
        ctx.save_for_backward(q, k, v)
        ctx.scale = scale
        return p @ v
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        ### HINT: recompute p, then dV = pᵀ·dO, dP = dO·vᵀ, and the softmax backward row by row
        ### BEGIN SOLUTION
        q, k, v = ctx.saved_tensors
        p = causal_probs(q, k, ctx.scale)  # the s×s tensor lives only inside this backward call
        grad_v = p.transpose(-2, -1) @ grad_out
        grad_p = grad_out @ v.transpose(-2, -1)
        # softmax backward: dS_ij = P_ij · (dP_ij − Σ_k dP_ik P_ik); masked entries have P = 0
        grad_s = p * (grad_p - (grad_p * p).sum(-1, keepdim=True))
        grad_q = grad_s @ k * ctx.scale
        grad_k = grad_s.transpose(-2, -1) @ q * ctx.scale
        return grad_q, grad_k, grad_v, None
        ### END SOLUTION


class Block(nn.Module):
    """Pre-LN GPT block (the one of train-01) whose attention core and checkpointing follow `mode`."""

    def __init__(self, h: int, a: int, f: int) -> None:
        super().__init__()
        self.a = a
        self.ln1 = nn.LayerNorm(h)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(h, h) for _ in range(4))
        self.ln2 = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, f)
        self.fc2 = nn.Linear(f, h)
        self.mode = "none"

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        d = h // self.a
        y = self.ln1(x)
        q, k, v = (w(y).view(b, s, self.a, d).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        core = AttentionCore.apply if self.mode == "selective" else attention_plain
        o = core(q, k, v, 1.0 / math.sqrt(d)).transpose(1, 2).reshape(b, s, h)
        x = x + self.wo(o)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "full":
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


def plan_recompute(n_layers: int, saved: dict[str, int], cost: dict[str, int], budget: int) -> list[str]:
    """A mode per layer (from MODES) with sum(saved[m]) <= budget and the least sum(cost[m]).

    saved[m]: activation bytes one layer keeps in mode m; cost[m]: what recomputing costs per layer
    in mode m (e.g. FLOPs). All layers are identical. Raises ValueError when no plan fits.
    """
    ### HINT: identical layers: only how many layers use each mode matters, not which ones
    ### BEGIN SOLUTION
    best = None
    for n_full in range(n_layers + 1):
        for n_sel in range(n_layers - n_full + 1):
            counts = {"none": n_layers - n_full - n_sel, "selective": n_sel, "full": n_full}
            if sum(saved[m] * n for m, n in counts.items()) <= budget:
                total = sum(cost[m] * n for m, n in counts.items())
                if best is None or total < best[0]:
                    best = (total, counts)
    if best is None:
        raise ValueError(f"no plan keeps {n_layers} layers within {budget} bytes")
    return [m for m in MODES for _ in range(best[1][m])]
    ### END SOLUTION
