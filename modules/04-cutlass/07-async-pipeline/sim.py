"""cute-07 simulator (given, do not edit): mbarriers, a TMA engine, instrumented shared-memory stages and a
discrete-event scheduler that interleaves a producer and a consumer written as Python generators.

A process is a generator. It yields
    barrier.wait(parity)   block until barrier.try_wait(parity) is true (mbarrier.try_wait.parity in a loop)
    Sleep(t)               spend t time units (the consumer's MMA on a tile)
Everything else (arrive, expect_tx, issuing a TMA load) takes no time. Whenever several things are ready at the
same instant (a process, a TMA completion), a `policy` picks which runs first: fixed orders or a seeded random
choice, so one run explores one interleaving.

The stages are instrumented: a load into a stage the consumer has not finished and released, a read of a stage
whose tile has not fully landed, an arrival on an empty barrier for a stage that is not done, and a deadlock all
raise at once with a message that says what happened and when.

    python sim.py        # runs pipeline.py once and prints the timeline
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


class ProtocolViolation(AssertionError):
    """A stage was read, overwritten or released at the wrong time, or an mbarrier was misused."""


class Deadlock(AssertionError):
    """Nothing can run and nothing is in flight, but a process has not finished."""


# ------------------------------------------------------------------------------------------------------------
# mbarrier (PTX ISA 8.x, "Parallel Synchronization and Communication Instructions: mbarrier")


@dataclass(frozen=True)
class Wait:
    barrier: MBarrier
    parity: int


@dataclass(frozen=True)
class Sleep:
    duration: int


class MBarrier:
    """An mbarrier object: an expected arrival count, a pending arrival count, a transaction (tx) count and the
    number of completed phases.

    - arrive(): pending -= 1.  expect_tx(n): tx += n.  complete_tx(n): tx -= n (the TMA unit does this when
      n bytes have landed; tx may be negative for a while, as in PTX).
    - The current phase completes when pending == 0 and tx == 0: `phase` (the number of completed phases) grows
      by one and pending is reset to the expected count.
    - try_wait(parity) is true once the phase with that parity has completed, i.e. when the CURRENT phase has
      the other parity. A fresh barrier is in phase 0, so try_wait(1) is already true (the "preceding" phase,
      parity 1, counts as complete) and try_wait(0) waits for the first completion.
    """

    def __init__(self, arrive_count: int, name: str = "mbarrier"):
        if arrive_count < 1:
            raise ValueError("an mbarrier needs an arrival count >= 1")
        self.arrive_count, self.name = arrive_count, name
        self.pending, self.tx, self.phase = arrive_count, 0, 0
        self.clock: Callable[[], int] = lambda: 0

    def arrive(self) -> None:
        if self.pending == 0:
            raise ProtocolViolation(f"t={self.clock()}: {self.name}: more arrivals than its count "
                                    f"{self.arrive_count} in one phase")
        self.pending -= 1
        self._complete_if_done()

    def expect_tx(self, nbytes: int) -> None:
        self.tx += nbytes

    def arrive_and_expect_tx(self, nbytes: int) -> None:
        self.expect_tx(nbytes)
        self.arrive()

    def complete_tx(self, nbytes: int) -> None:
        self.tx -= nbytes
        self._complete_if_done()

    def _complete_if_done(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.arrive_count

    def try_wait(self, parity: int) -> bool:
        if parity not in (0, 1):
            raise ProtocolViolation(f"t={self.clock()}: {self.name}: try_wait.parity takes 0 or 1, got {parity!r}")
        return (self.phase & 1) != parity

    def wait(self, parity: int) -> Wait:
        """`yield barrier.wait(parity)` blocks until try_wait(parity) is true."""
        return Wait(self, parity)

    def __repr__(self) -> str:
        return f"{self.name}(phase={self.phase}, pending={self.pending}, tx={self.tx})"


# ------------------------------------------------------------------------------------------------------------
# shared-memory stages, the TMA engine and the MMA, instrumented


class Stages:
    """What each shared-memory stage holds, is being written with, or is being read for."""

    def __init__(self, n: int, clock: Callable[[], int]):
        self.n, self.clock = n, clock
        self.content: list[int | None] = [None] * n  # tile whose bytes have all landed
        self.writing: list[int | None] = [None] * n  # tile a TMA load is writing now
        self.reading: list[int | None] = [None] * n  # tile the MMA is reading now
        self.consumed = [False] * n  # the MMA finished reading `content`
        self.released = [True] * n  # ... and the consumer arrived on the stage's empty barrier since

    def check_stage(self, stage, who: str) -> None:
        if not isinstance(stage, int) or not 0 <= stage < self.n:
            raise ProtocolViolation(f"t={self.clock()}: {who}: stage {stage!r} is not in 0..{self.n - 1}")

    def fail(self, msg: str) -> None:
        raise ProtocolViolation(f"t={self.clock()}: {msg}")


class EmptyBarrier(MBarrier):
    """The empty barrier of one stage: an arrival must come after the MMA on that stage's tile has finished."""

    def __init__(self, stages: Stages, stage: int):
        super().__init__(1, f"empty[{stage}]")
        self.stages, self.stage = stages, stage

    def arrive(self) -> None:
        st, s = self.stages, self.stage
        if st.reading[s] is not None:
            st.fail(f"consumer released stage {s} while its MMA on tile {st.reading[s]} is still running")
        if not st.consumed[s] or st.released[s]:
            what = "a tile still loading" if st.writing[s] is not None else f"tile {st.content[s]}"
            st.fail(f"consumer released stage {s}, which holds {what} that it has not just finished "
                    f"(wrong stage index, or a second release)")
        st.released[s] = True
        super().arrive()


