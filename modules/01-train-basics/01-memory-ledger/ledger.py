"""train-01: the memory ledger of mixed-precision AdamW training.

Two accounts, both in bytes:
- `static_ledger`: what lives across steps (weights, gradients, fp32 master copy, AdamW state);
- `activation_bytes`: what autograd keeps from one `block.Block` forward for its backward.
"""

from __future__ import annotations

from dataclasses import dataclass

# torch.optim.AdamW (default, non-fused, non-capturable) keeps state["step"] as a float32 scalar
# tensor: 4 bytes per parameter *tensor*, not per element.
STEP_BYTES = 4


def static_ledger(numels: list[int], param_bytes: int, master_bytes: int | None) -> dict[str, int]:
    """Bytes held between steps by a model trained with AdamW.

    numels:       element count of every parameter tensor of the model.
    param_bytes:  bytes per element of the model's weights and of their .grad (2 for bf16).
    master_bytes: bytes per element of the separate master copy the optimizer updates (4 for an
                  fp32 master), or None when the optimizer updates the model weights directly.

    Returns the keys "weights", "grads", "master", "exp_avg", "exp_avg_sq", "step".
    """
    ### HINT: AdamW creates exp_avg / exp_avg_sq with zeros_like(the tensor it updates)
    ### BEGIN SOLUTION
    n = sum(numels)
    # AdamW's moments follow the dtype of the tensors it steps: the master copy if there is one.
    state_bytes = master_bytes if master_bytes is not None else param_bytes
    return {
        "weights": n * param_bytes,
        "grads": n * param_bytes,
        "master": n * master_bytes if master_bytes is not None else 0,
        "exp_avg": n * state_bytes,
        "exp_avg_sq": n * state_bytes,
        "step": STEP_BYTES * len(numels),
    }
    ### END SOLUTION


@dataclass(frozen=True)
class BlockShape:
    b: int  # micro-batch size
    s: int  # sequence length
    h: int  # hidden size
    a: int  # attention heads
    f: int  # MLP inner width (4h in GPT)


def activation_bytes(shape: BlockShape, act_bytes: int, stat_bytes: int) -> int:
    """Bytes of the distinct tensors autograd saves during one `Block.forward` (weights excluded).

    act_bytes:  bytes per element of the activations (the block's dtype).
    stat_bytes: bytes per element of the mean / rstd that LayerNorm saves (fp32 in the CUDA kernels;
                the CPU kernel keeps the input dtype).
    A tensor saved by several ops (or a view of it) is held once and counted once.
    """
    ### HINT: walk Block.attention and Block.forward op by op: which tensor does each one save?
    ### BEGIN SOLUTION
    b, s, h, a, f = shape.b, shape.s, shape.h, shape.a, shape.f
    sbh = s * b * h
    # ln1 and ln2 each save their input plus a mean and an rstd per token
    layernorms = 2 * (sbh * act_bytes + 2 * s * b * stat_bytes)
    attention = (
        sbh  # ln1 output: the input of wq, wk and wv, one tensor saved three times
        + 3 * sbh  # q, k, v as matmul inputs: contiguous (b, a, s, d) copies
        + a * s * s * b  # softmax output: saved by softmax and, as p, by p @ v
        + sbh  # attention output, the input of wo
    ) * act_bytes
    mlp = (sbh + 2 * s * b * f) * act_bytes  # fc1 input (ln2 output), gelu input, fc2 input
    return layernorms + attention + mlp
    ### END SOLUTION
