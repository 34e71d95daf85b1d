"""infer-11 (a): action-chunk streaming with temporal ensembling (ACT, Zhao et al., RSS 2023).

Every inference returns a chunk of k future actions: chunk[i] is the action for tick start + i, where
`start` is the tick whose observation the policy saw. Inference takes `latency` ticks, so a chunk arrives
`latency` ticks after its start and its first `latency` actions are already in the past. At every control
tick the robot needs an action NOW: the controller never waits for the engine.

Temporal ensembling: the action for tick t is the weighted average of every chunk that covers t,
ordered oldest first (smallest start), with weights w_i = exp(-m * i) (w_0 = 1 for the oldest).
"""

from collections import deque
from collections.abc import Callable

import numpy as np


class NoActionError(RuntimeError):
    """No chunk covers this tick: the robot would have to stop and wait."""


class EngineBusy(RuntimeError):
    """A query was submitted while another one is in flight (or its result was not collected yet)."""


class SimulatedEngine:
    """One inference at a time. submit(t, obs) starts a query on the observation of tick t; its chunk
    (start = t) can be collected with poll(t') from t' = t + latency on. Until it is collected the engine
    is busy (its single output buffer is full). Before the episode a warm-up query on the first
    observation was submitted at tick -latency, so its chunk (start = -latency) arrives at tick 0."""

    def __init__(self, policy: Callable[[int, np.ndarray], np.ndarray], latency: int, first_obs: np.ndarray):
        assert latency >= 1, "an inference takes at least one control tick"
        self.policy, self.latency = policy, latency
        self.submitted: list[int] = []  # start ticks, in order (tests read it)
        self._in_flight: tuple[int, np.ndarray] | None = None
        self.submit(-latency, first_obs)

    def busy(self) -> bool:
        return self._in_flight is not None

    def submit(self, t: int, obs: np.ndarray) -> None:
        if self.busy():
            raise EngineBusy(f"submit at tick {t} while the query of tick {self._in_flight[0]} is not collected")
        self._in_flight = (t, np.asarray(self.policy(t, obs), dtype=np.float64))
        self.submitted.append(t)

    def poll(self, t: int) -> list[tuple[int, np.ndarray]]:
        """The finished chunk as [(start, chunk)] if one is ready at tick t (and frees the engine), else []."""
        if self._in_flight is None or self._in_flight[0] + self.latency > t:
            return []
        done, self._in_flight = self._in_flight, None
        return [done]


class TemporalEnsembler:
    """Holds the chunks that may still cover a future tick; ticks passed to action() never decrease."""

    def __init__(self, chunk_size: int, m: float):
        self.k, self.m = chunk_size, m
        self.chunks: deque[tuple[int, np.ndarray]] = deque()  # (start, chunk [k, action_dim]), oldest first

    def add_chunk(self, start: int, chunk: np.ndarray) -> None:
        assert len(chunk) == self.k and (not self.chunks or self.chunks[-1][0] < start)
        self.chunks.append((start, np.asarray(chunk, dtype=np.float64)))

    def action(self, t: int) -> np.ndarray:
        """Weighted average over the chunks covering t (oldest weight 1, then exp(-m), exp(-2m), ...);
        NoActionError if none covers t. Chunks that ended before t are dropped."""
        ### HINT: a chunk with start s covers ticks s .. s + k - 1; drop the ones that can never cover t again; weights follow age order, oldest first.
        ### BEGIN SOLUTION
        while self.chunks and self.chunks[0][0] + self.k <= t:
            self.chunks.popleft()
        live = [chunk[t - start] for start, chunk in self.chunks if start <= t]
        if not live:
            raise NoActionError(f"no chunk covers tick {t}")
        w = np.exp(-self.m * np.arange(len(live)))
        return (w[:, None] * np.stack(live)).sum(axis=0) / w.sum()
        ### END SOLUTION


class StreamingController:
    """Runs at the control rate: tick(t, obs) returns the action for tick t without ever waiting."""

    def __init__(self, engine: SimulatedEngine, chunk_size: int, m: float):
        self.engine = engine
        self.ensembler = TemporalEnsembler(chunk_size, m)

    def tick(self, t: int, obs: np.ndarray) -> np.ndarray:
        ### HINT: collect what the engine finished, keep the engine busy with the freshest observation, answer from the ensemble.
        ### BEGIN SOLUTION
        for start, chunk in self.engine.poll(t):
            self.ensembler.add_chunk(start, chunk)
        if not self.engine.busy():
            self.engine.submit(t, obs)
        return self.ensembler.action(t)
        ### END SOLUTION
