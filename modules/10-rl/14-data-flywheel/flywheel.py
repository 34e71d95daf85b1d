"""rl-14: a sim/real data flywheel — prioritized mixed replay fed by a "robot" Ray actor that may die.

Four pieces, each small:
- `SegmentTree` / `SumTree` / `MinTree`: array-backed binary trees over `capacity` leaves (padded with the
  operation's neutral element up to `base`, the smallest power of two >= capacity); O(log n) update and
  prefix-sum search.
- `PrioritizedReplay`: proportional PER (Schaul et al. 2016): p_i = (|delta_i| + eps) ** alpha, P(i) = p_i / sum p,
  w_i = (N P(i)) ** -beta / max_j w_j over the N stored items.
- `MixedReplay`: two pools (sim, real); every batch holds floor(real_fraction * B + 1/2) real transitions.
- `Robot` (a Ray actor) and `Ingest` (the learner side): per-robot sequence numbers, a write-ahead outbox on the
  robot's disk, commit in order with dedupe, ack = next expected seq, resend from the ack after a restart.
"""

from __future__ import annotations

import json
import math
import operator
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


# ----------------------------------------------------------------------------------------------- trees
class SegmentTree:
    """Leaves at nodes[base + i] (i < capacity); node j > 0 holds op(nodes[2j], nodes[2j+1]); root at nodes[1].

    Leaves capacity..base-1 and nodes[0] hold `neutral` and never change.
    """

    def __init__(self, capacity: int, op: Callable[[float, float], float], neutral: float) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        base = 1
        while base < capacity:
            base *= 2
        self.capacity, self.base, self.op, self.neutral = capacity, base, op, float(neutral)
        self.nodes = np.full(2 * base, self.neutral, dtype=np.float64)

    def get(self, i: int) -> float:
        if not 0 <= i < self.capacity:
            raise IndexError(f"leaf {i} outside [0, {self.capacity})")
        return float(self.nodes[self.base + i])

    def update(self, i: int, value: float) -> None:
        """Set leaf i to value and recompute every ancestor from its two children (O(log n) node accesses)."""
        if not 0 <= i < self.capacity:
            raise IndexError(f"leaf {i} outside [0, {self.capacity})")
        ### HINT: walk from the leaf to the root; each parent is recomputed from BOTH children, never patched by a delta.
        ### BEGIN SOLUTION
        j = self.base + i
        self.nodes[j] = float(value)
        j //= 2
        while j >= 1:
            self.nodes[j] = self.op(self.nodes[2 * j], self.nodes[2 * j + 1])
            j //= 2
        ### END SOLUTION

    def reduce(self) -> float:
        """op over all leaves (the root)."""
        return float(self.nodes[1])


class SumTree(SegmentTree):
    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, operator.add, 0.0)

    def update(self, i: int, value: float) -> None:
        if not (math.isfinite(value) and value >= 0.0):
            raise ValueError(f"a priority must be finite and >= 0, got {value}")
        super().update(i, value)

    def total(self) -> float:
        return self.reduce()

    def find(self, u: float) -> int:
        """The leaf i with S(i-1) <= u < S(i), S(i) = sum of leaves 0..i; u must lie in [0, total())."""
        ### HINT: at each node compare u with the LEFT child's sum; the interval of a leaf is closed on the left and open on the right.
        ### BEGIN SOLUTION
        if not 0.0 <= u < self.nodes[1]:
            raise ValueError(f"u = {u} outside [0, total = {self.nodes[1]})")
        j = 1
        while j < self.base:
            left = self.nodes[2 * j]
            if u < left:
                j = 2 * j
            else:
                u -= left
                j = 2 * j + 1
        return j - self.base
        ### END SOLUTION


class MinTree(SegmentTree):
    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, min, math.inf)