class Tma:
    """TMA loads: `load(tile, stage, barrier)` starts writing tile `tile` into `stage`; after the load latency the
    bytes have landed and the engine calls barrier.complete_tx(tile_bytes) (PipelineTmaAsync's full barrier)."""

    def __init__(self, sched: Scheduler, stages: Stages, tile_bytes: int, latency: Callable[[int], int]):
        self.sched, self.stages, self.tile_bytes, self.latency = sched, stages, tile_bytes, latency
        self.issued: list[tuple[int, int, int]] = []  # (time, tile, stage)

    def load(self, tile: int, stage: int, barrier: MBarrier) -> None:
        st = self.stages
        st.check_stage(stage, "TMA load")
        if not isinstance(barrier, MBarrier):
            st.fail(f"TMA load of tile {tile}: {barrier!r} is not an mbarrier")
        if st.writing[stage] is not None:
            st.fail(f"TMA load of tile {tile} into stage {stage}: tile {st.writing[stage]} is still being written there")
        if st.reading[stage] is not None:
            st.fail(f"TMA load of tile {tile} overwrites stage {stage} while the MMA reads tile {st.reading[stage]}")
        if not st.released[stage]:
            st.fail(f"TMA load of tile {tile} overwrites stage {stage} before the consumer released tile "
                    f"{st.content[stage]}")
        st.writing[stage], st.content[stage] = tile, None
        st.consumed[stage] = st.released[stage] = False
        self.issued.append((self.sched.now, tile, stage))

        def land():
            st.content[stage], st.writing[stage] = tile, None
            barrier.complete_tx(self.tile_bytes)

        self.sched.at(self.sched.now + self.latency(tile), f"TMA tile {tile} -> stage {stage}", land)


class Mma:
    """`yield from mma(tile, stage)`: read `stage`, which must hold tile `tile` completely, for the compute time."""

    def __init__(self, stages: Stages, compute: Callable[[int], int], clock: Callable[[], int]):
        self.stages, self.compute, self.clock = stages, compute, clock
        self.order: list[int] = []  # tiles in the order their MMA finished
        self.spans: list[tuple[int, int, int, int]] = []  # (tile, stage, start, end)

    def __call__(self, tile: int, stage: int):
        st = self.stages
        st.check_stage(stage, "MMA")
        if st.writing[stage] is not None or st.content[stage] != tile:
            now = (f"tile {st.writing[stage]} still loading" if st.writing[stage] is not None
                   else f"tile {st.content[stage]}")
            st.fail(f"MMA reads stage {stage} for tile {tile}, but the stage holds {now}")
        if st.reading[stage] is not None:
            st.fail(f"MMA on stage {stage} while another MMA reads it")
        st.reading[stage], start = tile, self.clock()
        yield Sleep(self.compute(tile))
        st.reading[stage], st.consumed[stage] = None, True
        self.order.append(tile)
        self.spans.append((tile, stage, start, self.clock()))


# ------------------------------------------------------------------------------------------------------------
# the scheduler


@dataclass
class Process:
    name: str
    gen: object
    waiting: Wait | None = None
    wake_at: int | None = None
    done: bool = False


@dataclass(order=True)
class Event:
    time: int
    seq: int
    name: str = field(compare=False)
    action: Callable[[], None] = field(compare=False)


POLICIES = ("fifo", "producer-first", "consumer-first", "producer-last", "random")


