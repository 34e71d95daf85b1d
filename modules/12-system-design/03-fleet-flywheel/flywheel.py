"""sd-03: capacity planner for an embodied robot fleet's data flywheel with nightly continual post-training.

The chain: robots record all shift -> upload over Wi-Fi while charging -> site backhaul (ingest gateway) ->
hot object-store tier (raw data kept `hot_days`) -> curation keeps a fraction -> human labelling of the kept
clips -> nightly full-parameter post-training (6ND) -> canary -> fleet-wide OTA.
Every formula, unit and rounding rule is stated in README.md; units: bytes (B), seconds, hours, FLOP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

BYTES_PER_PIXEL = 3        # 8-bit RGB
PROPRIO_BYTES = 4          # float32 per proprioceptive dimension
STAGES = ("upload", "backhaul", "hot_storage", "labelling", "training")  # chain order (ties go to the earliest)


@dataclass(frozen=True)
class Hardware:
    bf16_flops: float = 989e12     # H200 SXM dense bf16 tensor-core peak, FLOP/s (docs/hardware.md)
    gpus_per_node: int = 8


@dataclass(frozen=True)
class Fleet:
    """Requirements; the defaults are the worked case of the course site's robot-flywheel page."""
    # fleet and sensors
    n_robots: int = 1000
    hours_per_day: float = 8.0         # recorded hours per robot per day
    cameras: int = 3
    width: int = 640
    height: int = 480
    fps: float = 30.0                  # recorded frame rate
    compression: float = 30.0          # raw RGB bytes / encoded video bytes
    proprio_dims: int = 64
    proprio_hz: float = 200.0
    # data selection and the training mix
    curation: float = 0.05             # fraction of recorded time kept for training
    sample_hz: float = 5.0             # frames per second tokenised for training (per camera)
    tokens_per_image: int = 256
    replay: float = 1.0                # historical tokens replayed per new token
    # model and nightly training
    n_params: float = 7e9
    mfu: float = 0.4
    train_window_h: float = 6.0
    n_gpus: int = 56                   # GPUs provisioned for the nightly run
    # links and storage
    wifi_mbps: float = 100.0           # per robot, megabit/s (10^6 bit/s)
    charge_h: float = 4.0              # hours per day a robot sits at a charger (its upload window)
    site_gbps: float = 10.0            # site backhaul, gigabit/s (10^9 bit/s), usable 24 h a day
    hot_days: float = 30.0             # raw data kept in the hot tier
    hot_overhead: float = 1.5          # physical bytes per logical byte (erasure coding)
    hot_capacity_pb: float = 4.0       # physical hot-tier capacity, PB (10^15 B)
    warm_days: float = 365.0           # curated data kept in the warm tier
    # labelling of the curated clips
    labellers: int = 40
    labeller_hours: float = 8.0        # working hours per labeller per day
    label_ratio: float = 0.5           # labeller hours per curated robot-hour
    # release
    ota_bytes_per_param: float = 1.0   # INT8 weights
    canary_robots: int = 10
    episodes_per_hour: float = 20.0    # episodes a robot completes per recorded hour
    p_base: float = 0.90               # success rate of the current model
    p_worse: float = 0.85              # the regression the canary must detect
    alpha: float = 0.05                # two-sided
    power: float = 0.80


@dataclass(frozen=True)
class StorageTiers:
    hot_bytes: float        # logical bytes of raw data in the hot tier
    hot_raw_bytes: float    # physical bytes (with hot_overhead)
    curated_per_day: float  # logical bytes kept by curation each day
    warm_bytes: float       # logical bytes of curated data in the warm tier


@dataclass(frozen=True)
class Chain:
    utilisation: dict[str, float]   # stage -> demand / capacity, keys exactly STAGES
    bottleneck: str                 # the stage with the highest utilisation
    balanced: bool                  # every stage at or below 1


def data_rate(f: Fleet) -> float:
    """Bytes per second one robot records: encoded video of every camera plus proprioception."""
    ### BEGIN SOLUTION
    video = f.cameras * f.width * f.height * BYTES_PER_PIXEL * f.fps / f.compression
    proprio = f.proprio_dims * PROPRIO_BYTES * f.proprio_hz
    return video + proprio
    ### END SOLUTION


def daily_ingest(f: Fleet) -> float:
    """Bytes the whole fleet records per day."""
    ### BEGIN SOLUTION
    return f.n_robots * data_rate(f) * f.hours_per_day * 3600.0
    ### END SOLUTION


