"""train-15: pipeline stages for a heterogeneous model (vision encoder + LLM) and its 1F1B iteration time.

The model is a chain of layers with measured per-microbatch forward / backward times and memory.
A partition cuts the chain into p contiguous, non-empty stages: `sizes[s]` layers go to stage s.
Under 1F1B, stage s keeps the activations of min(p - s, m) microbatches alive (train-09), so its
memory is weights + min(p - s, m) * activations of its layers.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Layer:
    name: str
    t_f: float  # forward time per microbatch (ms)
    t_b: float  # backward time per microbatch (ms)
    act: float  # activations kept for the backward, per microbatch (GB)
    weight: float  # parameters + gradients + optimizer state (GB)


def stage_memory(layers: Sequence[Layer], stage: int, p: int, m: int) -> float:
    """Peak memory (GB) of `layers` placed on stage `stage` of p under 1F1B with m microbatches."""
    return sum(x.weight for x in layers) + min(p - stage, m) * sum(x.act for x in layers)


def stage_times(layers: Sequence[Layer], sizes: Sequence[int]) -> tuple[list[float], list[float]]:
    """Per-stage forward and backward times of the partition `sizes`."""
    f, b, i = [], [], 0
    for n in sizes:
        f.append(sum(x.t_f for x in layers[i:i + n]))
        b.append(sum(x.t_b for x in layers[i:i + n]))
        i += n
    return f, b


def one_f_one_b_order(p: int, m: int) -> list[list[tuple[str, int]]]:
    """Per-stage 1F1B op order: p - s - 1 warm-up forwards, then F/B pairs, then the remaining B."""
    out = []
    for s in range(p):
        w = min(p - s - 1, m)
        ops = [("F", i) for i in range(w)]
        for i in range(m - w):
            ops += [("F", w + i), ("B", i)]
        out.append(ops + [("B", i) for i in range(m - w, m)])
    return out


def partition(layers: Sequence[Layer], p: int, m: int, mem_budget: float = math.inf) -> list[int]:
    """Cut `layers` into p contiguous non-empty stages minimising the bottleneck stage time
    max_s sum(t_f + t_b), subject to stage_memory(stage s) <= mem_budget for every s.
    Returns the stage sizes; raises ValueError when no partition fits (or p > len(layers))."""
    n = len(layers)
    if not 1 <= p <= n:
        raise ValueError(f"cannot cut {n} layers into {p} non-empty stages")
    cost = [0.0]
    for x in layers:
        cost.append(cost[-1] + x.t_f + x.t_b)
    ### HINT: best[k][j] = smallest bottleneck for the first j layers on stages 0..k-1; remember the argmin to rebuild the cut.
    ### BEGIN SOLUTION
    inf = math.inf
    best = [[inf] * (n + 1) for _ in range(p + 1)]
    cut = [[0] * (n + 1) for _ in range(p + 1)]
    best[0][0] = 0.0
    for k in range(1, p + 1):
        for j in range(k, n - (p - k) + 1):
            for i in range(k - 1, j):
                if best[k - 1][i] == inf or stage_memory(layers[i:j], k - 1, p, m) > mem_budget:
                    continue
                cand = max(best[k - 1][i], cost[j] - cost[i])
                if cand < best[k][j]:
                    best[k][j], cut[k][j] = cand, i
    if best[p][n] == inf:
        raise ValueError("no partition fits the memory budget")
    sizes, j = [], n
    for k in range(p, 0, -1):
        sizes.append(j - cut[k][j])
        j = cut[k][j]
    return sizes[::-1]
    ### END SOLUTION


def iteration_time(stage_f: Sequence[float], stage_b: Sequence[float], m: int) -> float:
    """Time from the first forward to the last backward of one 1F1B iteration (zero p2p time):
    stage s runs one_f_one_b_order(p, m)[s] one op at a time; F(s, i) also waits for F(s - 1, i),
    B(s, i) for B(s + 1, i) (the last stage's B follows its own F)."""
    p = len(stage_f)
    order = one_f_one_b_order(p, m)
    ### BEGIN SOLUTION
    pos = {(s, op): k for s in range(p) for k, op in enumerate(order[s])}

    @cache
    def end(s: int, op: tuple[str, int]) -> float:
        k = pos[(s, op)]
        t = end(s, order[s][k - 1]) if k else 0.0
        if op[0] == "F" and s > 0:
            t = max(t, end(s - 1, op))
        if op[0] == "B" and s < p - 1:
            t = max(t, end(s + 1, op))
        return t + (stage_f[s] if op[0] == "F" else stage_b[s])

    return max(end(s, order[s][-1]) for s in range(p))
    ### END SOLUTION


def bubble_fraction(stage_f: Sequence[float], stage_b: Sequence[float], m: int) -> float:
    """Share of device time spent idle: 1 - (work of all stages) / (p * iteration time)."""
    work = m * (sum(stage_f) + sum(stage_b))
    return 1.0 - work / (len(stage_f) * iteration_time(stage_f, stage_b, m))
