"""triton-09: causal FlashAttention forward (FlashAttention-2 schedule) with a logsumexp output."""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _attn_inner(acc, l_i, m_i, q, k_base, v_base, offs_m, offs_d, lo, hi, seq_len, qk_scale,
                stride_kn, stride_kd, stride_vn, stride_vd,
                BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                INPUT_PRECISION: tl.constexpr):
    """Fold key/value blocks [lo, hi) into the running state (acc, l_i, m_i) of BLOCK_M query rows.

    Scores live in the log2 domain: s = (q . k) * sm_scale * log2(e), so exp2(s - m) is the softmax numerator.
    MASKED blocks may hold keys past seq_len and (if CAUSAL) keys after the query; the others are fully visible.
    """
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k_ptrs = k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd
        v_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
        if MASKED:
            k = tl.load(k_ptrs, mask=offs_n[:, None] < seq_len, other=0.0)
            v = tl.load(v_ptrs, mask=offs_n[:, None] < seq_len, other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        ### HINT: scores = q @ k^T * qk_scale; mask with -inf; new max; rescale l_i AND acc by exp2(m_old - m_new); acc += p @ v.
        ### BEGIN SOLUTION
        s = tl.dot(q, tl.trans(k), input_precision=INPUT_PRECISION) * qk_scale  # [BLOCK_M, BLOCK_N]
        if MASKED:
            keep = offs_n[None, :] < seq_len
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= offs_n[None, :])  # query i sees keys 0..i
            s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.math.exp2(m_i - m_new)  # rescales everything accumulated against the old max
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=INPUT_PRECISION)
        m_i = m_new
        ### END SOLUTION
    return acc, l_i, m_i


@triton.jit
def flash_attn_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, sm_scale, H, seq_len,
                          stride_qb, stride_qh, stride_qm, stride_qd,
                          stride_kb, stride_kh, stride_kn, stride_kd,
                          stride_vb, stride_vh, stride_vn, stride_vd,
                          stride_ob, stride_oh, stride_om, stride_od,
                          HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          CAUSAL: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """One program = BLOCK_M query rows of one (batch, head). O = softmax(Q K^T * sm_scale) V, LSE = log sum exp."""
    # heaviest query blocks first: with a causal mask block i does i + 1 key blocks, so launching them in
    # reverse order leaves short programs for the tail. Axis 0 (launched fastest) stays within one head,
    # so the programs running together share that head's K and V in L2.
    start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    q_base = q_ptr + b * stride_qb + h * stride_qh
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=offs_m[:, None] < seq_len, other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # fold log2(e) into the scale: exp2 in the inner loop
    ### HINT: two key ranges for this query block: [lo_full, hi_full) holds only keys every query row of the block may see (no mask at all), [lo_diag, hi_diag) the rest that any row may see (masked). Causal: nothing right of the block's diagonal is read. Not causal: every key is visible.
    ### BEGIN SOLUTION
    if CAUSAL:
        # key blocks entirely left of this query block's diagonal: every key is visible, no mask at all
        lo_full, hi_full = 0, start_m * BLOCK_M
        # the diagonal blocks: causal + sequence-end mask; blocks right of the diagonal are skipped entirely
        lo_diag, hi_diag = start_m * BLOCK_M, tl.minimum((start_m + 1) * BLOCK_M, seq_len)
    else:
        lo_full, hi_full = 0, 0
        lo_diag, hi_diag = 0, seq_len
    ### END SOLUTION
    acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_base, v_base, offs_m, offs_d, lo_full, hi_full,
                                seq_len, qk_scale, stride_kn, stride_kd, stride_vn, stride_vd,
                                BLOCK_N, False, CAUSAL, INPUT_PRECISION)
    acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_base, v_base, offs_m, offs_d, lo_diag, hi_diag,
                                seq_len, qk_scale, stride_kn, stride_kd, stride_vn, stride_vd,
                                BLOCK_N, True, CAUSAL, INPUT_PRECISION)
    ### HINT: normalize by the row sums; the natural-log LSE is (m + log2(l)) * ln(2) because m is in the log2 domain.
    ### BEGIN SOLUTION
    o = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # * ln(2): back to natural log
    ### END SOLUTION
    o_ptrs = o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
    tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len)
    tl.store(lse_ptr + pid_bh.to(tl.int64) * seq_len + offs_m, lse, mask=offs_m < seq_len)


def flash_attn_forward(q, k, v, causal=True, sm_scale=None, block_m=64, block_n=32, input_precision=None,
                       num_warps=4, num_stages=2):
    """q, k, v: [B, H, S, D] (any strides). Returns (o [B, H, S, D] in q.dtype, lse [B, H, S] fp32)."""
    B, H, S, D = q.shape
    assert k.shape == v.shape == q.shape, "same number of heads and length for q, k, v in this lesson"
    assert D in (16, 32, 64, 128, 256), "head dim must be a power of two >= 16 (tl.dot / tl.arange)"
    assert block_m % block_n == 0, "the causal split assumes whole key blocks inside each query block"
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    o = torch.empty_like(q)
    lse = torch.empty((B, H, S), device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(S, block_m), B * H)
    flash_attn_fwd_kernel[grid](q, k, v, o, lse, sm_scale, H, S,
                                *q.stride(), *k.stride(), *v.stride(), *o.stride(),
                                HEAD_DIM=D, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal,
                                INPUT_PRECISION=input_precision, num_warps=num_warps, num_stages=num_stages)
    return o, lse
