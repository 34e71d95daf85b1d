"""diag-04: FP8 / BF16 numerics.

1. DelayedScaling: Transformer Engine's delayed-scaling recipe (amax history, "max" / "most_recent", margin).
2. cast_report: what a cast to an 8-bit float format would do to a tensor, decided BEFORE the cast.
3. find_nan_origin: forward hooks that name the first module turning finite inputs into a non-finite output.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import nn

FP32_MAX = torch.finfo(torch.float32).max


class Fp8Format(NamedTuple):
    """An 8-bit (or any small) float format, described by its magnitudes only."""

    name: str
    max: float  # largest finite magnitude
    min_normal: float  # smallest positive normal number
    min_subnormal: float  # smallest positive subnormal number


# Exact powers of two / sums of them, checked against every bit pattern of torch's dtypes (README, measured table).
FORMATS = {
    "e4m3fn": Fp8Format("e4m3fn", 448.0, 2.0**-6, 2.0**-9),
    "e5m2": Fp8Format("e5m2", 57344.0, 2.0**-14, 2.0**-16),
    "e4m3fnuz": Fp8Format("e4m3fnuz", 240.0, 2.0**-7, 2.0**-10),
    "e5m2fnuz": Fp8Format("e5m2fnuz", 57344.0, 2.0**-15, 2.0**-17),
}
DTYPES = {
    "e4m3fn": torch.float8_e4m3fn,
    "e5m2": torch.float8_e5m2,
    "e4m3fnuz": torch.float8_e4m3fnuz,
    "e5m2fnuz": torch.float8_e5m2fnuz,
}


# ---------------------------------------------------------------------------------------------------------------------
# 1. delayed scaling
# ---------------------------------------------------------------------------------------------------------------------


class DelayedScaling:
    """One tensor's delayed-scaling state, laid out as in Transformer Engine.

    amax_history: float32 [amax_history_len]; slot 0 collects the amax of the current step (record), slots 1..L-1
    hold the previous steps, the newest in the last slot. scale: float32 0-dim tensor, starts at 1.
    """

    def __init__(self, fp8_max: float, margin: int = 0, amax_history_len: int = 1024,
                 amax_compute_algo: str = "max") -> None:
        if amax_compute_algo not in ("max", "most_recent"):
            raise ValueError(f"amax_compute_algo must be 'max' or 'most_recent', got {amax_compute_algo!r}")
        if amax_history_len < 1:
            raise ValueError("amax_history_len must be >= 1")
        self.fp8_max = float(fp8_max)
        self.margin = int(margin)
        self.amax_compute_algo = amax_compute_algo
        self.amax_history = torch.zeros(amax_history_len, dtype=torch.float32)
        self.scale = torch.ones((), dtype=torch.float32)

    def record(self, x: torch.Tensor) -> None:
        """What the cast kernel does during the step: fold |x|'s max into slot 0 (NaN propagates)."""
        if x.numel() == 0:
            return
        amax = x.detach().abs().max().to(torch.float32)
        self.amax_history[0] = torch.maximum(self.amax_history[0], amax)

    def update(self) -> torch.Tensor:
        """End of step: choose the amax, roll the history, compute the new scale; return it (float32, 0-dim)."""
        ### HINT: TE's order: amax from the history as it is, then roll (slot 0 -> last slot) and zero slot 0, then the scale
        ### BEGIN SOLUTION
        hist = self.amax_history
        if self.amax_compute_algo == "max":
            amax = hist.max()  # NaN anywhere in the window -> NaN (torch.max), as TE's Python path
        else:
            amax = hist[0].clone()
        if hist.numel() > 1:
            hist.copy_(torch.roll(hist, -1, 0))
        hist[0] = 0.0
        sf = (self.fp8_max / amax) / (2.0**self.margin)
        keep = ~(torch.isfinite(amax) & (amax > 0.0))  # amax 0, inf or NaN: nothing to learn, keep the old scale
        sf = torch.where(keep, self.scale, sf)
        sf = torch.where(torch.isinf(sf), torch.full_like(sf, FP32_MAX), sf)
        self.scale = sf.to(torch.float32)
        return self.scale
        ### END SOLUTION


# ---------------------------------------------------------------------------------------------------------------------
# 2. overflow / underflow before the cast
# ---------------------------------------------------------------------------------------------------------------------


class CastReport(NamedTuple):
    """Fractions of ALL elements of x (0.0 for an empty x); the four classes are disjoint."""

    overflow: float  # finite x with |x*scale| > fmt.max: saturates (e4m3fn), becomes inf (e5m2) or NaN (fnuz)
    subnormal: float  # finite x with min_subnormal/2 < |x*scale| < min_normal: lands in the subnormal range
    flushed: float  # finite x != 0 with |x*scale| <= min_subnormal/2: rounds to zero
    nonfinite: float  # x is inf or NaN


def cast_report(x: torch.Tensor, scale: float | torch.Tensor, fmt: Fp8Format) -> CastReport:
    """Classify every element of x as the cast of x*scale (float32 product) to fmt would treat it. x is read-only."""
    ### HINT: work on the float32 product and the format's three magnitudes; never cast to the 8-bit dtype
    ### BEGIN SOLUTION
    n = x.numel()
    if n == 0:
        return CastReport(0.0, 0.0, 0.0, 0.0)
    y = x.to(torch.float32) * torch.as_tensor(scale, dtype=torch.float32)
    a = y.abs()
    finite = torch.isfinite(x)
    half_sub = fmt.min_subnormal / 2.0
    overflow = finite & (a > fmt.max)
    flushed = finite & (x != 0) & (a <= half_sub)  # ties-to-even: exactly half the smallest subnormal goes to 0
    subnormal = finite & (a > half_sub) & (a < fmt.min_normal)
    return CastReport(overflow.sum().item() / n, subnormal.sum().item() / n, flushed.sum().item() / n,
                      (~finite).sum().item() / n)
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------------------------------
# 3. NaN origin
# ---------------------------------------------------------------------------------------------------------------------


def _tensors(obj: Any) -> list[torch.Tensor]:
    """Every tensor inside obj (tensors, tuples, lists, dicts, nested)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for item in obj for t in _tensors(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in _tensors(item)]
    return []


def all_finite(obj: Any) -> bool:
    """True when every tensor inside obj holds only finite values (no tensors: True)."""
    return all(bool(torch.isfinite(t).all()) for t in _tensors(obj))


def find_nan_origin(model: nn.Module, *args: Any, **kwargs: Any) -> str | None:
    """Run model(*args, **kwargs) once and return the qualified name (as in named_modules(); the root is "") of the
    first module, in the order the forward passes finish, whose output holds a non-finite value while every tensor
    it received (positional and keyword) was finite. None when no module does. Leaves no hook behind."""
    ### HINT: one forward hook per module (with_kwargs=True), a list filled in firing order, removal even on an exception
    ### BEGIN SOLUTION
    found: list[str] = []

    def make_hook(name: str):
        def hook(module: nn.Module, hook_args: tuple, hook_kwargs: dict, output: Any) -> None:
            if all_finite((hook_args, hook_kwargs)) and not all_finite(output):
                found.append(name)  # hooks fire as each forward finishes: the list is in execution order
        return hook

    handles = [m.register_forward_hook(make_hook(name), with_kwargs=True) for name, m in model.named_modules()]
    try:
        model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return found[0] if found else None
    ### END SOLUTION
