"""triton-10: weight-only quantized matmul (W4A16 / W8A16) with in-kernel dequantization and group-wise scales.

Weight format (one of the common layouts; AWQ/GPTQ differ in details such as packing direction and order):
- q[k, n] in [0, 2^BITS) is the quantized weight; PACK = 32 // BITS consecutive k share one int32 word:
  qweight[k // PACK, n] holds q[k, n] in bits [(k % PACK) * BITS, (k % PACK + 1) * BITS).
- scales[g, n] (fp16/bf16) and zeros[g, n] (int32) for group g = k // GROUP_SIZE.
- dequantized weight: w[k, n] = (q[k, n] - zeros[g, n]) * scales[g, n], rounded to the activation dtype.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def quant_matmul_kernel(a_ptr, qw_ptr, s_ptr, z_ptr, c_ptr, M, N, K,
                        stride_am, stride_ak, stride_qk, stride_qn, stride_sg, stride_sn,
                        stride_zg, stride_zn, stride_cm, stride_cn,
                        BITS: tl.constexpr, GROUP_SIZE: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C = A @ dequant(W). BLOCK_K must be a multiple of PACK; K a multiple of PACK and GROUP_SIZE."""
    PACK: tl.constexpr = 32 // BITS
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)  # absolute k of this tile
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
        w_mask = (offs_k[:, None] < K) & (offs_n[None, :] < N)
        ### HINT: load the int32 word of each (k, n), shift its field down and mask BITS bits; group = k // GROUP_SIZE; w = (q - zero) * scale in fp32, then to a.dtype; tl.dot.
        ### BEGIN SOLUTION
        # PACK consecutive k share a word: row k // PACK of qweight, field k % PACK inside it
        packed = tl.load(qw_ptr + (offs_k // PACK)[:, None] * stride_qk + offs_n[None, :] * stride_qn,
                         mask=w_mask, other=0)
        shifts = (offs_k % PACK) * BITS
        q = (packed >> shifts[:, None]) & ((1 << BITS) - 1)  # >> sign-extends the top field; the mask clears it
        group = offs_k // GROUP_SIZE
        scale = tl.load(s_ptr + group[:, None] * stride_sg + offs_n[None, :] * stride_sn, mask=w_mask, other=0.0)
        zero = tl.load(z_ptr + group[:, None] * stride_zg + offs_n[None, :] * stride_zn, mask=w_mask, other=0)
        w = ((q - zero).to(tl.float32) * scale.to(tl.float32)).to(a.dtype)
        acc = tl.dot(a, w, acc)
        ### END SOLUTION
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def quant_matmul(a, qweight, scales, zeros, bits, group_size, out_dtype=None,
                 block_m=16, block_n=64, block_k=64, num_warps=4, num_stages=3):
    """a [M, K] fp16/bf16; qweight [K * bits / 32, N] int32; scales [K / group_size, N]; zeros same shape, int32."""
    assert bits in (4, 8)
    pack = 32 // bits
    M, K = a.shape
    N = qweight.shape[1]
    assert qweight.dtype == torch.int32 and qweight.shape[0] * pack == K
    assert K % group_size == 0 and group_size % pack == 0 and block_k % pack == 0
    assert scales.shape == zeros.shape == (K // group_size, N)
    out = torch.empty((M, N), device=a.device, dtype=out_dtype or a.dtype)
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    quant_matmul_kernel[grid](a, qweight, scales, zeros, out, M, N, K,
                              a.stride(0), a.stride(1), qweight.stride(0), qweight.stride(1),
                              scales.stride(0), scales.stride(1), zeros.stride(0), zeros.stride(1),
                              out.stride(0), out.stride(1),
                              BITS=bits, GROUP_SIZE=group_size, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                              num_warps=num_warps, num_stages=num_stages)
    return out
