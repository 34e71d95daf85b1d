"""train-07: sequence parallelism (Korthikanti et al. 2023) around a tensor-parallel MLP block.

Outside the tensor-parallel region (LayerNorm, dropout, the residual) plain TP keeps the whole
[s, b, h] activation on every rank: replicated work and, above all, replicated activation memory.
Sequence parallelism splits those regions along the sequence: rank r keeps tokens
r*s/t .. (r+1)*s/t - 1. The conjugate pair of TP changes shape:

    g  (all-reduce)  ->  reduce-scatter along the sequence (backward: all-gather)
    f  (identity)    ->  all-gather along the sequence     (backward: reduce-scatter)

A ring all-reduce *is* a reduce-scatter followed by an all-gather, so the bytes on the wire stay
the same while LayerNorm / dropout work and memory drop to 1/t. The price: LayerNorm weights and
the row-parallel bias are replicated but now see only s/t tokens per rank, so their gradients are
partial sums that must be all-reduced over the TP group after backward.

Layout: activations are [s, b, h], sequence first (as in Megatron-LM), so a rank's tokens are one
contiguous block of dim 0 and the collectives need no reshuffling.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

DROP_P = 0.25


def dropout_mask(first_token: int, shape: tuple[int, int, int], p: float = DROP_P, seed: int = 0) -> torch.Tensor:
    """Keep-mask of dropout for tokens first_token .. first_token + shape[0] - 1 of the sequence.

    The mask is a hash of the GLOBAL index (token, batch, feature), so a sequence shard draws exactly
    the bits the unsharded model draws for the same tokens (a counter-based RNG, like Philox).
    """
    s, b, h = shape
    token = torch.arange(first_token, first_token + s, dtype=torch.int64).view(s, 1, 1)
    index = (token * b + torch.arange(b).view(1, b, 1)) * h + torch.arange(h).view(1, 1, h)
    x = (index + seed * 0x9E3779B9) & 0xFFFFFFFF
    for mul in (0x7FEB352D, 0x846CA68B):  # integer finalizer (lowbias32)
        x = ((x ^ (x >> 16)) * mul) & 0xFFFFFFFF
    x = x ^ (x >> 16)
    return x >= int(p * 2**32)


def dropout(x: torch.Tensor, first_token: int, p: float = DROP_P) -> torch.Tensor:
    """Inverted dropout of x ([tokens, b, h]) whose first row is token `first_token` of the sequence."""
    keep = dropout_mask(first_token, tuple(x.shape), p).to(x.dtype)
    return x * keep / (1 - p)


class FullBlock(nn.Module):
    """The unsharded block: x + dropout(fc2(gelu(fc1(layernorm(x))))), x: [s, b, h]."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + dropout(self.fc2(F.gelu(self.fc1(self.norm(x)))), first_token=0)


def shard(weight: torch.Tensor, dim: int, rank: int, world: int) -> torch.Tensor:
    """Block `rank` of `world` equal contiguous blocks of `weight` along `dim`, as a fresh tensor."""
    return weight.detach().chunk(world, dim=dim)[rank].clone()


# ---------------------------------------------------------------------------------------------
# The sequence-parallel versions of f and g (to write).
# ---------------------------------------------------------------------------------------------


class GatherFromSequenceParallel(torch.autograd.Function):
    """Enters the TP region: [s/t, b, h] on each rank -> the whole [s, b, h] on every rank."""

    @staticmethod
    def forward(ctx, shard_: torch.Tensor) -> torch.Tensor:
        ### HINT: output [t * s/t, b, h]; rank r's block lands at rows r*s/t .. (r+1)*s/t - 1
        ### BEGIN SOLUTION
        world = dist.get_world_size()
        full = shard_.new_empty((world * shard_.shape[0], *shard_.shape[1:]))
        dist.all_gather_into_tensor(full, shard_.contiguous())
        return full
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        ### HINT: every rank holds a gradient for ALL tokens, each covering only its own TP shard's paths
        ### BEGIN SOLUTION
        world = dist.get_world_size()
        mine = grad.new_empty((grad.shape[0] // world, *grad.shape[1:]))
        dist.reduce_scatter_tensor(mine, grad.contiguous())
        return mine
        ### END SOLUTION


class ReduceScatterToSequenceParallel(torch.autograd.Function):
    """Leaves the TP region: partial sums [s, b, h] on each rank -> rank r's summed tokens [s/t, b, h]."""

    @staticmethod
    def forward(ctx, partial: torch.Tensor) -> torch.Tensor:
        ### HINT: one collective that sums over ranks and leaves each rank only its own block of tokens
        ### BEGIN SOLUTION
        world = dist.get_world_size()
        mine = partial.new_empty((partial.shape[0] // world, *partial.shape[1:]))
        dist.reduce_scatter_tensor(mine, partial.contiguous())
        return mine
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        ### HINT: each token's output gradient lives on one rank; every rank needs all of them
        ### BEGIN SOLUTION
        world = dist.get_world_size()
        full = grad.new_empty((world * grad.shape[0], *grad.shape[1:]))
        dist.all_gather_into_tensor(full, grad.contiguous())
        return full
        ### END SOLUTION


# ---------------------------------------------------------------------------------------------
# The block.
# ---------------------------------------------------------------------------------------------


class SequenceParallelBlock(nn.Module):
    """FullBlock on t ranks: LayerNorm, dropout and the residual on s/t tokens, the MLP tensor-parallel.

    Parameters: norm_w, norm_b [h] and b2 [h] replicated; w1 [ffn/t, h], b1 [ffn/t] (column-parallel);
    w2 [h, ffn/t] (row-parallel).
    """

    def __init__(self, full: FullBlock, rank: int, world: int) -> None:
        super().__init__()
        self.rank, self.world = rank, world
        self.norm_w = nn.Parameter(full.norm.weight.detach().clone())
        self.norm_b = nn.Parameter(full.norm.bias.detach().clone())
        self.eps = full.norm.eps
        self.w1 = nn.Parameter(shard(full.fc1.weight, 0, rank, world))
        self.b1 = nn.Parameter(shard(full.fc1.bias, 0, rank, world))
        self.w2 = nn.Parameter(shard(full.fc2.weight, 1, rank, world))
        self.b2 = nn.Parameter(full.fc2.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: this rank's tokens [s/t, b, h]; returns this rank's tokens of the block's output."""
        ### HINT: layernorm on the shard -> gather -> fc1, gelu, fc2 (no bias) -> reduce-scatter -> + b2 -> dropout -> + x
        ### BEGIN SOLUTION
        normed = F.layer_norm(x, x.shape[-1:], self.norm_w, self.norm_b, self.eps)
        full = GatherFromSequenceParallel.apply(normed)
        partial = F.linear(F.gelu(F.linear(full, self.w1, self.b1)), self.w2)
        out = ReduceScatterToSequenceParallel.apply(partial) + self.b2
        return x + dropout(out, first_token=self.rank * x.shape[0])
        ### END SOLUTION

    def sync_sequence_parallel_grads(self) -> None:
        """After backward: make the gradients of the replicated parameters the full-sequence ones."""
        ### HINT: which parameters are replicated but only saw this rank's s/t tokens?
        ### BEGIN SOLUTION
        for p in (self.norm_w, self.norm_b, self.b2):
            dist.all_reduce(p.grad)
        ### END SOLUTION
