"""infer-01: KV-cache capacity planner for MHA, GQA and MLA models.

Contract (what the tests check, exactly, in integers where the quantity is a count of bytes):

- ``kv_elems_per_layer(spec, tp)``: cache elements one GPU stores per token per layer.
  MHA/GQA: a K and a V vector of ``head_dim`` for each KV head that GPU holds. Tensor parallelism
  splits the KV heads over ``tp`` ranks; when there are fewer KV heads than ranks each rank keeps
  one (replicated) head, as vLLM does (``max(1, num_kv_heads // tp)``). Only TP degrees vLLM accepts
  occur: tp divides num_heads, and num_kv_heads divides tp or tp divides num_kv_heads.
  MLA (``spec.kv_lora_rank > 0``): the compressed latent ``c_KV`` (kv_lora_rank elements) plus the
  decoupled RoPE key (qk_rope_head_dim elements), one copy shared by all heads, hence the same on
  every TP rank.
- ``kv_bytes_per_token(spec, kv_dtype_bytes, tp)``: the above over all layers, in bytes.
- ``plan_capacity(spec, dep, seq_len)``: the paged KV pool a GPU can hold and how many sequences of
  ``seq_len`` tokens fit. Budget = floor(gpu_bytes * gpu_memory_utilization) - weight bytes on one
  GPU - reserve_bytes (activations / workspace / CUDA graphs). The pool is a whole number of blocks
  of ``block_size`` tokens; a sequence needs ceil(seq_len / block_size) whole blocks.
- ``decode_roofline(spec, dep, batch, context_len, hbm_bytes_per_s, peak_flops)``: one decode step
  (one new token for each of ``batch`` sequences, each attending to ``context_len`` cached tokens)
  on one GPU. Bytes read = the GPU's weights once + the KV cache of the whole batch. FLOPs = 2 per
  active parameter per token + attention over the context. Time = max(bytes / bandwidth,
  FLOPs / peak): the roofline lower bound; ``bound`` is "memory" when the two times are equal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    name: str
    num_layers: int
    num_heads: int          # query heads
    num_kv_heads: int       # KV heads (= num_heads for MHA); not used by MLA
    head_dim: int           # per-head dim of K and V (MHA/GQA)
    num_params: int         # all weights resident on the GPUs
    active_params: int      # weights used per token (MoE: shared + routed experts of one token)
    kv_lora_rank: int = 0   # MLA latent dim d_c; 0 = not MLA
    qk_rope_head_dim: int = 0  # MLA decoupled RoPE key dim d_h^R


@dataclass(frozen=True)
class Deployment:
    gpu_bytes: int                    # HBM capacity of one GPU
    gpu_memory_utilization: float     # fraction of it the engine may use (vLLM's flag)
    reserve_bytes: int                # activations, workspace, CUDA graphs
    block_size: int = 16              # tokens per KV block
    tp: int = 1                       # tensor-parallel ranks (the model is split over tp GPUs)
    weight_dtype_bytes: int = 2       # bf16 weights
    kv_dtype_bytes: int = 2           # bf16 KV cache (1 for fp8)


@dataclass(frozen=True)
class Capacity:
    kv_budget_bytes: int     # bytes left for the KV pool on one GPU (0 if none)
    num_blocks: int          # whole blocks in the pool
    blocks_per_seq: int      # blocks one sequence of seq_len tokens needs
    max_seqs: int            # sequences that fit at the same time


@dataclass(frozen=True)
class Roofline:
    bytes_read: int
    flops: int
    t_memory: float          # seconds
    t_compute: float         # seconds
    time: float              # seconds, the bound
    bound: str               # "memory" or "compute"


def is_mla(spec: ModelSpec) -> bool:
    return spec.kv_lora_rank > 0


def weight_bytes_per_gpu(spec: ModelSpec, dep: Deployment) -> int:
    """Weights are split evenly over the TP ranks (rounded up to a whole byte)."""
    return math.ceil(spec.num_params * dep.weight_dtype_bytes / dep.tp)


def llama_params(layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int) -> int:
    """Exact parameter count of a Llama-architecture model (untied embeddings, RMSNorm, SwiGLU)."""
    head_dim = hidden // heads
    attn = hidden * hidden * 2 + 2 * hidden * kv_heads * head_dim   # q, o and k, v
    mlp = 3 * hidden * ffn                                          # gate, up, down
    return 2 * vocab * hidden + layers * (attn + mlp + 2 * hidden) + hidden


# Published configs (config.json / params.json of each model; see README "延伸阅读").
LLAMA3_8B = ModelSpec("Llama-3-8B", 32, 32, 8, 128,
                      llama_params(32, 4096, 32, 8, 14336, 128256),
                      llama_params(32, 4096, 32, 8, 14336, 128256))
LLAMA3_70B = ModelSpec("Llama-3-70B", 80, 64, 8, 128,
                       llama_params(80, 8192, 64, 8, 28672, 128256),
                       llama_params(80, 8192, 64, 8, 28672, 128256))
LLAMA2_7B = ModelSpec("Llama-2-7B (MHA)", 32, 32, 32, 128,
                      llama_params(32, 4096, 32, 32, 11008, 32000),
                      llama_params(32, 4096, 32, 32, 11008, 32000))
DEEPSEEK_V3 = ModelSpec("DeepSeek-V3 (MLA)", 61, 128, 128, 128, 671_000_000_000, 37_000_000_000,
                        kv_lora_rank=512, qk_rope_head_dim=64)


def kv_elems_per_layer(spec: ModelSpec, tp: int = 1) -> int:
    """Cache elements per token per layer on one of ``tp`` GPUs."""
    ### HINT: MLA caches one latent + one RoPE key shared by every head (TP does not split it); MHA/GQA caches K and V for each KV head this rank holds, at least one
    ### BEGIN SOLUTION
    if is_mla(spec):
        return spec.kv_lora_rank + spec.qk_rope_head_dim
    kv_heads_here = max(1, spec.num_kv_heads // tp)
    return 2 * kv_heads_here * spec.head_dim
    ### END SOLUTION


def kv_bytes_per_token(spec: ModelSpec, kv_dtype_bytes: int = 2, tp: int = 1) -> int:
    """KV-cache bytes one token occupies on one GPU, all layers."""
    return spec.num_layers * kv_elems_per_layer(spec, tp) * kv_dtype_bytes


def plan_capacity(spec: ModelSpec, dep: Deployment, seq_len: int) -> Capacity:
    """Paged KV pool on one GPU and the number of ``seq_len``-token sequences it holds."""
    ### HINT: utilization scales the GPU, not what is left after the weights; the pool and each sequence come in whole blocks (floor for the pool, ceil per sequence)
    ### BEGIN SOLUTION
    usable = math.floor(dep.gpu_bytes * dep.gpu_memory_utilization)
    budget = max(0, usable - weight_bytes_per_gpu(spec, dep) - dep.reserve_bytes)
    block_bytes = dep.block_size * kv_bytes_per_token(spec, dep.kv_dtype_bytes, dep.tp)
    num_blocks = budget // block_bytes
    blocks_per_seq = -(-seq_len // dep.block_size)
    return Capacity(budget, num_blocks, blocks_per_seq, num_blocks // blocks_per_seq)
    ### END SOLUTION


def attn_flops_per_pair(spec: ModelSpec) -> int:
    """FLOPs of one query token against one cached token, all heads, all layers (whole model)."""
    ### HINT: per head: scores over the key dim, then a weighted sum over the value dim, 2 FLOPs per multiply-add; absorbed MLA attends in the latent space (keys of d_c + d_h^R, values of d_c)
    ### BEGIN SOLUTION
    if is_mla(spec):
        per_head = 2 * (spec.kv_lora_rank + spec.qk_rope_head_dim) + 2 * spec.kv_lora_rank
    else:
        per_head = 4 * spec.head_dim
    return spec.num_layers * spec.num_heads * per_head
    ### END SOLUTION


def decode_roofline(spec: ModelSpec, dep: Deployment, batch: int, context_len: int,
                    hbm_bytes_per_s: float, peak_flops: float) -> Roofline:
    """Roofline time of one decode step on one of ``dep.tp`` GPUs."""
    ### HINT: every step streams this GPU's weights once plus every cached token of every sequence; the step cannot be faster than either the bytes or the FLOPs allow
    ### BEGIN SOLUTION
    kv = batch * context_len * kv_bytes_per_token(spec, dep.kv_dtype_bytes, dep.tp)
    bytes_read = weight_bytes_per_gpu(spec, dep) + kv
    flops = (2 * spec.active_params * batch + batch * context_len * attn_flops_per_pair(spec)) // dep.tp
    t_memory = bytes_read / hbm_bytes_per_s
    t_compute = flops / peak_flops
    bound = "memory" if t_memory >= t_compute else "compute"
    return Roofline(bytes_read, flops, t_memory, t_compute, max(t_memory, t_compute), bound)
    ### END SOLUTION
