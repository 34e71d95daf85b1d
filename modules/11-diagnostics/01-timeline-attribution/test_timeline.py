"""Tests for diag-01. Oracle: HolisticTraceAnalysis 0.5.0 (`TraceAnalysis.get_idle_time_breakdown` per stream and
`get_temporal_breakdown`'s union idle time) on every trace in fixtures/ and on a synthetic threshold trace; slow
sweeps written here as independent references for the union, the gaps, the causes and the stretches.

Order: fast hand-built and random checks first, then the fixtures by planted cause, then HTA (import ~2 s).
Times are float µs with 3 decimals as Kineto writes them; gap ends are input values, so gaps compare exactly and sums
of gap lengths to 1e-9 µs (two summation orders of < 1e4 terms below 1e4 µs differ by < 1e-8).
"""

import copy
import gzip
import json
import os
import random
import shutil
from itertools import groupby
from pathlib import Path

import pytest

HERE = Path(__file__).parent
CAUSES = ("item_sync", "tiny_loop", "loader_stall", "cuda_graph", "two_streams")
# every trace in fixtures/ is named <source>_<planted cause>.json.gz: planted_* now, h200_* once recorded
FIXTURES = sorted(p.name for p in (HERE / "fixtures").glob("*.json.gz"))


def _cause(name):
    return next(c for c in CAUSES if name.endswith(f"_{c}.json.gz"))


@pytest.fixture(scope="module")
def tl(lesson):
    return lesson.load("timeline.py")


# ------------------------------------------------------------------------------------------------
# hand-built traces in the Kineto schema, and slow references
# ------------------------------------------------------------------------------------------------


class Builder:
    """A Chrome trace as torch.profiler writes it, from (stream, ts, dur, launch_ts) tuples."""

    def __init__(self):
        self.events = []
        self.corr = 70000

    def op(self, stream, ts, dur, launch_ts, cat="kernel", device=0, launcher=("cuda_runtime", "cudaLaunchKernel")):
        self.corr += 1
        if launch_ts is not None:
            self.call(launcher[1], launch_ts, 3.0, cat=launcher[0], corr=self.corr)
        self.events.append({"ph": "X", "cat": cat, "name": f"k{self.corr}", "pid": device, "tid": stream, "ts": ts,
                            "dur": dur, "args": {"External id": 1, "device": device, "context": 1, "stream": stream,
                                                 "correlation": self.corr}})
        self.events.append({"ph": "f", "id": self.corr, "pid": device, "tid": stream, "ts": ts, "cat": "ac2g",
                            "name": "ac2g", "bp": "e"})
        return self.corr

    def call(self, name, ts, dur, cat="cuda_runtime", corr=None):
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 9, "tid": 9, "ts": ts, "dur": dur,
                            "args": {"cbid": 1, "correlation": corr if corr is not None else 1}})

    def trace(self):
        return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],
                "distributedInfo": {"rank": 0}, "traceEvents": list(self.events)}


def _r3(x):
    return round(x, 3)


