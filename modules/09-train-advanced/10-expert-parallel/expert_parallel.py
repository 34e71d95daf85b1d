"""train-10: a top-k MoE layer with capacity, the Switch load-balancing loss, and expert
parallelism through all-to-all dispatch / combine.

EP ranks form the default process group. Every rank holds its own tokens x [T_r, H] (T_r may
differ between ranks), a replicated router w_router [H, E], and the weights of its E_local
experts: global expert e lives on rank e // E_local as local expert e % E_local.

Routing, per rank, on its own tokens (as Megatron-core drops per rank):
- probs = softmax(x @ w_router) over the E experts; each token picks its top_k experts
  (ties broken as torch.topk breaks them); its gate for a choice is that expert's prob
  (not renormalised over the k choices).
- capacity: an expert accepts at most cap = ceil(T_r * top_k / E * capacity_factor) choices
  from this rank. Priority (GShard / Switch): all first choices in token order, then all second
  choices in token order, ...; a choice that finds its expert full is dropped.
- the layer's output for a token is Σ over its kept choices of gate * expert(x_token); a token
  whose choices were all dropped gets 0 (the residual connection around the layer carries it).
- aux loss (Switch Transformer eq. 4): alpha * E * Σ_i f_i * P_i with f_i = the fraction of the
  T_r * top_k choices that picked expert i (before dropping) and P_i = the mean of probs[:, i].
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist


def capacity(num_tokens: int, num_experts: int, top_k: int, capacity_factor: float) -> int:
    """Choices one expert accepts from one rank (Megatron-core get_capacity with T·k tokens)."""
    return math.ceil(num_tokens * top_k / num_experts * capacity_factor)


def expert_ffn(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One expert: x [n, H] -> [n, H] through a tanh MLP with w1 [H, F], w2 [F, H]."""
    return torch.tanh(x @ w1) @ w2


def route(probs: torch.Tensor, top_k: int, cap: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """probs [T, E] -> (experts [T, k] int64, gates [T, k], keep [T, k] bool).

    experts[t, j] is token t's j-th choice (j = 0 the best), gates[t, j] its prob (differentiable),
    keep[t, j] whether the choice fits in its expert's capacity under the priority above.
    """
    ### HINT: topk, then walk the choices choice-major (all j = 0, then j = 1, ...) counting per expert
    ### BEGIN SOLUTION
    gates, experts = probs.topk(top_k, dim=1)
    order = experts.T.reshape(-1)  # choice-major, token order inside each choice level
    onehot = torch.nn.functional.one_hot(order, probs.shape[1])
    slot = (onehot.cumsum(dim=0) * onehot).sum(dim=1) - 1  # position in its expert's queue
    keep = (slot < cap).reshape(top_k, -1).T
    return experts, gates, keep
    ### END SOLUTION


def load_balancing_loss(probs: torch.Tensor, experts: torch.Tensor, alpha: float) -> torch.Tensor:
    """Switch aux loss alpha * E * Σ_i f_i P_i on one rank's tokens (differentiable in probs)."""
    ### BEGIN SOLUTION
    num_tokens, num_experts = probs.shape
    f = torch.bincount(experts.reshape(-1), minlength=num_experts).to(probs.dtype)
    f = f / experts.numel()
    return alpha * num_experts * (f * probs.mean(dim=0)).sum()
    ### END SOLUTION


def moe_layer(x: torch.Tensor, w_router: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor,
              top_k: int, capacity_factor: float, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's MoE output [T_r, H] and aux loss. w1 [E_local, H, F], w2 [E_local, F, H].

    Dispatch and combine are `dist.all_to_all_single` calls with split sizes; each rank sends
    exactly its kept choices, grouped by destination rank (and by expert inside it), after the
    per-expert counts have been exchanged. Gates are applied here, on the token's own rank, after
    the combine, so the router's gradient needs no communication.
    """
    ep = dist.get_world_size()
    e_local = w1.shape[0]
    num_experts = e_local * ep
    probs = torch.softmax(x @ w_router, dim=1)
    cap = capacity(x.shape[0], num_experts, top_k, capacity_factor)
    experts, gates, keep = route(probs, top_k, cap)
    aux = load_balancing_loss(probs, experts, alpha)
    ### HINT: counts per global expert -> all_to_all_single -> splits; rows sorted by expert; run; send back; index_add
    ### BEGIN SOLUTION
    tok, choice = keep.nonzero(as_tuple=True)
    dest = experts[tok, choice]
    order = torch.argsort(dest, stable=True)  # grouped by expert, hence by destination rank
    tok, choice, dest = tok[order], choice[order], dest[order]
    send_counts = torch.bincount(dest, minlength=num_experts)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)  # [source rank, my local expert]
    send_split = send_counts.view(ep, e_local).sum(dim=1).tolist()
    recv_split = recv_counts.view(ep, e_local).sum(dim=1).tolist()
    received = x.new_empty(sum(recv_split), x.shape[1])
    dist.all_to_all_single(received, x[tok].detach().contiguous(), recv_split, send_split)
    y = torch.empty_like(received)
    start = 0
    for n, e in zip(recv_counts.tolist(), list(range(e_local)) * ep, strict=True):
        y[start:start + n] = expert_ffn(received[start:start + n], w1[e], w2[e])
        start += n
    back = x.new_empty(len(tok), x.shape[1])
    dist.all_to_all_single(back, y.detach(), send_split, recv_split)
    out = torch.zeros_like(x).index_add(0, tok, gates[tok, choice][:, None] * back)
    ### END SOLUTION
    return out, aux
