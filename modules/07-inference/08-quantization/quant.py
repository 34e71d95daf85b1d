"""infer-08: SmoothQuant migration (W8A8) and the GPTQ column update (weight-only, 3-8 bit).

Layout everywhere: a linear layer computes Y = X @ W.T with X [N, K] (tokens x input channels) and
W [M, K] (output rows x input channels), as torch.nn.Linear stores it. All math in float64.

Quantizer (symmetric, round-to-nearest-even): q = clamp(round(w / scale), -qmax, qmax), qmax = 2^(bits-1) - 1,
dequantized value q * scale. `fake_quant` does this; use it for every quantization below.

SmoothQuant (Xiao et al., ICML 2023, Eq. 4): per input channel k, s_k = max|X[:, k]|^alpha / max|W[:, k]|^(1-alpha);
X' = X / s, W' = W * s (per column), so X' @ W'.T == X @ W.T exactly. Then W8A8: W' per output row (per-channel
int8 scales), X' per tensor (one int8 scale).

GPTQ (Frantar et al., ICLR 2023, Algorithm 1): H = 2 X^T X + damping (given: `gptq_hessian`); U = upper Cholesky
factor of H^-1 (H^-1 = U^T U). Columns are quantized left to right; after column i is quantized, its error
e = (w_i - q_i) / U[i, i] is fed back into every later column j: w_j -= e * U[i, j]. Lazy batch updates: inside a
block of `block_size` columns apply the feedback immediately; apply the block's accumulated feedback to the columns
after the block once, at the end of the block. The result does not depend on block_size.
Scales are static: `weight_scales` computes them once from the ORIGINAL W (per output row, or per row and group of
`group_size` input columns), so column i always uses scales[:, i].
"""

import torch
from torch import Tensor


def qmax_of(bits: int) -> int:
    return 2 ** (bits - 1) - 1


def fake_quant(x: Tensor, scale: Tensor | float, bits: int) -> Tensor:
    """Quantize to signed `bits`-bit integers with `scale` (broadcast against x) and dequantize."""
    qm = qmax_of(bits)
    return torch.clamp(torch.round(x / scale), -qm, qm) * scale


def absmax_scale(absmax: Tensor, bits: int) -> Tensor:
    """Scale that maps absmax to qmax; all-zero groups get scale 1 (they quantize to 0 anyway)."""
    return torch.where(absmax > 0, absmax / qmax_of(bits), torch.ones_like(absmax))


def weight_scales(w: Tensor, bits: int, group_size: int | None = None) -> Tensor:
    """Static scales [M, K]: entry (m, k) is the scale of row m's group holding column k (whole row if None)."""
    m, k = w.shape
    g = k if group_size is None else group_size
    out = torch.empty_like(w)
    for start in range(0, k, g):
        block = w[:, start:start + g]
        out[:, start:start + g] = absmax_scale(block.abs().amax(dim=1, keepdim=True), bits)
    return out


def rtn_quantize(w: Tensor, bits: int, group_size: int | None = None) -> Tensor:
    """Round-to-nearest baseline with the same scales GPTQ uses."""
    return fake_quant(w, weight_scales(w, bits, group_size), bits)


def w8a8_linear_naive(x: Tensor, w: Tensor) -> Tensor:
    """W8A8 without smoothing: per-tensor int8 X, per-output-row int8 W."""
    xq = fake_quant(x, absmax_scale(x.abs().amax(), 8), 8)
    wq = fake_quant(w, absmax_scale(w.abs().amax(dim=1, keepdim=True), 8), 8)
    return xq @ wq.T


def gptq_hessian(x: Tensor, w: Tensor, damp: float = 0.01) -> tuple[Tensor, Tensor]:
    """H = 2 X^T X + damp * mean(diag) * I, with dead input channels (diag == 0) set to H_kk = 1 and W[:, k] = 0.

    Returns (H [K, K], W with dead columns zeroed) as new tensors.
    """
    h = 2.0 * x.T @ x
    w = w.clone()
    dead = torch.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h = h + damp * torch.diag(h).mean() * torch.eye(h.shape[0], dtype=h.dtype)
    return h, w


def smooth_scales(x: Tensor, w: Tensor, alpha: float) -> Tensor:
    """SmoothQuant migration scales s [K] (channels where X or W is all zero get s = 1)."""
    ### HINT: per input channel: activation absmax over tokens, weight absmax over output rows
    ### BEGIN SOLUTION
    ax = x.abs().amax(dim=0)
    aw = w.abs().amax(dim=0)
    s = ax.pow(alpha) / aw.pow(1.0 - alpha)
    return torch.where((ax > 0) & (aw > 0), s, torch.ones_like(s))
    ### END SOLUTION


def smoothquant_linear(x: Tensor, w: Tensor, alpha: float) -> Tensor:
    """Y_hat of the W8A8 layer after migration: per-tensor int8 X / s, per-output-row int8 W * s."""
    ### BEGIN SOLUTION
    s = smooth_scales(x, w, alpha)
    xs, ws = x / s, w * s
    xq = fake_quant(xs, absmax_scale(xs.abs().amax(), 8), 8)
    wq = fake_quant(ws, absmax_scale(ws.abs().amax(dim=1, keepdim=True), 8), 8)
    return xq @ wq.T
    ### END SOLUTION


def gptq_quantize(w: Tensor, x: Tensor, bits: int, block_size: int = 128, group_size: int | None = None,
                  damp: float = 0.01) -> Tensor:
    """GPTQ: the dequantized W_hat [M, K] minimising ||X W^T - X W_hat^T|| column by column (see module docstring)."""
    h, w = gptq_hessian(x, w, damp)
    scales = weight_scales(w, bits, group_size)
    m, k = w.shape
    ### HINT: U = upper Cholesky of H^-1; per block: quantize, scale the error by 1/U[i, i], feed back; then the lazy update
    ### BEGIN SOLUTION
    u = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    w = w.clone()
    q = torch.empty_like(w)
    for i1 in range(0, k, block_size):
        i2 = min(i1 + block_size, k)
        err = torch.empty(m, i2 - i1, dtype=w.dtype)
        for i in range(i1, i2):
            q[:, i] = fake_quant(w[:, i], scales[:, i], bits)
            err[:, i - i1] = (w[:, i] - q[:, i]) / u[i, i]
            w[:, i:i2] -= err[:, i - i1: i - i1 + 1] * u[i, i:i2]
        w[:, i2:] -= err @ u[i1:i2, i2:]
    return q
    ### END SOLUTION