def random_ops(tl, seed, n_streams=3, n=40, p_none=0.05):
    """Back-to-back, tiny, near-threshold and long gaps per stream; streams overlap; launches early or late."""
    rng = random.Random(seed)
    ops = []
    for s in [7, 13, 20, 31][:n_streams]:
        t = _r3(rng.uniform(0, 50))
        for _ in range(rng.randint(n // 2, n)):
            gap = rng.choice([0.0, 0.0, _r3(rng.uniform(0.5, 3)), _r3(rng.uniform(25, 35)), 30.0,
                              _r3(rng.uniform(40, 400))])
            t = _r3(t + gap)
            dur = _r3(rng.choice([rng.uniform(1, 3), rng.uniform(10, 120)]))
            r = rng.random()
            launch = None if r < p_none else _r3(t - rng.uniform(1, 200) if r < 0.55 else t - rng.uniform(0, gap))
            ops.append(tl.GpuOp("k", "kernel", s, t, dur, launch))
            t = _r3(t + dur)
    rng.shuffle(ops)
    return ops


def slow_union(ops):
    """Coverage at the midpoint of every elementary segment between sorted boundaries."""
    pts = sorted({o.ts for o in ops} | {o.end for o in ops})
    cover = [any(o.ts <= (a + b) / 2 <= o.end for o in ops) for a, b in zip(pts, pts[1:])]
    out = []
    for (a, b), c in zip(zip(pts, pts[1:]), cover):
        if c:
            if out and out[-1][1] == a:
                out[-1] = (out[-1][0], b)
            else:
                out.append((a, b))
    return out


def slow_gaps(ops, kw):
    """(start, end, category) of every hole between covered stretches, by the rule written out per gap."""
    out = []
    busy = slow_union(ops)
    for i in range(1, len(busy)):
        start, end = busy[i - 1][1], busy[i][0]
        starters = [o for o in ops if o.ts == end]
        if all(o.launch_ts is not None and o.launch_ts > start for o in starters):
            cat = "host_wait"
        elif end - start < kw:
            cat = "kernel_wait"
        else:
            cat = "other"
        out.append((start, end, cat))
    return out


def slow_stretches(gaps, causes, min_gaps):
    out, i = [], 0
    for cause, run in groupby(zip(gaps, causes), key=lambda gc: gc[1]):
        run = [g for g, _ in run]
        if cause == "sync" or (cause == "launch" and len(run) >= min_gaps):
            out.append((cause, run[0].start, run[-1].end, len(run), sum(g.length for g in run)))
        i += len(run)
    return out


def _gaps(tl, ops, kw=30.0):
    return [(g.start, g.end, g.category) for g in tl.idle_gaps(ops, kw)]


# ------------------------------------------------------------------------------------------------
# contract edges (fastest first: a mutant stops at its first failing test)
# ------------------------------------------------------------------------------------------------


def test_only_gpu_cats_are_gpu_work(tl):
    """gpu_user_annotation and cuda_sync carry device and stream like kernels do, but the GPU is not working."""
    b = Builder()
    b.op(7, 100.0, 5.0, 90.0)
    b.op(7, 200.0, 5.0, 195.0)
    b.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": "nccl:all_reduce", "pid": 0, "tid": 7,
                     "ts": 99.0, "dur": 120.0, "args": {"device": 0, "stream": 7}})
    b.events.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 150.0,
                     "dur": 20.0, "args": {"device": 0, "stream": 7, "correlation": 1, "cuda_sync_kind": "Stream Sync"}})
    b.events.append({"ph": "X", "cat": "gpu_kernel_marker", "name": "marker", "pid": 0, "tid": 7, "ts": 120.0,
                     "dur": 10.0, "args": {"device": 0, "stream": 7}})          # a made-up cat: only GPU_CATS count
    trace = b.trace()
    assert len(tl.gpu_ops(trace)) == 2
    r = tl.analyze(trace)
    assert (r["busy_us"], r["idle_us"]) == (10.0, 95.0)


def test_inputs_are_not_modified(tl):
    ops = random_ops(tl, 5, n_streams=3, n=12)            # shuffled: not in time order
    assert ops != sorted(ops, key=lambda o: (o.ts, o.end, o.stream))
    before = list(ops)
    tl.busy_intervals(ops)
    assert ops == before, "busy_intervals reordered the list passed in"
    gaps = tl.idle_gaps(ops)
    assert ops == before, "idle_gaps reordered the list passed in"
    tl.idle_breakdown(ops)
    assert ops == before, "idle_breakdown reordered the list passed in"
    calls = [tl.HostCall("cudaStreamSynchronize", g.start - 1.0, 2.0) for g in gaps[::2]][::-1]
    gaps_before, calls_before = list(gaps), list(calls)
    causes = tl.gap_causes(gaps, calls)
    causes_before = list(causes)
    tl.stretches(gaps, causes, 1)
    assert (gaps, calls, causes) == (gaps_before, calls_before, causes_before)


def test_a_missing_launch_among_the_starters_is_not_host_wait(tl):
    """Two ops end the gap; one launched after it began, the other's launch is not in the trace."""
    G = tl.GpuOp
    ops = [G("a", "kernel", 7, 0.0, 10.0, -5.0), G("b", "kernel", 7, 50.0, 10.0, None),
           G("c", "gpu_memcpy", 20, 50.0, 3.0, 45.0)]
    assert tl.idle_gaps(ops) == [tl.Gap(10.0, 50.0, "other")]
    short = [G("a", "kernel", 7, 0.0, 10.0, -5.0), G("b", "kernel", 20, 22.5, 1.0, 15.0),
             G("c", "kernel", 7, 22.5, 4.0, None)]
    assert tl.idle_gaps(short) == [tl.Gap(10.0, 22.5, "kernel_wait")]


# ------------------------------------------------------------------------------------------------
# the union and the gaps (fast)
# ------------------------------------------------------------------------------------------------


