"""runtime-06: dynamic shapes and guards — predict Dynamo's recompiles, then remove the avoidable ones.

Part 1, `expected_frames`: a model of torch 2.13's policy for ONE varying dimension. For a function with no
shape-dependent code, called on 1-D tensors of the given sizes, it returns the number of frames compiled so far
after each call (torch._dynamo.testing.CompileCounter.frame_count), for four settings:

    "static"   torch.compile(fn, dynamic=False)
    "auto"     torch.compile(fn)                    (dynamic=None, automatic_dynamic_shapes=True: the default)
    "mark"     torch.compile(fn) and torch._dynamo.mark_dynamic(x, 0) before every call
    "dynamic"  torch.compile(fn, dynamic=True)

Part 2, `project_fixed` + `make_runner`: `project` below recompiles for almost every new (batch, sequence) shape.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

ALIGN = 8  # the sequence is padded to a multiple of 8 (tensor-core friendly row counts)


def expected_frames(sizes: list[int], mode: str, limit: int = 8) -> list[int]:
    """Frames compiled after each call of the sequence `sizes` (see the module docstring for `mode`).

    `limit` is torch._dynamo.config.recompile_limit: once a frame has `limit` compiled entries, a call that
    matches none of them runs eagerly and compiles nothing. A call compiles only when no existing entry's guards
    accept its size. Sizes 0 and 1 are never covered by a symbolic (dynamic) entry."""
    ### HINT: an entry is either one exact size or "every size >= 2"; what decides the kind of a new entry is the mode and, for "auto", whether it is the first compile
    ### BEGIN SOLUTION
    entries: list = []  # an int (static entry for that size) or "dyn" (symbolic size, guarded s >= 2)
    frames = []
    for n in sizes:
        hit = n in entries or (n >= 2 and "dyn" in entries)
        if not hit and len(entries) < limit:
            # automatic dynamic: a miss after the first compile means the size changed -> compile it symbolic
            symbolic = mode in ("mark", "dynamic") or (mode == "auto" and len(entries) > 0)
            entries.append("dyn" if symbolic and n >= 2 else n)  # 0/1 specialization: 0 and 1 stay static
        frames.append(len(entries))
    return frames
    ### END SOLUTION


def project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Given code (do not edit). x [B, T, D], w [D, E] -> relu(x @ w) [B, T, E], computed on the sequence
    padded to a multiple of ALIGN. Under dynamic shapes the Python `if` installs a guard on T % ALIGN."""
    B, T, D = x.shape
    if T % ALIGN != 0:
        x = F.pad(x, (0, 0, 0, ALIGN - T % ALIGN))
    y = torch.relu(x @ w)
    return y[:, :T]


def project_fixed(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Same result as `project` for every shape, with no Python branch on a size. The matmul still runs on the
    sequence padded to a multiple of ALIGN (the padding is the point of `project`; the branch is what goes)."""
    ### HINT: padding by zero rows is a no-op; the pad amount can be one expression of T for every T >= 0
    ### BEGIN SOLUTION
    T = x.shape[1]
    x = F.pad(x, (0, 0, 0, (-T) % ALIGN))  # 0 when T is already a multiple of ALIGN: no branch, no guard
    return torch.relu(x @ w)[:, :T]
    ### END SOLUTION


def make_runner(backend) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Returns run(x, w) == project_fixed(x, w), compiled with torch.compile(..., backend=backend), such that a
    sequence of calls with x of shapes (B_i, T_i, D) compiles exactly as many frames as there are distinct pairs
    (c(B_i), c(T_i)), c(n) = n for n in {0, 1} and c(n) = ">= 2" otherwise: the first call already compiles B and
    T symbolic, D (the feature dim) and w stay static, and only the 0/1 specializations add frames."""
    ### HINT: automatic dynamic would spend one extra static compile; say up front which dims vary (and only those)
    ### BEGIN SOLUTION
    compiled = torch.compile(project_fixed, backend=backend)

    def run(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        torch._dynamo.mark_dynamic(x, 0)  # batch
        torch._dynamo.mark_dynamic(x, 1)  # sequence
        return compiled(x, w)

    return run
    ### END SOLUTION
