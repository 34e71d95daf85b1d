"""train-11: 5D parallel layout (TP-CP-EP-DP-PP rank groups) and a config search by a memory/comm model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import prod

DIMS = ("tp", "cp", "ep", "dp", "pp")
DEFAULT_ORDER = "tp-cp-ep-dp-pp"  # Megatron-core's default: the first name varies fastest


def normalise(sizes: Mapping[str, int], order: str) -> tuple[list[str], list[int]]:
    """Names in layout order (fastest first) and their sizes; names missing from `order` must have size 1."""
    names = order.lower().split("-")
    if sorted(set(names)) != sorted(names) or not set(names) <= set(DIMS):
        raise ValueError(f"bad order {order!r}")
    for name in DIMS:
        if name not in names:
            if sizes.get(name, 1) != 1:
                raise ValueError(f"{name} = {sizes[name]} but {name!r} is not in the order {order!r}")
            names.append(name)
    return names, [int(sizes.get(n, 1)) for n in names]


def rank_groups(sizes: Mapping[str, int], order: str, token: str) -> list[list[int]]:
    """The process groups of the parallel dimensions named in `token` ("dp", "tp-dp", "dp-cp", ...).

    Rank r has coordinates c[i] = (r // stride[i]) % size[i] with stride[i] = prod(size[:i]) in layout
    order (first name fastest). Two ranks share a group iff their coordinates agree on every dimension
    NOT in the token. Each group is ascending; groups are ordered by their smallest rank.
    """
    names, dims = normalise(sizes, order)
    masked = set(token.lower().split("-"))
    if not masked <= set(names):
        raise ValueError(f"bad token {token!r}")
    world = prod(dims)
    ### HINT: coordinates of each rank in the mixed-radix layout; the key of its group is its coordinates outside the token
    ### BEGIN SOLUTION
    strides = [prod(dims[:i]) for i in range(len(dims))]
    groups: dict[tuple[int, ...], list[int]] = {}
    for rank in range(world):
        key = tuple((rank // strides[i]) % dims[i] for i, n in enumerate(names) if n not in masked)
        groups.setdefault(key, []).append(rank)
    return sorted(groups.values())
    ### END SOLUTION


def dense_sizes(world: int, tp: int, cp: int, pp: int) -> dict[str, int]:
    """Sizes of the attention/dense part (Megatron's decoder RankGenerator): ep = 1, dp = what is left."""
    ### BEGIN SOLUTION
    if world % (tp * cp * pp):
        raise ValueError(f"world {world} not divisible by tp*cp*pp = {tp * cp * pp}")
    return {"tp": tp, "cp": cp, "ep": 1, "dp": world // (tp * cp * pp), "pp": pp}
    ### END SOLUTION


def expert_sizes(world: int, pp: int, ep: int, etp: int) -> dict[str, int]:
    """Sizes of the MoE-expert part (Megatron's expert RankGenerator): tp = etp, cp = 1, dp = what is left."""
    ### BEGIN SOLUTION
    if world % (etp * ep * pp):
        raise ValueError(f"world {world} not divisible by etp*ep*pp = {etp * ep * pp}")
    return {"tp": etp, "cp": 1, "ep": ep, "dp": world // (etp * ep * pp), "pp": pp}
    ### END SOLUTION


# ---------------------------------------------------------------- config search


@dataclass(frozen=True)
class Model:
    """A dense GPT; bf16 weights/activations, Adam with fp32 master weights."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    seq: int
    global_batch: int  # sequences per optimizer step
    micro_batch: int = 1  # sequences per micro-batch

    @property
    def params(self) -> int:
        return 12 * self.layers * self.hidden**2 + self.vocab * self.hidden


@dataclass(frozen=True)
class Cluster:
    n_gpus: int
    gpus_per_node: int = 8
    mem_bytes: float = 141e9  # H200 HBM (docs/hardware.md)
    flops: float = 729e12  # measured cuBLAS bf16 on the H200 (docs/hardware.md)
    intra_bw: float = 450e9  # NVLink, one direction (900 GB/s bidirectional, docs/hardware.md)
    inter_bw: float = 50e9  # per GPU between nodes: an assumption (400 Gb/s NIC), not measured here


@dataclass(frozen=True)
class Config:
    tp: int
    cp: int
    pp: int
    dp: int
    zero1: bool = False

    def sizes(self) -> dict[str, int]:
        return {"tp": self.tp, "cp": self.cp, "ep": 1, "dp": self.dp, "pp": self.pp}


def micro_batches(model: Model, cfg: Config) -> int:
    return model.global_batch // (cfg.dp * model.micro_batch)


def valid_configs(model: Model, cluster: Cluster) -> list[Config]:
    """Every (tp, cp, pp, dp, zero1) with tp*cp*pp*dp = n_gpus that the model can be split into."""
    n = cluster.n_gpus
    out = []
    for tp in range(1, n + 1):
        for cp in range(1, n // tp + 1):
            for pp in range(1, n // (tp * cp) + 1):
                if n % (tp * cp * pp):
                    continue
                dp = n // (tp * cp * pp)
                if (model.heads % tp or model.seq % cp or model.layers % pp
                        or model.global_batch % (dp * model.micro_batch)):
                    continue
                out += [Config(tp, cp, pp, dp, False), Config(tp, cp, pp, dp, True)]
    return out


def group_bandwidth(cfg: Config, token: str, cluster: Cluster, order: str = DEFAULT_ORDER) -> float:
    """NVLink bandwidth if every group of `token` stays inside one node, else the inter-node bandwidth."""
    g = cluster.gpus_per_node
    inside = all(grp[0] // g == grp[-1] // g for grp in rank_groups(cfg.sizes(), order, token))
    return cluster.intra_bw if inside else cluster.inter_bw


def memory_per_gpu(model: Model, cfg: Config) -> float:
    """Bytes per GPU on the first pipeline stage (README, "内存模型")."""
    s, b, h, n_layers = model.seq, model.micro_batch, model.hidden, model.layers
    ### BEGIN SOLUTION
    shard = model.params / (cfg.tp * cfg.pp)
    states = shard * (4 + 12 / (cfg.dp * cfg.cp)) if cfg.zero1 else shard * 16
    in_flight = min(cfg.pp, micro_batches(model, cfg))
    acts = 34 * s * b * h / (cfg.tp * cfg.cp) * (n_layers // cfg.pp) * in_flight
    return states + acts
    ### END SOLUTION


def step_time(model: Model, cfg: Config, cluster: Cluster, order: str = DEFAULT_ORDER) -> float:
    """Seconds per optimizer step (README, "时间模型"): compute with the 1F1B bubble + TP + CP + DP + PP comm."""
    s, b, h = model.seq, model.micro_batch, model.hidden
    m = micro_batches(model, cfg)
    layers_here = model.layers // cfg.pp
    ### BEGIN SOLUTION
    compute = 6 * model.params * model.global_batch * s / (cluster.n_gpus * cluster.flops)
    t = compute * (1 + (cfg.pp - 1) / m)
    if cfg.tp > 1:
        tp_bytes = m * layers_here * 8 * (cfg.tp - 1) / cfg.tp * 2 * s * b * h / cfg.cp
        t += tp_bytes / group_bandwidth(cfg, "tp", cluster, order)
    if cfg.cp > 1:
        cp_bytes = m * layers_here * 12 * (cfg.cp - 1) / cfg.cp * s * b * h / cfg.tp
        t += cp_bytes / group_bandwidth(cfg, "cp", cluster, order)
    d = cfg.dp * cfg.cp
    if d > 1:
        dp_bytes = 2 * (d - 1) / d * 2 * model.params / (cfg.tp * cfg.pp)
        t += dp_bytes / group_bandwidth(cfg, "dp-cp", cluster, order)
    if cfg.pp > 1:
        pp_bytes = 2 * m * 2 * s * b * h / (cfg.tp * cfg.cp)
        t += pp_bytes / group_bandwidth(cfg, "pp", cluster, order)
    return t
    ### END SOLUTION


def best_config(model: Model, cluster: Cluster, order: str = DEFAULT_ORDER) -> Config | None:
    """The fastest valid config (by step_time) whose memory_per_gpu fits in the GPU; None if none fits."""
    ### BEGIN SOLUTION
    fits = [c for c in valid_configs(model, cluster) if memory_per_gpu(model, c) <= cluster.mem_bytes]
    if not fits:
        return None
    return min(fits, key=lambda c: step_time(model, c, cluster, order))
    ### END SOLUTION
