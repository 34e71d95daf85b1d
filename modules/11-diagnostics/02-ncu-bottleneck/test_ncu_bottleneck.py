"""Tests for diag-02: the learner's rules against NCU's rule files and the course's verdict order.

The `ncu_*` functions below transcribe the rule files Nsight Compute ships in `sections/` line by line (read at
github.com/singularitti/nsight-compute @ 2e77507, src/nsight_compute/SpeedOfLight.py, LaunchStatistics.py,
TheoreticalOccupancy.py, SharedMemoryConflicts.py); the hand-written tables pin their boundaries. Verdicts are exact
(names, tuples, booleans); the one float, arithmetic intensity, is compared at rel 1e-9 (float64 sums of integers).
The metric sets are planted (fixtures/README.md): no test here ran on a GPU except test_live_ncu_run.
"""

import copy
import math
import os
import random
import shutil
import subprocess
import sys
import textwrap

import pytest

RIDGE_FP32 = 67 / 4.2    # docs/hardware.md: fp32 CUDA-core peak / copy bandwidth, FLOP/byte
RIDGE_BF16 = 729 / 4.2   # measured cuBLAS bf16 / copy bandwidth
GEMM_FLOPS = 2 * 8192**3


@pytest.fixture(scope="module")
def nb(lesson):
    return lesson.load("ncu_bottleneck.py")


@pytest.fixture(scope="module")
def planted(nb, lesson):
    return nb.read_ncu_raw_csv(lesson.path("fixtures/planted_h200.csv"))


# ---- transcriptions of NCU's rule files (the oracle) ----

def ncu_sol(sm_sol_pct, mem_sol_pct, num_waves):
    balanced_threshold, latency_bound_threshold, no_bound_threshold, waves_threshold = 10, 60, 80, 1
    if sm_sol_pct < no_bound_threshold and mem_sol_pct < no_bound_threshold:
        if sm_sol_pct < latency_bound_threshold and mem_sol_pct < latency_bound_threshold:
            if num_waves < waves_threshold:
                return "Small Grid"
            return "Latency Issue"
        elif math.fabs(sm_sol_pct - mem_sol_pct) >= balanced_threshold:
            if sm_sol_pct > mem_sol_pct:
                return "High Compute Throughput"
            return "High Memory Throughput"
        return "Balanced Throughput"
    return "High Throughput"


def ncu_tail(num_waves):
    partial_waves, whole_waves = math.modf(num_waves)
    if not (partial_waves > 0 and whole_waves >= 1):
        return False
    return 1 / (1 + whole_waves) * 100 >= 20   # speedup_threshold = 20; the rule returns below it


def ncu_limiters(m):
    if m["smsp__maximum_warps_avg_per_active_cycle"] / int(m["smsp__warps_active.avg.peak_sustained"]) * 100 >= 80:
        return ()
    limiters = sorted(((x, m[f"launch__occupancy_limit_{x}"]) for x in ("blocks", "registers", "shared_mem", "warps")),
                      key=lambda lim: lim[1])   # stable sort: ties keep LIMIT_TYPES order
    return tuple(x for x, v in limiters if v == limiters[0][1])


def ncu_conflicts(m):
    fired = []
    for short, (wave_tag, req_tag) in (("ld", ("mem_shared_op_ld", "shared_ld")), ("st", ("mem_shared_op_st", "shared_st"))):
        requests = m.get(f"smsp__sass_inst_executed_op_{req_tag}.sum") or 0
        if short == "ld":
            requests += m.get("smsp__inst_executed_op_ldsm.sum") or 0
        if requests == 0:
            continue
        wavefronts = m.get(f"l1tex__data_pipe_lsu_wavefronts_{wave_tag}.sum") or 0
        conflicts = m.get(f"l1tex__data_bank_conflicts_pipe_lsu_{wave_tag}.sum") or 0
        if ((conflicts * 100.0) / wavefronts if wavefronts > 0 else 0.0) >= 10.0:
            fired.append(short)
    return tuple(fired)