@pytest.mark.points(2)
def test_busy_intervals_are_the_union_over_streams(tl):
    for seed in range(6):
        ops = random_ops(tl, seed, n_streams=1 + seed % 4)
        assert tl.busy_intervals(ops) == slow_union(ops), f"seed {seed}"
    k = tl.GpuOp("k", "kernel", 7, 10.0, 5.0, None)
    nested = tl.GpuOp("k", "kernel", 20, 11.0, 1.0, None)
    touching = tl.GpuOp("k", "gpu_memcpy", 20, 15.0, 2.0, None)
    assert tl.busy_intervals([touching, nested, k]) == [(10.0, 17.0)]
    assert tl.busy_intervals([]) == []


@pytest.mark.points(2)
def test_classify_gap_is_htas_rule_with_its_strict_edges(tl):
    c = tl.classify_gap
    assert c(100.0, 105.0, 100.5, 30.0) == "host_wait"       # launched after the GPU went idle, however short
    assert c(100.0, 500.0, 100.001, 30.0) == "host_wait"
    assert c(100.0, 100.0, 100.0, 30.0) == "kernel_wait"     # launched exactly at the gap start: it was queued
    assert c(100.0, 129.999, 90.0, 30.0) == "kernel_wait"
    assert c(100.0, 130.0, 90.0, 30.0) == "other"            # exactly the threshold: not below it
    assert c(100.0, 129.0, None, 30.0) == "kernel_wait"      # launch not in the trace: never host wait
    assert c(100.0, 400.0, None, 30.0) == "other"
    assert c(100.0, 104.0, 99.0, 3.5) == "other"
    assert c(100.0, 104.0, 104.0, 3.5) == "host_wait"


@pytest.mark.points(2)
def test_idle_gaps_match_a_slow_sweep_on_random_streams(tl):
    for seed in range(8):
        ops = random_ops(tl, 100 + seed, n_streams=1 + seed % 4)
        kw = [30.0, 5.0, 17.5, 30.0][seed % 4]
        assert _gaps(tl, ops, kw) == slow_gaps(ops, kw), f"seed {seed}"


def test_simultaneous_starts_and_per_stream_breakdown(tl):
    ops = [tl.GpuOp("a", "kernel", 7, 0.0, 10.0, -5.0),
           tl.GpuOp("b", "kernel", 7, 50.0, 10.0, 5.0),        # queued before the gap ...
           tl.GpuOp("c", "gpu_memcpy", 20, 50.0, 3.0, 45.0),   # ... this one was not: the GPU had work queued
           tl.GpuOp("d", "kernel", 20, 100.0, 5.0, 70.0),
           tl.GpuOp("e", "gpu_memset", 7, 100.0, 1.0, 61.0),
           tl.GpuOp("f", "kernel", 7, 200.0, 1.0, None)]
    assert _gaps(tl, ops) == [(10.0, 50.0, "other"), (60.0, 100.0, "host_wait"), (105.0, 200.0, "other")]
    assert tl.idle_breakdown(ops) == {7: {"host_wait": 40.0, "kernel_wait": 0.0, "other": 139.0},
                                      20: {"host_wait": 47.0, "kernel_wait": 0.0, "other": 0.0}}


def test_gpu_ops_reads_the_kineto_schema(tl):
    b = Builder()
    b.op(7, 100.0, 5.0, 90.0)
    b.op(7, 106.0, 2.0, 91.5, cat="gpu_memcpy")
    b.op(13, 103.0, 9.0, 92.25, cat="gpu_memset")
    b.op(7, 120.0, 4.0, 111.0, launcher=("cuda_driver", "cuLaunchKernel"))   # Triton launches via the driver
    b.op(7, 130.0, 4.0, None)                                                  # launch outside the window
    b.op(7, 101.0, 50.0, 95.0, device=1)                                       # another GPU
    b.call("cudaStreamIsCapturing", 93.0, 0.5, corr=123456)                    # a runtime call without a GPU op
    g = b.op(7, 140.0, 2.0, 135.0)
    b.events.append({**b.events[-2], "ts": 143.5, "name": "graph kernel 2"})  # CUDA graph: one correlation, many ops
    b.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": "nccl:all_reduce", "pid": 0, "tid": 7,
                     "ts": 99.0, "dur": 60.0, "args": {"External id": 5}})
    b.events.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 150.0,
                     "dur": 20.0, "args": {"device": 0, "stream": 7, "correlation": 1, "cuda_sync_kind": "Stream Sync"}})
    b.events.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 9, "tid": 9, "ts": 80.0, "dur": 200.0,
                     "args": {"External id": 1}})
    rng = random.Random(0)
    rng.shuffle(b.events)
    trace = b.trace()
    got = [(o.stream, o.ts, o.end, o.cat, o.launch_ts) for o in tl.gpu_ops(trace, 0)]
    assert got == [(7, 100.0, 105.0, "kernel", 90.0), (13, 103.0, 112.0, "gpu_memset", 92.25),
                   (7, 106.0, 108.0, "gpu_memcpy", 91.5), (7, 120.0, 124.0, "kernel", 111.0),
                   (7, 130.0, 134.0, "kernel", None), (7, 140.0, 142.0, "kernel", 135.0),
                   (7, 143.5, 145.5, "kernel", 135.0)]
    assert [(o.ts, o.launch_ts) for o in tl.gpu_ops(trace, 1)] == [(101.0, 95.0)]
    assert g > 0


