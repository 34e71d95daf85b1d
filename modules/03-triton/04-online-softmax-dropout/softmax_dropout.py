"""triton-04: softmax over rows too long for one block (online max/sum merge) with fused, seeded dropout."""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_dropout_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, p, seed, BLOCK: tl.constexpr):
    """y[row] = dropout(softmax(x[row]), p) for rows of any length, walking each row BLOCK columns at a time.

    Pass 1 keeps a running max m_i and a running sum l_i = sum(exp(x - m_i)) over the blocks seen so far.
    Pass 2 re-reads the row and writes exp(x - m_i) / l_i, dropped out with a Philox mask keyed by (seed, index).
    """
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y

    m_i = float("-inf")  # running max of the row so far
    l_i = 0.0  # running sum of exp(x - m_i) so far
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        ### HINT: new max = max(old max, block max); rescale the old sum by exp(old max - new max) before adding this block.
        ### BEGIN SOLUTION
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m_i, tl.max(x, axis=0))
        # while every value so far is -inf, any finite reference keeps exp() at 0 instead of exp(-inf + inf) = NaN
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        l_i = l_i * tl.exp(m_i - m_safe) + tl.sum(tl.exp(x - m_safe), axis=0)
        m_i = m_new
        ### END SOLUTION

    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        y = tl.exp(x - m_i) / l_i
        ### HINT: one uniform number per element from tl.rand(seed, <the element's global index row * n_cols + col>); keep when >= p; scale kept values by 1 / (1 - p).
        ### BEGIN SOLUTION
        # keyed by the element's position in the whole tensor: the mask does not depend on BLOCK or the grid,
        # so a backward pass can regenerate it from (seed, index) instead of storing it
        r = tl.rand(seed, row * n_cols + cols)
        keep = r >= p
        y = tl.where(keep, y / (1.0 - p), 0.0)
        ### END SOLUTION
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax_dropout(x: torch.Tensor, p: float = 0.0, seed: int = 0, out: torch.Tensor | None = None,
                    block: int = 1024, num_warps: int = 4) -> torch.Tensor:
    """Row softmax followed by inverted dropout with probability p; rows must be contiguous."""
    assert x.dim() == 2 and x.stride(1) == 1, "rows must be contiguous (the row stride may be anything)"
    assert 0.0 <= p < 1.0
    M, N = x.shape
    if out is None:
        out = torch.empty_like(x)
    assert out.shape == x.shape and out.stride(1) == 1
    if M == 0 or N == 0:
        return out
    block = min(block, triton.next_power_of_2(N))
    softmax_dropout_kernel[(M,)](x, out, N, x.stride(0), out.stride(0), p, seed, BLOCK=block, num_warps=num_warps)
    return out
