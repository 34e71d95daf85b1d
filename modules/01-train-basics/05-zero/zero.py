"""train-05: ZeRO-2 — AdamW whose state and gradients are sharded over the data-parallel ranks.

Plain data parallelism keeps the whole optimizer on every rank: master weights, m and v, 12Ψ bytes
in fp32, N times over. ZeRO (Rajbhandari et al. 2020) keeps 1/N of it per rank:
1. all parameters are seen as one flat vector, padded to a multiple of N and cut into N equal
   shards; rank r owns shard r and holds AdamW state only for it;
2. step: reduce-scatter the flat gradient, so rank r receives the sum of shard r only (ZeRO-2: the
   full gradient is dropped right away), average it, run AdamW on the shard, then all-gather the
   updated shards so every rank has the full new parameters again.
Reduce-scatter + all-gather move exactly the bytes of one all-reduce (train-03), so ZeRO-1/2 cost
no more communication than DDP.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def shard_bounds(numel: int, world_size: int, rank: int) -> tuple[int, int]:
    """[start, end) of `rank`'s shard of a flat vector of `numel` elements padded with zeros to a
    multiple of world_size. All shards have the same length; the padding sits at the very end."""
    ### HINT: the shard length is a ceiling division
    ### BEGIN SOLUTION
    shard = -(-numel // world_size)  # ceil(numel / world_size)
    return rank * shard, (rank + 1) * shard
    ### END SOLUTION


class ZeroAdamW:
    """AdamW over `params` with ZeRO-2 sharding. Call after loss.backward(); no zero_grad needed."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2) -> None:
        self.params = list(params)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.numel = sum(p.numel() for p in self.params)
        self.start, self.end = shard_bounds(self.numel, self.world_size, self.rank)
        self.padded = (self.end - self.start) * self.world_size
        with torch.no_grad():
            flat = self.flatten([p.detach() for p in self.params])
            # The master copy of this rank's shard: the only weights AdamW updates here. (Same dtype
            # as the model on CPU; with bf16 weights this would be the fp32 master.)
            self.master = nn.Parameter(flat[self.start:self.end].clone())
        self.inner = torch.optim.AdamW([self.master], lr=lr, betas=betas, eps=eps,
                                       weight_decay=weight_decay)

    def flatten(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """Concatenate into one flat vector, zero-padded to `self.padded` elements."""
        flat = torch.cat([t.reshape(-1) for t in tensors])
        return F.pad(flat, (0, self.padded - flat.numel()))

    def unflatten_into_params(self, flat: torch.Tensor) -> None:
        """Copy the first `numel` elements of `flat` back into the parameters (padding dropped)."""
        offset = 0
        for p in self.params:
            p.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()

    @torch.no_grad()
    def step(self) -> None:
        ### HINT: reduce_scatter_tensor -> average -> self.inner.step() -> all_gather_into_tensor
        ### BEGIN SOLUTION
        grad_shard = torch.empty_like(self.master)
        # rank r receives Σ_ranks grad[start_r:end_r]: its own shard only
        dist.reduce_scatter_tensor(grad_shard, self.flatten([p.grad for p in self.params]))
        self.master.grad = grad_shard / self.world_size
        for p in self.params:
            p.grad = None  # ZeRO-2: the full gradient is not kept after the reduce-scatter
        self.inner.step()  # AdamW on 1/N of the parameters, with 1/N of the state
        full = self.flatten([p.detach() for p in self.params])
        dist.all_gather_into_tensor(full, self.master.detach())  # every updated shard, everywhere
        self.unflatten_into_params(full)
        ### END SOLUTION
