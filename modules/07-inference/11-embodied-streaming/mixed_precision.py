"""infer-11 (b): per-layer precision assignment under an error budget.

Sensitivity analysis: quantize ONE layer at a time to each format and measure the relative change of the
model's output on a calibration batch: err[l, f]. First-order assumption: the errors of several quantized
layers add up (by the triangle inequality the norms of first-order output perturbations do add up as a
bound), so we choose one format per layer minimizing the total cost (bytes) subject to
sum_l err[l, f_l] <= budget. That is a multiple-choice knapsack: exact for a few dozen layers with a
dynamic program over Pareto-optimal (cost, error) partial assignments.
"""

import numpy as np
import torch
from torch import nn

FORMATS = ("fp32", "bf16", "fp8_e4m3", "int8", "int4")
BITS = {"fp32": 32, "bf16": 16, "fp8_e4m3": 8, "int8": 8, "int4": 4}
FP8_E4M3_MAX = 448.0


def fake_quant(w: torch.Tensor, fmt: str) -> torch.Tensor:
    """w quantized to `fmt` and back to w.dtype (weights of a Linear: one scale per output row)."""
    if fmt == "fp32":
        return w.clone()
    if fmt == "bf16":
        return w.to(torch.bfloat16).to(w.dtype)
    amax = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12)
    if fmt == "fp8_e4m3":
        scale = amax / FP8_E4M3_MAX
        return (w / scale).to(torch.float8_e4m3fn).to(w.dtype) * scale
    qmax = {"int8": 127, "int4": 7}[fmt]
    scale = amax / qmax
    return torch.clamp(torch.round(w / scale), -qmax, qmax) * scale


def quant_layers(model: nn.Module) -> list[nn.Linear]:
    """The layers whose weights get a format, in forward order."""
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


def relative_error(y: torch.Tensor, y_ref: torch.Tensor) -> float:
    return float((y - y_ref).norm() / y_ref.norm())


@torch.no_grad()
def measure_sensitivity(model: nn.Module, x: torch.Tensor, formats: tuple[str, ...] = FORMATS) -> np.ndarray:
    """err[l, f] = relative_error(output with ONLY layer l's weight fake-quantized to formats[f], output of
    the unmodified model), on the calibration batch x. The model is left exactly as it was."""
    layers = quant_layers(model)
    y_ref = model(x)
    err = np.zeros((len(layers), len(formats)))
    ### HINT: one layer, one format at a time; every other layer keeps its original weight while you measure.
    ### BEGIN SOLUTION
    for li, layer in enumerate(layers):
        original = layer.weight.data.clone()
        for fi, fmt in enumerate(formats):
            layer.weight.data = fake_quant(original, fmt)
            err[li, fi] = relative_error(model(x), y_ref)
        layer.weight.data = original
    ### END SOLUTION
    return err


def layer_costs(model: nn.Module, formats: tuple[str, ...] = FORMATS) -> np.ndarray:
    """cost[l, f] = bytes of layer l's weight stored in formats[f] (integers)."""
    return np.array([[m.weight.numel() * BITS[f] // 8 for f in formats] for m in quant_layers(model)])


def assign_precision(err: np.ndarray, cost: np.ndarray, budget: float) -> list[int] | None:
    """err, cost: [n_layers, n_formats], both >= 0. Returns one format index per layer that minimizes
    sum_l cost[l, f_l] subject to sum_l err[l, f_l] <= budget (sums taken in layer order), or None when no
    assignment meets the budget. Any optimal assignment is accepted."""
    n_layers, n_formats = err.shape
    ### HINT: partial assignments of the first layers as (cost, error, choices); after each layer keep only those no other beats on both cost and error, and none over the budget (errors only grow).
    ### BEGIN SOLUTION
    frontier: list[tuple[float, float, list[int]]] = [(0.0, 0.0, [])]
    for layer in range(n_layers):
        cand = [(c + cost[layer, f], e + err[layer, f], [*ch, f])
                for c, e, ch in frontier for f in range(n_formats)]
        cand.sort(key=lambda s: (s[0], s[1]))
        frontier, best_err = [], float("inf")
        for state in cand:
            if state[1] <= budget and state[1] < best_err:
                frontier.append(state)
                best_err = state[1]
    return frontier[0][2] if frontier else None
    ### END SOLUTION


@torch.no_grad()
def apply_formats(model: nn.Module, choice: list[int], formats: tuple[str, ...] = FORMATS) -> None:
    """Fake-quantize every layer's weight to its chosen format, in place."""
    for layer, f in zip(quant_layers(model), choice, strict=True):
        layer.weight.data = fake_quant(layer.weight.data, formats[f])
