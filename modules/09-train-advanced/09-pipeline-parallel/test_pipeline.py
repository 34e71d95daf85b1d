"""Tests for train-09.

References, all written here independently of the lesson file:
- `_ref_end_times`: the executor as a longest path over the DAG (each op waits for the op before it on
  its rank and for its cross-stage dependencies), by memoised recursion with cycle detection;
- closed forms for the bubble: (p-1)/m for GPipe and 1F1B, (p-1)/(v*m) for interleaved 1F1B
  (Narayanan et al., SC'21, Sec. 2.2);
- Megatron-core 0.16.1's own `get_schedule_table` and `get_pp_rank_microbatches`, taken from the installed
  `megatron/core/pipeline_parallel/schedules.py` by name (without importing the heavy package).
Durations are multiples of 1/8 or 1/v: float sums of them are exact or within 1e-9 of the closed form.
"""

import ast
import functools
import importlib.util
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import pytest


def _stage(r, c, p):
    return c * p + r


def _where(s, p):
    return s % p, s // p  # (rank, chunk) of virtual stage s


def _preds(op, r, p, v):
    kind, mb, c = op
    s = _stage(r, c, p)
    if kind == "F":
        return [] if s == 0 else [(*_where(s - 1, p), ("F", mb, _where(s - 1, p)[1]))]
    out = [(r, c, ("F", mb, c))]
    if s + 1 < p * v:
        rr, cc = _where(s + 1, p)
        out.append((rr, cc, ("B", mb, cc)))
    return out


def _ref_end_times(schedule, v, t_f, t_b):
    """End time of every (rank, op), or raise AssertionError on a cycle (deadlock)."""
    p = len(schedule)
    pos = {(r, op): i for r, ops in enumerate(schedule) for i, op in enumerate(ops)}
    end, busy = {}, set()

    def finish(r, op):
        key = (r, op)
        if key in end:
            return end[key]
        assert key in pos, f"rank {r} never runs {op}, which another op depends on"
        assert key not in busy, f"dependency cycle through rank {r} {op}: the schedule deadlocks"
        busy.add(key)
        i = pos[key]
        t0 = finish(r, schedule[r][i - 1]) if i > 0 else 0.0
        for rr, _, dep in _preds(op, r, p, v):
            t0 = max(t0, finish(rr, dep))
        end[key] = t0 + (t_f if op[0] == "F" else t_b)[r][op[2]]
        return end[key]

    for r, ops in enumerate(schedule):
        for op in ops:
            finish(r, op)
    return end


def _check_complete(schedule, p, m, v):
    assert len(schedule) == p, f"{len(schedule)} rank lists for p = {p}"
    want = sorted((k, mb, c) for k in "FB" for mb in range(m) for c in range(v))
    for r, ops in enumerate(schedule):
        got = sorted(tuple(op) for op in ops)
        assert got == want, f"rank {r} does not run every (F|B, microbatch, chunk) exactly once"


def _held(ops):
    held = peak = 0
    for kind, _, _ in ops:
        held += 1 if kind == "F" else -1
        peak = max(peak, held)
    return peak


def _bubble(schedule, v, tf_chunk, tb_chunk):
    p = len(schedule)
    t_f = [[tf_chunk] * v for _ in range(p)]
    t_b = [[tb_chunk] * v for _ in range(p)]
    makespan = max(_ref_end_times(schedule, v, t_f, t_b).values())
    busy = len(schedule[0]) // 2 * (tf_chunk + tb_chunk)
    return (makespan - busy) / busy


PM = [(1, 1), (1, 5), (2, 1), (2, 2), (3, 7), (4, 4), (4, 9), (5, 3), (7, 16)]
PMV = [(2, 2, 2), (2, 6, 3), (3, 3, 2), (3, 9, 4), (4, 8, 2), (4, 12, 3), (5, 5, 2), (2, 4, 5)]


