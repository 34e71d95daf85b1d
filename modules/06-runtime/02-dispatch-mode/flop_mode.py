"""runtime-02: TorchDispatchMode — an aten op tracer and a FLOP counter.

A TorchDispatchMode sits at the dispatcher's Python key: below Autograd and Autocast, above the backend kernels.
Every aten op that actually runs (forward AND backward, after autograd and after CompositeImplicit decompositions)
calls `__torch_dispatch__(func, types, args, kwargs)` with `func` an OpOverload such as `aten.mm.default`.

FLOP convention (the one of torch.utils.flop_counter.FlopCounterMode in PyTorch v2.13.0): a multiply-add is 2 FLOPs;
only matrix products and convolutions count; bias adds, activations, softmax and normalization count 0.
"""

from collections import defaultdict
from math import prod

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

aten = torch.ops.aten


class OpTracer(TorchDispatchMode):
    """Records every aten op that runs inside the mode, in order.

    `calls[i] = (name, shapes)`: name is the overload's string (e.g. "aten.mm.default"), shapes a list with the shape
    (a tuple of ints) of every tensor in the op's output, in pytree-flatten order (an op may return a tensor, a tuple
    of tensors, a list, or None entries)."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, list[tuple[int, ...]]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ### HINT: run the op exactly as called (args and kwargs), record (str(func), shapes of all output tensors), return its output
        ### BEGIN SOLUTION
        out = func(*args, **(kwargs or {}))
        leaves, _ = tree_flatten(out)
        self.calls.append((str(func), [tuple(t.shape) for t in leaves if isinstance(t, torch.Tensor)]))
        return out
        ### END SOLUTION

    def ops(self) -> list[str]:
        return [name for name, _ in self.calls]


def conv_flops(x_shape, w_shape, out_shape, transposed: bool) -> int:
    """Convolution FLOPs: 2 * batch * C_out * (C_in / groups) * prod(kernel) * prod(spatial points convolved).

    w_shape is [C_out, C_in/groups, *kernel] (for a transposed conv [C_in, C_out/groups, *kernel]; the product of its
    first two entries is the same). A normal conv convolves at every OUTPUT point, a transposed one at every INPUT point."""
    spatial = (x_shape if transposed else out_shape)[2:]
    return 2 * x_shape[0] * w_shape[0] * w_shape[1] * prod(w_shape[2:]) * prod(spatial)


def _swap01(shape):
    """[A, B, *rest] -> [B, A, *rest]: the batch and channel axes exchanged."""
    return [shape[1], shape[0], *shape[2:]]


def matmul_flops(a_shape, b_shape) -> int:
    """[M, K] @ [K, N] or [B, M, K] @ [B, K, N]."""
    ### HINT: one multiply and one add per (batch, m, n, k)
    ### BEGIN SOLUTION
    *batch, m, k = a_shape
    n = b_shape[-1]
    return 2 * prod(batch) * m * n * k
    ### END SOLUTION


def conv_backward_flops(grad_out_shape, x_shape, w_shape, transposed: bool, output_mask, out_shapes) -> int:
    """aten.convolution_backward: only the gradients in output_mask = [input, weight, bias] are computed.

    grad_input is a convolution of grad_out with w in the opposite direction (transposed <-> not transposed); grad_weight
    is a convolution whose batch axis is the channel axis: conv(x, grad_out) for a normal conv, conv(grad_out, x) for a
    transposed one, with batch and channel axes swapped in all three shapes. Bias gradients count 0."""
    ### HINT: out_shapes[0] / out_shapes[1] are the shapes of grad_input / grad_weight (when computed); reuse conv_flops
    ### BEGIN SOLUTION
    flops = 0
    if output_mask[0]:
        flops += conv_flops(grad_out_shape, w_shape, out_shapes[0], not transposed)
    if output_mask[1]:
        src, ker = (grad_out_shape, x_shape) if transposed else (x_shape, grad_out_shape)
        flops += conv_flops(_swap01(src), _swap01(ker), _swap01(out_shapes[1]), False)
    return flops
    ### END SOLUTION


def sdpa_flops(q_shape, k_shape, v_shape) -> int:
    """Attention forward, q [B, H, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv]: the two batched matmuls
    S = Q K^T and O = P V over all B*H query heads (GQA broadcasts the Hkv heads). Causal masks are ignored."""
    ### HINT: every query head (q_shape[1]) does its own QK^T and PV; reuse matmul_flops
    ### BEGIN SOLUTION
    b, h, sq, d = q_shape
    sk, dv = k_shape[2], v_shape[3]
    return matmul_flops((b * h, sq, d), (b * h, d, sk)) + matmul_flops((b * h, sq, sk), (b * h, sk, dv))
    ### END SOLUTION


def sdpa_backward_flops(grad_out_shape, q_shape, k_shape, v_shape) -> int:
    """Attention backward as fused kernels run it: recompute S = Q K^T, then dP = dO V^T, dV = P^T dO,
    dQ = dS K, dK = dS^T Q (five batched matmuls; FlopCounterMode's sdpa_backward_flop_count)."""
    b, h, sq, d = q_shape
    sk, dv = k_shape[2], v_shape[3]
    return 2 * b * h * sq * sk * (3 * d + 2 * dv)  # S, dQ, dK cost Sq*Sk*D each; dP, dV cost Sq*Sk*Dv each


def _shape(t):
    return None if t is None else tuple(t.shape)


def flop_formulas() -> dict:
    """aten op packet -> flops(args, kwargs, out). args are the op's positional arguments as the dispatcher passes them:
    mm(a, b); addmm(bias, a, b); bmm(a, b); baddbmm(bias, a, b); convolution(x, w, bias, stride, padding, dilation,
    transposed, output_padding, groups); convolution_backward(grad_out, x, w, bias_sizes, stride, padding, dilation,
    transposed, output_padding, groups, output_mask) -> (grad_input | None, grad_weight | None, grad_bias | None);
    _scaled_dot_product_flash_attention_for_cpu(q, k, v, ...) and its _backward(grad_out, q, k, v, out, logsumexp, ...):
    the CPU flash kernel F.scaled_dot_product_attention picks by default, which FlopCounterMode does not count."""
    ### HINT: bias adds count 0 (FlopCounterMode's convention); conv_backward_flops wants the shapes of out's non-None entries
    ### BEGIN SOLUTION
    return {
        aten.mm: lambda args, kwargs, out: matmul_flops(args[0].shape, args[1].shape),
        aten.addmm: lambda args, kwargs, out: matmul_flops(args[1].shape, args[2].shape),
        aten.bmm: lambda args, kwargs, out: matmul_flops(args[0].shape, args[1].shape),
        aten.baddbmm: lambda args, kwargs, out: matmul_flops(args[1].shape, args[2].shape),
        aten.convolution: lambda args, kwargs, out: conv_flops(args[0].shape, args[1].shape, out.shape, args[6]),
        aten.convolution_backward: lambda args, kwargs, out: conv_backward_flops(
            args[0].shape, args[1].shape, args[2].shape, args[7], args[10], [_shape(t) for t in out]),
        aten._scaled_dot_product_flash_attention_for_cpu: lambda args, kwargs, out: sdpa_flops(
            args[0].shape, args[1].shape, args[2].shape),
        aten._scaled_dot_product_flash_attention_for_cpu_backward: lambda args, kwargs, out: sdpa_backward_flops(
            args[0].shape, args[1].shape, args[2].shape, args[3].shape),
    }
    ### END SOLUTION


class FlopCounter(TorchDispatchMode):
    """Counts FLOPs of the ops in flop_formulas() that run inside the mode. `counts` maps an op packet
    (e.g. aten.mm) to its FLOPs; every other op counts 0 (and does not appear)."""

    def __init__(self):
        super().__init__()
        self.counts: dict = defaultdict(int)
        self.formulas = flop_formulas()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ### HINT: key by func.overloadpacket; the formulas need the op's output too
        ### BEGIN SOLUTION
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = self.formulas.get(func.overloadpacket)
        if formula is not None:
            self.counts[func.overloadpacket] += formula(args, kwargs, out)
        return out
        ### END SOLUTION

    def total(self) -> int:
        return sum(self.counts.values())