def test_empty_and_single_op_traces(tl):
    for trace in ({}, {"traceEvents": []}, {"schemaVersion": 1, "traceEvents": [{"ph": "M", "name": "process_name"}]}):
        assert tl.gpu_ops(trace) == []
        r = tl.analyze(trace)
        assert (r["busy_us"], r["idle_us"], r["stretches"]) == (0.0, 0.0, [])
        assert tl.idle_breakdown([]) == {}
    b = Builder()
    b.op(7, 10.0, 4.5, 2.0)
    ops = tl.gpu_ops(b.trace())
    assert tl.busy_intervals(ops) == [(10.0, 14.5)] and tl.idle_gaps(ops) == []
    assert tl.idle_breakdown(ops) == {7: {"host_wait": 0.0, "kernel_wait": 0.0, "other": 0.0}}


# ------------------------------------------------------------------------------------------------
# causes and stretches
# ------------------------------------------------------------------------------------------------


def _gap(tl, a, b, cat="host_wait"):
    return tl.Gap(a, b, cat)


@pytest.mark.points(2)
def test_gap_causes_edges(tl):
    H = tl.HostCall
    gaps = [_gap(tl, 100.0, 120.0), _gap(tl, 200.0, 215.0), _gap(tl, 300.0, 500.0), _gap(tl, 600.0, 650.0),
            _gap(tl, 700.0, 710.0), _gap(tl, 800.0, 900.0, "other"), _gap(tl, 1000.0, 1400.0),
            _gap(tl, 1500.0, 1510.0), _gap(tl, 1600.0, 1601.0, "kernel_wait")]
    calls = [H("cudaStreamSynchronize", 50.0, 50.0),     # ends exactly when the GPU runs dry: sync
             H("cudaDeviceSynchronize", 200.0, 3.0),     # starts exactly then: sync
             H("cudaLaunchKernel", 598.0, 5.0),          # a launch covering the gap start is not a sync
             H("cudaMemcpyAsync", 698.0, 20.0),          # nor an async copy
             H("cudaStreamSynchronize", 805.0, 20.0),    # inside a non-host-wait gap: nothing
             H("cudaEventSynchronize", 990.0, 50.0),     # covers the start of a 400 µs gap: stall wins
             H("cudaStreamSynchronize", 1502.0, 5.0),    # starts inside the gap, after the GPU ran dry: launch
             H("cudaMemcpy", 1590.0, 20.0)]
    assert tl.gap_causes(gaps, calls, 200.0) == ["sync", "sync", "stall", "launch", "launch", None, "stall",
                                                 "launch", None]
    assert tl.gap_causes(gaps, calls, 201.0)[2] == "launch"       # 200 µs is below a 201 µs stall threshold
    assert tl.gap_causes([], calls) == []


@pytest.mark.points(2)
def test_stretches_are_maximal_runs(tl):
    g = [_gap(tl, 10.0 * i, 10.0 * i + 1 + i % 3) for i in range(14)]
    causes = ["launch", "launch", "sync", "launch", "launch", "launch", None, "launch", "launch", "launch",
              "launch", "sync", "sync", "stall"]
    got = [(s.kind, s.start, s.end, s.n_gaps, s.idle_us) for s in tl.stretches(g, causes, 3)]
    assert got == slow_stretches(g, causes, 3)
    assert [x[:4] for x in got] == [("sync", 20.0, 23.0, 1), ("launch", 30.0, 53.0, 3), ("launch", 70.0, 102.0, 4),
                                    ("sync", 110.0, 121.0, 2)]
    assert [s.n_gaps for s in tl.stretches(g, causes, 4)] == [1, 4, 2]
    assert [s.kind for s in tl.stretches(g, causes, 1)] == ["launch", "sync", "launch", "launch", "sync"]
    assert tl.stretches([], [], 3) == []


