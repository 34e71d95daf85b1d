"""infer-03: decode attention that reads K/V through a block table (PagedAttention), written in Triton.

Paged KV cache: K and V live in a pool of physical blocks, `k_cache[num_blocks, block_size, num_kv_heads,
head_dim]` (V alike). Sequence b's token t sits in physical block `block_tables[b, t // block_size]`, slot
`t % block_size`. Decode: one new query token per sequence; GQA: query head h reads KV head h // group.
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def paged_decode_kernel(q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, context_lens_ptr, out_ptr,
                        sm_scale,
                        stride_qb, stride_qh, stride_qd,
                        stride_kb, stride_ks, stride_kh, stride_kd,
                        stride_vb, stride_vs, stride_vh, stride_vd,
                        stride_tb, stride_tj,
                        stride_ob, stride_oh, stride_od,
                        GROUP: tl.constexpr, ROWS: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                        HEAD_DIM: tl.constexpr, TILE_N: tl.constexpr):
    """One program = one sequence x one KV head, i.e. the GROUP query heads that share that KV head.

    Each loop step handles TILE_N tokens (TILE_N / BLOCK_SIZE physical blocks, or part of one). The GROUP
    query rows are padded to ROWS >= 16 so that both products are `tl.dot` (tensor cores on a GPU).
    Scores are kept in the log2 domain (qk_scale folds in log2(e)): exp2(s - m) is the softmax numerator.
    """
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    offs_g = tl.arange(0, ROWS)  # GROUP padded to ROWS rows; rows >= GROUP are padding
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, TILE_N)  # token offsets within one loop step
    head_ok = offs_g < GROUP
    ### HINT: the query heads this program serves (GQA: a KV head serves GROUP consecutive query heads); their q rows [ROWS, HEAD_DIM] in the cache's dtype (tl.dot wants equal operand types), padding rows masked.
    ### BEGIN SOLUTION
    heads = kv_head * GROUP + offs_g
    q = tl.load(q_ptr + seq * stride_qb + heads[:, None] * stride_qh + offs_d[None, :] * stride_qd,
                mask=head_ok[:, None], other=0.0).to(k_cache_ptr.dtype.element_ty)
    ### END SOLUTION
    ctx_len = tl.load(context_lens_ptr + seq)
    qk_scale = sm_scale * 1.4426950408889634  # log2(e)
    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    acc = tl.zeros([ROWS, HEAD_DIM], dtype=tl.float32)
    ### HINT: walk the context TILE_N tokens at a time; every token finds its own physical block in the table (token t: logical block t // BLOCK_SIZE, slot t % BLOCK_SIZE); gather K/V [TILE_N, HEAD_DIM] through the cache strides with tokens past ctx_len masked (their slots hold garbage); scores [ROWS, TILE_N] = tl.dot, -inf past ctx_len; online softmax: new max, rescale l_i and acc by exp2(m_old - m_new), add tl.dot(p, v).
    ### BEGIN SOLUTION
    for start in range(0, ctx_len, TILE_N):
        tok = start + offs_n
        tok_ok = tok < ctx_len
        # physical block of every token of this step (a step may span several blocks)
        phys = tl.load(block_tables_ptr + seq * stride_tb + (tok // BLOCK_SIZE) * stride_tj,
                       mask=tok_ok, other=0).to(tl.int64)
        slot = tok % BLOCK_SIZE
        k = tl.load(k_cache_ptr + phys[:, None] * stride_kb + slot[:, None] * stride_ks + kv_head * stride_kh
                    + offs_d[None, :] * stride_kd, mask=tok_ok[:, None], other=0.0)
        v = tl.load(v_cache_ptr + phys[:, None] * stride_vb + slot[:, None] * stride_vs + kv_head * stride_vh
                    + offs_d[None, :] * stride_vd, mask=tok_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale  # [ROWS, TILE_N]
        s = tl.where(tok_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    ### END SOLUTION
    out = acc / l_i[:, None]
    rows = GROUP * kv_head + offs_g  # the query heads of this group, in the output
    tl.store(out_ptr + seq * stride_ob + rows[:, None] * stride_oh + offs_d[None, :] * stride_od,
             out.to(out_ptr.dtype.element_ty), mask=head_ok[:, None])


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           sm_scale: float | None = None, out: torch.Tensor | None = None,
                           tile_n: int = 64, num_warps: int = 4, num_stages: int = 2) -> torch.Tensor:
    """q [B, Hq, D]; k_cache, v_cache [num_blocks, block_size, Hkv, D] (any strides);
    block_tables int32 [B, max_blocks] (entries past a sequence's last block are unspecified);
    context_lens int32 [B], each >= 1. Returns out [B, Hq, D] in q.dtype.

    Float32 caches: `tl.dot` rounds float32 operands to tf32 on NVIDIA GPUs unless TRITON_F32_DEFAULT=ieee
    (the tests set it); fp16/bf16 caches are exact products accumulated in fp32 either way."""
    B, Hq, D = q.shape
    num_blocks, block_size, Hkv, Dk = k_cache.shape
    assert v_cache.shape == k_cache.shape and Dk == D, "K and V caches share one shape; head dims match q"
    assert Hq % Hkv == 0, "GQA: query heads are a multiple of KV heads"
    assert D & (D - 1) == 0 and block_size & (block_size - 1) == 0, "head_dim and block_size: powers of two"
    assert tile_n >= 16 and tile_n & (tile_n - 1) == 0, "tile_n: a power of two >= 16 (tl.dot's minimum)"
    assert block_tables.shape[0] == context_lens.shape[0] == B
    group = Hq // Hkv
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    if out is None:
        out = torch.empty_like(q)
    paged_decode_kernel[(B, Hkv)](
        q, k_cache, v_cache, block_tables, context_lens, out, sm_scale,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), *block_tables.stride(), *out.stride(),
        GROUP=group, ROWS=max(16, triton.next_power_of_2(group)), BLOCK_SIZE=block_size, HEAD_DIM=D,
        TILE_N=tile_n, num_warps=num_warps, num_stages=num_stages)
    return out
