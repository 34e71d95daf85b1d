"""cute-08 tests: launch arithmetic exact against closed forms; stages against CUTLASS's formula and against
the stage counts nvMatmulHeuristics reports; the modelled time term by term; the selector's pick against
NVIDIA's own selector, nvMatmulHeuristics 0.1.0.27 with its predefined H200_SXM profile.

How the library is used (nvMatmulHeuristics.py of 0.1.0.27):
- `NvMatmulHeuristicsInterfaceEx(backend=CUTLASS3, flags=PERF_MODEL_BASED_AUTO_TUNING, gpu=H200_SXM)`; the
  predefined GPU profile means no GPU is needed. Precision "TST": bf16 A/B, fp32 compute, bf16 D.
  Layout NN_ROW_MAJOR (A is M x K, B is K x N, both row-major).
- `get(problem, n, precision)` returns its top-n configurations with their modelled runtime.
- The runtime of an ARBITRARY configuration: the C function `nvMatmulHeuristicsEstimateRuntime` (the
  wrapper's own `estimateRuntime` calls a base-class method that 0.1.0.27 lacks). It returns 0.0 for a
  configuration the library considers invalid for the backend; such candidates are left out.
  The rasterization order (ctaOrder) is not part of our Config: a config is rated by its better order.
"""

import ctypes
import functools
import itertools
import math
import random
from fractions import Fraction

import pytest

# ---------------------------------------------------------------------------------------------------------
# The README's formulas, written out independently (the oracle for the exact tests)

KIB = 1024
SMS, SMEM_SM, SMEM_BLOCK = 132, 228 * KIB, 227 * KIB  # docs/hardware.md
PEAK, DRAM_BW, FILL_BW = 989e12, 4.2e12, 10e12


def hw_dict(sms=SMS, smem_per_sm=SMEM_SM, smem_per_block=SMEM_BLOCK, peak=PEAK, dram=DRAM_BW, fill=FILL_BW):
    return {"sms": sms, "smem_per_sm": smem_per_sm, "smem_per_block": smem_per_block,
            "peak_flops": peak, "dram_bw": dram, "fill_bw": fill}


def ceil_div(a, b):
    return math.ceil(Fraction(a, b))


def ref_grid(M, N, K, bm, bn, bk, cm, cn, sk):
    tm = ceil_div(ceil_div(M, bm), cm) * cm
    tn = ceil_div(ceil_div(N, bn), cn) * cn
    kit = ceil_div(ceil_div(K, bk), sk)
    return tm, tn, kit, tm * tn * sk


def ref_stage_bytes(bm, bn, bk, dt):
    return ceil_div((bm + bn) * bk * dt, 128) * 128 + 16


