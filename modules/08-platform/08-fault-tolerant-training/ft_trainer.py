"""platform-08: data-parallel training on Ray actors that survives a worker killed for real.

The workers (given) hold a model replica, its Adam state and their own data stream; the driver (you)
averages their gradients each step, makes a checkpoint every `ckpt_every` steps, and — when a worker
process dies — throws the whole gang away, starts a new one and resumes from the last checkpoint that
every rank finished writing. The final weights must equal those of a run in which nothing failed.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

COMMITTED = "COMMITTED"  # marker file: present only when every rank's shard of that step is durable


@dataclass(frozen=True)
class Config:
    dim: int = 7            # features of the linear model
    batch: int = 5          # samples per rank per step
    lr: float = 0.05        # Adam
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    seed: int = 2026
    journal_dir: str = ""   # each worker appends "incarnation step" per applied step to rank<r>.log
    fault_dir: str = ""     # a fired fault leaves a file here so that it fires once
    # (kind, rank, step): "kill-grad" SIGKILLs the worker while it computes that step's gradient,
    # "kill-save" SIGKILLs it halfway through writing that step's checkpoint, "raise" makes the
    # gradient raise FloatingPointError (a bug in the training code, not a machine failure)
    faults: tuple[tuple[str, int, int], ...] = field(default_factory=tuple)


def step_dir(ckpt_dir: Path, step: int) -> Path:
    return Path(ckpt_dir) / f"step_{step:06d}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_marker(path: Path) -> None:
    """Create `path` durably: write a temp file, fsync it, rename it into place, fsync the folder."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(b"ok\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def average(grads: Sequence[np.ndarray]) -> np.ndarray:
    """Mean of the ranks' gradients, summed in rank order (the same bits on every run)."""
    total = np.zeros_like(grads[0])
    for g in grads:
        total = total + g
    return total / len(grads)


