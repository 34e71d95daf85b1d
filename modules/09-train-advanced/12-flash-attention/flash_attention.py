"""train-12: FlashAttention forward and backward by tiles, with logsumexp recomputation (PyTorch).

Shapes: q [Nq, d], k [Nk, d], v [Nk, dv], o and do [Nq, dv], lse [Nq].
Causal masks are aligned to the bottom-right corner (as flash-attn does): query i may see key j
iff j <= i + Nk - Nq. A query row that sees no key gets o = 0 and lse = +inf.
"""

import math

import torch


def causal_keep(i0: int, i1: int, j0: int, j1: int, n_q: int, n_k: int) -> torch.Tensor:
    """Bool [i1 - i0, j1 - j0]: True where query i (in [i0, i1)) may attend key j (in [j0, j1))."""
    rows = torch.arange(i0, i1).unsqueeze(1) + (n_k - n_q)
    cols = torch.arange(j0, j1).unsqueeze(0)
    return cols <= rows


def flash_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                  causal: bool = False, block_q: int = 64,
                  block_k: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (o [Nq, dv], lse [Nq]) with lse_i = log sum_j exp(scale * q_i . k_j) over visible j.

    One pass over K/V per query block (online softmax); no tensor larger than one
    block_q x block_k tile or one N x d operand is ever created.
    """
    n_q, n_k = q.shape[0], k.shape[0]
    o = torch.empty(n_q, v.shape[1], dtype=q.dtype)
    lse = torch.empty(n_q, dtype=q.dtype)
    for i0 in range(0, n_q, block_q):
        i1 = min(i0 + block_q, n_q)
        qi = q[i0:i1]
        ### HINT: per query block keep m [bq], l [bq], acc [bq, dv]; rescale both l and acc when m grows
        ### BEGIN SOLUTION
        m = torch.full((i1 - i0,), -math.inf, dtype=q.dtype)
        row_sum = torch.zeros(i1 - i0, dtype=q.dtype)
        acc = torch.zeros(i1 - i0, v.shape[1], dtype=q.dtype)
        for j0 in range(0, n_k, block_k):
            if causal and j0 > i1 - 1 + n_k - n_q:
                break  # every later key block lies right of the diagonal for all rows of this block
            j1 = min(j0 + block_k, n_k)
            s = (qi @ k[j0:j1].T) * scale
            if causal:
                s = s.masked_fill(~causal_keep(i0, i1, j0, j1, n_q, n_k), -math.inf)
            m_new = torch.maximum(m, s.amax(dim=1))
            m_safe = torch.where(m_new == -math.inf, 0.0, m_new)
            p = torch.exp(s - m_safe[:, None])
            alpha = torch.exp(m - m_safe)
            row_sum = alpha * row_sum + p.sum(dim=1)
            acc = alpha[:, None] * acc + p @ v[j0:j1]
            m = m_new
        seen = row_sum > 0
        o[i0:i1] = acc / torch.where(seen, row_sum, 1.0)[:, None]
        lse[i0:i1] = torch.where(seen, m + torch.log(row_sum), math.inf)
        ### END SOLUTION
    return o, lse


def flash_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                   lse: torch.Tensor, do: torch.Tensor, scale: float, causal: bool = False,
                   block_q: int = 64, block_k: int = 64
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (dq, dk, dv). P is recomputed per tile as exp(scale * q k^T - lse) from the lse
    given (never re-normalised), and D = rowsum(do * o) replaces rowsum(P * dP)."""
    n_q, n_k = q.shape[0], k.shape[0]
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    ### HINT: dV += P^T dO, dP = dO V^T, dS = P * (dP - D), dQ += scale dS K, dK += scale dS^T Q
    ### BEGIN SOLUTION
    d_row = (do * o).sum(dim=1)
    for j0 in range(0, n_k, block_k):
        j1 = min(j0 + block_k, n_k)
        kj, vj = k[j0:j1], v[j0:j1]
        for i0 in range(0, n_q, block_q):
            i1 = min(i0 + block_q, n_q)
            if causal and j0 > i1 - 1 + n_k - n_q:
                continue
            qi, doi = q[i0:i1], do[i0:i1]
            s = (qi @ kj.T) * scale
            if causal:
                s = s.masked_fill(~causal_keep(i0, i1, j0, j1, n_q, n_k), -math.inf)
            p = torch.exp(s - lse[i0:i1, None])
            dv[j0:j1] += p.T @ doi
            dp = doi @ vj.T
            ds = p * (dp - d_row[i0:i1, None])
            dq[i0:i1] += (ds @ kj) * scale
            dk[j0:j1] += (ds.T @ qi) * scale
    ### END SOLUTION
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """Saves q, k, v, o and lse only: no Nq x Nk tensor survives the forward."""

    @staticmethod
    def forward(ctx, q, k, v, scale, causal, block_q, block_k):  # noqa: ANN001, ANN205
        o, lse = flash_forward(q, k, v, scale, causal, block_q, block_k)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.cfg = (scale, causal, block_q, block_k)
        return o

    @staticmethod
    def backward(ctx, do):  # noqa: ANN001, ANN205
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = flash_backward(q, k, v, o, lse, do.contiguous(), *ctx.cfg)
        return dq, dk, dv, None, None, None, None


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
                    causal: bool = False, block_q: int = 64, block_k: int = 64) -> torch.Tensor:
    """Differentiable tiled attention: softmax(scale * q k^T [+ causal mask]) v."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    return FlashAttention.apply(q, k, v, scale, causal, block_q, block_k)