def storage_tiers(f: Fleet) -> StorageTiers:
    """Hot tier (raw, hot_days), its physical size, the curated bytes per day and the warm tier (warm_days)."""
    ### BEGIN SOLUTION
    day = daily_ingest(f)
    hot = day * f.hot_days
    curated = day * f.curation
    return StorageTiers(hot_bytes=hot, hot_raw_bytes=hot * f.hot_overhead,
                        curated_per_day=curated, warm_bytes=curated * f.warm_days)
    ### END SOLUTION


def train_tokens_per_day(f: Fleet) -> float:
    """Tokens of one nightly run: the curated recordings sampled at sample_hz, plus the replayed history."""
    ### BEGIN SOLUTION
    curated_seconds = f.n_robots * f.hours_per_day * 3600.0 * f.curation
    new_tokens = curated_seconds * f.sample_hz * f.cameras * f.tokens_per_image
    return new_tokens * (1.0 + f.replay)
    ### END SOLUTION


def train_flops(f: Fleet) -> float:
    """FLOP of one nightly full-parameter run."""
    ### BEGIN SOLUTION
    return 6.0 * f.n_params * train_tokens_per_day(f)
    ### END SOLUTION


def train_gpus(f: Fleet, hw: Hardware) -> int:
    """Smallest number of GPUs, in whole nodes, that finishes the nightly run inside the training window."""
    ### HINT: GPU-seconds needed / seconds in the window = GPUs (a real number); then whole nodes
    ### BEGIN SOLUTION
    gpu_seconds = train_flops(f) / (hw.bf16_flops * f.mfu)
    gpus = gpu_seconds / (f.train_window_h * 3600.0)
    return hw.gpus_per_node * math.ceil(gpus / hw.gpus_per_node)
    ### END SOLUTION


def upload_hours(f: Fleet) -> float:
    """Hours one robot needs at its charger to upload one day of recordings over Wi-Fi."""
    ### BEGIN SOLUTION
    day_bytes = data_rate(f) * f.hours_per_day * 3600.0
    return day_bytes / (f.wifi_mbps * 1e6 / 8.0) / 3600.0
    ### END SOLUTION


def ota_minutes(f: Fleet) -> float:
    """Minutes one robot needs to download the quantised model over Wi-Fi."""
    ### BEGIN SOLUTION
    return f.n_params * f.ota_bytes_per_param / (f.wifi_mbps * 1e6 / 8.0) / 60.0
    ### END SOLUTION


def canary_episodes(p_base: float, p_worse: float, alpha: float, power: float) -> int:
    """Episodes per arm for a two-sided two-proportion z-test (unpooled variance) to detect p_base -> p_worse;
    ValueError unless p_worse < p_base."""
    ### HINT: z quantiles from statistics.NormalDist().inv_cdf; the variance of each arm's success rate adds up
    ### BEGIN SOLUTION
    if not p_worse < p_base:
        raise ValueError(f"nothing to detect: p_worse={p_worse} is not below p_base={p_base}")
    z_alpha = NormalDist().inv_cdf(1.0 - alpha / 2.0)
    z_beta = NormalDist().inv_cdf(power)
    variance = p_base * (1.0 - p_base) + p_worse * (1.0 - p_worse)
    return math.ceil((z_alpha + z_beta) ** 2 * variance / (p_base - p_worse) ** 2)
    ### END SOLUTION


def canary_days(f: Fleet) -> int:
    """Whole days the canary robots need to collect canary_episodes; one candidate at a time, so the release
    interval in days."""
    ### BEGIN SOLUTION
    needed = canary_episodes(f.p_base, f.p_worse, f.alpha, f.power)
    per_day = f.canary_robots * f.episodes_per_hour * f.hours_per_day
    return math.ceil(needed / per_day)
    ### END SOLUTION


def chain(f: Fleet, hw: Hardware) -> Chain:
    """Utilisation (demand / capacity per day) of every stage, the bottleneck and whether the chain is balanced."""
    ### BEGIN SOLUTION
    util = {
        "upload": upload_hours(f) / f.charge_h,
        "backhaul": daily_ingest(f) / (f.site_gbps * 1e9 / 8.0 * 86400.0),
        "hot_storage": storage_tiers(f).hot_raw_bytes / (f.hot_capacity_pb * 1e15),
        "labelling": f.n_robots * f.hours_per_day * f.curation * f.label_ratio / (f.labellers * f.labeller_hours),
        "training": train_flops(f) / (f.n_gpus * hw.bf16_flops * f.mfu * f.train_window_h * 3600.0),
    }
    worst = STAGES[0]
    for stage in STAGES:
        if util[stage] > util[worst]:
            worst = stage
    return Chain(utilisation=util, bottleneck=worst, balanced=util[worst] <= 1.0)
    ### END SOLUTION
