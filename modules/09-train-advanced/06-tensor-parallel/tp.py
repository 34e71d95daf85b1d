"""train-06: tensor parallelism (Megatron-LM style) with the f and g operators.

A transformer block is split across the t ranks of a tensor-parallel group without ever gathering
an activation. The first linear of a block is column-parallel (rank r keeps output features r of
t, so no communication is needed to apply the nonlinearity), the second is row-parallel (rank r
keeps the matching input features and produces a partial sum of the full output). Two conjugate
operators glue the region to the replicated world outside it (Shoeybi et al. 2019, §3):

    f: identity in forward, all-reduce of the gradient in backward (enters the region)
    g: all-reduce in forward, identity in backward               (leaves the region)

so each block costs exactly one all-reduce of b*s*h elements in forward and one in backward.
Attention is split the same way with whole heads per rank: the q/k/v projections are column-parallel
(rank r owns heads r*a/t .. (r+1)*a/t - 1) and the output projection is row-parallel.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

# ---------------------------------------------------------------------------------------------
# The unsharded model (given): the reference every rank is compared with.
# ---------------------------------------------------------------------------------------------


class FullMLP(nn.Module):
    """fc2(gelu(fc1(x))), x: [b, s, hidden]."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[b, s, heads*d] -> [b, heads, s, d]."""
    b, s, width = x.shape
    return x.view(b, s, heads, width // heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[b, heads, s, d] -> [b, s, heads*d]."""
    b, heads, s, d = x.shape
    return x.transpose(1, 2).reshape(b, s, heads * d)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + causal mask) v per head; q, k, v: [b, heads, s, d]."""
    s, d = q.shape[-2], q.shape[-1]
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    future = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v


class FullAttention(nn.Module):
    """Multi-head causal self-attention with a fused qkv projection (rows: all q, then k, then v)."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        heads = [split_heads(t, self.heads) for t in (q, k, v)]
        return self.out(merge_heads(causal_attention(*heads)))


def shard(weight: torch.Tensor, dim: int, rank: int, world: int) -> torch.Tensor:
    """Block `rank` of `world` equal contiguous blocks of `weight` along `dim`, as a fresh tensor."""
    return weight.detach().chunk(world, dim=dim)[rank].clone()


# ---------------------------------------------------------------------------------------------
# The two conjugate operators (to write).
# ---------------------------------------------------------------------------------------------


class CopyToTensorParallel(torch.autograd.Function):
    """f: the input of a tensor-parallel region. Forward identity; backward sums the gradient over ranks."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ### HINT: every rank already holds the whole (replicated) input
        ### BEGIN SOLUTION
        return x.view_as(x)
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        ### HINT: each rank's gradient only covers the paths through its own shard; do not modify `grad` in place
        ### BEGIN SOLUTION
        total = grad.clone()
        dist.all_reduce(total)
        return total
        ### END SOLUTION


class ReduceFromTensorParallel(torch.autograd.Function):
    """g: the output of a tensor-parallel region. Forward sums the partial outputs; backward identity."""

    @staticmethod
    def forward(ctx, partial: torch.Tensor) -> torch.Tensor:
        ### HINT: the row-parallel linear left a partial sum on every rank; do not modify the input in place
        ### BEGIN SOLUTION
        total = partial.clone()
        dist.all_reduce(total)
        return total
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        ### HINT: the output was replicated, so its gradient already is
        ### BEGIN SOLUTION
        return grad
        ### END SOLUTION


# ---------------------------------------------------------------------------------------------
# The tensor-parallel blocks (to write). Parameter names and layouts are fixed (see README).
# ---------------------------------------------------------------------------------------------


class ParallelMLP(nn.Module):
    """Column-parallel fc1, row-parallel fc2: w1 [ffn/t, h], b1 [ffn/t], w2 [h, ffn/t], b2 [h]."""

    def __init__(self, full: FullMLP, rank: int, world: int) -> None:
        super().__init__()
        ### HINT: nn.Linear stores weight as [out_features, in_features]; use shard(); b2 stays whole
        ### BEGIN SOLUTION
        self.w1 = nn.Parameter(shard(full.fc1.weight, 0, rank, world))  # output features of rank r
        self.b1 = nn.Parameter(shard(full.fc1.bias, 0, rank, world))
        self.w2 = nn.Parameter(shard(full.fc2.weight, 1, rank, world))  # the matching input features
        self.b2 = nn.Parameter(full.fc2.bias.detach().clone())
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [b, s, h], the same on every rank; returns the full [b, s, h] output on every rank."""
        ### HINT: f -> local fc1 + gelu -> local fc2 (no bias) -> g -> add the bias once
        ### BEGIN SOLUTION
        x = CopyToTensorParallel.apply(x)
        hidden = F.gelu(F.linear(x, self.w1, self.b1))
        return ReduceFromTensorParallel.apply(F.linear(hidden, self.w2)) + self.b2
        ### END SOLUTION


class ParallelAttention(nn.Module):
    """Heads split over ranks: w_qkv [3h/t, h] = [q rows; k rows; v rows] of rank r's heads,
    b_qkv [3h/t], w_out [h, h/t] (the matching input columns), b_out [h]."""

    def __init__(self, full: FullAttention, rank: int, world: int) -> None:
        super().__init__()
        hidden = full.out.in_features
        self.heads = full.heads // world  # heads of this rank
        ### HINT: split the fused qkv into its q, k and v parts first; rank r's heads are rows r of t in each part
        ### BEGIN SOLUTION
        parts = zip(full.qkv.weight.split(hidden, dim=0), full.qkv.bias.split(hidden), strict=True)
        weights, biases = zip(*[(shard(w, 0, rank, world), shard(b, 0, rank, world)) for w, b in parts],
                              strict=True)
        self.w_qkv = nn.Parameter(torch.cat(weights))
        self.b_qkv = nn.Parameter(torch.cat(biases))
        self.w_out = nn.Parameter(shard(full.out.weight, 1, rank, world))
        self.b_out = nn.Parameter(full.out.bias.detach().clone())
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [b, s, h], the same on every rank; returns the full [b, s, h] output on every rank."""
        ### HINT: f -> local qkv -> causal_attention on this rank's heads -> local out projection -> g -> bias
        ### BEGIN SOLUTION
        x = CopyToTensorParallel.apply(x)
        q, k, v = F.linear(x, self.w_qkv, self.b_qkv).chunk(3, dim=-1)
        context = causal_attention(*(split_heads(t, self.heads) for t in (q, k, v)))
        return ReduceFromTensorParallel.apply(F.linear(merge_heads(context), self.w_out)) + self.b_out
        ### END SOLUTION