@pytest.mark.points(1)
def test_schedules_are_complete_and_deadlock_free(lesson):
    pl = lesson.load("pipeline.py")
    for p, m in PM:
        for gen in (pl.gpipe_schedule, pl.one_f_one_b_schedule):
            sched = gen(p, m)
            _check_complete(sched, p, m, 1)
            _ref_end_times(sched, 1, [[1.0]] * p, [[1.0]] * p)
    for p, m, v in PMV:
        sched = pl.interleaved_schedule(p, m, v)
        _check_complete(sched, p, m, v)
        _ref_end_times(sched, v, [[1.0] * v] * p, [[1.0] * v] * p)


@pytest.mark.points(1)
def test_bubble_fraction_equals_the_closed_form(lesson):
    pl = lesson.load("pipeline.py")
    for p, m in PM:
        for tb in (1.0, 2.0):  # F = B, and the usual B = 2F
            for gen in (pl.gpipe_schedule, pl.one_f_one_b_schedule):
                got = _bubble(gen(p, m), 1, 1.0, tb)
                assert got == pytest.approx((p - 1) / m, abs=1e-9), (gen.__name__, p, m, tb)
    for p, m, v in PMV:
        got = _bubble(pl.interleaved_schedule(p, m, v), v, 1 / v, 2 / v)
        assert got == pytest.approx((p - 1) / (v * m), abs=1e-9), ("interleaved", p, m, v)


@pytest.mark.points(1)
def test_1f1b_holds_at_most_p_minus_rank_microbatches(lesson):
    pl = lesson.load("pipeline.py")
    for p, m in PM:
        gpipe, ofob = pl.gpipe_schedule(p, m), pl.one_f_one_b_schedule(p, m)
        for r in range(p):
            assert _held(gpipe[r]) == m
            assert _held(ofob[r]) == min(p - r, m), f"1F1B p={p} m={m}: rank {r} holds {_held(ofob[r])}"
            assert pl.peak_in_flight(ofob[r]) == _held(ofob[r])
    for p, m, v in PMV:
        sched = pl.interleaved_schedule(p, m, v)
        for r in range(p):
            want = min(m * v, 2 * (p - r - 1) + (v - 1) * p + 1)
            assert _held(sched[r]) == want, f"interleaved p={p} m={m} v={v}: rank {r}"


@functools.cache
def _megatron():
    """get_schedule_table / get_pp_rank_microbatches from the installed Megatron-core source file."""
    core = Path(importlib.util.find_spec("megatron.core").origin).parent
    src = (core / "pipeline_parallel" / "schedules.py").read_text()
    names = {"get_schedule_table", "get_pp_rank_microbatches"}
    tree = ast.parse(src)
    tree.body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    ns = {"Optional": Optional, "P2PCommunicator": object, "parallel_state": None}
    exec(compile(tree, str(core / "pipeline_parallel" / "schedules.py"), "exec"), ns)
    return ns["get_schedule_table"], ns["get_pp_rank_microbatches"]


def _megatron_order(p, m, v, r):
    """The op order forward_backward_pipelining_with_interleaving runs on rank r (no p2p overlap):
    warm-up forwards, then (forward k + warmup, backward k) pairs, then the remaining backwards; the k-th
    backward is on microbatch table[k] and chunk v - 1 - chunk_table[k]."""
    table_fn, counts_fn = _megatron()
    table = table_fn(m, v, p)  # microbatch_group_size_per_vp_stage defaults to p
    comm = SimpleNamespace(pp_group=SimpleNamespace(size=lambda: p, rank=lambda: r),
                           virtual_pipeline_model_parallel_size=v)
    total, _, warmup, remaining = counts_fn(m, v, p, p2p_communicator=comm)
    fwd = [("F", mb, c) for mb, c in table]
    bwd = [("B", mb, v - 1 - c) for mb, c in table]
    ops = fwd[:warmup]
    for k in range(remaining):
        ops += [fwd[warmup + k], bwd[k]]
    return ops + bwd[remaining:total]


