"""runtime-03: a custom torch.autograd.Function — softplus that also returns its amax.

    y    = softplus_beta(x) = log(1 + exp(beta * x)) / beta          (elementwise, x's dtype)
    amax = max(y)                                                     (0-dim; e.g. for FP8 scaling or logging)

Contract:
- forward is exact for every finite x: no overflow for large beta*x (exp(89) is inf in float32, exp(710) in float64).
- memory: the function saves exactly ONE tensor for backward, its output y, through ctx.save_for_backward
  (so saved-tensor hooks, checkpointing and the version counter see it). The derivative is recovered from y:
  dy/dx = sigmoid(beta * x) = 1 - exp(-beta * y).
- backward is written in differentiable torch ops, so it can itself be differentiated (double backward).
- amax is not differentiable: no gradient flows through it.
"""

import torch
from torch import Tensor


class SoftplusAmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, beta: float) -> tuple[Tensor, Tensor]:
        ### HINT: log(1 + e^z) = max(z, 0) + log1p(e^-|z|); save y only (after it is final), keep beta as a plain float
        ### BEGIN SOLUTION
        bx = x * beta
        y = (bx.clamp(min=0) + torch.log1p(torch.exp(-bx.abs()))) / beta
        amax = y.amax()
        ctx.save_for_backward(y)
        ctx.beta = beta
        ctx.mark_non_differentiable(amax)
        ### END SOLUTION
        return y, amax

    @staticmethod
    def backward(ctx, grad_y: Tensor, grad_amax: Tensor) -> tuple[Tensor, None]:
        ### HINT: sigmoid(beta*x) from the saved output; 1 - exp(-t) loses everything when t is tiny
        ### BEGIN SOLUTION
        (y,) = ctx.saved_tensors
        slope = -torch.expm1(-ctx.beta * y)
        return grad_y * slope, None
        ### END SOLUTION


def softplus_amax(x: Tensor, beta: float = 1.0) -> tuple[Tensor, Tensor]:
    return SoftplusAmax.apply(x, beta)