def ref_stages(bm, bn, bk, dt, reserve, capacity):
    # CUTLASS v4.2.0 sm90_gmma_builder.inl, compute_stage_count_or_override(StageCountAutoCarveout<R>)
    return ((capacity // 128) * 128 - ceil_div(reserve, 128) * 128) // ref_stage_bytes(bm, bn, bk, dt)


def ref_reserve(bm):
    return 2 * min(bm, 128) * 32 * 2


def ref_model(M, N, K, c, hw):
    """Returns a dict of every Estimate field under the README's model."""
    tm, tn, kit, ctas = ref_grid(M, N, K, c.bm, c.bn, c.bk, c.cluster_m, c.cluster_n, c.split_k)
    stages = c.stages if c.stages is not None else ref_stages(c.bm, c.bn, c.bk, 2, ref_reserve(c.bm),
                                                               hw["smem_per_block"])
    smem = stages * ref_stage_bytes(c.bm, c.bn, c.bk, 2) + ceil_div(ref_reserve(c.bm), 128) * 128
    per_sm = hw["smem_per_sm"] // (smem + hw["smem_per_sm"] - hw["smem_per_block"])
    size = c.cluster_m * c.cluster_n
    conc = (hw["sms"] * per_sm) // size * size
    if stages < 2 or conc == 0:
        return {"total": math.inf, "ctas": ctas, "concurrent": conc}
    waves = ceil_div(ctas, conc)
    tile_time = 2 * c.bm * c.bn * kit * c.bk * hw["sms"] / hw["peak_flops"]
    compute = waves * per_sm * tile_time
    fill = waves * conc * (Fraction(c.bm, c.cluster_n) + Fraction(c.bn, c.cluster_m)) * kit * c.bk * 2 / hw["fill_bw"]
    dram = ((M * K + K * N) * 2 + M * N * 2) / hw["dram_bw"]
    reduce = 2 * c.split_k * M * N * 4 / hw["dram_bw"] if c.split_k > 1 else 0.0
    padded = (tm * c.bm) * (tn * c.bn) * (c.split_k * kit * c.bk)
    return {"total": max(compute, float(fill), dram) + reduce, "compute": compute, "fill": float(fill),
            "dram": dram, "reduce": reduce, "waves": waves, "wave_efficiency": ctas / (waves * conc),
            "tile_efficiency": M * N * K / padded, "ctas": ctas, "concurrent": conc}


# ---------------------------------------------------------------------------------------------------------
# nvMatmulHeuristics


@functools.cache
def nvmmh():
    from nvMatmulHeuristics import (
        NvMatmulHeuristicsFlags,
        NvMatmulHeuristicsInterfaceEx,
        NvMatmulHeuristicsMatmulLayout,
        NvMatmulHeuristicsNvidiaGpu,
        NvMatmulHeuristicsTarget,
    )

    h = NvMatmulHeuristicsInterfaceEx(backend=NvMatmulHeuristicsTarget.CUTLASS3,
                                      flags=NvMatmulHeuristicsFlags.PERF_MODEL_BASED_AUTO_TUNING,
                                      gpu=NvMatmulHeuristicsNvidiaGpu.H200_SXM)
    layout = NvMatmulHeuristicsMatmulLayout.NN_ROW_MAJOR
    h._ensure_discovery_loaded(h.target, "TST", layout)  # what get() does before rating; harmless without a set
    return h, layout


@functools.cache
def lib_top(M, N, K, count=8):
    h, layout = nvmmh()
    return h.get(h.makeNvMatmulHeuristicsProblem(M, N, K, layout), count, precision="TST")


@functools.cache
def lib_runtime(M, N, K, bm, bn, bk, cm, cn, sk):
    """The library's modelled runtime (s) of one configuration, by its better rasterization order;
    None when the library rejects it."""
    h, layout = nvmmh()
    problem = h.makeNvMatmulHeuristicsProblem(M, N, K, layout)
    times = []
    for order in (0, 1):
        k = h.nvmmhKernelConfiguration()
        k.cta[:] = [bm, bn, bk]
        k.warp[:] = [64, min(bn, 64), bk]  # warp/instruction tiles do not change the estimate for sm90
        k.instr[:] = [64, 8, 16]
        k.splitK, k.gridSwizzle, k.ctaOrder = sk, 1, order
        k.loadStages = max(2, min(8, ref_stages(bm, bn, bk, 2, 0, SMEM_BLOCK)))  # the estimate ignores it
        k.cluster[:] = [cm, cn]
        t = h.nvMatmulHeuristicsEstimateRuntime(h.handle, b"TST", ctypes.c_int(h.target), ctypes.byref(problem),
                                                ctypes.byref(k), h.hardware_descriptor)
        if t > 0:
            times.append(t)
    return min(times) if times else None


TILES = [(bm, bn) for bm in (64, 128, 256) for bn in (64, 128, 256) if (bm, bn) != (256, 256)]
CLUSTERS = [(1, 1), (2, 1), (1, 2)]
SPLITS = [1, 2, 4, 8, 16]


def candidates(sel, M, N, K):
    """The candidate grid of the README, minus what the library refuses to rate."""
    out = []
    for (bm, bn), (cm, cn), sk in itertools.product(TILES, CLUSTERS, SPLITS):
        if lib_runtime(M, N, K, bm, bn, 64, cm, cn, sk) is not None:
            out.append(sel.Config(bm, bn, 64, cm, cn, sk))
    return out


def lib_of(M, N, K, c):
    return lib_runtime(M, N, K, c.bm, c.bn, c.bk, c.cluster_m, c.cluster_n, c.split_k)


# ---------------------------------------------------------------------------------------------------------
# 1. Wave and tile quantization


def random_cases(seed, n):
    rng = random.Random(seed)
    for _ in range(n):
        small = rng.random() < 0.3
        M, N = (rng.randint(1, 300) if small else rng.randint(1, 20000) for _ in range(2))
        K = rng.randint(1, 300) if rng.random() < 0.2 else rng.randint(1, 70000)
        bm, bn = rng.choice([16, 32, 48, 64, 96, 128, 192, 256]), rng.choice([16, 32, 64, 80, 128, 256])
        yield M, N, K, bm, bn, rng.choice([16, 32, 64, 128]), rng.choice([1, 2, 4]), rng.choice([1, 2, 4]), \
            rng.choice([1, 2, 3, 4, 5, 8, 16])


@pytest.mark.points(2)
def test_grid_and_tile_efficiency_match_closed_forms(lesson):
    sel = lesson.load("selection.py")
    for M, N, K, bm, bn, bk, cm, cn, sk in random_cases(1, 600):
        c = sel.Config(bm, bn, bk, cm, cn, sk)
        g = sel.grid(M, N, K, c)
        want = ref_grid(M, N, K, bm, bn, bk, cm, cn, sk)
        assert (g.tiles_m, g.tiles_n, g.k_iters, g.ctas) == want, (M, N, K, c)
        tm, tn, kit, _ = want
        eff = Fraction(M * N * K, (tm * bm) * (tn * bn) * (sk * kit * bk))
        assert sel.tile_efficiency(M, N, K, c) == pytest.approx(float(eff), rel=1e-12), (M, N, K, c)


@pytest.mark.points(2)
def test_wave_quantization_matches_closed_form(lesson):
    sel = lesson.load("selection.py")
    rng = random.Random(2)
    cases = [(rng.randint(1, 20000), rng.randint(1, 800)) for _ in range(600)]
    cases += [(1, 132), (131, 132), (132, 132), (133, 132), (264, 132), (265, 132), (133, 264), (660, 660), (1, 1)]
    for ctas, conc in cases:
        waves = ceil_div(ctas, conc)
        got = sel.wave_quantization(ctas, conc)
        assert got[0] == waves and got[1] == pytest.approx(ctas / (waves * conc), rel=1e-12), (ctas, conc, got)


def test_edge_cases_of_the_launch(lesson):
    sel = lesson.load("selection.py")
    C = sel.Config
    # M smaller than one tile: one CTA row, mostly padding
    assert sel.grid(50, 4096, 1000, C(128, 128)).tiles_m == 1
    assert sel.tile_efficiency(50, 4096, 1000, C(128, 128)) == pytest.approx(50 / 128 * 1000 / 1024, rel=1e-12)
    # K smaller than bk, and more splits than k-blocks: every split still runs one full bk-iteration
    assert sel.grid(256, 256, 10, C(128, 128, 64)).k_iters == 1
    g = sel.grid(256, 256, 128, C(128, 128, 64, split_k=4))
    assert (g.k_iters, g.ctas) == (1, 16)
    assert sel.tile_efficiency(256, 256, 128, C(128, 128, 64, split_k=4)) == pytest.approx(0.5, rel=1e-12)
    # sizes beyond float precision (README: integer ceilings, not math.ceil(a / b)): 2**60 + 1 rows need 2**53 + 1 tiles
    big = sel.grid(2**60 + 1, 128, 2**62 + 1, C(128, 128, 64, split_k=2))
    assert (big.tiles_m, big.k_iters) == (2**53 + 1, 2**55 + 1), big
    # a 7 x 19 tile grid under a 2 x 1 cluster launches 8 x 19
    g = sel.grid(896, 2432, 4096, C(128, 128, 64, 2, 1))
    assert (g.tiles_m, g.tiles_n, g.ctas) == (8, 19, 152)
    # exactly one wave: 11 x 12 = 132 tiles; one tile more than a wave: 7 x 19 = 133
    one = sel.modelled_time(1408, 1536, 4096, C(128, 128))
    assert (one.ctas, one.concurrent, one.waves) == (132, 132, 1) and one.wave_efficiency == pytest.approx(1.0)
    tail = sel.modelled_time(896, 2432, 4096, C(128, 128))
    assert (tail.ctas, tail.waves) == (133, 2) and tail.wave_efficiency == pytest.approx(133 / 264, rel=1e-12)
    assert tail.compute == pytest.approx(2 * one.compute, rel=1e-12)  # the 133rd tile costs a whole wave
    # split-K multiplies the CTAs: 8 x 8 tiles, 2 splits = 128 CTAs in one wave; 4 splits = 256 in two
    assert sel.modelled_time(1024, 1024, 8192, C(128, 128, split_k=2)).waves == 1
    e = sel.modelled_time(1024, 1024, 8192, C(128, 128, split_k=4))
    assert (e.ctas, e.waves) == (256, 2) and e.wave_efficiency == pytest.approx(256 / 264, rel=1e-12)


# ---------------------------------------------------------------------------------------------------------
# 2. Stages and occupancy


def test_stages_match_cutlass_formula(lesson):
    sel = lesson.load("selection.py")
    rng = random.Random(3)
    for _ in range(500):
        bm, bn = rng.randrange(16, 272, 16), rng.randrange(8, 264, 8)
        bk, dt = rng.choice([16, 32, 64, 128]), rng.choice([1, 2, 4])
        reserve, cap = rng.randint(0, 40000), rng.choice([232448, 166912, 101376, 232448 + 77])
        c = sel.Config(bm, bn, bk)
        assert sel.stage_bytes(c, dt) == ref_stage_bytes(bm, bn, bk, dt), (c, dt)
        assert sel.stages_that_fit(c, dt, reserve, cap) == ref_stages(bm, bn, bk, dt, reserve, cap), (c, dt, reserve, cap)
        assert sel.stages_that_fit(c) == ref_stages(bm, bn, bk, 2, ref_reserve(bm), SMEM_BLOCK), c
    # capacities that are not a multiple of 128 B lose their tail even when whole stages would fit into it:
    # 7 stages of 32784 B = 229488 B, but floor(229488 / 128) * 128 = 229376 leaves room for 6
    for bm, bn, bk, dt, reserve, cap in [(128, 128, 64, 2, 0, 229488), (128, 128, 64, 2, 4096, 229488 + 4096),
                                         (64, 64, 64, 2, 0, 14 * 16400 + 20)]:
        c = sel.Config(bm, bn, bk)
        want = ref_stages(bm, bn, bk, dt, reserve, cap)
        assert want < (cap - ceil_div(reserve, 128) * 128) // ref_stage_bytes(bm, bn, bk, dt)  # the case bites
        assert sel.stages_that_fit(c, dt, reserve, cap) == want, (c, dt, reserve, cap)
    # values of CUTLASS v4.2.0's constexpr compute_stage_count_or_override (bf16, compiled with g++)
    for bm, bn, bk, reserve, stages in [(64, 64, 64, 0, 14), (128, 128, 64, 0, 7), (128, 128, 64, 16384, 6),
                                        (128, 256, 64, 16384, 4), (64, 64, 32, 100, 28), (128, 128, 128, 16384, 3)]:
        assert sel.stages_that_fit(sel.Config(bm, bn, bk), 2, reserve, 232448) == stages, (bm, bn, bk, reserve)


def test_stages_agree_with_nvmatmulheuristics(lesson):
    """nvMatmulHeuristics reports min(8, CUTLASS's count with no carve-out) for every configuration it returns."""
    sel = lesson.load("selection.py")
    h, layout = nvmmh()
    rng = random.Random(4)
    checked = 0
    for prec, dt in [("TST", 2), ("QQTST", 1), ("SSS", 4)]:
        for _ in range(12):
            M, N, K = (int(2 ** rng.uniform(6, 14)) for _ in range(3))
            for r in h.get(h.makeNvMatmulHeuristicsProblem(M, N, K, layout), 8, precision=prec):
                k = r["kernel"]
                c = sel.Config(k.cta_tile_m, k.cta_tile_n, k.cta_tile_k)
                assert min(8, sel.stages_that_fit(c, dt, 0, SMEM_BLOCK)) == k.stages, (prec, str(k))
                checked += 1
    assert checked > 100


def test_ctas_per_sm_and_concurrency(lesson):
    sel = lesson.load("selection.py")
    rng = random.Random(5)
    for _ in range(400):
        bm, bn, bk = rng.choice([64, 128, 256]), rng.choice([32, 64, 128, 256]), rng.choice([32, 64, 128])
        cm, cn = rng.choice([(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 3)])
        c = sel.Config(bm, bn, bk, cm, cn, 1, rng.choice([None, 2, 3, 4, 5, 6]))
        hw = hw_dict(sms=rng.choice([132, 7, 114, 133]))
        e = ref_model(1000, 1000, 1000, c, hw)
        stages = c.stages if c.stages is not None else ref_stages(bm, bn, bk, 2, ref_reserve(bm), SMEM_BLOCK)
        smem = stages * ref_stage_bytes(bm, bn, bk, 2) + ceil_div(ref_reserve(bm), 128) * 128
        assert sel.smem_per_cta(c, hw) == smem
        assert sel.ctas_per_sm(c, hw) == SMEM_SM // (smem + 1024), c
        assert sel.concurrent_ctas(c, hw) == e["concurrent"], (c, hw["sms"])
    # other shared-memory sizes: the SM's capacity and the per-block reserve come from hw (A100-like; made up)
    for smem_sm, smem_block in [(164 * 1024, 163 * 1024), (100 * 1024, 98 * 1024)]:
        hw = hw_dict(smem_per_sm=smem_sm, smem_per_block=smem_block)
        for bm, bn, bk, st in [(64, 64, 64, 2), (128, 128, 32, None), (64, 32, 32, 3), (128, 64, 64, 2)]:
            c = sel.Config(bm, bn, bk, stages=st)
            stages = st if st is not None else ref_stages(bm, bn, bk, 2, ref_reserve(bm), smem_block)
            smem = stages * ref_stage_bytes(bm, bn, bk, 2) + ceil_div(ref_reserve(bm), 128) * 128
            assert sel.ctas_per_sm(c, hw) == smem_sm // (smem + smem_sm - smem_block), (c, smem_sm, smem_block)
    # 64 x 64 x 64 with 2 stages: 2 * 16400 + 8192 B per CTA -> 5 CTAs per SM, 660 on the GPU
    c = sel.Config(64, 64, 64, stages=2)
    assert (sel.ctas_per_sm(c), sel.concurrent_ctas(c)) == (5, 660)
    e = sel.modelled_time(4096, 4096, 4096, c)
    assert (e.concurrent, e.waves) == (660, 7) and e.wave_efficiency == pytest.approx(4096 / 4620, rel=1e-12)


# ---------------------------------------------------------------------------------------------------------
# 3. The modelled time and the selector


@pytest.mark.points(2)
def test_modelled_time_is_the_stated_model(lesson):
    sel = lesson.load("selection.py")
    rng = random.Random(6)
    for _i in range(500):
        M, N, K = rng.randint(1, 16384), rng.randint(1, 16384), rng.randint(1, 65536)
        bm, bn = rng.choice([64, 128, 256]), rng.choice([64, 128, 256])
        cm, cn = rng.choice([(1, 1), (2, 1), (1, 2), (2, 2)])
        c = sel.Config(bm, bn, rng.choice([32, 64, 128]), cm, cn, rng.choice([1, 2, 3, 4, 8, 16]),
                       rng.choice([None, None, 2, 3, 4, 1, 30]))
        hw = hw_dict(sms=rng.choice([132, 132, 7]), fill=rng.choice([10e12, 3e12]),
                     dram=(DRAM_BW, 3.35e12)[_i % 2], peak=(PEAK, 1979e12)[(_i // 2) % 2])  # every hw key is used
        want, got = ref_model(M, N, K, c, hw), sel.modelled_time(M, N, K, c, hw)
        if math.isinf(want["total"]):
            assert math.isinf(got.total), (M, N, K, c, "cannot run: fewer than 2 stages or no room on an SM")
            continue
        for field, value in want.items():
            assert getattr(got, field) == pytest.approx(value, rel=1e-9), (M, N, K, c, field)


def test_select_returns_the_first_fastest(lesson):
    sel = lesson.load("selection.py")
    C = sel.Config
    rng = random.Random(7)
    grid_all = [C(bm, bn, 64, cm, cn, sk) for (bm, bn), (cm, cn), sk in itertools.product(TILES, CLUSTERS, SPLITS)]
    for _ in range(60):
        M, N, K = int(2 ** rng.uniform(6, 14)), int(2 ** rng.uniform(6, 14)), int(2 ** rng.uniform(7, 16))
        cands = rng.sample(grid_all, rng.randint(1, 40)) + [C(256, 256, 128)]  # the last cannot run
        rng.shuffle(cands)
        pick = sel.select(M, N, K, cands)
        assert pick in cands
        times = [ref_model(M, N, K, c, hw_dict())["total"] for c in cands]
        assert ref_model(M, N, K, pick, hw_dict())["total"] <= min(times) * (1 + 1e-9), (M, N, K, pick)
    # ties go to the earliest candidate (M = N: the transposed tiles take the same time)
    a, b = C(128, 256), C(256, 128)
    assert sel.select(4096, 4096, 4096, [a, b]) == a and sel.select(4096, 4096, 4096, [b, a]) == b
    with pytest.raises(ValueError):
        sel.select(4096, 4096, 4096, [C(256, 256, 128), C(128, 128, 64, stages=1)])


# Shapes for the comparison with the library: LLM-sized GEMMs, wave-quantization victims, skinny ones,
# then 30 random shapes (M, N in 256..16384, K in 256..65536, log-uniform, seed 0).
FIXED_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 4096), (4096, 14336, 4096),
                (8192, 1024, 8192), (1024, 1024, 1024), (2048, 2048, 2048), (4224, 4224, 4096),
                (1000, 3000, 2000), (256, 256, 65536), (512, 512, 32768), (256, 4096, 14336),
                (128, 8192, 8192), (896, 2432, 8192), (1408, 1536, 4096)]
MARGIN, GEO_MARGIN, GEO_TOP_MARGIN = 1.6, 1.10, 1.15


def comparison_shapes():
    rng = random.Random(0)
    rand = [(int(2 ** rng.uniform(8, 14)), int(2 ** rng.uniform(8, 14)), int(2 ** rng.uniform(8, 16)))
            for _ in range(30)]
    return FIXED_SHAPES + rand


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


@pytest.mark.points(3)
def test_pick_is_close_to_nvmatmulheuristics_best(lesson):
    """Rated by the library's own runtime model: the learner's pick is within MARGIN of the best candidate of
    the same list on every shape and within GEO_MARGIN on the geometric mean; against the library's own
    first choice (searched over its whole space: 128x192 tiles, 4-CTA clusters, ...) within GEO_TOP_MARGIN."""
    sel = lesson.load("selection.py")
    vs_list, vs_top, worst = [], [], []
    for M, N, K in comparison_shapes():
        cands = candidates(sel, M, N, K)
        pick = sel.select(M, N, K, cands)
        mine = lib_of(M, N, K, pick)
        ratio = mine / min(lib_of(M, N, K, c) for c in cands)
        vs_list.append(ratio)
        vs_top.append(mine / lib_top(M, N, K)[0]["runtime"])
        if ratio > MARGIN:
            worst.append(f"{M}x{N}x{K}: pick {pick} is {ratio:.2f}x the best candidate by the library's estimate")
    assert not worst, "; ".join(worst)
    assert geomean(vs_list) <= GEO_MARGIN, f"geometric mean {geomean(vs_list):.3f}x the best candidate (limit {GEO_MARGIN})"
    assert geomean(vs_top) <= GEO_TOP_MARGIN, \
        f"geometric mean {geomean(vs_top):.3f}x the library's own first choice (limit {GEO_TOP_MARGIN})"


@pytest.mark.points(2)
def test_split_k_for_skinny_shapes_like_the_library(lesson):
    """Small M*N, huge K: too few output tiles to fill 132 SMs. The library's first choice splits K; so must
    the learner's selector. A big square GEMM already fills the GPU: neither splits."""
    sel = lesson.load("selection.py")
    for M, N, K in [(256, 256, 65536), (128, 128, 65536), (512, 512, 32768)]:
        top = lib_top(M, N, K)[0]["kernel"]
        assert top.split_k > 1, f"library top pick for {M}x{N}x{K}: {top}"
        pick = sel.select(M, N, K, candidates(sel, M, N, K))
        assert pick.split_k > 1, f"{M}x{N}x{K}: picked {pick}; only {math.ceil(M / pick.bm) * math.ceil(N / pick.bn)} tiles for 132 SMs"
        assert lib_of(M, N, K, pick) <= MARGIN * lib_top(M, N, K)[0]["runtime"], (M, N, K, pick)
    for M, N, K in [(8192, 8192, 8192), (4096, 14336, 4096)]:
        assert lib_top(M, N, K)[0]["kernel"].split_k == 1
        assert sel.select(M, N, K, candidates(sel, M, N, K)).split_k == 1, (M, N, K)
