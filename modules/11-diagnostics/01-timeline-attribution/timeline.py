"""diag-01: where the GPU sat idle, and why — an analyzer for torch.profiler Chrome traces.

Times are in the trace's unit, microseconds (float; torch >= 2.4 writes ns resolution as 3 decimals).
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")        # what occupies a GPU stream (HTA's list for CUDA)
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")             # host calls that carry a correlation id
SYNC_CALLS = frozenset({                                  # host calls that block the CPU until the GPU got there
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuMemcpyDtoH_v2",
})
HOST_WAIT, KERNEL_WAIT, OTHER = "host_wait", "kernel_wait", "other"


@dataclass(frozen=True)
class GpuOp:
    name: str
    cat: str
    stream: int
    ts: float
    dur: float
    launch_ts: float | None    # ts of the host call with the same correlation id; None if not in the trace

    @property
    def end(self) -> float:
        return round(self.ts + self.dur, 3)     # Kineto's times are whole ns: an op that ends where the next starts touches it


@dataclass(frozen=True)
class HostCall:
    name: str
    ts: float
    dur: float

    @property
    def end(self) -> float:
        return round(self.ts + self.dur, 3)


@dataclass(frozen=True)
class Gap:
    start: float
    end: float
    category: str              # HOST_WAIT | KERNEL_WAIT | OTHER

    @property
    def length(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Stretch:
    kind: str                  # "launch" | "sync"
    start: float               # start of its first gap
    end: float                 # end of its last gap
    n_gaps: int
    idle_us: float             # sum of its gaps' lengths


def load_trace(path: str | Path) -> dict:
    """A Chrome trace as torch.profiler's export_chrome_trace writes it (.json or .json.gz)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def host_calls(trace: dict) -> list[HostCall]:
    """Every CUDA runtime / driver call on the host, in time order."""
    calls = [HostCall(e["name"], float(e["ts"]), float(e.get("dur", 0.0)))
             for e in trace.get("traceEvents", [])
             if e.get("ph") == "X" and e.get("cat") in LAUNCH_CATS]
    return sorted(calls, key=lambda c: (c.ts, c.dur, c.name))


def gpu_ops(trace: dict, device: int = 0) -> list[GpuOp]:
    """The kernels, memcpys and memsets of one device, each with the ts of the host call that launched it."""
    ### HINT: kernel and launch share args["correlation"]; only complete ("X") events of GPU_CATS on this device count
    ### BEGIN SOLUTION
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    launched_at: dict[int, float] = {}
    for e in events:
        if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {}):
            launched_at[e["args"]["correlation"]] = float(e["ts"])
    ops = []
    for e in events:
        args = e.get("args", {})
        if e.get("cat") in GPU_CATS and args.get("device") == device:
            ops.append(GpuOp(e["name"], e["cat"], int(args["stream"]), float(e["ts"]), float(e["dur"]),
                             launched_at.get(args.get("correlation"))))
    ### END SOLUTION
    return sorted(ops, key=lambda o: (o.ts, o.end, o.stream))


def busy_intervals(ops: list[GpuOp]) -> list[tuple[float, float]]:
    """Union of the ops' [ts, end] over all streams: sorted, disjoint, touching intervals merged."""
    ### HINT: sort by start; an op that starts at or before the running end extends the current interval
    ### BEGIN SOLUTION
    merged: list[list[float]] = []
    for op in sorted(ops, key=lambda o: o.ts):
        if merged and op.ts <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], op.end)
        else:
            merged.append([op.ts, op.end])
    ### END SOLUTION
    return [(a, b) for a, b in merged]


def classify_gap(start: float, end: float, launch_ts: float | None, kernel_wait_us: float) -> str:
    """HTA's rule for the idle gap [start, end] that the op launched at launch_ts ends."""
    ### BEGIN SOLUTION
    if launch_ts is not None and launch_ts > start:
        return HOST_WAIT
    if end - start < kernel_wait_us:
        return KERNEL_WAIT
    return OTHER
    ### END SOLUTION


