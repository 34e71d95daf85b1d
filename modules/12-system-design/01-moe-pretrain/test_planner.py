"""Tests for sd-01: the capacity planner against the site's worked case and against changed requirements.

Every reference here is computed another way than the README's closed forms: bytes counted by category, ranks placed
one by one, the smallest GPU count and the smallest PP found by search, Young's interval and the storage bandwidth
found by numerical minimisation / bisection. All arithmetic is float64 on values of 1e-3..1e25, so two correct
orders of operations agree to ~1e-15 relative; the tests allow 1e-9 (the page's rounded `expect` values: 1e-3, the
tolerance the site build itself uses). Exact-fit cases use numbers whose every intermediate is exact in float64.
"""

import dataclasses
import math
import tomllib
from pathlib import Path

import pytest

REL = 1e-9

# site/system-design.toml, case "moe-pretrain": the `expect` column (value / scale); used when the file is absent
PAGE_FALLBACK = {
    "train_flops": 6.66e24, "gpu_days": 222687.66, "wall_days": 13.5918, "mem_static": 14.1008,
    "a2a_bytes": 108.985, "ckpt_bytes": 9.394, "ckpt_s": 18.788, "fail_per_day": 7.86432, "ckpt_interval": 10.7085,
}


def page_expect(lesson_dir: Path) -> dict[str, float]:
    for parent in lesson_dir.resolve().parents:
        site = parent / "site" / "system-design.toml"
        if site.is_file():
            cases = tomllib.loads(site.read_text(encoding="utf-8"))["case"]
            rows = next(c for c in cases if c["id"] == "moe-pretrain")["capacity"]
            return {row["name"]: float(row["expect"]) for row in rows if row["name"] in PAGE_FALLBACK}
    return dict(PAGE_FALLBACK)


@pytest.fixture(scope="module")
def pl(lesson):
    return lesson.load("planner.py")


def close(a, b, rel=REL):
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


# --------------------------------------------------------------------------- independent references

def ref_gpu_seconds(req, hw):
    flop_per_token = 2 * req.active_params * 3        # forward 2N, backward 4N
    return flop_per_token * req.tokens / (hw.peak_flops * req.mfu)


def ref_valid(req, hw, tp, cp, pp, ep, dp):
    return (tp * cp * pp * dp == req.n_gpus and hw.gpus_per_node % tp == 0 and req.n_experts % ep == 0
            and (dp * cp) % ep == 0 and pp <= req.n_layers and req.global_batch_seqs % dp == 0
            and req.seq_len % cp == 0)


