"""infer-07: speculative decoding -- the rejection sampler and the draft/verify loop.

Contract (Leviathan et al., ICML 2023, Algorithm 1 and Appendix A.1; Chen et al., 2023, Algorithm 2):
a cheap draft model proposes gamma tokens x_1..x_gamma from its distributions q_1..q_gamma; ONE target
forward pass over prefix + drafts gives the target distributions p_1..p_{gamma+1}. Then, left to right,
draft token x_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection the
token is resampled from norm(max(0, p_i - q_i)) and the step ends; if all gamma are accepted a bonus
token is sampled from p_{gamma+1}. Every step emits between 1 and gamma + 1 tokens, and the emitted
sequence has exactly the distribution of sampling from the target alone.

Randomness is explicit so that every batch row is reproducible: `u[b, i]` decides acceptance of draft i
(accept iff u < p/q), `v[b, i]` is the uniform that `sample_categorical` turns into the token emitted at
position i when position i is a rejection (i < gamma) or the bonus (i == gamma).
Temperature 0 needs no special case: `to_probs` turns logits into one-hot argmax distributions and the
same rule then accepts exactly the drafts that equal the target's argmax.
"""

from collections.abc import Callable

import torch
from torch import Tensor

PLACEHOLDER = -1  # output slots after a row's last emitted token

Model = Callable[[Tensor], Tensor]  # tokens [L] -> next-token logits after every prefix [L, V]


def sample_categorical(weights: Tensor, v: Tensor) -> Tensor:
    """Inverse-CDF sampling from non-negative, unnormalised weights [..., V] with uniforms v [...] in [0, 1).

    Returns the smallest index k with cumsum(weights)[k] > v * sum(weights) (int64, shape of v).
    Call it once for a whole batch: the tests count its calls.
    """
    if bool((weights < 0).any()):
        raise ValueError("sample_categorical: negative weight; weights must be >= 0")
    cdf = weights.cumsum(-1)
    total = cdf[..., -1:]
    idx = torch.searchsorted(cdf, v.unsqueeze(-1).to(cdf.dtype) * total, right=True).squeeze(-1)
    return idx.clamp(max=weights.shape[-1] - 1)


def to_probs(logits: Tensor, temperature: float) -> Tensor:
    """Softmax at a temperature; temperature 0 gives the one-hot distribution of the argmax (greedy)."""
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(torch.float64)
    return torch.softmax(logits.to(torch.float64) / temperature, dim=-1)


def verify(draft: Tensor, q: Tensor, p: Tensor, u: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Rejection-sample one speculative step for a batch of B rows, vectorised over the batch.

    draft [B, G] int64: drafted tokens (G = gamma >= 1), drawn from q.
    q [B, G, V]: draft distributions; p [B, G + 1, V]: target distributions (the last is the bonus position).
    u [B, G], v [B, G + 1]: uniforms in [0, 1) (see the module docstring).
    Returns (tokens [B, G + 1] int64, n [B] int64): row b emitted tokens[b, :n[b]] (accepted drafts, then
    the resampled or bonus token); tokens[b, n[b]:] == PLACEHOLDER.
    """
    ### HINT: accept mask -> the length of the accepted prefix per row -> one sample_categorical call for the last token
    ### BEGIN SOLUTION
    B, G = draft.shape
    rows = torch.arange(B)
    p_draft = p[:, :G].gather(-1, draft.unsqueeze(-1)).squeeze(-1)
    q_draft = q.gather(-1, draft.unsqueeze(-1)).squeeze(-1)
    accepted = u * q_draft < p_draft
    n_acc = accepted.to(torch.int64).cumprod(dim=1).sum(dim=1)
    residual = (p[:, :G] - q).clamp(min=0)
    last = torch.cat([residual, p[:, G:]], dim=1)[rows, n_acc]
    token = sample_categorical(last, v[rows, n_acc])
    out = torch.full((B, G + 1), PLACEHOLDER, dtype=torch.int64)
    keep = torch.arange(G + 1) < n_acc.unsqueeze(1)
    out[:, :G] = torch.where(keep[:, :G], draft, PLACEHOLDER)
    out[rows, n_acc] = token
    return out, n_acc + 1
    ### END SOLUTION


def speculative_generate(target: Model, draft: Model, prompt: Tensor, max_new: int, gamma: int,
                         temperature: float, gen: torch.Generator) -> tuple[Tensor, int]:
    """Generate max_new tokens after prompt [L0] (int64) with speculative decoding.

    Each step: the draft model proposes gamma tokens autoregressively (one draft call per token, sampled
    from to_probs(draft logits, temperature) with `gen`); the target model is called ONCE on prefix + drafts;
    `verify` decides what to keep. Stop when max_new tokens exist and return exactly the first max_new of
    them, plus the number of steps (== target calls). Near the end you may draft fewer than gamma tokens.
    """
    ### HINT: the last gamma + 1 rows of ONE target call are p_1 .. p_{gamma+1}; the emitted tokens extend the prefix
    ### BEGIN SOLUTION
    seq = prompt.clone()
    steps = 0
    while seq.numel() - prompt.numel() < max_new:
        ctx = seq
        drafted, qs = [], []
        for _ in range(gamma):
            qi = to_probs(draft(ctx)[-1], temperature)
            xi = torch.multinomial(qi, 1, generator=gen)
            drafted.append(xi)
            qs.append(qi)
            ctx = torch.cat([ctx, xi])
        p = to_probs(target(ctx)[-(gamma + 1):], temperature)
        u = torch.rand(1, gamma, generator=gen, dtype=torch.float64)
        v = torch.rand(1, gamma + 1, generator=gen, dtype=torch.float64)
        tokens, n = verify(torch.cat(drafted)[None], torch.stack(qs)[None], p[None], u, v)
        seq = torch.cat([seq, tokens[0, : int(n[0])]])
        steps += 1
    return seq[prompt.numel(): prompt.numel() + max_new], steps
    ### END SOLUTION