class Scheduler:
    """Discrete-event loop. At each instant every ready item (a process whose wait is satisfied or whose sleep
    ended, a due TMA completion) is a candidate; `policy` picks the next one: "fifo" (TMA completions, then the
    processes in spawn order), "producer-first", "consumer-first", "producer-last", or "random" (seeded)."""

    def __init__(self, policy: str = "fifo", seed: int = 0, max_steps: int = 200_000):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}")
        self.policy, self.rng, self.max_steps = policy, random.Random(seed), max_steps
        self.now, self.procs, self.events, self._seq = 0, [], [], 0

    def spawn(self, name: str, gen) -> None:
        if not hasattr(gen, "send"):
            raise ProtocolViolation(f"{name} is not a generator (did the function `yield`?)")
        self.procs.append(Process(name, gen))

    def at(self, time: int, name: str, action: Callable[[], None]) -> None:
        self._seq += 1
        self.events.append(Event(time, self._seq, name, action))

    def _ready(self) -> list:
        ready: list = [e for e in sorted(self.events) if e.time <= self.now]
        for p in self.procs:
            if p.done:
                continue
            if p.wake_at is not None:
                if p.wake_at <= self.now:
                    ready.append(p)
            elif p.waiting is None or p.waiting.barrier.try_wait(p.waiting.parity):
                ready.append(p)
        return ready

    def _pick(self, ready: list):
        events = [r for r in ready if isinstance(r, Event)]
        producer = [r for r in ready if isinstance(r, Process) and r is self.procs[0]]
        others = [r for r in ready if isinstance(r, Process) and r is not self.procs[0]]
        if self.policy == "random":
            return self.rng.choice(ready)
        order = {"fifo": events + producer + others,  # completions first, then the processes in spawn order
                 "producer-first": producer + others + events,
                 "consumer-first": others + producer + events,
                 "producer-last": events + others + producer}[self.policy]
        return order[0]

    def _step(self, p: Process) -> None:
        p.waiting = p.wake_at = None
        try:
            cmd = p.gen.send(None)
        except StopIteration:
            p.done = True
            return
        if isinstance(cmd, Wait):
            if not isinstance(cmd.barrier, MBarrier):
                raise ProtocolViolation(f"t={self.now}: {p.name} waits on {cmd.barrier!r}, not an mbarrier")
            cmd.barrier.try_wait(cmd.parity)  # validates the parity now, with the time in the message
            p.waiting = cmd
        elif isinstance(cmd, Sleep):
            p.wake_at = self.now + cmd.duration
        else:
            raise ProtocolViolation(f"t={self.now}: {p.name} yielded {cmd!r}; yield barrier.wait(parity) "
                                    f"or use `yield from` on a blocking call")

    def run(self) -> int:
        """Run to completion; returns the time at which the last process finished."""
        for _ in range(self.max_steps):
            if all(p.done for p in self.procs):
                return self.now
            ready = self._ready()
            if not ready:
                times = [e.time for e in self.events] + [p.wake_at for p in self.procs
                                                        if not p.done and p.wake_at is not None]
                if not times:
                    blocked = ", ".join(f"{p.name} waits {p.waiting.barrier!r} for parity {p.waiting.parity}"
                                        for p in self.procs if not p.done and p.waiting)
                    raise Deadlock(f"t={self.now}: deadlock: {blocked}")
                self.now = min(times)
                continue
            item = self._pick(ready)
            if isinstance(item, Event):
                self.events.remove(item)
                item.action()
            else:
                self._step(item)
        raise Deadlock(f"t={self.now}: no progress after {self.max_steps} steps (a process spins without waiting)")


# ------------------------------------------------------------------------------------------------------------
# one run of the learner's pipeline


@dataclass
class Run:
    makespan: int
    order: list[int]  # tiles in the order the consumer finished them
    loads: list[tuple[int, int, int]]  # (time, tile, stage) of every TMA load
    spans: list[tuple[int, int, int, int]]  # (tile, stage, start, end) of every MMA
    full: list[MBarrier]
    empty: list[MBarrier]


def _as_fn(x) -> Callable[[int], int]:
    return x if callable(x) else (lambda _tile: x)


def run_pipeline(pl, stages: int, k_tiles: int, load_latency, compute_time, *, policy: str = "fifo",
                 seed: int = 0, tile_bytes: int = 32768) -> Run:
    """Run `pl` (the pipeline.py module) with `stages` stages over `k_tiles` tiles. load_latency and compute_time
    are time units per tile: an int, or a function tile -> int."""
    sched = Scheduler(policy, seed)
    clock = lambda: sched.now  # noqa: E731
    st = Stages(stages, clock)
    full = [MBarrier(1, f"full[{s}]") for s in range(stages)]  # one producer arrival + the tile's bytes
    empty = [EmptyBarrier(st, s) for s in range(stages)]  # one consumer arrival
    for b in full + empty:
        b.clock = clock
    tma = Tma(sched, st, tile_bytes, _as_fn(load_latency))
    mma = Mma(st, _as_fn(compute_time), clock)
    pipe = pl.PipelineTmaAsync(full, empty, tile_bytes)
    sched.spawn("producer", pl.producer_mainloop(pipe, tma, k_tiles))
    sched.spawn("consumer", pl.consumer_mainloop(pipe, mma, k_tiles))
    end = sched.run()
    if sched.events:
        raise ProtocolViolation(f"t={end}: loads still in flight after both loops ended: "
                                f"{[e.name for e in sched.events]}")
    return Run(end, mma.order, tma.issued, mma.spans, full, empty)


if __name__ == "__main__":
    import importlib.util
    import pathlib

    spec = importlib.util.spec_from_file_location("pipeline", pathlib.Path(__file__).with_name("pipeline.py"))
    pl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pl)
    r = run_pipeline(pl, stages=3, k_tiles=8, load_latency=5, compute_time=2)
    for t, tile, s in r.loads:
        print(f"t={t:3d}  TMA  tile {tile} -> stage {s}")
    for tile, s, a, b in r.spans:
        print(f"t={a:3d}..{b:3d}  MMA tile {tile} on stage {s}")
    print("makespan", r.makespan)
