"""cute-08: choosing a Hopper GEMM configuration (CTA tile, pipeline stages, cluster, split-K) for M, N, K.

Everything here is arithmetic on the launch, not a kernel: how many CTAs a configuration launches, how many
waves they take on the H200's 132 SMs, how many pipeline stages fit into shared memory, and a simple
roofline-per-wave model of the run time (README.md states it term by term). `select` returns the candidate
with the smallest modelled time; the tests compare that pick with NVIDIA's own selector, nvMatmulHeuristics.

Data types: A and B in bf16, accumulation in fp32, D written in bf16 (`IN_BYTES`, `ACC_BYTES`, `OUT_BYTES`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

KIB = 1024

# H200 SXM, course values from docs/hardware.md, except fill_bw: a fitted model parameter (README; measured L2 -> SM
# read bandwidth is 8.3 TB/s in docs/hardware.md).
H200 = {
    "sms": 132,                    # multiProcessorCount
    "smem_per_sm": 228 * KIB,      # sharedMemPerMultiprocessor
    "smem_per_block": 227 * KIB,   # sharedMemPerBlockOptin (= CUTLASS detail::sm90_smem_capacity_bytes, 232448)
    "peak_flops": 989e12,          # bf16 dense tensor-core peak, FLOP/s
    "dram_bw": 4.2e12,             # measured device-to-device copy bandwidth, B/s
    "fill_bw": 10e12,              # L2 -> shared memory operand bandwidth, B/s: a stated model parameter
}

IN_BYTES, OUT_BYTES, ACC_BYTES = 2, 2, 4  # bf16 A/B, bf16 D, fp32 accumulators and split-K partials
BARRIER_BYTES = 16  # per stage: one "full" and one "empty" mbarrier of 8 B (PipelineTmaAsync::SharedStorage)
SMEM_ALIGN = 128    # CUTLASS rounds stage and carve-out sizes up to 128 B


@dataclass(frozen=True)
class Config:
    """One GEMM configuration: CTA tile bm x bn x bk, thread-block cluster cluster_m x cluster_n (CTAs along M
    and along N), split_k slices of K, and the pipeline depth (None: as many stages as fit)."""

    bm: int
    bn: int
    bk: int = 64
    cluster_m: int = 1
    cluster_n: int = 1
    split_k: int = 1
    stages: int | None = None


@dataclass(frozen=True)
class Grid:
    tiles_m: int  # CTA rows along M, padded up to a multiple of cluster_m
    tiles_n: int  # CTA columns along N, padded up to a multiple of cluster_n
    k_iters: int  # bk-wide iterations of the MAC loop that one CTA runs (its share of K)
    ctas: int     # CTAs launched: tiles_m * tiles_n * split_k


@dataclass(frozen=True)
class Estimate:
    total: float            # seconds: max(compute, fill, dram) + reduce
    compute: float          # tensor-core time, wave-quantized
    fill: float             # operand loads into shared memory, wave-quantized
    dram: float             # compulsory HBM traffic: A and B read once, D written once
    reduce: float           # split-K: fp32 partials written and read back (0 without split-K)
    waves: int
    wave_efficiency: float  # ctas / (waves * concurrent)
    tile_efficiency: float  # useful M*N*K / padded M*N*K
    ctas: int
    concurrent: int         # CTAs resident at once on the whole GPU


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def round_up(x: int, align: int) -> int:
    return cdiv(x, align) * align


def epilogue_reserve(cfg: Config, out_bytes: int = OUT_BYTES) -> int:
    """Shared memory the epilogue keeps: two D sub-tiles of min(bm, 128) x 32 elements (the sm90 cooperative
    TMA epilogue's default sub-tile, StagesD = 2, no C source read)."""
    return 2 * min(cfg.bm, 128) * 32 * out_bytes


# ---------------------------------------------------------------------------------------------------------
# 1. Wave and tile quantization


def grid(M: int, N: int, K: int, cfg: Config) -> Grid:
    """The CTAs a configuration launches for an M x N x K GEMM."""
    ### HINT: every count is a ceiling; a cluster only launches whole, so pad the tile counts to its shape; K splits into split_k equal shares of bk-iterations
    ### BEGIN SOLUTION
    tiles_m = round_up(cdiv(M, cfg.bm), cfg.cluster_m)
    tiles_n = round_up(cdiv(N, cfg.bn), cfg.cluster_n)
    k_iters = cdiv(cdiv(K, cfg.bk), cfg.split_k)
    return Grid(tiles_m, tiles_n, k_iters, tiles_m * tiles_n * cfg.split_k)
    ### END SOLUTION


def wave_quantization(ctas: int, concurrent: int) -> tuple[int, float]:
    """(waves, wave efficiency) for `ctas` CTAs when `concurrent` of them fit on the GPU at once."""
    ### HINT: efficiency is 1.0 exactly when ctas is a multiple of concurrent; 133 CTAs on 132 slots give 133/264
    ### BEGIN SOLUTION
    waves = cdiv(ctas, concurrent)
    return waves, ctas / (waves * concurrent)
    ### END SOLUTION


def tile_efficiency(M: int, N: int, K: int, cfg: Config) -> float:
    """Useful M*N*K over the M*N*K the launched CTAs compute (padded in M, N and K)."""
    ### HINT: the padded extent of each dimension is (number of pieces) * (piece size), taken from grid()
    ### BEGIN SOLUTION
    g = grid(M, N, K, cfg)
    padded = (g.tiles_m * cfg.bm) * (g.tiles_n * cfg.bn) * (cfg.split_k * g.k_iters * cfg.bk)
    return M * N * K / padded
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------------------
# 2. Pipeline stages and occupancy


def stage_bytes(cfg: Config, in_bytes: int = IN_BYTES) -> int:
    """Shared memory of one pipeline stage: the A and B tiles of one bk-slice, aligned, plus its barriers."""
    ### HINT: A tile bm x bk, B tile bn x bk; align the tile bytes, then add the two 8-byte mbarriers
    ### BEGIN SOLUTION
    return round_up((cfg.bm + cfg.bn) * cfg.bk * in_bytes, SMEM_ALIGN) + BARRIER_BYTES
    ### END SOLUTION


def stages_that_fit(cfg: Config, in_bytes: int = IN_BYTES, reserve: int | None = None,
                    capacity: int = H200["smem_per_block"]) -> int:
    """CUTLASS's StageCountAutoCarveout: how many stages fit into `capacity` bytes after the epilogue carve-out
    `reserve` (default: epilogue_reserve(cfg))."""
    reserve = epilogue_reserve(cfg) if reserve is None else reserve
    ### HINT: capacity is rounded DOWN to the alignment, the carve-out UP; whole stages only
    ### BEGIN SOLUTION
    usable = capacity // SMEM_ALIGN * SMEM_ALIGN - round_up(reserve, SMEM_ALIGN)
    return usable // stage_bytes(cfg, in_bytes)
    ### END SOLUTION


def smem_per_cta(cfg: Config, hw: dict = H200) -> int:
    """Shared memory one CTA allocates: its stages plus the epilogue carve-out."""
    stages = cfg.stages if cfg.stages is not None else stages_that_fit(cfg, capacity=hw["smem_per_block"])
    return stages * stage_bytes(cfg) + round_up(epilogue_reserve(cfg), SMEM_ALIGN)


def ctas_per_sm(cfg: Config, hw: dict = H200) -> int:
    """CTAs of this configuration that fit on one SM at once (shared memory is the only limit modelled)."""
    ### HINT: each resident CTA also costs the bytes the system reserves per block: smem_per_sm - smem_per_block
    ### BEGIN SOLUTION
    reserved_per_cta = hw["smem_per_sm"] - hw["smem_per_block"]
    return hw["smem_per_sm"] // (smem_per_cta(cfg, hw) + reserved_per_cta)
    ### END SOLUTION


def concurrent_ctas(cfg: Config, hw: dict = H200) -> int:
    """CTAs resident on the whole GPU at once: every SM's slots, counted in whole clusters."""
    ### HINT: a multiple of cluster_m * cluster_n; with 2 CTAs per SM it is twice the SM count (cluster permitting)
    ### BEGIN SOLUTION
    size = cfg.cluster_m * cfg.cluster_n
    return hw["sms"] * ctas_per_sm(cfg, hw) // size * size
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------------------
# 3. The modelled time and the selector


def modelled_time(M: int, N: int, K: int, cfg: Config, hw: dict = H200) -> Estimate:
    """The README's model. A configuration that cannot run (fewer than 2 stages, or no CTA fits on an SM)
    gets total = math.inf."""
    g = grid(M, N, K, cfg)
    stages = cfg.stages if cfg.stages is not None else stages_that_fit(cfg, capacity=hw["smem_per_block"])
    per_sm = ctas_per_sm(cfg, hw)
    concurrent = concurrent_ctas(cfg, hw)
    ### HINT: a wave lasts per_sm tile-times on every SM; a partial wave costs a full one (compute AND fill); multicast shares A across cluster_n CTAs and B across cluster_m
    ### BEGIN SOLUTION
    if stages < 2 or concurrent == 0:
        return Estimate(math.inf, math.inf, math.inf, math.inf, 0.0, 0, 0.0, 0.0, g.ctas, concurrent)
    waves, wave_eff = wave_quantization(g.ctas, concurrent)
    tile_flops = 2 * cfg.bm * cfg.bn * g.k_iters * cfg.bk
    compute = waves * per_sm * tile_flops / (hw["peak_flops"] / hw["sms"])
    fill_per_cta = (cfg.bm / cfg.cluster_n + cfg.bn / cfg.cluster_m) * g.k_iters * cfg.bk * IN_BYTES
    fill = waves * concurrent * fill_per_cta / hw["fill_bw"]
    dram = ((M * K + K * N) * IN_BYTES + M * N * OUT_BYTES) / hw["dram_bw"]
    reduce = 2 * cfg.split_k * M * N * ACC_BYTES / hw["dram_bw"] if cfg.split_k > 1 else 0.0
    total = max(compute, fill, dram) + reduce
    return Estimate(total, compute, fill, dram, reduce, waves, wave_eff,
                    tile_efficiency(M, N, K, cfg), g.ctas, concurrent)
    ### END SOLUTION


def select(M: int, N: int, K: int, candidates: list[Config], hw: dict = H200) -> Config:
    """The candidate with the smallest modelled total time; on a tie the earliest in the list.
    ValueError when no candidate can run."""
    ### HINT: strict comparison keeps the earliest of equal times; an all-inf list has no answer
    ### BEGIN SOLUTION
    best, best_time = None, math.inf
    for cfg in candidates:
        t = modelled_time(M, N, K, cfg, hw).total
        if t < best_time:
            best, best_time = cfg, t
    if best is None:
        raise ValueError("no candidate configuration can run")
    return best
    ### END SOLUTION