def test_causes_and_stretches_random(tl):
    rng = random.Random(7)
    for trial in range(20):
        t, gaps, calls = 0.0, [], []
        for _ in range(rng.randint(0, 30)):
            t = _r3(t + rng.uniform(1, 50))
            length = _r3(rng.choice([rng.uniform(1, 30), rng.uniform(150, 300), 200.0]))
            gaps.append(_gap(tl, t, _r3(t + length), rng.choice(["host_wait"] * 4 + ["kernel_wait", "other"])))
            if rng.random() < 0.4:
                calls.append(tl.HostCall(rng.choice(sorted(tl.SYNC_CALLS) + ["cudaLaunchKernel"]),
                                         _r3(t - rng.uniform(0, 40)), _r3(rng.uniform(0, 60))))
            t = gaps[-1].end
        calls.sort(key=lambda c: c.ts)
        want = []
        for gp in gaps:
            if gp.category != "host_wait":
                want.append(None)
            elif gp.length >= 200.0:
                want.append("stall")
            elif any(c.name in tl.SYNC_CALLS and c.ts <= gp.start <= c.end for c in calls):
                want.append("sync")
            else:
                want.append("launch")
        causes = tl.gap_causes(gaps, calls, 200.0)
        assert causes == want, f"trial {trial}"
        m = 1 + trial % 4
        got = [(s.kind, s.start, s.end, s.n_gaps, s.idle_us) for s in tl.stretches(gaps, causes, m)]
        want_s = slow_stretches(gaps, causes, m)
        assert [x[:4] for x in got] == [x[:4] for x in want_s]
        assert all(abs(a[4] - b[4]) < 1e-9 for a, b in zip(got, want_s))


# ------------------------------------------------------------------------------------------------
# fixtures: each planted (or recorded) cause is found
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reports(tl):
    return {name: (tl.load_trace(HERE / "fixtures" / name), tl.analyze(tl.load_trace(HERE / "fixtures" / name)))
            for name in FIXTURES}


@pytest.mark.points(2)
@pytest.mark.parametrize("name", FIXTURES)
def test_the_planted_cause_is_found(tl, reports, name):
    trace, r = reports[name]
    cause, kinds = _cause(name), [s.kind for s in r["stretches"]]
    idle, by = r["idle_us"], r["by_cause"]
    if cause == "item_sync":             # the .item() drains the queue once per step: one sync stretch per step
        assert kinds.count("sync") >= 2 and by["sync"] > 0.5 * r["by_category"]["host_wait"] and by["stall"] == 0
        assert all(s.n_gaps == 1 for s in r["stretches"] if s.kind == "sync")
    elif cause == "tiny_loop":           # every kernel is shorter than the host's launch interval
        assert "sync" not in kinds and max(s.n_gaps for s in r["stretches"] if s.kind == "launch") >= 30
        assert by["launch"] > 0.8 * idle
    elif cause == "loader_stall":        # long host gaps with no launch and no sync
        assert by["stall"] > 0.8 * idle and "launch" not in kinds and "sync" not in kinds
    elif cause == "cuda_graph":          # the same tiny kernels from one cudaGraphLaunch: no host waits inside
        assert r["by_category"]["host_wait"] < 0.1 * idle and "launch" not in kinds
        assert r["by_category"]["kernel_wait"] > 0.5 * idle
    elif cause == "two_streams":         # a stream waits on another's copy while the device is busy
        per = tl.idle_breakdown(tl.gpu_ops(trace))
        waiting = max(per, key=lambda s: per[s]["other"])
        assert len(per) >= 2 and per[waiting]["other"] > 5 * idle


def test_planted_fixtures_exact_counts(tl, reports):
    """The planted traces' own numbers (4 steps each): what the generator put there."""
    for name in FIXTURES:
        if not name.startswith("planted_"):
            continue
        r = reports[name][1]
        kinds = [(s.kind, s.n_gaps) for s in r["stretches"]]
        want = {"item_sync": [("sync", 1)] * 3, "tiny_loop": [("launch", 159)], "loader_stall": [],
                "cuda_graph": [], "two_streams": []}[_cause(name)]
        assert kinds == want, name


