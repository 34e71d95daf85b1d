"""triton-08: fused GEMM epilogues — bias + GELU, and the SwiGLU gate — applied to the fp32 accumulator
before the single store, so the GEMM output never makes an extra round trip through HBM."""

import torch
import triton
import triton.language as tl


@triton.jit
def _mainloop(acc, a_ptrs, b_ptrs, offs_m, offs_n, offs_k, M, N, K, stride_ak, stride_bk,
              BLOCK_K: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """acc += A[offs_m, :] @ B[:, offs_n] (triton-06's K loop)."""
    for k0 in range(0, K, BLOCK_K):
        k_mask = offs_k < K - k0
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & k_mask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_mask[:, None] & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def gelu(x):
    """Exact (erf) GELU, the default of torch.nn.functional.gelu."""
    ### HINT: GELU(x) = x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2))); tl.math.erf exists.
    ### BEGIN SOLUTION
    return 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    ### END SOLUTION


@triton.jit
def silu(x):
    """SiLU (swish): x * sigmoid(x)."""
    ### BEGIN SOLUTION
    return x * tl.sigmoid(x)
    ### END SOLUTION


@triton.jit
def linear_act_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                      stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                      HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      INPUT_PRECISION: tl.constexpr):
    """C = act(A @ B + bias); ACTIVATION is "gelu" or "none"."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc = _mainloop(acc, a_ptrs, b_ptrs, offs_m, offs_n, offs_k, M, N, K, stride_ak, stride_bk,
                    BLOCK_K, INPUT_PRECISION)
    ### HINT: in fp32, on the accumulator: add the bias (one value per output column), then the activation.
    ### BEGIN SOLUTION
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
        acc += bias[None, :]  # bias[n] broadcast down the rows of the tile
    if ACTIVATION == "gelu":
        acc = gelu(acc)
    ### END SOLUTION
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def swiglu_kernel(x_ptr, wg_ptr, wu_ptr, h_ptr, M, N, K,
                  stride_xm, stride_xk, stride_wk, stride_wn, stride_hm, stride_hn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  INPUT_PRECISION: tl.constexpr):
    """H = silu(X @ Wg) * (X @ Wu): two accumulators over the same X tiles, one store. Wg and Wu share strides."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_offs = offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn
    wg_ptrs = wg_ptr + w_offs
    wu_ptrs = wu_ptr + w_offs
    ### HINT: two fp32 accumulators [BLOCK_M, BLOCK_N] fed by the same X tile (one X load per K step, as in _mainloop); mask the K tail on X and on both weights; advance all three pointer tiles; then gate in fp32: h = SiLU(gate projection) times the up projection.
    ### BEGIN SOLUTION
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_mask = offs_k < K - k0
        x = tl.load(x_ptrs, mask=(offs_m[:, None] < M) & k_mask[None, :], other=0.0)  # read once, used twice
        w_mask = k_mask[:, None] & (offs_n[None, :] < N)
        acc_g = tl.dot(x, tl.load(wg_ptrs, mask=w_mask, other=0.0), acc_g, input_precision=INPUT_PRECISION)
        acc_u = tl.dot(x, tl.load(wu_ptrs, mask=w_mask, other=0.0), acc_u, input_precision=INPUT_PRECISION)
        x_ptrs += BLOCK_K * stride_xk
        wg_ptrs += BLOCK_K * stride_wk
        wu_ptrs += BLOCK_K * stride_wk
    h = silu(acc_g) * acc_u
    ### END SOLUTION
    h_ptrs = h_ptr + offs_m[:, None] * stride_hm + offs_n[None, :] * stride_hn
    tl.store(h_ptrs, h.to(h_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def linear_act(x, w, bias=None, activation="gelu", block=(64, 64, 32), input_precision=None,
               num_warps=4, num_stages=3):
    """act(x @ w + bias) for x [M, K], w [K, N], bias [N] or None; activation "gelu" or "none"."""
    assert activation in ("gelu", "none")
    M, K = x.shape
    N = w.shape[1]
    out = torch.empty((M, N), device=x.device, dtype=x.dtype)
    bm, bn, bk = block
    grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
    linear_act_kernel[grid](x, w, bias if bias is not None else x, out, M, N, K,
                            x.stride(0), x.stride(1), w.stride(0), w.stride(1), out.stride(0), out.stride(1),
                            HAS_BIAS=bias is not None, ACTIVATION=activation,
                            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, INPUT_PRECISION=input_precision,
                            num_warps=num_warps, num_stages=num_stages)
    return out


def swiglu(x, w_gate, w_up, block=(64, 64, 32), input_precision=None, num_warps=4, num_stages=3):
    """silu(x @ w_gate) * (x @ w_up) for x [M, K] and two [K, N] weights with the same strides."""
    assert w_gate.shape == w_up.shape and w_gate.stride() == w_up.stride()
    M, K = x.shape
    N = w_gate.shape[1]
    out = torch.empty((M, N), device=x.device, dtype=x.dtype)
    bm, bn, bk = block
    grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
    swiglu_kernel[grid](x, w_gate, w_up, out, M, N, K,
                        x.stride(0), x.stride(1), w_gate.stride(0), w_gate.stride(1), out.stride(0), out.stride(1),
                        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, INPUT_PRECISION=input_precision,
                        num_warps=num_warps, num_stages=num_stages)
    return out
