"""platform-07: Young's and Daly's checkpoint intervals and a Monte-Carlo simulation of a job with failures.

Model (Daly, FGCS 2006): a job needs `work` hours of computation. It computes `tau` hours, then writes a checkpoint
that takes `delta` hours, and repeats; the last segment may be shorter (work - (n-1)*tau) and also ends with a
checkpoint. Failures arrive as a Poisson process of rate 1/mtbf in wall-clock time: during computation, checkpointing
and restarting alike. A failure throws away the segment in progress (back to the last completed checkpoint) and
starts a restart of `restart` hours; a failure during a restart starts the restart over. All times in hours.
"""

import math

import numpy as np


def system_mtbf(unit_mtbf: float, n_units: int) -> float:
    """MTBF of a job that fails when any of n independent units with exponential failures fails."""
    ### BEGIN SOLUTION
    return unit_mtbf / n_units
    ### END SOLUTION


def young_interval(delta: float, mtbf: float) -> float:
    """Young (1974): the first-order optimal compute time between checkpoints."""
    ### BEGIN SOLUTION
    return (2.0 * delta * mtbf) ** 0.5
    ### END SOLUTION


def daly_interval(delta: float, mtbf: float) -> float:
    """Daly (2006), the higher-order estimate of the optimal compute time between checkpoints (eq. 37)."""
    ### HINT: two regimes, split at delta = 2 * mtbf
    ### BEGIN SOLUTION
    if delta >= 2.0 * mtbf:
        return mtbf
    r = delta / (2.0 * mtbf)
    return math.sqrt(2.0 * delta * mtbf) * (1.0 + math.sqrt(r) / 3.0 + r / 9.0) - delta
    ### END SOLUTION


def daly_expected_time(tau: float, delta: float, restart: float, mtbf: float, work: float) -> float:
    """Daly's exact expected wall time when work / tau segments of tau + delta each must run without a failure."""
    return mtbf * math.exp(restart / mtbf) * math.expm1((tau + delta) / mtbf) * work / tau


def segment_lengths(work: float, tau: float, delta: float) -> np.ndarray:
    """Wall-clock length of each failure-free segment: compute plus the checkpoint that ends it."""
    n_full = int(math.floor(work / tau + 1e-9))
    rest = work - n_full * tau
    lengths = [tau + delta] * n_full + ([rest + delta] if rest > 1e-9 * tau else [])
    return np.asarray(lengths, dtype=np.float64)


def simulate_wall_time(work: float, tau: float, delta: float, restart: float, mtbf: float,
                       n_runs: int, rng: np.random.Generator) -> np.ndarray:
    """Wall-clock time of n_runs independent jobs, float64 [n_runs]; every random number comes from rng."""
    lengths = segment_lengths(work, tau, delta)
    ### HINT: memoryless failures: each (run, segment) pair can be simulated on its own; loop over rounds, not over runs
    ### BEGIN SOLUTION
    need = np.broadcast_to(lengths, (n_runs, lengths.size)).ravel()
    total = np.zeros(need.size)
    todo = np.arange(need.size)               # (run, segment) pairs whose segment has not completed yet
    while todo.size:
        t = rng.exponential(mtbf, todo.size)  # time to the next failure, from the start of this attempt
        ok = t >= need[todo]
        total[todo[ok]] += need[todo[ok]]
        failed = todo[~ok]
        total[failed] += t[~ok]
        pending = failed                      # these must first get through an uninterrupted restart
        while pending.size:
            t = rng.exponential(mtbf, pending.size)
            done = t >= restart
            total[pending[done]] += restart
            total[pending[~done]] += t[~done]
            pending = pending[~done]
        todo = failed
    return total.reshape(n_runs, lengths.size).sum(axis=1)
    ### END SOLUTION