def idle_gaps(ops: list[GpuOp], kernel_wait_us: float = 30.0) -> list[Gap]:
    """The idle gaps between consecutive busy intervals of `ops`, each with its HTA category."""
    ### HINT: the ops that start exactly where a gap ends decide it; the GPU had work queued if any of them was launched by then
    ### BEGIN SOLUTION
    launches_at: dict[float, list[float | None]] = {}
    for o in ops:
        launches_at.setdefault(o.ts, []).append(o.launch_ts)
    busy = busy_intervals(ops)
    gaps = []
    for (_, start), (end, _) in zip(busy, busy[1:]):
        launches = launches_at[end]
        launch_ts = None if None in launches else min(launches)
        gaps.append(Gap(start, end, classify_gap(start, end, launch_ts, kernel_wait_us)))
    ### END SOLUTION
    return gaps


def idle_breakdown(ops: list[GpuOp], kernel_wait_us: float = 30.0) -> dict[int, dict[str, float]]:
    """Per stream: idle time by category (HTA's get_idle_time_breakdown), every category present (0.0 if none)."""
    out = {}
    for stream in sorted({o.stream for o in ops}):
        totals = {HOST_WAIT: 0.0, KERNEL_WAIT: 0.0, OTHER: 0.0}
        for g in idle_gaps([o for o in ops if o.stream == stream], kernel_wait_us):
            totals[g.category] += g.length
        out[stream] = totals
    return out


def gap_causes(gaps: list[Gap], calls: list[HostCall], stall_us: float = 200.0) -> list[str | None]:
    """Why the host left the GPU waiting: "stall", "sync" or "launch" for each host-wait gap, None otherwise."""
    ### HINT: precedence stall > sync > launch; a sync call counts when the GPU ran dry while the CPU was inside it
    ### BEGIN SOLUTION
    syncs = [c for c in calls if c.name in SYNC_CALLS]
    causes: list[str | None] = []
    for g in gaps:
        if g.category != HOST_WAIT:
            causes.append(None)
        elif g.length >= stall_us:
            causes.append("stall")
        elif any(c.ts <= g.start <= c.end for c in syncs):
            causes.append("sync")
        else:
            causes.append("launch")
    ### END SOLUTION
    return causes


def stretches(gaps: list[Gap], causes: list[str | None], min_gaps: int = 3) -> list[Stretch]:
    """Maximal runs of consecutive gaps with the same cause: every "sync" run, "launch" runs of >= min_gaps gaps."""
    ### BEGIN SOLUTION
    out = []
    i = 0
    while i < len(gaps):
        j = i
        while j + 1 < len(gaps) and causes[j + 1] == causes[i]:
            j += 1
        n = j - i + 1
        if causes[i] == "sync" or (causes[i] == "launch" and n >= min_gaps):
            out.append(Stretch(causes[i], gaps[i].start, gaps[j].end, n, sum(g.length for g in gaps[i:j + 1])))
        i = j + 1
    ### END SOLUTION
    return out


def analyze(trace: dict, device: int = 0, kernel_wait_us: float = 30.0, stall_us: float = 200.0,
            min_gaps: int = 3) -> dict:
    """The whole report for one device: busy, idle by category, idle by cause, stretches."""
    ops = gpu_ops(trace, device)
    gaps = idle_gaps(ops, kernel_wait_us)
    causes = gap_causes(gaps, host_calls(trace), stall_us)
    by_category = {HOST_WAIT: 0.0, KERNEL_WAIT: 0.0, OTHER: 0.0}
    by_cause = {"stall": 0.0, "sync": 0.0, "launch": 0.0}
    for g, c in zip(gaps, causes):
        by_category[g.category] += g.length
        if c is not None:
            by_cause[c] += g.length
    return {
        "busy_us": sum(b - a for a, b in busy_intervals(ops)),
        "idle_us": sum(g.length for g in gaps),
        "by_category": by_category,
        "by_cause": by_cause,
        "stretches": stretches(gaps, causes, min_gaps),
    }
