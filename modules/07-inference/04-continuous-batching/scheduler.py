"""infer-04: one scheduling step of a continuous-batching engine, as in vLLM V1 (FCFS policy).

Contract (the tests check all of it):
- A request knows `num_tokens` (prompt + tokens generated so far) and `num_computed` (tokens whose KV is in the
  cache). Each step the scheduler hands out at most `max_num_batched_tokens` tokens in total; a request gets
  `min(num_tokens - num_computed, budget left)` of them, so a prefill, a chunk of a long prefill and a decode
  (1 token) are the same thing to it.
- RUNNING requests first, in `running` order. Before a request gets n tokens it must hold
  ceil((num_computed + n) / block_size) KV blocks; the missing ones come from the pool. If the pool is short,
  preempt the LAST request of `running` (free all its blocks, num_computed = 0, num_preemptions += 1, put it
  at the FRONT of `waiting`) and retry; if that was the request itself, stop scheduling running requests.
  Stop as soon as the budget is used up: a request that would get 0 tokens is not scheduled.
- Then WAITING requests, in `waiting` order, only if nothing was preempted this step: stop at the first one
  that does not get its blocks, when the budget is used up, or when `running` holds `max_num_seqs`. An
  admitted request moves to the end of `running`.
- `schedule()` advances `num_computed` of every scheduled request and returns what it did; the engine then
  calls `update_after_step`, which samples one token for each request whose KV is complete.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(eq=False)
class Request:
    rid: int
    prompt_len: int
    max_tokens: int
    num_output: int = 0
    num_computed: int = 0
    num_blocks: int = 0
    num_preemptions: int = 0

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output


@dataclass
class SchedulerOutput:
    num_scheduled: dict[int, int] = field(default_factory=dict)  # rid -> tokens this step, in schedule order
    preempted: list[int] = field(default_factory=list)           # rids, in preemption order


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.num_free = num_blocks

    def take(self, n: int) -> None:
        if n > self.num_free:
            raise RuntimeError(f"asked for {n} KV blocks with {self.num_free} free")
        self.num_free -= n

    def give_back(self, n: int) -> None:
        self.num_free += n
        assert self.num_free <= self.num_blocks


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Scheduler:
    def __init__(self, num_blocks: int, block_size: int, max_num_batched_tokens: int, max_num_seqs: int) -> None:
        self.pool = BlockPool(num_blocks)
        self.block_size = block_size
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def add_request(self, req: Request) -> None:
        self.waiting.append(req)

    def _allocate(self, req: Request, n: int) -> bool:
        """Give `req` the blocks it needs to hold num_computed + n tokens; False (nothing taken) if short."""
        ### BEGIN SOLUTION
        need = cdiv(req.num_computed + n, self.block_size) - req.num_blocks
        if need > self.pool.num_free:
            return False
        if need > 0:
            self.pool.take(need)
            req.num_blocks += need
        return True
        ### END SOLUTION

    def _preempt(self, req: Request) -> None:
        """`req` was already removed from `running`: drop its KV (recompute later) and requeue it first."""
        ### BEGIN SOLUTION
        self.pool.give_back(req.num_blocks)
        req.num_blocks = 0
        req.num_computed = 0
        req.num_preemptions += 1
        self.waiting.appendleft(req)
        ### END SOLUTION

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        ### HINT: running pass (preempt running[-1] until the allocation fits), then the waiting pass; budget shared
        ### BEGIN SOLUTION
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(req.num_tokens - req.num_computed, budget)
            while not self._allocate(req, n):
                victim = self.running.pop()
                self._preempt(victim)
                out.preempted.append(victim.rid)
                if victim is req:
                    break
            if out.preempted and out.preempted[-1] == req.rid:
                break
            out.num_scheduled[req.rid] = n
            budget -= n
            i += 1
        while not out.preempted and self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            n = min(req.num_tokens - req.num_computed, budget)
            if not self._allocate(req, n):
                break
            self.running.append(self.waiting.popleft())
            out.num_scheduled[req.rid] = n
            budget -= n
        ### END SOLUTION
        for req in self.running:
            req.num_computed += out.num_scheduled.get(req.rid, 0)
        return out

    def update_after_step(self, out: SchedulerOutput) -> list[Request]:
        """The model ran: every scheduled request whose KV now covers all its tokens samples one token."""
        finished = []
        for req in list(self.running):
            if req.rid in out.num_scheduled and req.num_computed == req.num_tokens:
                req.num_output += 1
                if req.num_output == req.max_tokens:
                    self.running.remove(req)
                    self.pool.give_back(req.num_blocks)
                    req.num_blocks = 0
                    finished.append(req)
        return finished