def ref_memory(req, tp, cp, pp, ep, dp):
    """Bytes by category: bf16 weights and grads of the local shard; fp32 master/m/v spread over all GPUs (ZeRO-1)."""
    expert_local = req.expert_params / (tp * pp * ep)
    dense_local = (req.total_params - req.expert_params) / (tp * pp)
    weights = 2 * (expert_local + dense_local)
    grads = 2 * (expert_local + dense_local)
    optimizer = 12 * req.total_params / req.n_gpus  # every parameter's 12 B live on exactly one GPU
    stage_layers = [req.n_layers // pp + (1 if s < req.n_layers % pp else 0) for s in range(pp)]
    stash = min(pp, req.global_batch_seqs // dp)    # 1F1B: stage 0 holds pp micro-batches, fewer if m < pp
    act = stash * max(stage_layers) * (req.seq_len // cp) / tp * req.act_bytes_per_token_layer
    return weights + grads + optimizer, act


def ref_plan(req, hw, tp, ep, cp):
    """Brute force over every stage count: the first valid layout whose bytes fit HBM minus the reserve."""
    for pp in range(1, req.n_layers + 1):
        dp = req.n_gpus // (tp * cp * pp)
        if ref_valid(req, hw, tp, cp, pp, ep, dp) and sum(ref_memory(req, tp, cp, pp, ep, dp)) <= hw.hbm_bytes - hw.reserve_bytes:
            return (tp, cp, pp, ep, dp)
    return None


def ref_local_share(hw, tp, ep):
    """Place rank 0's EP group (expert rank order tp-ep-dp-pp: members tp apart) and count who shares node 0."""
    members = [e * tp for e in range(ep)]
    return sum(1 for r in members if r // hw.gpus_per_node == 0) / ep


def ref_a2a_per_gpu(req):
    tokens = req.global_batch_seqs * req.seq_len
    copies = tokens * req.n_moe_layers * req.top_k               # token-expert pairs in the whole step
    return copies * req.hidden * 2 * 2 * 2 / req.n_gpus          # bf16, dispatch+combine, fwd+bwd


def ref_job_mtbf_s(req):
    rate_per_s = req.n_gpus / (req.gpu_mtbf_hours * 3600.0)      # independent exponential failures add
    return 1.0 / rate_per_s


def ref_waste(delta, mtbf, restart, tau):
    return delta / tau + tau / (2 * mtbf) + restart / mtbf


def golden_min(f, lo, hi, iters=200):
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    for _ in range(iters):
        c, d = b - g * (b - a), a + g * (b - a)
        if f(c) < f(d):
            b = d
        else:
            a = c
    return (a + b) / 2


CHANGED = [  # (requirements changes, hardware changes): other model size, cluster, MFU, NIC, storage, MTBF
    (dict(total_params=1.2e12, expert_params=1.17e12, active_params=52e9, tokens=21e12, n_gpus=24576, mfu=0.31,
          n_layers=80, n_moe_layers=76, hidden=8192, n_experts=384, top_k=6, gpu_mtbf_hours=80_000.0,
          restart_s=300.0, global_batch_seqs=12288), dict(nic_gbit_s=800.0, storage_write_bytes_s=1.2e12)),
    (dict(total_params=236e9, expert_params=221e9, active_params=21e9, tokens=8.1e12, n_gpus=4096, mfu=0.42,
          seq_len=8192, global_batch_seqs=4096, n_layers=27, n_moe_layers=26, hidden=5120, n_experts=160, top_k=6,
          act_bytes_per_token_layer=40 * 5120, gpu_mtbf_hours=30_000.0, restart_s=900.0),
     dict(peak_flops=1979e12, hbm_bytes=80e9, nvlink_bytes_s=600e9, nic_gbit_s=200.0, storage_write_bytes_s=150e9)),
    (dict(n_gpus=8192, tokens=14.8e12, mfu=0.22, top_k=4, hidden=6144, gpu_mtbf_hours=12_345.0, restart_s=60.0),
     dict(gpus_per_node=4, hbm_bytes=192e9, reserve_bytes=25e9, nvlink_bytes_s=1800e9)),
]


CHANGED_LAYOUT = {0: (2, 1, 12, 128, 1024), 1: (1, 2, 4, 32, 512), 2: (2, 1, 8, 64, 512)}


def changed(pl, i):
    r, h = CHANGED[i]
    return dataclasses.replace(pl.WORKED, **r), dataclasses.replace(pl.H200, **h)


# --------------------------------------------------------------------------- tests (fastest first)

@pytest.mark.points(1)
def test_worked_case_reproduces_the_page_and_changed_cases_follow(pl, lesson):
    page = page_expect(lesson.dir)
    req, hw = pl.WORKED, pl.H200
    c = pl.train_compute(req, hw)
    lay = pl.Layout(tp=1, cp=1, pp=8, ep=64, dp=2048)
    t = pl.step_traffic(req, hw, lay)
    ck = pl.checkpoint_plan(req, hw)
    got = {"train_flops": c.flops, "gpu_days": c.gpu_days, "wall_days": c.wall_days,
           "mem_static": pl.memory_per_gpu(req, lay).static_bytes / 1e9, "a2a_bytes": t.a2a_bytes / 1e9,
           "ckpt_bytes": ck.bytes / 1e12, "ckpt_s": ck.write_s, "fail_per_day": ck.failures_per_day,
           "ckpt_interval": ck.interval_s / 60}
    for name, want in page.items():
        assert math.isclose(got[name], want, rel_tol=1e-3), f"{name}: got {got[name]:.6g}, the page says {want}"
    for i in range(len(CHANGED)):  # the same quantities on requirements the page does not work out
        req, hw = changed(pl, i)
        c = pl.train_compute(req, hw)
        gs = ref_gpu_seconds(req, hw)
        assert close(c.flops, 6 * req.active_params * req.tokens), f"case {i}: flops {c.flops:.4g}"
        assert close(c.gpu_days, gs / 86400) and close(c.wall_days, gs / req.n_gpus / 86400), \
            f"case {i}: gpu_days {c.gpu_days:.6g} (want {gs / 86400:.6g}), wall_days {c.wall_days:.6g}"
        ck = pl.checkpoint_plan(req, hw)
        assert close(ck.mtbf_s, ref_job_mtbf_s(req)), f"case {i}: job MTBF {ck.mtbf_s:.6g} s"
        assert close(ck.bytes, 14 * req.total_params), f"case {i}: checkpoint bytes {ck.bytes:.6g}"
    # one input changed, the others the same: the answer follows (nothing cached on the requirements alone)
    fast = dataclasses.replace(pl.H200, peak_flops=1979e12)
    c = pl.train_compute(pl.WORKED, fast)
    gs = ref_gpu_seconds(pl.WORKED, fast)
    assert close(c.gpu_days, gs / 86400), f"same model, 2x the peak: gpu_days {c.gpu_days:.6g}, want {gs / 86400:.6g}"


@pytest.mark.points(1)
def test_gpus_for_deadline_is_the_smallest_whole_node_count(pl):
    # exact fit: 10 days on exactly 1000 GPUs; every intermediate is exact in float64 in any order
    req = dataclasses.replace(pl.WORKED, active_params=2.0**30, tokens=10_000 * 14_400 * 2.0**19, mfu=0.5)
    hw = dataclasses.replace(pl.H200, peak_flops=2.0**50)
    assert pl.gpus_for_deadline(req, hw, 10.0) == 1000, "exact fit: 1000 GPUs finish in exactly 10 days"
    assert pl.gpus_for_deadline(req, hw, 10.0 * (1 - 1e-6)) == 1008, "a hair less time needs one more node"
    assert pl.gpus_for_deadline(req, hw, 10.0 * 1000 / 993) == 1000, "993 GPUs round up to whole nodes: 1000"
    for i in range(len(CHANGED)):
        req, hw = changed(pl, i)
        for days in (3.7, 14.0, 21.0, 60.5):
            got = pl.gpus_for_deadline(req, hw, days)
            g = hw.gpus_per_node
            n = g
            while ref_gpu_seconds(req, hw) / n / 86400 > days:  # search, not a closed form
                n += g
            assert got == n, f"case {i}, {days} days: {got} GPUs, the smallest whole-node count is {n}"
            more = dataclasses.replace(req, n_gpus=got + g)
            exact = dataclasses.replace(req, n_gpus=got)
            assert pl.train_compute(more, hw).wall_days <= pl.train_compute(exact, hw).wall_days <= days
    req, hw = pl.WORKED, pl.H200
    for g in (8, 6, 4):  # same requirements and deadline, other node size: the answer follows the hardware
        node = dataclasses.replace(hw, gpus_per_node=g)
        n = g
        while ref_gpu_seconds(req, node) / n / 86400 > 14.0:
            n += g
        got = pl.gpus_for_deadline(req, node, 14.0)
        assert got == n, f"{g}-GPU nodes, 14 days: {got} GPUs, the smallest whole-node count is {n}"
    counts = [pl.gpus_for_deadline(req, hw, d) for d in (7, 10, 14, 21, 30, 45)]
    assert counts == sorted(counts, reverse=True), f"a longer deadline never needs more GPUs: {counts}"


@pytest.mark.points(1)
def test_layout_rules_and_memory_ledger(pl):
    req, hw = pl.WORKED, pl.H200
    ok = [(1, 1, 8, 64, 2048), (8, 1, 1, 32, 2048), (2, 2, 4, 64, 1024), (1, 4, 16, 256, 256), (4, 1, 2, 8, 2048)]
    bad = [((1, 1, 8, 64, 1024), "does not tile 16384 GPUs"),
           ((16, 1, 1, 8, 1024), "TP = 16 crosses the 8-GPU node"),
           ((1, 1, 8, 96, 2048), "256 experts do not split 96 ways"),
           ((1, 1, 16, 512, 1024), "more EP ranks than experts"),
           ((1, 1, 64, 8, 256), "64 stages for 61 layers")]
    for t in ok:
        assert ref_valid(req, hw, *t)
        assert pl.is_valid(req, hw, pl.Layout(*t)), f"{t} is a valid layout of the worked case"
    for t, why in bad:
        assert not ref_valid(req, hw, *t)
        assert not pl.is_valid(req, hw, pl.Layout(*t)), f"{t}: {why}"
    small = dataclasses.replace(req, n_gpus=4096, global_batch_seqs=1000)
    assert not pl.is_valid(small, hw, pl.Layout(tp=1, cp=1, pp=4, ep=8, dp=1024)), "1000 seqs over 1024 replicas"
    small = dataclasses.replace(req, n_gpus=4096, global_batch_seqs=1024, seq_len=4040)
    assert not pl.is_valid(small, hw, pl.Layout(tp=1, cp=32, pp=1, ep=8, dp=128)), "4040 tokens do not split over cp = 32"
    assert pl.is_valid(small, hw, pl.Layout(tp=1, cp=8, pp=4, ep=8, dp=128)), "cp = 8 splits 4040; ep folds into dp x cp"
    tiny = dataclasses.replace(req, n_gpus=64, global_batch_seqs=64)
    assert not pl.is_valid(tiny, hw, pl.Layout(tp=1, cp=1, pp=8, ep=16, dp=8)), "EP = 16 must divide dp x cp = 8"
    short = dataclasses.replace(req, n_layers=16, n_moe_layers=15)
    assert pl.is_valid(short, hw, pl.Layout(tp=1, cp=1, pp=16, ep=64, dp=1024)), "pp = L = 16: one layer a stage is valid"
    assert not pl.is_valid(short, hw, pl.Layout(tp=1, cp=1, pp=32, ep=64, dp=512)), "pp = 32 > L = 16 layers"
    r6 = dataclasses.replace(req, n_gpus=1536)
    six = dataclasses.replace(hw, gpus_per_node=6)
    tp4 = pl.Layout(tp=4, cp=1, pp=3, ep=8, dp=128)
    assert pl.is_valid(r6, hw, tp4), "TP = 4 divides an 8-GPU node"
    assert not pl.is_valid(r6, six, tp4), "same layout on 6-GPU nodes: TP = 4 does not divide 6, a TP group straddles nodes"
    assert pl.is_valid(r6, six, pl.Layout(tp=6, cp=1, pp=2, ep=8, dp=128)), "TP = 6 fills a 6-GPU node"
    assert pl.is_valid(r6, six, pl.Layout(tp=2, cp=1, pp=6, ep=8, dp=128)), "TP = 2 divides a 6-GPU node"
    assert pl.is_valid(tiny, hw, pl.Layout(tp=1, cp=2, pp=4, ep=16, dp=8)), "EP = 16 divides dp x cp = 16"
    cases = [(req, (1, 1, 8, 64, 2048)), (req, (8, 1, 1, 32, 2048)), (req, (2, 2, 4, 64, 1024)),
             (req, (1, 4, 16, 256, 256)), (req, (4, 1, 2, 8, 2048)),
             (dataclasses.replace(req, global_batch_seqs=4096), (1, 1, 8, 64, 2048)),   # m = 2 < pp = 8
             (dataclasses.replace(req, global_batch_seqs=2048), (1, 1, 16, 8, 1024)),   # m = 2, 61 / 16 uneven
             (dataclasses.replace(req, global_batch_seqs=8192), (1, 2, 4, 64, 2048)),   # CP = 2: m = B/dp = 4 = pp
             (dataclasses.replace(req, act_bytes_per_token_layer=50 * 7168), (1, 2, 4, 64, 2048))]
    for i in range(len(CHANGED)):
        r, _ = changed(pl, i)
        assert ref_valid(r, changed(pl, i)[1], *CHANGED_LAYOUT[i])
        cases.append((r, CHANGED_LAYOUT[i]))
    for r, t in cases:
        m = pl.memory_per_gpu(r, pl.Layout(*t))
        static, act = ref_memory(r, *t)
        assert close(m.static_bytes, static), f"{t}: static {m.static_bytes / 1e9:.4f} GB, expected {static / 1e9:.4f}"
        assert close(m.activation_bytes, act), f"{t}: activations {m.activation_bytes / 1e9:.4f} GB, " \
                                               f"expected {act / 1e9:.4f}"
        assert close(m.total_bytes, static + act)


@pytest.mark.points(1)
def test_plan_layout_is_the_smallest_pp_that_fits(pl):
    hw = pl.H200
    runs = [(pl.WORKED, hw, 1, 64, 1), (pl.WORKED, hw, 1, 8, 1), (pl.WORKED, hw, 8, 32, 1),
            (pl.WORKED, hw, 1, 64, 2), (pl.WORKED, dataclasses.replace(hw, hbm_bytes=80e9), 1, 64, 1)]
    for i in range(len(CHANGED)):
        r, h = changed(pl, i)
        runs += [(r, h, 1, {0: 96, 1: 32, 2: 64}[i], 1), (r, h, 2, 16, 1)]
    for req, hw_, tp, ep, cp in runs:
        want = ref_plan(req, hw_, tp, ep, cp)
        got = pl.plan_layout(req, hw_, tp, ep, cp)
        where = f"tp={tp} ep={ep} cp={cp}, {req.n_gpus} GPUs, HBM {hw_.hbm_bytes / 1e9:.0f} GB"
        if want is None:
            assert got is None, f"{where}: nothing fits, got {got}"
            continue
        assert got is not None, f"{where}: pp={want[2]} fits, got None"
        assert (got.tp, got.cp, got.pp, got.ep, got.dp) == want, f"{where}: got {got}, want pp={want[2]}"
        assert got.tp * got.cp * got.pp * got.dp == req.n_gpus
    # exact fit: every byte count below is exact in float64, and HBM minus reserve equals the pp=2 total
    req = dataclasses.replace(pl.WORKED, n_gpus=64, global_batch_seqs=64, seq_len=1024, n_layers=12, n_moe_layers=10,
                              n_experts=16, total_params=2.0**34 + 2.0**30, expert_params=2.0**34,
                              act_bytes_per_token_layer=2.0**12)
    fit = sum(ref_memory(req, 1, 1, 2, 8, 32))
    assert fit < sum(ref_memory(req, 1, 1, 1, 8, 64))
    exact = dataclasses.replace(hw, hbm_bytes=fit + 2.0**33, reserve_bytes=2.0**33)
    got = pl.plan_layout(req, exact, 1, 8)
    assert got is not None and got.pp == 2, f"memory exactly equal to HBM minus reserve fits (<=): got {got}"
    under = dataclasses.replace(exact, hbm_bytes=exact.hbm_bytes - 1.0)
    got = pl.plan_layout(req, under, 1, 8)
    assert ref_plan(req, under, 1, 8, 1)[2] == 4
    assert got is not None and got.pp == 4, f"one byte short of pp=2: the next valid pp is 4 (3 does not divide 64), got {got}"
    short = dataclasses.replace(pl.WORKED, n_layers=16, n_moe_layers=15)   # pp = 16 needs ~23.3 GB, pp = 8 ~30.1 GB
    last = dataclasses.replace(hw, hbm_bytes=35e9, reserve_bytes=10e9)
    assert ref_plan(short, last, 1, 64, 1) == (1, 1, 16, 64, 1024)
    got = pl.plan_layout(short, last, 1, 64)
    assert got is not None and got.pp == 16, f"only pp = L = 16 fits 25 GB (the range of pp includes L): got {got}"
    tiny = dataclasses.replace(hw, hbm_bytes=11e9)
    assert pl.plan_layout(pl.WORKED, tiny, 1, 64) is None, "1 GB of usable HBM fits no layout: None"
    assert pl.plan_layout(pl.WORKED, hw, 1, 48) is None, "EP = 48 does not divide 256 experts: None"


@pytest.mark.points(1)
def test_traffic_per_tier_follows_rank_placement(pl):
    other = dataclasses.replace(pl.H200, gpus_per_node=4, nvlink_bytes_s=1800e9, nic_gbit_s=800.0)
    cases = [(pl.WORKED, pl.H200, (1, 1, 8, 64, 2048)), (pl.WORKED, other, (1, 1, 8, 64, 2048)),  # same model, other node
             (pl.WORKED, pl.H200, (8, 1, 1, 32, 2048)),
             (pl.WORKED, pl.H200, (1, 1, 8, 4, 2048)), (pl.WORKED, pl.H200, (2, 2, 4, 64, 1024)),
             (pl.WORKED, pl.H200, (4, 1, 16, 8, 256))]
    for i in range(len(CHANGED)):
        r, h = changed(pl, i)
        cases.append((r, h, CHANGED_LAYOUT[i]))
    for req, hw, t in cases:
        lay = pl.Layout(*t)
        s = pl.step_traffic(req, hw, lay)
        a2a = ref_a2a_per_gpu(req)
        local = ref_local_share(hw, t[0], t[3])
        nic_bytes_s = hw.nic_gbit_s * 1e9 / 8            # bits -> bytes
        link_one_way = hw.nvlink_bytes_s / 2             # the datasheet number counts both directions
        where = f"layout {t}, {req.n_gpus} GPUs"
        assert close(s.a2a_bytes, a2a), f"{where}: a2a {s.a2a_bytes / 1e9:.3f} GB, expected {a2a / 1e9:.3f}"
        assert close(s.nvlink_bytes, a2a * local), f"{where}: NVLink share {s.nvlink_bytes / s.a2a_bytes:.4f}, " \
                                                   f"expected {local:.4f}"
        assert close(s.rdma_bytes, a2a * (1 - local)), f"{where}: RDMA {s.rdma_bytes / 1e9:.3f} GB"
        assert close(s.nvlink_s, a2a * local / link_one_way), f"{where}: NVLink time {s.nvlink_s:.4f} s"
        assert close(s.rdma_s, a2a * (1 - local) / nic_bytes_s), f"{where}: RDMA time {s.rdma_s:.4f} s"
        step = 6 * req.active_params * req.global_batch_seqs * req.seq_len / req.n_gpus
        assert close(s.compute_s, step / (hw.peak_flops * req.mfu)), f"{where}: compute {s.compute_s:.4f} s"


@pytest.mark.points(1)
def test_checkpoint_interval_and_failure_budget(pl):
    runs = [(pl.WORKED, pl.H200)] + [changed(pl, i) for i in range(len(CHANGED))]
    for req, hw in runs:
        ck = pl.checkpoint_plan(req, hw)
        mtbf = ref_job_mtbf_s(req)
        delta = 14 * req.total_params / hw.storage_write_bytes_s
        tau = golden_min(lambda x, d=delta, m=mtbf: d / x + x / (2 * m), 1.0, 10 * mtbf)
        where = f"{req.n_gpus} GPUs, MTBF {req.gpu_mtbf_hours} h"
        assert close(ck.write_s, delta) and close(ck.failures_per_day, 86400 / mtbf), where
        assert close(ck.interval_s, tau, rel=1e-6), f"{where}: interval {ck.interval_s:.2f} s, the minimum is at {tau:.2f} s"
        assert close(ck.waste, ref_waste(delta, mtbf, req.restart_s, tau), rel=1e-9), f"{where}: waste {ck.waste:.5f}"
        for budget in (0.08, 0.15, 0.3):
            got = pl.storage_bw_for_waste(req, hw, budget)
            if req.restart_s / mtbf >= budget:
                assert got is None, f"{where}: restarts alone use {req.restart_s / mtbf:.3f} > {budget}: None"
                continue
            lo, hi = 1.0, 1e18                           # bisection on bandwidth (log scale)
            for _ in range(300):
                mid = math.sqrt(lo * hi)
                d = 14 * req.total_params / mid
                if ref_waste(d, mtbf, req.restart_s, math.sqrt(2 * d * mtbf)) <= budget:
                    hi = mid
                else:
                    lo = mid
            assert got is not None and close(got, hi, rel=1e-6), f"{where}, waste <= {budget}: {got} B/s, want {hi:.6g}"
    # the boundary: R/M is exactly 1/8 (1000 GPUs x 24 h / 24000 h = 1 failure a day, M = 86400 s, R = 10800 s);
    # every input and intermediate is exact in float64, so R/M == 0.125 in any order of operations
    req = dataclasses.replace(pl.WORKED, n_gpus=1000, gpu_mtbf_hours=24_000.0, restart_s=10_800.0)
    assert pl.storage_bw_for_waste(req, pl.H200, 0.125) is None, "waste budget equal to R/M: no bandwidth is enough"
    bw = pl.storage_bw_for_waste(req, pl.H200, 0.125 + 2.0**-6)
    assert bw is not None and close(bw, 14 * 671e9 * 2 / (86400 * 2.0**-12), rel=1e-6), bw
    # one input changed, the others the same: the plan follows it (nothing cached on the model and the GPU count)
    base = pl.checkpoint_plan(pl.WORKED, pl.H200)
    slow = pl.checkpoint_plan(pl.WORKED, dataclasses.replace(pl.H200, storage_write_bytes_s=250e9))
    assert close(slow.write_s, 2 * base.write_s), f"half the storage bandwidth: write {slow.write_s:.3f} s"
    assert close(slow.interval_s, math.sqrt(2) * base.interval_s), f"half the bandwidth: interval {slow.interval_s:.1f} s"
    late = pl.checkpoint_plan(dataclasses.replace(pl.WORKED, restart_s=1200.0), pl.H200)
    assert close(late.waste, base.waste + 600.0 / base.mtbf_s), f"restart 600 s -> 1200 s: waste {late.waste:.5f}"
    flaky = pl.checkpoint_plan(dataclasses.replace(pl.WORKED, gpu_mtbf_hours=25_000.0), pl.H200)
    assert close(flaky.failures_per_day, 2 * base.failures_per_day), f"half the MTBF: {flaky.failures_per_day} a day"
    sizes = [pl.checkpoint_plan(dataclasses.replace(pl.WORKED, n_gpus=n), pl.H200) for n in (4096, 16384, 65536)]
    assert sizes[0].interval_s > sizes[1].interval_s > sizes[2].interval_s, "more GPUs: shorter interval"
    assert close(sizes[0].interval_s / sizes[2].interval_s, 4.0), "16x the GPUs: interval / 4 (sqrt of M)"
    again = pl.checkpoint_plan(pl.WORKED, pl.H200)
    assert again == pl.checkpoint_plan(pl.WORKED, pl.H200), "same inputs, same plan (no hidden state)"
