"""triton-06: tiled matmul C = A @ B with a K loop and an fp32 accumulator."""

import torch
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  INPUT_PRECISION: tl.constexpr):
    """One program computes one BLOCK_M x BLOCK_N tile of C, walking K in BLOCK_K steps."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    ### HINT: pointer tiles for A [BLOCK_M, BLOCK_K] and B [BLOCK_K, BLOCK_N] from the strides; accumulate tl.dot in fp32; mask the K tail with other=0; advance both tiles by BLOCK_K along K.
    ### BEGIN SOLUTION
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        # only the last K step is ragged: lanes past K load 0 so they add nothing to the dot product
        k_mask = offs_k < K - k0
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & k_mask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_mask[:, None] & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    ### END SOLUTION
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
           block_m: int = 64, block_n: int = 64, block_k: int = 32, input_precision: str | None = None,
           num_warps: int = 4, num_stages: int = 3) -> torch.Tensor:
    """C = A @ B for 2-D A (M x K) and B (K x N) of any strides.

    input_precision: None = Triton's default ("tf32" for fp32 operands on NVIDIA GPUs: ~1e-3 relative error),
    "ieee" = true fp32 products. fp16/bf16 operands always multiply exactly and accumulate in fp32.
    """
    assert a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0]
    M, K = a.shape
    N = b.shape[1]
    if out is None:
        out = torch.empty((M, N), device=a.device, dtype=out_dtype or a.dtype)
    if M == 0 or N == 0:
        return out
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    matmul_kernel[grid](a, b, out, M, N, K,
                        a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
                        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, INPUT_PRECISION=input_precision,
                        num_warps=num_warps, num_stages=num_stages)
    return out
