"""train-04: data parallelism with bucketed gradient all-reduce that overlaps backward.

Every rank holds a full replica of the model and a different slice of the batch. After backward
the gradients are averaged over ranks, so every replica takes the same optimizer step. Instead of
one all-reduce per parameter (latency-bound) or one at the end (no overlap), gradients are packed
into buckets in the order backward produces them (last layer first), and each bucket's all-reduce
is launched the moment its last gradient lands in `.grad`, while backward continues on earlier
layers. This is what torch.nn.parallel.DistributedDataParallel does (torch/csrc/distributed/c10d/
reducer.cpp), minus gradient views, unused-parameter search and no_sync.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


def build_buckets(sizes_bytes: list[int], cap_bytes: int) -> list[list[int]]:
    """Group parameter indices into buckets for all-reduce.

    sizes_bytes[i] is the gradient size of parameter i, in registration (forward) order. Buckets
    are filled in REVERSE order, the order in which backward produces gradients; a bucket is closed
    when the next parameter would push it past cap_bytes. A parameter larger than the cap gets a
    bucket of its own. Returns the buckets, each a list of parameter indices in the order added.
    """
    ### HINT: walk the indices from last to first; start a new bucket when the next one does not fit
    ### BEGIN SOLUTION
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for i in reversed(range(len(sizes_bytes))):  # backward runs from the last layer to the first
        if current and filled + sizes_bytes[i] > cap_bytes:
            buckets.append(current)
            current, filled = [], 0
        current.append(i)
        filled += sizes_bytes[i]
    if current:
        buckets.append(current)
    return buckets
    ### END SOLUTION


class BucketedDDP(nn.Module):
    """Wraps `module`; call `finish_gradient_sync()` after `loss.backward()`, then step."""

    def __init__(self, module: nn.Module, bucket_cap_bytes: int = 25 * 2**20) -> None:
        super().__init__()
        self.module = module
        self.world_size = dist.get_world_size()
        self.params = [p for p in module.parameters() if p.requires_grad]
        with torch.no_grad():
            for p in self.params:  # every replica starts from rank 0's weights
                dist.broadcast(p, src=0)
        self.buckets = build_buckets([p.numel() * p.element_size() for p in self.params],
                                     bucket_cap_bytes)
        self.bucket_of = {i: b for b, members in enumerate(self.buckets) for i in members}
        self.fired: list[int] = []  # bucket ids in the order their all-reduce was launched
        self._reset()
        ### HINT: one hook per parameter, run when its gradient is complete in p.grad (not before)
        ### BEGIN SOLUTION
        for i, p in enumerate(self.params):
            # Runs after backward has accumulated this parameter's gradient into p.grad.
            p.register_post_accumulate_grad_hook(self._hook(i))
        ### END SOLUTION

    def _reset(self) -> None:
        self._missing = [len(members) for members in self.buckets]  # gradients not yet ready
        self._inflight: list[tuple[int, torch.Tensor, dist.Work]] = []  # (bucket, flat grads, work)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _hook(self, i: int):
        def hook(param: torch.Tensor) -> None:
            ### HINT: count down the bucket of parameter i; when it reaches 0, flatten and launch async
            ### BEGIN SOLUTION
            b = self.bucket_of[i]
            self._missing[b] -= 1
            if self._missing[b] == 0:  # the bucket's last gradient just landed in .grad
                flat = torch.cat([self.params[j].grad.reshape(-1) for j in self.buckets[b]])
                work = dist.all_reduce(flat, async_op=True)  # runs while backward goes on
                self._inflight.append((b, flat, work))
                self.fired.append(b)
            ### END SOLUTION

        return hook

    def finish_gradient_sync(self) -> None:
        """Wait for every bucket's all-reduce and write the averaged gradients back to .grad."""
        if any(self._missing):
            raise RuntimeError("some buckets never became ready: a parameter received no gradient "
                               "(DDP would need find_unused_parameters=True)")
        ### HINT: for each (bucket, flat, work): wait, divide by world_size, copy the slices back into .grad
        ### BEGIN SOLUTION
        for b, flat, work in self._inflight:
            work.wait()
            flat /= self.world_size  # all-reduce sums; data parallelism averages
            offset = 0
            for j in self.buckets[b]:
                grad = self.params[j].grad
                grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
                offset += grad.numel()
        ### END SOLUTION
        self._reset()
