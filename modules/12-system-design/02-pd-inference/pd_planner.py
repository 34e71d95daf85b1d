"""sd-02: a capacity planner for a prefill/decode (PD) disaggregated inference cluster.

Units: bytes, seconds, FLOP, requests per second; the NIC alone is given in Gbit/s (as datasheets do).
Every formula the tests rely on is stated in README.md. All functions are pure: the frozen dataclasses are
never changed and nothing is remembered between calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Model:
    n_params: float          # parameters (weights) of the dense model
    n_layers: int
    n_heads: int             # query heads: attention width d = n_heads * head_dim
    n_kv_heads: int          # K/V heads (GQA): what the KV cache stores
    head_dim: int
    weight_bytes: float = 1.0  # bytes per parameter (FP8 = 1)
    kv_bytes: float = 2.0      # bytes per cached K or V element (BF16 = 2)


@dataclass(frozen=True)
class Hardware:
    peak_flops: float        # dense tensor-core FLOP/s of one GPU at the weights' precision
    hbm_bytes: float         # HBM capacity of one GPU
    hbm_bw: float            # achievable HBM bandwidth of one GPU, B/s
    nic_gbit: float          # RDMA NIC of one GPU, Gbit/s (one NIC per GPU)
    gpus_per_node: int = 8


@dataclass(frozen=True)
class Requirements:
    qps: float               # peak arrival rate, requests/s (Poisson)
    prompt_len: int          # tokens per prompt
    output_len: int          # tokens generated per request
    ttft_slo: float          # TTFT target at the quantile below, s
    tpot_slo: float          # time per output token target, s
    quantile: float = 0.99   # the TTFT quantile the SLO is stated at


@dataclass(frozen=True)
class Deployment:
    prefill_tp: int = 4          # GPUs per prefill instance
    decode_tp: int = 1           # GPUs per decode instance
    prefill_mfu: float = 0.4     # fraction of peak a prefill instance reaches
    max_prefill_util: float = 0.7  # utilisation cap of the prefill pool (headroom for bursts)
    reserve_bytes: float = 10e9  # per GPU: activations, workspace, CUDA graphs
    layerwise_kv: bool = True    # stream each layer's KV as soon as it is computed


@dataclass(frozen=True)
class Plan:
    prefill_instances: int
    prefill_gpus: int
    decode_instances: int
    decode_gpus: int
    decode_batch: int        # concurrent sequences per decode instance
    ttft: float              # modelled TTFT at req.quantile with the planned prefill pool, s
    tpot: float              # decode step time at the full batch, s
    kv_transfer: float       # time to move one request's KV from P to D, s
    kv_ingress: float        # average KV bytes/s arriving at one decode GPU
    kv_node_bytes: float     # KV bytes held by one full decode node at the planned batch


def kv_bytes_per_token(m: Model) -> float:
    """KV-cache bytes one token occupies: K and V, every layer, every KV head."""
    ### BEGIN SOLUTION
    return 2 * m.n_layers * m.n_kv_heads * m.head_dim * m.kv_bytes
    ### END SOLUTION


def prefill_flops(m: Model, prompt_len: int) -> float:
    """FLOP to prefill one prompt: linear layers 2*N*L plus causal attention 2*L^2*d per layer."""
    ### BEGIN SOLUTION
    d = m.n_heads * m.head_dim
    return 2 * m.n_params * prompt_len + 2 * prompt_len**2 * d * m.n_layers
    ### END SOLUTION


def prefill_seconds(m: Model, hw: Hardware, dep: Deployment, prompt_len: int) -> float:
    """Time one prefill instance (prefill_tp GPUs at prefill_mfu of peak) takes for one prompt."""
    ### BEGIN SOLUTION
    return prefill_flops(m, prompt_len) / (dep.prefill_tp * hw.peak_flops * dep.prefill_mfu)
    ### END SOLUTION


def kv_transfer_seconds(m: Model, hw: Hardware, dep: Deployment, prompt_len: int) -> float:
    """Time to move one prompt's KV from a prefill to a decode instance over the narrower side's NICs."""
    ### BEGIN SOLUTION
    nic_bytes_per_s = hw.nic_gbit * 1e9 / 8
    n_nics = min(dep.prefill_tp, dep.decode_tp)
    return kv_bytes_per_token(m) * prompt_len / (n_nics * nic_bytes_per_s)
    ### END SOLUTION


def kv_exposed_seconds(m: Model, hw: Hardware, dep: Deployment, prompt_len: int) -> float:
    """Part of the KV transfer that ends after the prefill computation ends (adds to TTFT)."""
    ### HINT: layer-wise: layer i can leave once computed and once layer i-1 has left; the transfer can be the slower pipe stage
    ### BEGIN SOLUTION
    x = kv_transfer_seconds(m, hw, dep, prompt_len)
    if not dep.layerwise_kv:
        return x
    p = prefill_seconds(m, hw, dep, prompt_len)
    n = m.n_layers
    return max(x / n, x - p * (n - 1) / n)
    ### END SOLUTION


def erlang_c(servers: int, load: float) -> float:
    """Probability that an arrival waits in an M/M/c queue with c = servers and offered load a = lambda/mu."""
    ### HINT: must stay finite for thousands of servers: a**c / c! overflows long before that
    ### BEGIN SOLUTION
    if load >= servers:
        return 1.0
    b = 1.0                                   # Erlang B by its recursion: B(k) = a B(k-1) / (k + a B(k-1))
    for k in range(1, servers + 1):
        b = load * b / (k + load * b)
    return servers * b / (servers - load * (1.0 - b))
    ### END SOLUTION


def wait_quantile(servers: int, qps: float, service: float, q: float) -> float:
    """q-quantile of the queueing wait in M/M/c (mean service time `service`); inf when the queue is unstable."""
    ### BEGIN SOLUTION
    load = qps * service
    if load >= servers:
        return math.inf
    c_wait = erlang_c(servers, load)
    if c_wait <= 1.0 - q:
        return 0.0
    return math.log(c_wait / (1.0 - q)) / (servers / service - qps)
    ### END SOLUTION


def ttft_quantile(m: Model, hw: Hardware, dep: Deployment, req: Requirements, instances: int) -> float:
    """Modelled TTFT at req.quantile with `instances` prefill instances: wait + prefill + exposed KV."""
    p = prefill_seconds(m, hw, dep, req.prompt_len)
    return wait_quantile(instances, req.qps, p, req.quantile) + p + kv_exposed_seconds(m, hw, dep, req.prompt_len)


def prefill_instances(m: Model, hw: Hardware, dep: Deployment, req: Requirements) -> int | None:
    """Fewest prefill instances meeting both the utilisation cap and the TTFT SLO; None if no count can."""
    ### BEGIN SOLUTION
    p = prefill_seconds(m, hw, dep, req.prompt_len)
    if p + kv_exposed_seconds(m, hw, dep, req.prompt_len) > req.ttft_slo:
        return None
    c = max(1, math.ceil(req.qps * p / dep.max_prefill_util))
    while ttft_quantile(m, hw, dep, req, c) > req.ttft_slo:
        c += 1
    return c
    ### END SOLUTION


def decode_step_seconds(m: Model, hw: Hardware, dep: Deployment, batch: int, context: float) -> float:
    """One decode step of an instance: read the weights once plus `batch` sequences of `context` tokens of KV."""
    ### BEGIN SOLUTION
    read = m.n_params * m.weight_bytes + batch * kv_bytes_per_token(m) * context
    return read / (dep.decode_tp * hw.hbm_bw)
    ### END SOLUTION


def decode_batch(m: Model, hw: Hardware, dep: Deployment, req: Requirements) -> int:
    """Most concurrent sequences per decode instance: KV capacity and the TPOT SLO both hold; 0 if none fits."""
    ### BEGIN SOLUTION
    kv_tok = kv_bytes_per_token(m)
    weights = m.n_params * m.weight_bytes
    free = dep.decode_tp * (hw.hbm_bytes - dep.reserve_bytes) - weights
    by_memory = math.floor(free / (kv_tok * (req.prompt_len + req.output_len)))
    budget = req.tpot_slo * dep.decode_tp * hw.hbm_bw - weights
    by_tpot = math.floor(budget / (kv_tok * (req.prompt_len + req.output_len / 2)))
    return max(0, min(by_memory, by_tpot))
    ### END SOLUTION


def route(prefill_backlog: Sequence[float], decode_free_tokens: Sequence[int], need_tokens: int) -> tuple[int, int] | None:
    """Pick (prefill, decode) instances for one request; None when no decode instance can hold it."""
    ### BEGIN SOLUTION
    fits = [j for j, free in enumerate(decode_free_tokens) if free >= need_tokens]
    if not fits or not prefill_backlog:
        return None
    p = min(range(len(prefill_backlog)), key=lambda i: (prefill_backlog[i], i))
    d = min(fits, key=lambda j: (-decode_free_tokens[j], j))
    return p, d
    ### END SOLUTION


def plan(m: Model, hw: Hardware, dep: Deployment, req: Requirements) -> Plan | None:
    """Size both pools for the requirements; None when either SLO cannot be met by any pool size."""
    ### BEGIN SOLUTION
    n_p = prefill_instances(m, hw, dep, req)
    batch = decode_batch(m, hw, dep, req)
    if n_p is None or batch < 1:
        return None
    tpot = decode_step_seconds(m, hw, dep, batch, req.prompt_len + req.output_len / 2)
    n_d = math.ceil(req.qps * req.output_len * tpot / batch)   # Little: sequences in flight / per instance
    kv_req = kv_bytes_per_token(m) * req.prompt_len
    kv_seq = kv_bytes_per_token(m) * (req.prompt_len + req.output_len)
    return Plan(
        prefill_instances=n_p,
        prefill_gpus=n_p * dep.prefill_tp,
        decode_instances=n_d,
        decode_gpus=n_d * dep.decode_tp,
        decode_batch=batch,
        ttft=ttft_quantile(m, hw, dep, req, n_p),
        tpot=tpot,
        kv_transfer=kv_transfer_seconds(m, hw, dep, req.prompt_len),
        kv_ingress=req.qps * kv_req / (n_d * dep.decode_tp),
        kv_node_bytes=hw.gpus_per_node * batch * kv_seq / dep.decode_tp,
    )
    ### END SOLUTION