@pytest.mark.points(1)
@pytest.mark.requires("megatron-core")
def test_interleaved_order_equals_megatron_core(lesson):
    pl = lesson.load("pipeline.py")
    for p, m, v in PMV + [(4, 4, 4), (8, 16, 2)]:
        sched = pl.interleaved_schedule(p, m, v)
        for r in range(p):
            got = [tuple(op) for op in sched[r]]
            assert got == _megatron_order(p, m, v, r), f"p={p} m={m} v={v}: rank {r} differs from Megatron"


def _random_valid_schedule(p, m, v, rng):
    """Per-rank lists cut from one random topological order of the stage DAG: never deadlocks."""
    S = p * v
    ready = [("F", mb, 0) for mb in range(m)]  # (kind, mb, stage)
    sched = [[] for _ in range(p)]
    while ready:
        kind, mb, s = ready.pop(rng.randrange(len(ready)))
        r, c = _where(s, p)
        sched[r].append((kind, mb, c))
        if kind == "F":
            if s + 1 < S:
                ready.append(("F", mb, s + 1))
            else:
                ready.append(("B", mb, s))
        elif s > 0:
            ready.append(("B", mb, s - 1))
    return sched


@pytest.mark.points(1)
def test_simulate_matches_the_longest_path_reference(lesson):
    pl = lesson.load("pipeline.py")
    rng = random.Random(909)
    cases = [(1, 3, 1), (2, 3, 1), (3, 5, 2), (4, 6, 3), (5, 4, 1)]
    for p, m, v in cases:
        for _ in range(3):
            sched = _random_valid_schedule(p, m, v, rng)
            t_f = [[rng.randint(1, 16) / 8 for _ in range(v)] for _ in range(p)]
            t_b = [[rng.randint(1, 24) / 8 for _ in range(v)] for _ in range(p)]
            ref = _ref_end_times(sched, v, t_f, t_b)
            tl = pl.simulate(sched, v, t_f, t_b)
            for r, ops in enumerate(sched):
                assert len(tl.start[r]) == len(ops) and len(tl.end[r]) == len(ops)
                for i, op in enumerate(ops):
                    dur = (t_f if op[0] == "F" else t_b)[r][op[2]]
                    assert tl.end[r][i] == pytest.approx(ref[(r, op)], abs=1e-9), (p, m, v, r, op)
                    assert tl.start[r][i] == pytest.approx(ref[(r, op)] - dur, abs=1e-9), (p, m, v, r, op)
            assert tl.makespan == pytest.approx(max(ref.values()), abs=1e-9)


@pytest.mark.points(1)
def test_simulate_rejects_a_deadlocking_order(lesson):
    pl = lesson.load("pipeline.py")
    one = [[1.0]] * 2
    # rank 1 wants microbatch 1 before 0, but rank 0 only sends microbatch 1 after B(0) came back
    cyc = [[("F", 0, 0), ("B", 0, 0), ("F", 1, 0), ("B", 1, 0)],
           [("F", 1, 0), ("F", 0, 0), ("B", 0, 0), ("B", 1, 0)]]
    # a backward listed before its own forward on the last rank
    early_b = [[("F", 0, 0), ("B", 0, 0)], [("B", 0, 0), ("F", 0, 0)]]
    # an op listed twice on one rank (nothing deadlocks if it simply runs again)
    twice_f = [[("F", 0, 0), ("F", 0, 0), ("B", 0, 0)], [("F", 0, 0), ("B", 0, 0)]]
    twice_b = [[("F", 0, 0), ("B", 0, 0)], [("F", 0, 0), ("B", 0, 0), ("B", 0, 0)]]
    # rank 1 runs microbatch 1, whose forward on rank 0 is in no list
    missing = [[("F", 0, 0), ("B", 0, 0)], [("F", 0, 0), ("B", 0, 0), ("F", 1, 0), ("B", 1, 0)]]
    for name, bad in [("cycle", cyc), ("B before F", early_b), ("F twice", twice_f), ("B twice", twice_b),
                      ("missing dependency", missing)]:
        with pytest.raises(ValueError):
            pl.simulate(bad, 1, one, one)
            pytest.fail(f"simulate accepted a bad schedule ({name})")