def course_class(m):
    """README's verdict order, written as a table of (condition, class) tried top to bottom."""
    sm, mem, waves = (m["sm__throughput.avg.pct_of_peak_sustained_elapsed"],
                      m["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"],
                      m["launch__waves_per_multiprocessor"])
    sol = ncu_sol(sm, mem, waves)
    order = [(sol == "Small Grid", "latency-bound"),
             (bool(ncu_conflicts(m)) and mem > sm, "bank-conflicted"),
             (sol in ("High Throughput", "High Compute Throughput", "High Memory Throughput") and mem > sm, "memory-bound"),
             (sol in ("High Throughput", "High Compute Throughput", "High Memory Throughput"), "compute-bound"),
             (sol == "Balanced Throughput", "balanced"),
             (bool(ncu_limiters(m)), "occupancy-limited"),
             (ncu_tail(waves), "tail-effect"),
             (True, "latency-bound")]
    return next(c for ok, c in order if ok)


# ---- the SOLBottleneck rule ----

SOL_CASES = [  # (sm %, mem %, waves per SM, NCU rule name): every boundary of SpeedOfLight.py
    (17.4, 91.8, 248.2, "High Throughput"),
    (80.0, 10.0, 5.0, "High Throughput"),          # 80 is not < 80
    (10.0, 80.0, 5.0, "High Throughput"),
    (79.9, 10.0, 5.0, "High Compute Throughput"),
    (10.0, 79.9, 5.0, "High Memory Throughput"),
    (60.0, 50.0, 3.0, "High Compute Throughput"),  # 60 is not < 60; difference exactly 10 is not balanced
    (50.0, 60.0, 3.0, "High Memory Throughput"),
    (65.0, 56.0, 3.0, "Balanced Throughput"),
    (60.0, 60.0, 0.5, "Balanced Throughput"),      # waves only matter inside the latency branch
    (59.9, 59.9, 0.5, "Small Grid"),
    (59.9, 59.9, 1.0, "Latency Issue"),            # exactly one wave is not small
    (59.9, 5.0, 0.99, "Small Grid"),
    (59.9, 5.0, 30.0, "Latency Issue"),            # 55 points apart, still latency: both under 60
    (0.08, 0.11, 0.0, "Small Grid"),
    (79.0, 71.0, 1.0, "Balanced Throughput"),
]


def test_sol_rule_on_its_boundaries(nb):
    got = [(sm, mem, w, nb.sol_bottleneck(sm, mem, w)) for sm, mem, w, _ in SOL_CASES]
    assert got == SOL_CASES


def test_sol_rule_matches_the_rule_file_on_random_points(nb):
    rng = random.Random(2)
    grid = [0.0, 9.99, 10.0, 50.0, 59.99, 60.0, 69.99, 70.0, 79.99, 80.0, 100.0]
    for _ in range(3000):
        sm = rng.choice(grid) if rng.random() < 0.4 else round(rng.uniform(0, 100), rng.choice([0, 1, 2]))
        mem = rng.choice(grid) if rng.random() < 0.4 else round(rng.uniform(0, 100), rng.choice([0, 1, 2]))
        waves = rng.choice([0.0, 0.5, 0.99, 1.0, 1.01, 7.0, 300.25])
        assert nb.sol_bottleneck(sm, mem, waves) == ncu_sol(sm, mem, waves), (sm, mem, waves)


# ---- Tail Effect, TheoreticalOccupancy, SharedMemoryConflicts ----

@pytest.mark.parametrize("waves, fires", [
    (0.0, False), (0.5, False), (0.9999, False),   # no full wave: the small-grid rule's business
    (1.0, False), (2.0, False), (37.0, False),     # no partial wave
    (1.06, True), (1.9, True), (3.5, True),
    (4.01, True),                                  # 100 / 5 = 20 %: at the threshold
    (5.01, False), (248.24, False),                # 16.7 %, 0.4 %
])
def test_tail_effect_rule(nb, waves, fires):
    assert bool(nb.tail_effect(waves)) == fires
    assert ncu_tail(waves) == fires