class Worker:
    """One data-parallel rank (run as a Ray actor). Given: you drive it, you do not edit it."""

    def __init__(self, rank: int, world_size: int, cfg: Config, incarnation: int) -> None:
        self.rank, self.world_size, self.cfg, self.incarnation = rank, world_size, cfg, incarnation
        self._start_fresh()

    def _start_fresh(self) -> None:
        init = np.random.default_rng(self.cfg.seed)  # the same initial weights on every rank
        self.w_true = init.standard_normal(self.cfg.dim)
        self.params = init.standard_normal(self.cfg.dim) * 0.1
        self.m = np.zeros(self.cfg.dim)
        self.v = np.zeros(self.cfg.dim)
        self.data = np.random.default_rng([self.cfg.seed, self.rank])  # this rank's data stream
        self.step = 0  # steps applied so far

    def pid(self) -> int:
        return os.getpid()

    def restore(self, ckpt_dir: str | None, step: int) -> int:
        """Load this rank's shard of checkpoint `step` (None: back to the initial state, step 0); returns
        the step. Either way everything the worker held before is replaced, so a survivor can be reused."""
        if ckpt_dir is None:
            if step != 0:
                raise ValueError(f"no checkpoint given but asked to resume at step {step}")
            self._start_fresh()
            return 0
        with np.load(step_dir(Path(ckpt_dir), step) / f"rank{self.rank}.npz") as z:
            self.params, self.m, self.v = z["params"], z["m"], z["v"]
            self.step = int(z["step"])
            self.data.bit_generator.state = _unpack_state(z["data_state"])
        if self.step != step:
            raise ValueError(f"rank {self.rank}: checkpoint of step {step} holds step {self.step}")
        return self.step

    def grad(self, step: int) -> np.ndarray:
        if step != self.step:
            raise ValueError(f"rank {self.rank} asked for step {step} but has applied {self.step} steps")
        self._fault("kill-grad", step)
        if self._fault("raise", step):
            raise FloatingPointError(f"rank {self.rank}: loss is NaN at step {step}")
        x = self.data.standard_normal((self.cfg.batch, self.cfg.dim))
        y = x @ self.w_true + 0.1 * self.data.standard_normal(self.cfg.batch)
        return 2.0 * x.T @ (x @ self.params - y) / self.cfg.batch  # d/dw of the mean squared error

    def apply(self, g: np.ndarray, step: int) -> None:
        if step != self.step:
            raise ValueError(f"rank {self.rank} asked to apply step {step} but has applied {self.step}")
        b1, b2 = self.cfg.betas
        t = step + 1
        self.m = b1 * self.m + (1 - b1) * g
        self.v = b2 * self.v + (1 - b2) * g * g
        m_hat, v_hat = self.m / (1 - b1**t), self.v / (1 - b2**t)
        self.params = self.params - self.cfg.lr * m_hat / (np.sqrt(v_hat) + self.cfg.eps)
        self.step += 1
        if self.cfg.journal_dir:
            with open(Path(self.cfg.journal_dir) / f"rank{self.rank}.log", "a") as f:
                f.write(f"{self.incarnation} {step}\n")

    def save(self, ckpt_dir: str, step: int) -> None:
        """Write this rank's shard of checkpoint `step` atomically (temp file, fsync, rename)."""
        if step != self.step:
            raise ValueError(f"rank {self.rank} asked to save step {step} but has applied {self.step}")
        d = step_dir(Path(ckpt_dir), step)
        d.mkdir(parents=True, exist_ok=True)
        final, tmp = d / f"rank{self.rank}.npz", d / f"rank{self.rank}.npz.tmp"
        with open(tmp, "wb") as f:
            np.savez(f, params=self.params, m=self.m, v=self.v, step=self.step,
                     data_state=_pack_state(self.data.bit_generator.state))
            if self._fault_pending("kill-save", step):
                f.flush()
                f.truncate(f.tell() // 2)  # half a file on disk, then the process dies
                self._fault("kill-save", step)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        _fsync_dir(d)

    def get_params(self) -> np.ndarray:
        return self.params

    # -- fault injection: each (kind, rank, step) fires once, across incarnations ----------------
    def _fault_pending(self, kind: str, step: int) -> bool:
        if (kind, self.rank, step) not in self.cfg.faults:
            return False
        return not (Path(self.cfg.fault_dir) / f"{kind}-{self.rank}-{step}").exists()

    def _fault(self, kind: str, step: int) -> bool:
        if not self._fault_pending(kind, step):
            return False
        (Path(self.cfg.fault_dir) / f"{kind}-{self.rank}-{step}").touch()
        if kind.startswith("kill"):
            os.kill(os.getpid(), signal.SIGKILL)  # a real crash: no exception, no cleanup
        return True


def _pack_state(state: dict[str, Any]) -> np.ndarray:
    s = state["state"]
    # 128-bit integers: stored as text so that np.load needs no pickle
    return np.array([str(s["state"]), str(s["inc"]), str(state["has_uint32"]), str(state["uinteger"])])


def _unpack_state(a: np.ndarray) -> dict[str, Any]:
    s, inc, has, u = (int(x) for x in a)
    return {"bit_generator": "PCG64", "state": {"state": s, "inc": inc}, "has_uint32": has, "uinteger": u}


@dataclass
class TrainResult:
    params: np.ndarray                    # final weights (rank 0's; all ranks hold the same)
    restarts: int                         # how many times the gang was started again
    resumed_from: list[int]               # the step each incarnation of the gang started at


# ------------------------------------------------------------------------------------------------
# Your part


def latest_committed(ckpt_dir: Path) -> int | None:
    """The newest step whose checkpoint every rank finished (its COMMITTED marker exists), or None."""
    ### HINT: a step folder can exist with some shards written and no marker: a crash in the middle of saving
    ### BEGIN SOLUTION
    steps = [int(p.parent.name.removeprefix("step_")) for p in Path(ckpt_dir).glob(f"step_*/{COMMITTED}")]
    return max(steps, default=None)
    ### END SOLUTION


def train(spawn: Callable[[int], Any], world_size: int, ckpt_dir: Path, total_steps: int,
          ckpt_every: int, max_restarts: int) -> TrainResult:
    """Train for `total_steps` steps on `world_size` workers made by `spawn(rank)` (a Ray actor of `Worker`).

    Each step: every worker's `grad(step)`, their `average`, every worker's `apply(avg, step)`. After step
    s is applied, if s % ckpt_every == 0 or s == total_steps: every worker `save`s checkpoint s, then the
    checkpoint is committed (`write_marker`). When a worker process dies (Ray raises `RayActorError`), the
    gang is restarted — at most `max_restarts` times, then the error propagates — and every rank resumes
    from `latest_committed` (new actors for all ranks, or a new one for the dead rank with the survivors set
    back by `restore` as well). Any other error is a bug and propagates at once. No actor outlives the call.
    """
    import ray
    from ray.exceptions import RayActorError

    ### HINT: after a crash the survivors are ahead of the checkpoint; which workers can be trusted to resume?
    ### BEGIN SOLUTION
    restarts, resumed_from = 0, []
    while True:
        workers = [spawn(rank) for rank in range(world_size)]
        try:
            start = latest_committed(ckpt_dir)
            source = None if start is None else str(ckpt_dir)
            step = start or 0
            resumed_from.append(step)
            ray.get([w.restore.remote(source, step) for w in workers])
            while step < total_steps:
                avg = average(ray.get([w.grad.remote(step) for w in workers]))
                ray.get([w.apply.remote(avg, step) for w in workers])
                step += 1
                if step % ckpt_every == 0 or step == total_steps:
                    ray.get([w.save.remote(str(ckpt_dir), step) for w in workers])
                    write_marker(step_dir(ckpt_dir, step) / COMMITTED)
            return TrainResult(ray.get(workers[0].get_params.remote()), restarts, resumed_from)
        except RayActorError:
            restarts += 1
            if restarts > max_restarts:
                raise
        finally:
            for w in workers:
                ray.kill(w, no_restart=True)
    ### END SOLUTION
