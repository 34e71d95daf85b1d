"""triton-05: fused LayerNorm forward and backward; dW/dB through a two-stage (partial-sum) reduction."""

import torch
import triton
import triton.language as tl


@triton.jit
def layernorm_fwd_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, N, stride_x, stride_y, eps,
                         BLOCK_N: tl.constexpr):
    """One program per row; BLOCK_N >= N so the whole row stays in registers. Saves mean and 1/std for backward."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    ### HINT: two-pass statistics in fp32: mean first, then the variance of the centred row; padded lanes must add nothing.
    ### BEGIN SOLUTION
    mean = tl.sum(x, axis=0) / N
    # centre before squaring (no E[x^2] - E[x]^2 cancellation); padded lanes would each add mean^2
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    ### END SOLUTION
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = xc * rstd * w + b
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def layernorm_bwd_dx_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_part_ptr, db_part_ptr,
                            M, N, stride, GROUPS, BLOCK_N: tl.constexpr):
    """Stage 1. Program g handles rows g, g + GROUPS, g + 2*GROUPS, ...: it writes their dx and one partial
    row of dW and dB (its own rows only) into the [GROUPS, N] buffers. No atomics, no locks, deterministic."""
    g = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for row in range(g, M, GROUPS):
        offs = tl.cast(row, tl.int64) * stride + cols  # int64: row * stride can exceed 2^31
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        ### HINT: xhat = (x - mean) * rstd; with g = w * dy, dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); accumulate dW += dy * xhat, dB += dy.
        ### BEGIN SOLUTION
        xhat = (x - mean) * rstd
        wdy = w * dy  # zero on padded lanes: dy and w were loaded with other=0
        c1 = tl.sum(xhat * wdy, axis=0) / N
        c2 = tl.sum(wdy, axis=0) / N
        dx = (wdy - (xhat * c1 + c2)) * rstd
        dw_acc += dy * xhat
        db_acc += dy
        ### END SOLUTION
        tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    ### HINT: each stage-1 program owns one row of the [GROUPS, N] partial buffers; every program writes its row, even one that had no input rows.
    ### BEGIN SOLUTION
    # this program's partial sums go to its own row of the buffers: no other program writes there
    tl.store(dw_part_ptr + g * N + cols, dw_acc, mask=mask)
    tl.store(db_part_ptr + g * N + cols, db_acc, mask=mask)
    ### END SOLUTION


@triton.jit
def layernorm_bwd_dwdb_kernel(dw_part_ptr, db_part_ptr, dw_ptr, db_ptr, GROUPS, N,
                              BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr):
    """Stage 2. Each program owns BLOCK_N columns and sums the GROUPS partial rows of dW and dB."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_N], dtype=tl.float32)
    ### HINT: walk the GROUPS rows BLOCK_G at a time: load a [BLOCK_G, BLOCK_N] tile (masked in both dimensions) and sum over axis 0.
    ### BEGIN SOLUTION
    for g0 in range(0, GROUPS, BLOCK_G):
        rows = g0 + tl.arange(0, BLOCK_G)
        mask = (rows[:, None] < GROUPS) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += tl.sum(tl.load(dw_part_ptr + offs, mask=mask, other=0.0), axis=0)
        db += tl.sum(tl.load(db_part_ptr + offs, mask=mask, other=0.0), axis=0)
    ### END SOLUTION
    tl.store(dw_ptr + cols, dw, mask=cols < N)
    tl.store(db_ptr + cols, db, mask=cols < N)


def _num_warps(block_n: int) -> int:
    return 16 if block_n >= 8192 else 8 if block_n >= 2048 else 4


def layernorm_forward(x, weight, bias, eps=1e-5):
    """Returns (y, mean, rstd) for a 2-D x with contiguous rows; statistics in fp32."""
    assert x.dim() == 2 and x.stride(1) == 1
    M, N = x.shape
    block_n = triton.next_power_of_2(N)
    assert block_n * x.element_size() <= 65536, "this kernel keeps a whole row on chip"
    y = torch.empty_like(x)
    mean = torch.empty(M, device=x.device, dtype=torch.float32)
    rstd = torch.empty(M, device=x.device, dtype=torch.float32)
    layernorm_fwd_kernel[(M,)](x, y, weight, bias, mean, rstd, N, x.stride(0), y.stride(0), eps,
                               BLOCK_N=block_n, num_warps=_num_warps(block_n))
    return y, mean, rstd


def layernorm_backward(dy, x, weight, mean, rstd, groups=None):
    """Returns (dx, dw, db). `groups` = number of stage-1 programs = rows of the partial-sum buffers."""
    M, N = x.shape
    x, dy = x.contiguous(), dy.contiguous()
    if groups is None:
        groups = min(M, 256)
    block_n = triton.next_power_of_2(N)
    dx = torch.empty_like(x)
    dw_part = torch.empty((groups, N), device=x.device, dtype=torch.float32)
    db_part = torch.empty((groups, N), device=x.device, dtype=torch.float32)
    layernorm_bwd_dx_kernel[(groups,)](dy, x, weight, mean, rstd, dx, dw_part, db_part, M, N, x.stride(0), groups,
                                       BLOCK_N=block_n, num_warps=_num_warps(block_n))
    dw = torch.empty(N, device=x.device, dtype=torch.float32)
    db = torch.empty(N, device=x.device, dtype=torch.float32)
    block_cols = 64
    layernorm_bwd_dwdb_kernel[(triton.cdiv(N, block_cols),)](dw_part, db_part, dw, db, groups, N,
                                                             BLOCK_G=32, BLOCK_N=block_cols)
    return dx, dw.to(weight.dtype), db.to(weight.dtype)


class LayerNorm(torch.autograd.Function):
    """y = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension, with the kernels above."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps=1e-5, groups=None):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        y, mean, rstd = layernorm_forward(x2, weight, bias, eps)
        ctx.save_for_backward(x2, weight, mean, rstd)
        ctx.groups = groups
        return y.reshape(shape)

    @staticmethod
    def backward(ctx, dy):
        x2, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = layernorm_backward(dy.reshape(x2.shape), x2, weight, mean, rstd, ctx.groups)
        return dx.reshape(dy.shape), dw, db, None, None


def layer_norm(x, weight, bias, eps=1e-5, groups=None):
    return LayerNorm.apply(x, weight, bias, eps, groups)