def occupancy(theoretical, max_warps=16.0, blocks=32, registers=8, shared_mem=32, warps=8):
    return {"smsp__maximum_warps_avg_per_active_cycle": theoretical, "smsp__warps_active.avg.peak_sustained": max_warps,
            "launch__occupancy_limit_blocks": blocks, "launch__occupancy_limit_registers": registers,
            "launch__occupancy_limit_shared_mem": shared_mem, "launch__occupancy_limit_warps": warps,
            # achieved occupancy is not this rule's input: a low value here must not fire it
            "sm__warps_active.avg.pct_of_peak_sustained_active": 31.0}


@pytest.mark.parametrize("m, expected", [
    (occupancy(16.0), ()),                                   # 100 %
    (occupancy(12.8), ()),                                   # exactly 80 % does not fire
    (occupancy(12.79, registers=3), ("registers",)),
    (occupancy(2.0, shared_mem=1), ("shared_mem",)),
    (occupancy(3.0, registers=1, shared_mem=1, warps=5), ("registers", "shared_mem")),   # tie: both, in NCU order
    (occupancy(8.0, blocks=32, registers=256, shared_mem=32, warps=64), ("blocks", "shared_mem")),
    (occupancy(4.0, warps=2, registers=2, blocks=32, shared_mem=32), ("registers", "warps")),
    (occupancy(9.0, max_warps=12.0, warps=3), ("warps",)),   # another max: 75 % of 12 warps
    (occupancy(10.0, max_warps=12.0, warps=3), ()),          # 83 %
])
def test_occupancy_limiters(nb, m, expected):
    assert ncu_limiters(m) == expected
    assert tuple(nb.occupancy_limiters(m)) == expected


