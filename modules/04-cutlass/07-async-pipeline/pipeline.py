"""cute-07: a multi-stage TMA pipeline with mbarrier phase bits, after CUTLASS v4.2.0
`include/cutlass/pipeline/sm90_pipeline.hpp` (PipelineState, make_producer_start_state, PipelineTmaAsync).

S shared-memory stages form a ring. Stage s has two mbarriers (sim.py's MBarrier):
  full[s]   expected arrivals 1: the producer's arrive_and_expect_tx(bytes) + the TMA's complete_tx(bytes)
  empty[s]  expected arrivals 1: the consumer's arrive once its MMA on the stage has finished
Both start in phase 0. `barrier.try_wait(parity)` is true once the phase with that parity has completed; a
blocking wait is `yield barrier.wait(parity)`, and a blocking helper is called with `yield from`.
"""

from __future__ import annotations


class PipelineState:
    """Where a loop is in the ring: `index` (stage), `phase` (parity bit to wait for), `count` (iterations)."""

    def __init__(self, stages: int, index: int = 0, phase: int = 0, count: int = 0):
        self.stages, self.index, self.phase, self.count = stages, index, phase, count

    def advance(self) -> None:
        """CUTLASS's operator++: the next stage; the parity flips each time the index wraps to 0."""
        ### HINT: index stays in 0..stages-1 and count grows by one per call; phase changes only on the wrap
        ### BEGIN SOLUTION
        self.index += 1
        self.count += 1
        if self.index == self.stages:
            self.index = 0
            self.phase ^= 1  # the next lap waits for the next completion of the same barriers
        ### END SOLUTION

    def __repr__(self) -> str:
        return f"PipelineState(index={self.index}, phase={self.phase}, count={self.count})"


def make_producer_start_state(stages: int) -> PipelineState:
    """The producer's first state (sm90_pipeline.hpp). The consumer starts at PipelineState(stages)."""
    ### HINT: every stage is empty at the start, yet no consumer has ever arrived on an empty barrier
    ### BEGIN SOLUTION
    return PipelineState(stages, index=0, phase=1, count=0)  # try_wait(1) on a fresh barrier is already true
    ### END SOLUTION


class PipelineTmaAsync:
    """The barrier protocol of CUTLASS's PipelineTmaAsync for one producer and one consumer."""

    def __init__(self, full: list, empty: list, transaction_bytes: int):
        self.full, self.empty, self.transaction_bytes = full, empty, transaction_bytes
        self.stages = len(full)

    def producer_acquire(self, state: PipelineState):
        """Generator: block until stage `state.index` is empty, then announce the bytes the TMA will deliver."""
        ### BEGIN SOLUTION
        yield self.empty[state.index].wait(state.phase)
        self.full[state.index].arrive_and_expect_tx(self.transaction_bytes)
        ### END SOLUTION

    def producer_commit(self, state: PipelineState) -> None:
        """Nothing to do with TMA: the TMA unit itself calls complete_tx on the full barrier (in CUTLASS this is
        a no-op outside unit tests)."""

    def consumer_wait(self, state: PipelineState):
        """Generator: block until the tile in stage `state.index` has fully landed."""
        ### BEGIN SOLUTION
        yield self.full[state.index].wait(state.phase)
        ### END SOLUTION

    def consumer_release(self, state: PipelineState) -> None:
        """Tell the producer that stage `state.index` may be overwritten."""
        ### BEGIN SOLUTION
        self.empty[state.index].arrive()
        ### END SOLUTION


def producer_mainloop(pipe: PipelineTmaAsync, tma, k_tiles: int):
    """Generator: the producer warp. Load tiles 0..k_tiles-1 in order, each with
    `tma.load(tile, stage, pipe.full[stage])` (asynchronous: returns at once, lands after the load latency)."""
    ### HINT: one PipelineState walks the ring; acquire the stage before the load, advance after it
    ### BEGIN SOLUTION
    state = make_producer_start_state(pipe.stages)
    for k in range(k_tiles):
        yield from pipe.producer_acquire(state)
        tma.load(k, state.index, pipe.full[state.index])
        pipe.producer_commit(state)
        state.advance()
    ### END SOLUTION


def consumer_mainloop(pipe: PipelineTmaAsync, mma, k_tiles: int):
    """Generator: the consumer warpgroup. For tiles 0..k_tiles-1 in order run `yield from mma(tile, stage)`
    (it reads the stage for the compute time) and give every stage back as soon as its MMA is done."""
    ### BEGIN SOLUTION
    state = PipelineState(pipe.stages)
    for k in range(k_tiles):
        yield from pipe.consumer_wait(state)
        yield from mma(k, state.index)
        pipe.consumer_release(state)  # only after the MMA has finished reading the stage
        state.advance()
    ### END SOLUTION
