"""diag-02: classify a kernel's bottleneck from Nsight Compute metrics, with NCU's own rule thresholds.

The thresholds are those of the rule files Nsight Compute ships in `sections/` (copy read: github.com/singularitti/
nsight-compute @ 2e77507, src/nsight_compute/): SpeedOfLight.py (rule SOLBottleneck), LaunchStatistics.py (Tail Effect),
TheoreticalOccupancy.py and SharedMemoryConflicts.py.  `read_ncu_raw_csv` (given) reads what
`ncu --csv --page raw --print-units base` prints; you write the rules and the verdict.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

# the 11 columns ncu writes before the metrics on the raw page
ID_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
              "Block Size", "Grid Size", "Device", "CC")
# a unit ncu scaled (its default --print-units auto): a prefixed count or a duration not in nanoseconds
SCALED_UNIT = re.compile(r"^([KMGTP](byte|cycle|inst|sector|request|warp|block)|[um]?second)(/|$)")

SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEM_PCT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
WAVES = "launch__waves_per_multiprocessor"
THEORETICAL_WARPS = "smsp__maximum_warps_avg_per_active_cycle"
MAX_WARPS = "smsp__warps_active.avg.peak_sustained"
LIMITERS = ("blocks", "registers", "shared_mem", "warps")  # NCU's LIMIT_TYPES order; metric launch__occupancy_limit_<x>
DRAM_BYTES = "dram__bytes.sum"
FADD = "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"
FMUL = "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum"
FFMA = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"


def shared_metrics(kind: str) -> tuple[str, str, str]:
    """(requests, wavefronts, bank conflicts) metric names for kind "ld" or "st" (SharedMemoryConflicts.py)."""
    return (f"smsp__sass_inst_executed_op_shared_{kind}.sum",
            f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{kind}.sum",
            f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{kind}.sum")


LDSM = "smsp__inst_executed_op_ldsm.sum"  # ldmatrix: counted as shared-load requests too


@dataclass(frozen=True)
class Diagnosis:
    sol: str                    # SOLBottleneck's rule name
    klass: str                  # memory-bound | compute-bound | balanced | latency-bound | occupancy-limited | bank-conflicted | tail-effect
    limiters: tuple[str, ...]   # TheoreticalOccupancy's limiters, () when it does not fire
    tail: bool                  # the Tail Effect rule fires
    conflicts: tuple[str, ...]  # "ld" / "st" for which SharedMemoryConflicts fires, in that order
    intensity: float            # FLOP per DRAM byte
    roofline: str               # "memory" (left of the ridge) | "compute" (at or right of it)


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")  # ncu prints thousands separators: "2,147,483,648"
    if text in ("", "n/a"):
        return None
    return float(text)


def read_ncu_raw_csv(source: str | Path) -> list[dict[str, float | str | None]]:
    """Rows of `ncu --csv --page raw --print-units base`: ID columns as text, metrics as floats (None for n/a).

    `source` is a path or the CSV text; lines ncu or the program print around the table (==PROF== ...) are skipped.
    A scaled unit (Mbyte, usecond: ncu's default --print-units auto) is refused rather than silently misread.
    """
    text = Path(source).read_text() if isinstance(source, Path) or "\n" not in str(source) else str(source)
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    table = list(csv.reader(io.StringIO("\n".join(lines))))
    header, units, rows = table[0], table[1], table[2:]
    if tuple(header[:len(ID_COLUMNS)]) != ID_COLUMNS:
        raise ValueError(f"not an ncu raw page: header starts {header[:3]}")
    for name, unit in zip(header[len(ID_COLUMNS):], units[len(ID_COLUMNS):]):
        if SCALED_UNIT.match(unit):
            raise ValueError(f"{name}: unit {unit!r} is scaled; record with --print-units base")
    out = []
    for row in rows:
        rec: dict[str, float | str | None] = dict(zip(ID_COLUMNS, row[:len(ID_COLUMNS)]))
        for name, value in zip(header[len(ID_COLUMNS):], row[len(ID_COLUMNS):]):
            rec[name] = _number(value)
        out.append(rec)
    return out


def sol_bottleneck(sm_pct: float, mem_pct: float, waves: float) -> str:
    """SOLBottleneck's rule name: "High Throughput", "High Compute Throughput", "High Memory Throughput",
    "Balanced Throughput", "Latency Issue" or "Small Grid"."""
    ### HINT: 80 / 60 / 10 / 1 wave, tested in NCU's order; the small-grid test lives inside the latency branch.
    ### BEGIN SOLUTION
    if sm_pct < 80 and mem_pct < 80:
        if sm_pct < 60 and mem_pct < 60:
            return "Small Grid" if waves < 1 else "Latency Issue"
        if abs(sm_pct - mem_pct) >= 10:
            return "High Compute Throughput" if sm_pct > mem_pct else "High Memory Throughput"
        return "Balanced Throughput"
    return "High Throughput"
    ### END SOLUTION


def occupancy_limiters(m: dict) -> tuple[str, ...]:
    """TheoreticalOccupancy: () if theoretical warps reach 80 % of the maximum, else the limiter(s) with the smallest
    launch__occupancy_limit_<x> (all tied ones, in LIMITERS order)."""
    ### BEGIN SOLUTION
    if 100.0 * m[THEORETICAL_WARPS] / m[MAX_WARPS] >= 80:
        return ()
    limits = {x: m[f"launch__occupancy_limit_{x}"] for x in LIMITERS}
    low = min(limits.values())
    return tuple(x for x in LIMITERS if limits[x] == low)
    ### END SOLUTION


def tail_effect(waves: float) -> bool:
    """LaunchStatistics' Tail Effect: a partial wave after at least one full wave, reported when its estimated
    speedup 100 / (1 + full waves) is at least 20 %."""
    ### BEGIN SOLUTION
    whole = math.floor(waves)
    return waves > whole and whole >= 1 and 100.0 / (1 + whole) >= 20
    ### END SOLUTION


def bank_conflicts(m: dict) -> tuple[str, ...]:
    """SharedMemoryConflicts: "ld" and/or "st" when bank conflicts are >= 10 % of that kind's shared wavefronts;
    a kind without requests is skipped (shared loads count ldmatrix instructions as requests too)."""
    ### BEGIN SOLUTION
    out = []
    for kind in ("ld", "st"):
        req, wave, conf = (m.get(name) or 0.0 for name in shared_metrics(kind))
        if kind == "ld":
            req += m.get(LDSM) or 0.0
        if req == 0:
            continue
        if wave > 0 and 100.0 * conf / wave >= 10:
            out.append(kind)
    return tuple(out)
    ### END SOLUTION


def arithmetic_intensity(m: dict, extra_flops: float = 0.0) -> float:
    """FP32 FLOP (NCU roofline: fadd + fmul + 2 * ffma, thread instructions) plus extra_flops, per DRAM byte;
    math.inf when the kernel moved no DRAM bytes."""
    ### BEGIN SOLUTION
    flops = m[FADD] + m[FMUL] + 2 * m[FFMA] + extra_flops
    return flops / m[DRAM_BYTES] if m[DRAM_BYTES] > 0 else math.inf
    ### END SOLUTION


def diagnose(m: dict, ridge: float, extra_flops: float = 0.0) -> Diagnosis:
    """One kernel's row of read_ncu_raw_csv -> Diagnosis; ridge in FLOP/byte (peak FLOP/s / peak byte/s)."""
    sm, mem, waves = m[SM_PCT], m[MEM_PCT], m[WAVES]
    ### BEGIN SOLUTION
    sol = sol_bottleneck(sm, mem, waves)
    limiters, tail, conflicts = occupancy_limiters(m), tail_effect(waves), bank_conflicts(m)
    if sol == "Small Grid":
        klass = "latency-bound"
    elif conflicts and mem > sm:
        klass = "bank-conflicted"
    elif sol.startswith("High"):
        klass = "memory-bound" if mem > sm else "compute-bound"
    elif sol == "Balanced Throughput":
        klass = "balanced"
    elif limiters:
        klass = "occupancy-limited"
    elif tail:
        klass = "tail-effect"
    else:
        klass = "latency-bound"
    ai = arithmetic_intensity(m, extra_flops)
    return Diagnosis(sol, klass, limiters, tail, conflicts, ai, "memory" if ai < ridge else "compute")
    ### END SOLUTION