def test_inputs_unchanged_and_no_hidden_state(tl):
    trace = json.loads(gzip.open(HERE / "fixtures" / FIXTURES[0], "rt").read())
    before = copy.deepcopy(trace)
    a = tl.analyze(trace)
    ops = tl.gpu_ops(trace)
    ops_before = list(ops)
    rng = random.Random(3)
    shuffled = list(ops)
    rng.shuffle(shuffled)
    assert tl.idle_gaps(shuffled) == tl.idle_gaps(ops)
    assert tl.analyze(trace) == a and trace == before and ops == ops_before
    # the caller edits the trace in place: nothing computed for the old contents may come back
    trace["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "late_k", "pid": 0, "tid": 7, "ts": 1e9,
                                 "dur": 1.0, "args": {"device": 0, "stream": 7, "correlation": 999_999}})
    assert len(tl.gpu_ops(trace)) == len(ops) + 1, "gpu_ops returned the ops of the trace before it was edited"
    assert tl.gpu_ops(trace) == tl.gpu_ops(copy.deepcopy(trace))
    assert tl.analyze(trace)["busy_us"] == pytest.approx(a["busy_us"] + 1.0, abs=1e-6)


# ------------------------------------------------------------------------------------------------
# oracle: HolisticTraceAnalysis 0.5.0 on the same traces
# ------------------------------------------------------------------------------------------------


def _hta(trace_path, tmp_path, monkeypatch, kw=30):
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")     # compare the ns-resolution times as they are
    from hta.trace_analysis import TraceAnalysis

    d = tmp_path / "rank0"
    d.mkdir()
    shutil.copy(trace_path, d / "rank-0.json.gz")
    ta = TraceAnalysis(trace_dir=str(d), include_last_profiler_step=True)
    per, _ = ta.get_idle_time_breakdown(visualize=False, consecutive_kernel_delay=kw)
    temporal = ta.get_temporal_breakdown(visualize=False)
    by_stream = {}
    for row in per.itertuples():
        by_stream.setdefault(int(row.stream), {})[row.idle_category] = float(row.idle_time)
    return by_stream, float(temporal["idle_time(us)"].iloc[0])


def _assert_matches_hta(tl, trace, hta_by_stream, hta_union, kw):
    ops = tl.gpu_ops(trace)
    ours = tl.idle_breakdown(ops, kw)
    assert set(ours) == set(hta_by_stream)
    for s, cats in ours.items():
        for c in ("host_wait", "kernel_wait", "other"):   # HTA rounds to 2 decimals
            assert abs(cats[c] - hta_by_stream[s].get(c, 0.0)) <= 0.006, (s, c, cats, hta_by_stream[s])
    assert abs(sum(g.length for g in tl.idle_gaps(ops, kw)) - hta_union) < 1e-3   # HTA: span - busy, ends unrounded


@pytest.mark.requires("hta")
@pytest.mark.parametrize("name", FIXTURES)
def test_matches_hta_idle_breakdown(tl, name, tmp_path, monkeypatch):
    path = HERE / "fixtures" / name
    by_stream, union = _hta(path, tmp_path, monkeypatch)
    _assert_matches_hta(tl, tl.load_trace(path), by_stream, union, 30.0)


@pytest.mark.requires("hta")
def test_matches_hta_at_the_threshold(tl, tmp_path, monkeypatch):
    b = Builder()
    t = 1_000_000.0
    b.call("cudaStreamIsCapturing", t - 100.0, 1.0, corr=10)
    b.events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 9, "tid": 9,
                     "ts": t - 200.0, "dur": 2000.0, "args": {}})
    for gap, late in [(0.0, False), (12.499, False), (12.5, False), (12.501, False), (3.0, True), (400.0, True),
                      (400.0, False), (1.25, False)]:
        start = _r3(t + gap)
        b.op(7, start, 7.125, _r3(t + 0.001) if late else _r3(t - 50.0))
        t = _r3(start + 7.125)
    b.op(20, 1_000_010.0, 40.0, 999_990.0, cat="gpu_memcpy")
    path = tmp_path / "threshold.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(b.trace(), f)
    by_stream, union = _hta(path, tmp_path, monkeypatch, kw=12.5)
    _assert_matches_hta(tl, b.trace(), by_stream, union, 12.5)
    assert os.environ.get("HTA_DISABLE_NS_ROUNDING") == "1"
