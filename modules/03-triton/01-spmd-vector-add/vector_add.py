"""triton-01: the SPMD programming model — vector add with program ids, masks and a grid lambda."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """One *program* handles one BLOCK_SIZE-wide slice of the vectors.

    The whole block is the unit of work: `tl.arange` produces a vector of BLOCK_SIZE lanes and every
    load/store below is a block operation. The compiler decides how the lanes map onto threads.
    """
    ### HINT: offsets of this program = its program id times BLOCK_SIZE, plus 0..BLOCK_SIZE-1; mask the tail.
    ### BEGIN SOLUTION
    pid = tl.program_id(axis=0)
    # first element of this program's slice, then one offset per lane
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    # the last program may run past n_elements: those lanes must neither load nor store
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)
    ### END SOLUTION


def add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None, block_size: int = 128) -> torch.Tensor:
    """out = x + y for 1-D contiguous tensors of the same length, dtype and device."""
    assert x.shape == y.shape and x.dim() == 1, "1-D tensors of equal length"
    assert x.is_contiguous() and y.is_contiguous(), "the kernel indexes with unit stride"
    if out is None:
        out = torch.empty_like(x)
    n = x.numel()
    if n == 0:
        return out  # a launch needs at least one program
    ### HINT: the grid is a function of the meta-parameters: how many BLOCK_SIZE slices cover n elements?
    ### BEGIN SOLUTION
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
    ### END SOLUTION
    add_kernel[grid](x, y, out, n, BLOCK_SIZE=block_size)
    return out