def shared(ld=(0, 0, 0), st=(0, 0, 0), ldsm=0):
    m = {"smsp__inst_executed_op_ldsm.sum": ldsm}
    for kind, (req, wave, conf) in (("ld", ld), ("st", st)):
        m[f"smsp__sass_inst_executed_op_shared_{kind}.sum"] = req
        m[f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{kind}.sum"] = wave
        m[f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{kind}.sum"] = conf
    return m


@pytest.mark.parametrize("m, expected", [
    (shared(), ()),
    (shared(ld=(2_097_152, 67_108_864, 65_011_712)), ("ld",)),          # 32-way: 96.9 %
    (shared(st=(393_216, 1_572_864, 196_608)), ("st",)),                # 12.5 %
    (shared(ld=(1000, 1000, 100), st=(1000, 2000, 1000)), ("ld", "st")),  # exactly 10 % fires
    (shared(ld=(1000, 10_000, 999)), ()),                               # 9.99 %
    (shared(ld=(1000, 1200, 200)), ("ld",)),                            # 16.7 %: 1.2-way on average, still fires
    (shared(ld=(0, 1000, 900)), ()),                                    # no requests: skipped
    (shared(ld=(0, 1000, 900), ldsm=40), ("ld",)),                      # ldmatrix requests count as loads
    (shared(st=(500, 0, 0)), ()),                                       # no wavefronts: 0 %
])
def test_bank_conflict_rule(nb, m, expected):
    assert ncu_conflicts(m) == expected
    before = copy.deepcopy(m)
    assert tuple(nb.bank_conflicts(m)) == expected
    assert m == before, "bank_conflicts changed the metric dict it was given"


def test_bank_conflicts_with_counters_ncu_left_out(nb):
    """A metric ncu did not collect reads as None (n/a) or is absent: NCU's default for these requests is 0."""
    m = shared(st=(393_216, 1_572_864, 196_608))
    m["smsp__inst_executed_op_ldsm.sum"] = None
    del m["smsp__sass_inst_executed_op_shared_ld.sum"]
    before = copy.deepcopy(m)
    assert tuple(nb.bank_conflicts(m)) == ("st",)
    assert m == before, "bank_conflicts changed the metric dict it was given (added or rewrote a counter)"


# ---- roofline ----

def flops_row(fadd, fmul, ffma, dram):
    return {"smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": fadd,
            "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum": fmul,
            "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": ffma, "dram__bytes.sum": dram}


def test_arithmetic_intensity_counts_an_fma_as_two_flops(nb):
    rng = random.Random(5)
    for _ in range(200):
        fadd, fmul, ffma = (rng.randrange(0, 10**10) for _ in range(3))
        dram, extra = rng.randrange(1, 10**10), rng.choice([0.0, float(rng.randrange(10**12))])
        want = (fadd + fmul + 2 * ffma + extra) / dram
        assert nb.arithmetic_intensity(flops_row(fadd, fmul, ffma, dram), extra) == pytest.approx(want, rel=1e-9)
    assert nb.arithmetic_intensity(flops_row(3, 5, 7, 8)) == pytest.approx(22 / 8, rel=1e-12)
    assert nb.arithmetic_intensity(flops_row(32, 0, 0, 0)) == math.inf
    assert nb.arithmetic_intensity(flops_row(0, 0, 0, 0)) == math.inf


# ---- the verdict on whole metric sets ----

EXPECTED = {  # kernel -> (sol, class, limiters, tail, conflicts, roofline), worked out from the rule files by hand
    "copy_f32": ("High Throughput", "memory-bound", (), False, (), "memory"),
    "sm90_xmma_gemm": ("High Throughput", "compute-bound", ("registers", "shared_mem"), False, ("st",), "compute"),
    "tiny_add": ("Small Grid", "latency-bound", ("blocks", "shared_mem"), False, (), "compute"),
    "smem_hog": ("Latency Issue", "occupancy-limited", ("shared_mem",), False, (), "memory"),
    "transpose_naive": ("High Throughput", "bank-conflicted", (), False, ("ld",), "memory"),
    "fma_tail": ("Latency Issue", "tail-effect", (), True, (), "compute"),
}


def settings(row):
    gemm = row["Kernel Name"].startswith("sm90_xmma_gemm")
    return (RIDGE_BF16, GEMM_FLOPS) if gemm else (RIDGE_FP32, 0.0)


def verdict(d):
    return (d.sol, d.klass, tuple(d.limiters), bool(d.tail), tuple(d.conflicts), d.roofline)


@pytest.mark.points(2)
def test_planted_h200_metric_sets(nb, planted):
    assert len(planted) == len(EXPECTED)
    for row in planted:
        key = next(k for k in EXPECTED if row["Kernel Name"].startswith(k))
        ridge, extra = settings(row)
        assert verdict(nb.diagnose(row, ridge, extra)) == EXPECTED[key], key
        assert course_class(row) == EXPECTED[key][1]


def changed(row, rng):
    """The planted row with SOL, waves, occupancy and shared-memory counters redrawn (other kernels, same schema)."""
    m = dict(row)
    pick = rng.random()
    m["sm__throughput.avg.pct_of_peak_sustained_elapsed"] = rng.choice([5.0, 45.0, 59.99, 60.0, 65.0, 72.0, 79.99, 80.0, 93.0])
    m["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"] = (
        m["sm__throughput.avg.pct_of_peak_sustained_elapsed"] if pick < 0.1 else
        rng.choice([3.0, 50.0, 55.0, 62.0, 70.0, 75.0, 80.0, 91.0]))
    m["launch__waves_per_multiprocessor"] = rng.choice([0.0, 0.42, 1.0, 1.06, 2.5, 3.99, 4.5, 6.0, 62.06, 248.24])
    m["smsp__maximum_warps_avg_per_active_cycle"] = rng.choice([2.0, 3.0, 12.0, 12.8, 13.0, 16.0])
    for x in ("blocks", "registers", "shared_mem", "warps"):
        m[f"launch__occupancy_limit_{x}"] = rng.choice([1, 2, 8, 32])
    ld_req = rng.choice([0, 4096])
    m["smsp__sass_inst_executed_op_shared_ld.sum"] = ld_req
    m["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"] = 4096 * rng.choice([1, 2, 32])
    m["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"] = (
        m["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"] - 4096)
    m["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"] = rng.choice([0, 10**6, 10**9])
    m["dram__bytes.sum"] = rng.choice([0, 2**20, 2**30])
    return m


@pytest.mark.points(2)
def test_verdict_order_on_changed_metric_sets(nb, planted):
    rng = random.Random(11)
    seen = set()
    for i in range(1500):
        m = changed(planted[i % len(planted)], rng)
        ridge, extra = settings(m)
        d = nb.diagnose(m, ridge, extra)
        ai = nb.arithmetic_intensity(m, extra)
        sm, mem = m["sm__throughput.avg.pct_of_peak_sustained_elapsed"], m["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"]
        want = (ncu_sol(sm, mem, m["launch__waves_per_multiprocessor"]), course_class(m), ncu_limiters(m),
                ncu_tail(m["launch__waves_per_multiprocessor"]), ncu_conflicts(m), "memory" if ai < ridge else "compute")
        assert verdict(d) == want, (i, m["Kernel Name"][:20], sm, mem, m["launch__waves_per_multiprocessor"])
        seen.add(want[1])
    assert seen == {"memory-bound", "compute-bound", "balanced", "latency-bound", "occupancy-limited",
                    "bank-conflicted", "tail-effect"}


@pytest.mark.parametrize("ai, ridge, side", [(15.9, 16.0, "memory"), (16.0, 16.0, "compute"), (173.5, RIDGE_BF16, "memory")])
def test_roofline_side_at_the_ridge(nb, planted, ai, ridge, side):
    m = dict(planted[0])   # the copy kernel, its FLOPs set so that FLOP / byte is exactly ai
    m.update(flops_row(0, 0, 0, 1024))
    assert nb.diagnose(m, ridge, ai * 1024).roofline == side


def test_inputs_unchanged_and_no_hidden_state(nb, planted):
    rows = copy.deepcopy(planted)
    first = [verdict(nb.diagnose(r, *settings(r))) for r in rows]
    again = [verdict(nb.diagnose(r, *settings(r))) for r in reversed(rows)][::-1]
    assert first == again
    assert rows == planted


# ---- a real ncu run (GPU machines with Nsight Compute) ----

LIVE_KERNEL = textwrap.dedent("""
    import torch
    x = torch.empty(64 * 2**20, dtype=torch.float32, device="cuda")   # 256 MiB, never initialised: one kernel only
    y = torch.empty_like(x)
    for _ in range(2):
        y.copy_(x)
    torch.cuda.synchronize()
""")
LIVE_SECTIONS = ["SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis_Tables"]


@pytest.mark.requires("cuda-gpu")
@pytest.mark.timeout(300)
def test_live_ncu_run_classifies_a_device_copy_as_memory_bound(nb, tmp_path):
    ncu = shutil.which("ncu")
    if ncu is None:
        pytest.skip("ncu (Nsight Compute CLI) is not on PATH")
    script = tmp_path / "copy.py"
    script.write_text(LIVE_KERNEL)
    extra = ",".join(["dram__bytes.sum", "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
                      "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
                      "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "smsp__inst_executed_op_ldsm.sum"])
    cmd = [ncu, *sum((["--section", s] for s in LIVE_SECTIONS), []), "--metrics", extra, "--csv", "--page", "raw",
           "--print-units", "base", "--launch-skip", "1", "--launch-count", "1", sys.executable, str(script)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=280, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    rows = nb.read_ncu_raw_csv(run.stdout)
    assert len(rows) == 1, run.stdout[-2000:]
    d = nb.diagnose(rows[0], RIDGE_FP32)
    assert d.klass == "memory-bound", (d, {k: rows[0][k] for k in (
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "launch__waves_per_multiprocessor")})
    assert d.roofline == "memory" and d.conflicts == () and not d.tail