# ------------------------------------------------------------------------------------ prioritized replay
class PrioritizedReplay:
    """Proportional prioritized replay over a ring buffer of `capacity` items (the oldest is overwritten)."""

    def __init__(self, capacity: int, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6) -> None:
        if alpha < 0 or beta < 0 or not eps > 0:
            raise ValueError(f"need alpha >= 0, beta >= 0, eps > 0; got {alpha}, {beta}, {eps}")
        self.capacity, self.alpha, self.beta, self.eps = capacity, alpha, beta, eps
        self.sums, self.mins = SumTree(capacity), MinTree(capacity)
        self.items: list[Any] = [None] * capacity
        self.size = 0          # items stored (N)
        self.next_slot = 0     # where the next add goes
        self.max_raw = 1.0     # max(1, every |delta| passed to update_priorities so far)

    def __len__(self) -> int:
        return self.size

    def _set(self, i: int, raw: float) -> None:
        """Leaf i of both trees := (|raw| + eps) ** alpha."""
        ### BEGIN SOLUTION
        p = (abs(raw) + self.eps) ** self.alpha
        self.sums.update(i, p)
        self.mins.update(i, p)
        ### END SOLUTION

    def add(self, item: Any) -> int:
        """Store item at next_slot with raw priority max_raw; return its slot."""
        ### BEGIN SOLUTION
        slot = self.next_slot
        self.items[slot] = item
        self._set(slot, self.max_raw)
        self.next_slot = (slot + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)
        return slot
        ### END SOLUTION

    def weights(self, indices: np.ndarray) -> np.ndarray:
        """Importance weights (N P(i)) ** -beta / max_j (N P(j)) ** -beta, j over the N stored items; float64."""
        ### BEGIN SOLUTION
        idx = np.asarray(indices, dtype=np.int64)
        total, n = self.sums.total(), self.size
        p = np.array([self.sums.get(int(i)) for i in idx], dtype=np.float64)
        w = (n * p / total) ** -self.beta
        w_max = (n * self.mins.reduce() / total) ** -self.beta
        return w / w_max
        ### END SOLUTION

    def sample(self, batch_size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(indices int64 [B], weights float64 [B]); u = rng.random(B) * total, one call, index j = find(u[j])."""
        if batch_size == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay")
        ### BEGIN SOLUTION
        u = rng.random(batch_size) * self.sums.total()
        idx = np.array([self.sums.find(float(x)) for x in u], dtype=np.int64)
        return idx, self.weights(idx)
        ### END SOLUTION

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """After a learn step: p_i = (|delta_i| + eps) ** alpha for the given (stored) slots; a repeated slot keeps its last delta."""
        idx = np.asarray(indices, dtype=np.int64)
        td = np.asarray(td_errors, dtype=np.float64)
        if idx.shape != td.shape or not np.all(np.isfinite(td)):
            raise ValueError("indices and td_errors must have the same shape and finite values")
        if np.any((idx < 0) | (idx >= self.size)):
            raise IndexError("update_priorities on a slot that holds no item")
        ### BEGIN SOLUTION
        for i, d in zip(idx, td):
            self._set(int(i), float(d))
        if td.size:
            self.max_raw = max(self.max_raw, float(np.abs(td).max()))
        ### END SOLUTION


# ---------------------------------------------------------------------------------------- mixed replay
@dataclass
class MixedBatch:
    pools: np.ndarray    # int8 [B]: 1 = real, 0 = sim; the real rows come first
    indices: np.ndarray  # int64 [B]: slot in that row's pool
    weights: np.ndarray  # float64 [B]: the IS weight within that row's pool
    items: list[Any]


REAL, SIM = 1, 0


class MixedReplay:
    def __init__(self, sim: PrioritizedReplay, real: PrioritizedReplay, real_fraction: float) -> None:
        if not 0.0 <= real_fraction <= 1.0:
            raise ValueError(f"real_fraction must lie in [0, 1], got {real_fraction}")
        self.sim, self.real, self.real_fraction = sim, real, real_fraction

    def split(self, batch_size: int) -> tuple[int, int]:
        """(n_real, n_sim): n_real = floor(real_fraction * B + 1/2), half up."""
        ### BEGIN SOLUTION
        n_real = math.floor(self.real_fraction * batch_size + 0.5)
        return n_real, batch_size - n_real
        ### END SOLUTION

    def sample(self, batch_size: int, rng: np.random.Generator) -> MixedBatch:
        """The real pool is sampled first (n_real draws from rng), then the sim pool (n_sim draws)."""
        ### BEGIN SOLUTION
        n_real, n_sim = self.split(batch_size)
        ri, rw = self.real.sample(n_real, rng)
        si, sw = self.sim.sample(n_sim, rng)
        pools = np.concatenate([np.full(n_real, REAL, np.int8), np.full(n_sim, SIM, np.int8)])
        items = [self.real.items[i] for i in ri] + [self.sim.items[i] for i in si]
        return MixedBatch(pools, np.concatenate([ri, si]), np.concatenate([rw, sw]), items)
        ### END SOLUTION

    def update_priorities(self, batch: MixedBatch, td_errors: np.ndarray) -> None:
        """Route each row's |delta| to the pool it came from."""
        td = np.asarray(td_errors, dtype=np.float64)
        ### BEGIN SOLUTION
        real = batch.pools == REAL
        self.real.update_priorities(batch.indices[real], td[real])
        self.sim.update_priorities(batch.indices[~real], td[~real])
        ### END SOLUTION


# ------------------------------------------------------------------------------------- the robot (Ray)
def read_outbox(path: Path) -> list[dict]:
    """The transitions in a robot's outbox (one JSON object per line); a torn last line is cut off the file."""
    if not path.exists():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end != len(data):                       # the process died inside a write: drop the partial line
        with open(path, "r+b") as f:
            f.truncate(end)
    return [json.loads(line) for line in data[:end].splitlines()]


def append_outbox(path: Path, transition: dict) -> None:
    """Append one transition and make it durable (one write, flush, fsync) before returning."""
    with open(path, "ab") as f:
        f.write((json.dumps(transition) + "\n").encode())
        f.flush()
        os.fsync(f.fileno())


class Robot:
    """A real robot's data logger: every transition is written to the robot's own disk (the outbox) before it is
    sent. The process can die at any moment (ray.kill); a new incarnation on the same outbox continues it."""

    def __init__(self, robot_id: int, outbox: str, episode_len: int = 6) -> None:
        self.robot_id, self.outbox, self.episode_len = robot_id, Path(outbox), episode_len
        done = read_outbox(self.outbox)
        ### HINT: a new incarnation continues the sequence numbers of what is on disk, and (the robot was reset) starts a new episode at t = 0.
        ### BEGIN SOLUTION
        self.next_seq = done[-1]["seq"] + 1 if done else 0
        self.episode = done[-1]["episode"] + 1 if done else 0
        ### END SOLUTION
        self.t = 0

    def _transition(self) -> dict:
        """The next transition of the current episode (deterministic in robot, episode, t)."""
        rng = np.random.default_rng([self.robot_id, self.episode, self.t])
        obs = rng.normal(size=3).round(6).tolist()
        tr = {"robot": self.robot_id, "seq": self.next_seq, "episode": self.episode, "t": self.t,
              "obs": obs, "action": int(rng.integers(4)), "reward": float(round(rng.normal(), 6)),
              "done": self.t == self.episode_len - 1}
        self.t += 1
        if tr["done"]:
            self.episode, self.t = self.episode + 1, 0
        return tr

    def produce(self, n: int, delay_s: float = 0.0) -> list[dict]:
        """Run n more steps (delay_s seconds each); each transition is durable in the outbox before the next step."""
        out = []
        for _ in range(n):
            tr = self._transition()
            append_outbox(self.outbox, tr)
            self.next_seq += 1
            out.append(tr)
            if delay_s:
                time.sleep(delay_s)
        return out

    def unacked(self, ack: int) -> list[dict]:
        """Every transition in the outbox with seq >= ack, in seq order (what the learner has not committed)."""
        ### BEGIN SOLUTION
        return [tr for tr in read_outbox(self.outbox) if tr["seq"] >= ack]
        ### END SOLUTION

    def pid(self) -> int:
        return os.getpid()


# ---------------------------------------------------------------------------------- the learner side
class Ingest:
    """Commits robot transitions into the real pool exactly once, in seq order per robot."""

    def __init__(self, real: PrioritizedReplay) -> None:
        self.real = real
        self.next_seq: dict[int, int] = {}      # per robot: the ack = next expected seq
        self.committed: list[tuple[int, int]] = []
        self.duplicates = 0

    def ack(self, robot_id: int) -> int:
        return self.next_seq.get(robot_id, 0)

    def receive(self, robot_id: int, chunk: Sequence[dict]) -> int:
        """Commit in order; seq < ack: a duplicate, skipped and counted; seq > ack: a gap, ValueError (what came
        before it in the chunk stays committed). Returns the ack."""
        ### BEGIN SOLUTION
        for tr in chunk:
            if tr["robot"] != robot_id:
                raise ValueError(f"transition of robot {tr['robot']} in a chunk from robot {robot_id}")
            nxt = self.ack(robot_id)
            if tr["seq"] < nxt:
                self.duplicates += 1
                continue
            if tr["seq"] > nxt:
                raise ValueError(f"robot {robot_id}: got seq {tr['seq']}, expected {nxt}: a gap")
            self.real.add(tr)
            self.committed.append((robot_id, tr["seq"]))
            self.next_seq[robot_id] = nxt + 1
        return self.ack(robot_id)
        ### END SOLUTION


def pump(robot: Any, ingest: Ingest, robot_id: int, n: int) -> int:
    """One round trip: the robot produces n transitions, the learner commits them; returns the ack."""
    import ray

    return ingest.receive(robot_id, ray.get(robot.produce.remote(n), timeout=60))


def recover(robot: Any, ingest: Ingest, robot_id: int) -> int:
    """After a (re)start: ask the robot for everything after the learner's ack and commit it; returns how many it resent."""
    import ray

    chunk = ray.get(robot.unacked.remote(ingest.ack(robot_id)), timeout=60)
    ingest.receive(robot_id, chunk)
    return len(chunk)
