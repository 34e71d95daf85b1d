"""fp32 -> tf32 operand rounding, as the tensor cores apply it to `tl.dot(..., input_precision="tf32")`.

tf32 keeps fp32's sign and 8 exponent bits and the top 10 of its 23 mantissa bits. Two roundings exist:
- "truncate" (the default here): the low 13 bits are dropped (round toward zero). The PTX ISA says so
  for Hopper's `wgmma.mma_async`: "wgmma.mma_async operation involving type .tf32 will truncate lower
  13 bits of the 32-bit input data before multiplication is issued" (PTX ISA 8.x, section
  "Asynchronous Warpgroup Level Matrix Multiply-Accumulate", .tf32 element-wise multiplication); Triton
  feeds fp32 registers to wgmma / mma.sync unchanged (triton-lang/triton#4574: its tf32 dot is less
  accurate than cuBLAS, which rounds with `cvt.rna.tf32.f32` first), and Triton's own Hopper tests
  mask the low 13 bits to predict the result (triton-lang/triton#8873).
- "rne": round to nearest, ties to even, at 10 mantissa bits (what a TFLOAT32 TMA tensor map applies,
  and triton 3.9's interpreter for descriptors created with `round_f32_to_tf32=True`).
Inf and NaN pass unchanged in both (a NaN whose payload sits only in the low 13 bits stays a NaN);
subnormals are treated like normals (the same 13 bits dropped or rounded); RNE may carry into the next
binade (0x3FFFFFFF -> 2.0) and the largest finite floats round to infinity.
"""

from __future__ import annotations

import numpy as np

MODES = ("truncate", "rne")

_EXPONENT = np.uint32(0x7F800000)
_KEEP = np.uint32(0xFFFFE000)  # sign, exponent and the top 10 mantissa bits


def round_to_tf32(values: np.ndarray, mode: str = "truncate") -> np.ndarray:
    """fp32 `values` rounded to tf32 precision (still stored as float32); a new array."""
    if mode not in MODES:
        raise ValueError(f"tf32 rounding mode must be one of {MODES}, got {mode!r}")
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    special = (bits & _EXPONENT) == _EXPONENT
    if mode == "truncate":
        kept = bits & _KEEP
    else:
        # Adding 0xFFF (+1 when the last kept bit is odd) carries into the kept bits exactly when the
        # dropped part is above half an ulp, or equal to it with an odd last kept bit.
        kept = (bits + (np.uint32(0x0FFF) + ((bits >> np.uint32(13)) & np.uint32(1)))) & _KEEP
    return np.where(special, bits, kept).view(np.float32)
