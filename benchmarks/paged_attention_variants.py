"""Two other paged decode attention kernels, for the H200 comparison with infer-03's kernel only.

Same inputs and result as `modules/07-inference/03-paged-attention/paged_attention.py` (TILE_N tokens per
loop step, each token looking up its own block, both products as `tl.dot` on 16 padded query rows):
- `per_block`: the first version of the lesson's kernel: one physical block (BLOCK_SIZE tokens) per loop
  step and the products as broadcast multiply + `tl.sum` on [GROUP_PAD, BLOCK_SIZE, HEAD_DIM] (CUDA cores);
- `split_kv`: the lesson's kernel plus split-KV (flash-decoding): the context is cut into NUM_SPLITS ranges
  handled by separate programs, each writing a normalised partial output and its log-sum-exp; a second
  small kernel merges them.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _split_kernel(q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, part_ptr, lse_ptr, sm_scale,
                  sqb, sqh, skb, sks, skh, svb, svs, svh, stb, spb, sph, sps, slb, slh,
                  GROUP: tl.constexpr, ROWS: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
                  TILE_N: tl.constexpr, NUM_SPLITS: tl.constexpr):
    seq, kv_head, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_g = tl.arange(0, ROWS)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, TILE_N)
    head_ok = offs_g < GROUP
    heads = kv_head * GROUP + offs_g
    q = tl.load(q_ptr + seq * sqb + heads[:, None] * sqh + offs_d[None, :], mask=head_ok[:, None], other=0.0)
    ctx = tl.load(lens_ptr + seq)
    per_split = tl.cdiv(tl.cdiv(ctx, NUM_SPLITS), TILE_N) * TILE_N  # tokens per split, whole tiles
    lo = split * per_split
    hi = tl.minimum(lo + per_split, ctx)
    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    acc = tl.zeros([ROWS, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    for start in range(lo, hi, TILE_N):
        tok = start + offs_n
        ok = tok < hi
        page = tl.load(tables_ptr + seq * stb + tok // BLOCK_SIZE, mask=ok, other=0).to(tl.int64)
        slot = tok % BLOCK_SIZE  # each token finds its own physical block: TILE_N spans several blocks
        k = tl.load(k_ptr + page[:, None] * skb + slot[:, None] * sks + kv_head * skh + offs_d[None, :],
                    mask=ok[:, None], other=0.0)
        v = tl.load(v_ptr + page[:, None] * svb + slot[:, None] * svs + kv_head * svh + offs_d[None, :],
                    mask=ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale  # [ROWS, TILE_N] on tensor cores
        s = tl.where(ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # an empty split keeps l = 0
        alpha = tl.math.exp2(m_i - m_safe)
        p = tl.math.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    lse = tl.where(l_i > 0, m_i + tl.math.log2(l_i), float("-inf"))  # log2-domain LSE of this split
    rows = kv_head * GROUP + offs_g
    tl.store(part_ptr + seq * spb + rows[:, None] * sph + split * sps + offs_d[None, :],
             acc / tl.where(l_i > 0, l_i, 1.0)[:, None], mask=head_ok[:, None])
    tl.store(lse_ptr + seq * slb + rows * slh + split, lse, mask=head_ok)


@triton.jit
def _merge_kernel(part_ptr, lse_ptr, out_ptr, spb, sph, sps, slb, slh, sob, soh,
                  HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr):
    seq, head = tl.program_id(0), tl.program_id(1)
    offs_s = tl.arange(0, NUM_SPLITS)
    offs_d = tl.arange(0, HEAD_DIM)
    lse = tl.load(lse_ptr + seq * slb + head * slh + offs_s)
    w = tl.math.exp2(lse - tl.max(lse, axis=0))  # splits weighted by their share of the softmax mass
    part = tl.load(part_ptr + seq * spb + head * sph + offs_s[:, None] * sps + offs_d[None, :])
    out = tl.sum(w[:, None] * part, axis=0) / tl.sum(w, axis=0)
    tl.store(out_ptr + seq * sob + head * soh + offs_d, out.to(out_ptr.dtype.element_ty))


def split_kv(q, k_cache, v_cache, block_tables, context_lens, sm_scale=None, out=None,
             tile_n: int = 64, num_splits: int | None = None, num_warps: int = 4, num_stages: int = 2):
    B, Hq, D = q.shape
    _, block_size, Hkv, _ = k_cache.shape
    assert q.stride(2) == 1 and k_cache.stride(3) == 1 and v_cache.stride(3) == 1
    group = Hq // Hkv
    if num_splits is None:  # enough programs to fill 132 SMs a few times over
        num_splits = triton.next_power_of_2(max(1, min(16, math.ceil(4 * 132 / (B * Hkv)))))
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    out = torch.empty_like(q) if out is None else out
    part = torch.empty(B, Hq, num_splits, D, device=q.device, dtype=torch.float32)
    lse = torch.empty(B, Hq, num_splits, device=q.device, dtype=torch.float32)
    _split_kernel[(B, Hkv, num_splits)](
        q, k_cache, v_cache, block_tables, context_lens, part, lse, sm_scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_tables.stride(0),
        part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
        GROUP=group, ROWS=max(16, triton.next_power_of_2(group)), BLOCK_SIZE=block_size, HEAD_DIM=D,
        TILE_N=tile_n, NUM_SPLITS=num_splits, num_warps=num_warps, num_stages=num_stages)
    _merge_kernel[(B, Hq)](part, lse, out, part.stride(0), part.stride(1), part.stride(2),
                           lse.stride(0), lse.stride(1), out.stride(0), out.stride(1),
                           HEAD_DIM=D, NUM_SPLITS=num_splits)
    return out


@triton.jit
def _per_block_kernel(q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, out_ptr, sm_scale,
                      sqb, sqh, skb, sks, skh, svb, svs, svh, stb, sob, soh,
                      GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                      HEAD_DIM: tl.constexpr):
    seq, kv_head = tl.program_id(0), tl.program_id(1)
    offs_g = tl.arange(0, GROUP_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_s = tl.arange(0, BLOCK_SIZE)
    head_ok = offs_g < GROUP
    heads = kv_head * GROUP + offs_g
    q = tl.load(q_ptr + seq * sqb + heads[:, None] * sqh + offs_d[None, :], mask=head_ok[:, None],
                other=0.0).to(tl.float32)
    ctx = tl.load(lens_ptr + seq)
    qk_scale = sm_scale * 1.4426950408889634
    m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)
    for j in range(0, tl.cdiv(ctx, BLOCK_SIZE)):
        phys = tl.load(tables_ptr + seq * stb + j).to(tl.int64)
        ok = j * BLOCK_SIZE + offs_s < ctx
        k = tl.load(k_ptr + phys * skb + offs_s[:, None] * sks + kv_head * skh + offs_d[None, :],
                    mask=ok[:, None], other=0.0).to(tl.float32)
        v = tl.load(v_ptr + phys * svb + offs_s[:, None] * svs + kv_head * svh + offs_d[None, :],
                    mask=ok[:, None], other=0.0).to(tl.float32)
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * qk_scale  # CUDA cores, [GROUP_PAD, BLOCK_SIZE]
        s = tl.where(ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        m_i = m_new
    rows = kv_head * GROUP + offs_g
    tl.store(out_ptr + seq * sob + rows[:, None] * soh + offs_d[None, :],
             (acc / l_i[:, None]).to(out_ptr.dtype.element_ty), mask=head_ok[:, None])


def per_block(q, k_cache, v_cache, block_tables, context_lens, sm_scale=None, out=None, **_):
    B, Hq, D = q.shape
    _, block_size, Hkv, _ = k_cache.shape
    assert q.stride(2) == 1 and k_cache.stride(3) == 1 and v_cache.stride(3) == 1
    group = Hq // Hkv
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    out = torch.empty_like(q) if out is None else out
    _per_block_kernel[(B, Hkv)](
        q, k_cache, v_cache, block_tables, context_lens, out, sm_scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_tables.stride(0),
        out.stride(0), out.stride(1),
        GROUP=group, GROUP_PAD=triton.next_power_of_2(group), BLOCK_SIZE=block_size, HEAD_DIM=D,
        num_warps=4, num_stages=2)
    return out
