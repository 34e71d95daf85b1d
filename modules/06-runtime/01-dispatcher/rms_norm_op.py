"""runtime-01: RMSNorm as a PyTorch custom op — one kernel per dispatch key.

`torch.ops.hpccourse.rms_norm(x, weight, eps) -> (y, rstd)`:

    rstd = 1 / sqrt(mean(x**2, dim=-1) + eps)          # one value per row, kept for backward
    y    = x * rstd[..., None] * weight

Contract (the real kernel and the fake kernel must both honour it):
- x: [..., N] floating point (float16, bfloat16, float32, float64), any strides; weight: [N], x's dtype.
- y: x.shape, x.dtype, contiguous, on x's device.
- rstd: x.shape[:-1], dtype acc_dtype(x.dtype) (float32 for 16-bit x, else x's dtype), contiguous, on x's device.
- The math runs in acc_dtype(x.dtype); x and weight are never modified and never aliased by an output.
"""

import torch
from torch import Tensor

OP_NAME = "hpccourse::rms_norm"


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The accumulation dtype: float32 for half/bfloat16, the dtype itself for float32/float64."""
    return torch.promote_types(dtype, torch.float32)


# The CPU kernel: registered to the dispatcher's CPU key (the op's schema is inferred from the annotations).
@torch.library.custom_op(OP_NAME, mutates_args=(), device_types="cpu")
def rms_norm(x: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    ### HINT: compute in acc_dtype(x.dtype); y goes back to x.dtype; both outputs fresh, contiguous tensors (no in-place on x)
    ### BEGIN SOLUTION
    xf = x.to(acc_dtype(x.dtype))
    rstd = torch.rsqrt(xf.square().mean(dim=-1) + eps)
    y = (xf * rstd.unsqueeze(-1) * weight).to(x.dtype).contiguous()
    ### END SOLUTION
    return y, rstd


# The fake (Meta) kernel: what FakeTensorMode, meta tensors, Dynamo and AOTAutograd run instead of the CPU kernel.
@rms_norm.register_fake
def _rms_norm_fake(x: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    ### HINT: no data here, only metadata: shape, dtype, device and strides exactly as the real kernel returns them
    ### BEGIN SOLUTION
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rstd = torch.empty(x.shape[:-1], dtype=acc_dtype(x.dtype), device=x.device)
    ### END SOLUTION
    return y, rstd


# Autograd: setup_context runs after the forward and decides what backward may read.
def _setup_context(ctx, inputs: tuple, output: tuple) -> None:
    ### HINT: backward needs the input row, the weight and the per-row rstd
    ### BEGIN SOLUTION
    x, weight, _eps = inputs
    y, rstd = output
    ctx.save_for_backward(x, weight, rstd)
    ### END SOLUTION


def _backward(ctx, grad_y: Tensor, grad_rstd: Tensor) -> tuple[Tensor, Tensor, None]:
    """Gradients for (x, weight, eps). Both outputs are differentiable: rstd may be used downstream too."""
    ### HINT: d rstd / d x_j = -rstd**3 * x_j / N; it feeds both y (through every element of the row) and the rstd output
    ### BEGIN SOLUTION
    x, weight, rstd = ctx.saved_tensors
    acc = rstd.dtype
    xf, gy, w = x.to(acc), grad_y.to(acc), weight.to(acc)
    n = x.shape[-1]
    r = rstd.unsqueeze(-1)
    # sum_i dL/dy_i * dy_i/drstd, plus the gradient that reaches rstd directly
    g_rstd = (gy * w * xf).sum(dim=-1, keepdim=True) + grad_rstd.to(acc).unsqueeze(-1)
    grad_x = r * gy * w - xf * r.pow(3) * g_rstd / n
    grad_w = (gy * xf * r).reshape(-1, n).sum(dim=0)
    ### END SOLUTION
    return grad_x.to(x.dtype), grad_w.to(weight.dtype), None


rms_norm.register_autograd(_backward, setup_context=_setup_context)
