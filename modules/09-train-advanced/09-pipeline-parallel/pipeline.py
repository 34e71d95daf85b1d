"""train-09: pipeline-parallel schedules (GPipe, 1F1B, interleaved 1F1B) and an executor that runs them.

A schedule is one ordered list of ops per pipeline rank. An op is ("F" | "B", microbatch, chunk).
With v model chunks per rank, chunk c of rank r is virtual stage s = c * p + r (Megatron's layout:
rank 0 holds stages 0, p, 2p, ...), so the model is cut into p * v stages. Without interleaving v = 1
and every op has chunk 0.
"""

from collections.abc import Sequence
from dataclasses import dataclass

Op = tuple[str, int, int]  # (kind "F" | "B", microbatch, chunk)
Schedule = list[list[Op]]  # schedule[rank] = that rank's ops in execution order


def gpipe_schedule(p: int, m: int) -> Schedule:
    """GPipe (given, the baseline): every rank runs all m forwards, then all m backwards."""
    return [[("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)] for _ in range(p)]


def one_f_one_b_schedule(p: int, m: int) -> Schedule:
    """1F1B (PipeDream-Flush): a warm-up of forwards, then alternate one forward / one backward, then
    drain the backwards. Rank r never holds more than p - r microbatches whose backward is pending."""
    ### HINT: the last rank can start a backward right after its first forward; each earlier rank one step later.
    ### BEGIN SOLUTION
    out: Schedule = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        ops: list[Op] = [("F", i, 0) for i in range(warmup)]
        for i in range(m - warmup):
            ops += [("F", warmup + i, 0), ("B", i, 0)]
        ops += [("B", i, 0) for i in range(m - warmup, m)]
        out.append(ops)
    return out
    ### END SOLUTION


def interleaved_schedule(p: int, m: int, v: int) -> Schedule:
    """Interleaved 1F1B with v >= 2 chunks per rank, in Megatron-core's order (m divisible by p).

    Forward order on every rank: microbatches in groups of p; for each group, chunk 0 of the group's
    microbatches, then chunk 1, ..., chunk v-1. The k-th backward visits the same (microbatch, chunk)
    as the k-th forward but with the chunk mirrored (v - 1 - chunk). Rank r first runs
    min(m*v, 2*(p - r - 1) + (v - 1)*p) forwards, then alternates forward, backward, then drains."""
    ### BEGIN SOLUTION
    order = [(g + i, c) for g in range(0, m, p) for c in range(v) for i in range(p)]
    total = m * v
    out: Schedule = []
    for r in range(p):
        warmup = min(total, 2 * (p - r - 1) + (v - 1) * p)
        fwd = [("F", mb, c) for mb, c in order]
        bwd = [("B", mb, v - 1 - c) for mb, c in order]
        ops = fwd[:warmup]
        for k in range(total - warmup):
            ops += [fwd[warmup + k], bwd[k]]
        ops += bwd[total - warmup:]
        out.append(ops)
    return out
    ### END SOLUTION


@dataclass
class Timeline:
    """start[r][i] / end[r][i]: when schedule[r][i] ran on rank r."""

    start: list[list[float]]
    end: list[list[float]]

    @property
    def makespan(self) -> float:
        return max((e for row in self.end for e in row), default=0.0)


def dependencies(op: Op, rank: int, p: int, v: int) -> list[tuple[int, Op]]:
    """The ops on other stages (rank, op) that must finish before `op` may start on `rank`.

    F of virtual stage s needs F of stage s - 1 (same microbatch); B of stage s needs B of stage s + 1,
    and B of the last stage needs that stage's own F (the loss). The F before the B on the same stage is
    also required (the activations); the rank's own order must respect it."""
    kind, mb, chunk = op
    s, last = chunk * p + rank, p * v - 1
    if kind == "F":
        return [] if s == 0 else [((s - 1) % p, ("F", mb, (s - 1) // p))]
    deps = [(rank, ("F", mb, chunk))]
    if s < last:
        deps.append(((s + 1) % p, ("B", mb, (s + 1) // p)))
    return deps


def simulate(schedule: Schedule, v: int, t_f: Sequence[Sequence[float]],
             t_b: Sequence[Sequence[float]]) -> Timeline:
    """Run the schedule: each rank executes its ops one at a time in its list's order; an op starts when
    its rank is free and every op in `dependencies` has ended (zero communication time). t_f[r][c] and
    t_b[r][c] are the durations of a forward / backward of chunk c on rank r.
    Raises ValueError if the schedule deadlocks (no rank can start its next op) or lists an op twice."""
    p = len(schedule)
    ### HINT: keep, per rank, the index of its next op and the time it becomes free; sweep until no rank moves.
    ### BEGIN SOLUTION
    start = [[0.0] * len(ops) for ops in schedule]
    end = [[0.0] * len(ops) for ops in schedule]
    done: dict[tuple[int, Op], float] = {}
    nxt, free = [0] * p, [0.0] * p
    progress = True
    while progress:
        progress = False
        for r in range(p):
            while nxt[r] < len(schedule[r]):
                op = schedule[r][nxt[r]]
                deps = dependencies(op, r, p, v)
                if any(d not in done for d in deps) or (r, op) in done:
                    break
                t0 = max([free[r]] + [done[d] for d in deps])
                dur = (t_f if op[0] == "F" else t_b)[r][op[2]]
                start[r][nxt[r]], end[r][nxt[r]] = t0, t0 + dur
                done[(r, op)] = free[r] = t0 + dur
                nxt[r] += 1
                progress = True
    if any(nxt[r] < len(schedule[r]) for r in range(p)):
        raise ValueError(f"schedule deadlocks: ranks stop at ops {nxt}")
    return Timeline(start, end)
    ### END SOLUTION


def bubble_fraction(schedule: Schedule, v: int, t_f: Sequence[Sequence[float]],
                    t_b: Sequence[Sequence[float]]) -> float:
    """(makespan - busiest rank's compute time) / busiest rank's compute time: the idle time of an
    iteration relative to the time the same work would take without a pipeline fill and drain."""
    busy = max(sum((t_f if k == "F" else t_b)[r][c] for k, _, c in ops) for r, ops in enumerate(schedule))
    return (simulate(schedule, v, t_f, t_b).makespan - busy) / busy


def peak_in_flight(ops: Sequence[Op]) -> int:
    """Most (microbatch, chunk) pairs whose forward ran and whose backward has not: activations held."""
    held = peak = 0
    for kind, _, _ in ops:
        held += 1 if kind == "F" else -1
        peak = max(peak, held)
    return peak
