"""sd-01: capacity planner for a 10k-GPU MoE pre-training platform.

Every function maps typed requirements and hardware to numbers; the formulas are stated in README.md.
Units: FLOP, bytes, seconds (days where the name says so). Nothing here keeps state between calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Hardware:
    peak_flops: float = 989e12            # bf16 dense tensor-core peak per GPU, FLOP/s (docs/hardware.md)
    hbm_bytes: float = 141e9              # HBM per GPU, bytes (docs/hardware.md)
    reserve_bytes: float = 10e9           # per GPU: workspace, NCCL buffers, fragmentation (assumption)
    gpus_per_node: int = 8
    nvlink_bytes_s: float = 900e9         # NVLink per GPU, BIDIRECTIONAL, bytes/s (docs/hardware.md)
    nic_gbit_s: float = 400.0             # RDMA NIC per GPU, gigaBITS per second (assumption)
    storage_write_bytes_s: float = 500e9  # aggregate checkpoint write bandwidth of the file system, bytes/s


@dataclass(frozen=True)
class Requirements:
    total_params: float = 671e9           # Psi: all parameters
    expert_params: float = 654e9          # routed-expert parameters (sharded by EP); the rest is replicated
    active_params: float = 37e9           # N: parameters used per token
    tokens: float = 30e12                 # D: token budget
    n_gpus: int = 16384
    mfu: float = 0.35
    seq_len: int = 4096
    global_batch_seqs: int = 16384        # sequences per optimizer step (micro-batch = 1 sequence)
    n_layers: int = 61
    n_moe_layers: int = 58
    hidden: int = 7168
    n_experts: int = 256                  # routed experts per MoE layer
    top_k: int = 8
    act_bytes_per_token_layer: float = 34 * 7168  # activations kept per token per layer (selective recompute)
    gpu_mtbf_hours: float = 50_000.0      # per GPU, including its share of node and NIC failures
    restart_s: float = 600.0              # R: detect, replace the node, reload the checkpoint


@dataclass(frozen=True)
class Layout:
    tp: int
    cp: int
    pp: int
    ep: int
    dp: int                               # tp * cp * pp * dp == n_gpus; EP is folded into dp * cp


@dataclass(frozen=True)
class Compute:
    flops: float                          # total training FLOP
    gpu_days: float
    wall_days: float                      # ideal: no failures, no checkpoints


@dataclass(frozen=True)
class Memory:
    static_bytes: float                   # weights + grads + ZeRO-1 optimizer shard, per GPU
    activation_bytes: float               # first pipeline stage, per GPU

    @property
    def total_bytes(self) -> float:
        return self.static_bytes + self.activation_bytes


@dataclass(frozen=True)
class StepTraffic:
    compute_s: float                      # per step at the target MFU
    a2a_bytes: float                      # all-to-all bytes each GPU sends per step
    nvlink_bytes: float                   # the part that stays inside the node
    rdma_bytes: float                     # the part that leaves the node
    nvlink_s: float
    rdma_s: float


@dataclass(frozen=True)
class Checkpoint:
    bytes: float
    write_s: float                        # delta: the training blocks while it writes
    failures_per_day: float
    mtbf_s: float                         # M: job MTBF
    interval_s: float                     # Young's optimum sqrt(2 delta M)
    waste: float                          # delta/tau + tau/(2M) + R/M at that interval


WORKED = Requirements()
H200 = Hardware()
BF16 = 2                                  # bytes per element sent in dispatch / combine
OPT_BYTES = 12                            # fp32 master weight + Adam m + v, per parameter
WEIGHT_GRAD_BYTES = 4                     # bf16 weight + bf16 gradient, per parameter
CKPT_BYTES = 14                           # bf16 weight + fp32 master + m + v, per parameter


def train_compute(req: Requirements, hw: Hardware) -> Compute:
    """6*N*D FLOP, GPU-days at peak * MFU, and the ideal wall-clock on req.n_gpus GPUs."""
    ### BEGIN SOLUTION
    flops = 6.0 * req.active_params * req.tokens
    gpu_days = flops / (hw.peak_flops * req.mfu) / 86400.0
    return Compute(flops=flops, gpu_days=gpu_days, wall_days=gpu_days / req.n_gpus)
    ### END SOLUTION


def gpus_for_deadline(req: Requirements, hw: Hardware, days: float) -> int:
    """The fewest GPUs, in whole nodes, whose ideal wall-clock is <= days (req.n_gpus is ignored)."""
    ### HINT: whole nodes; an exact fit needs no extra node
    ### BEGIN SOLUTION
    gpus = train_compute(req, hw).gpu_days / days
    return hw.gpus_per_node * math.ceil(gpus / hw.gpus_per_node)
    ### END SOLUTION


def is_valid(req: Requirements, hw: Hardware, lay: Layout) -> bool:
    """The divisibility rules of README.md: the layout tiles the cluster and the model."""
    ### BEGIN SOLUTION
    return (
        lay.tp * lay.cp * lay.pp * lay.dp == req.n_gpus
        and hw.gpus_per_node % lay.tp == 0
        and req.n_experts % lay.ep == 0
        and (lay.dp * lay.cp) % lay.ep == 0
        and lay.pp <= req.n_layers
        and req.global_batch_seqs % lay.dp == 0
        and req.seq_len % lay.cp == 0
    )
    ### END SOLUTION


def memory_per_gpu(req: Requirements, lay: Layout) -> Memory:
    """ZeRO-1 static ledger plus the 1F1B activations of the first stage, per GPU (lay is valid: is_valid is True)."""
    ### BEGIN SOLUTION
    dense = req.total_params - req.expert_params
    dense_dp = lay.dp * lay.cp                        # ZeRO-1 shards the optimizer over DP x CP
    expert_dp = lay.dp * lay.cp // lay.ep             # expert data parallelism
    static = ((WEIGHT_GRAD_BYTES + OPT_BYTES / expert_dp) * req.expert_params / (lay.tp * lay.pp * lay.ep)
              + (WEIGHT_GRAD_BYTES + OPT_BYTES / dense_dp) * dense / (lay.tp * lay.pp))
    micro_batches = req.global_batch_seqs // lay.dp
    in_flight = min(lay.pp, micro_batches)
    layers = math.ceil(req.n_layers / lay.pp)
    tokens = req.seq_len / (lay.tp * lay.cp)
    activation = in_flight * layers * tokens * req.act_bytes_per_token_layer
    return Memory(static_bytes=static, activation_bytes=activation)
    ### END SOLUTION


def plan_layout(req: Requirements, hw: Hardware, tp: int, ep: int, cp: int = 1) -> Layout | None:
    """The valid layout with the given tp, ep, cp and the smallest pp that fits memory; None if none fits."""
    ### BEGIN SOLUTION
    budget = hw.hbm_bytes - hw.reserve_bytes
    for pp in range(1, req.n_layers + 1):
        if req.n_gpus % (tp * cp * pp):
            continue
        lay = Layout(tp=tp, cp=cp, pp=pp, ep=ep, dp=req.n_gpus // (tp * cp * pp))
        if is_valid(req, hw, lay) and memory_per_gpu(req, lay).total_bytes <= budget:
            return lay
    return None
    ### END SOLUTION


def step_traffic(req: Requirements, hw: Hardware, lay: Layout) -> StepTraffic:
    """Compute time and MoE all-to-all bytes per GPU per step, split into NVLink and RDMA (lay is valid)."""
    ### BEGIN SOLUTION
    global_tokens = req.global_batch_seqs * req.seq_len
    compute_s = 6.0 * req.active_params * global_tokens / (req.n_gpus * hw.peak_flops * req.mfu)
    tokens = global_tokens / (lay.dp * lay.cp * lay.tp)
    moe_layers = req.n_moe_layers / lay.pp
    a2a = tokens * moe_layers * req.top_k * req.hidden * BF16 * 2 * 2  # dispatch + combine, forward + backward
    ep_in_node = min(lay.ep, max(1, hw.gpus_per_node // lay.tp))     # EP ranks sit tp apart
    nvlink = a2a * ep_in_node / lay.ep
    rdma = a2a - nvlink
    return StepTraffic(compute_s=compute_s, a2a_bytes=a2a, nvlink_bytes=nvlink, rdma_bytes=rdma,
                       nvlink_s=nvlink / (hw.nvlink_bytes_s / 2), rdma_s=rdma / (hw.nic_gbit_s * 1e9 / 8))
    ### END SOLUTION


def checkpoint_plan(req: Requirements, hw: Hardware) -> Checkpoint:
    """Checkpoint size and write time, job MTBF, Young's interval and the wasted fraction at it."""
    ### BEGIN SOLUTION
    size = req.total_params * CKPT_BYTES
    delta = size / hw.storage_write_bytes_s
    failures = req.n_gpus * 24.0 / req.gpu_mtbf_hours
    mtbf = 86400.0 / failures
    tau = math.sqrt(2.0 * delta * mtbf)
    waste = delta / tau + tau / (2.0 * mtbf) + req.restart_s / mtbf
    return Checkpoint(bytes=size, write_s=delta, failures_per_day=failures, mtbf_s=mtbf,
                      interval_s=tau, waste=waste)
    ### END SOLUTION


def storage_bw_for_waste(req: Requirements, hw: Hardware, max_waste: float) -> float | None:
    """The smallest checkpoint write bandwidth (bytes/s) whose waste at Young's interval is <= max_waste;
    None when no bandwidth is enough (restarts alone use up the budget)."""
    ### BEGIN SOLUTION
    plan = checkpoint_plan(req, hw)
    room = max_waste - req.restart_s / plan.mtbf_s    # what is left for sqrt(2 delta / M)
    if room <= 0:
        return None
    delta_max = plan.mtbf_s * room * room / 2.0
    return plan.bytes / delta_max
    ### END SOLUTION
