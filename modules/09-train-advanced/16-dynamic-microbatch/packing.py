"""train-16: dynamic micro-batches: token-budget packing with cu_seqlens, the varlen attention mask,
and balancing the packed micro-batches across data-parallel ranks."""

import torch


def attention_cost(lengths: list[int], attn_weight: float = 1.0) -> float:
    """Work of one packed micro-batch: linear layers scale with tokens, attention with sum len^2."""
    return float(sum(lengths)) + attn_weight * float(sum(n * n for n in lengths))


def pack_sequences(lengths: list[int], token_budget: int) -> list[list[int]]:
    """Group sequence indices into packs whose total length is <= token_budget.

    Every index appears in exactly one pack. The number of packs is at most 11/9 OPT + 6/9
    (the first-fit-decreasing guarantee). Raises ValueError if one sequence exceeds the budget.
    """
    if any(n > token_budget for n in lengths):
        raise ValueError("a sequence is longer than the token budget")
    ### HINT: sort by length (longest first); put each sequence into the first pack that still has room
    ### BEGIN SOLUTION
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    packs: list[list[int]] = []
    free: list[int] = []
    for i in order:
        for p, room in enumerate(free):
            if lengths[i] <= room:
                packs[p].append(i)
                free[p] -= lengths[i]
                break
        else:
            packs.append([i])
            free.append(token_budget - lengths[i])
    return packs
    ### END SOLUTION


def build_packed_batch(seqs: list[torch.Tensor], pack: list[int]
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Concatenate seqs[i] for i in pack (in that order) into one row.

    Returns (tokens [T], cu_seqlens [len(pack) + 1] int32 with cu_seqlens[0] = 0 and
    cu_seqlens[-1] = T, position_ids [T] restarting at 0 for every sequence).
    """
    ### BEGIN SOLUTION
    parts = [seqs[i] for i in pack]
    lens = torch.tensor([len(t) for t in parts], dtype=torch.int32)
    cu_seqlens = torch.zeros(len(parts) + 1, dtype=torch.int32)
    cu_seqlens[1:] = torch.cumsum(lens, dim=0)
    tokens = torch.cat(parts)
    position_ids = torch.cat([torch.arange(len(t)) for t in parts])
    return tokens, cu_seqlens, position_ids
    ### END SOLUTION


def varlen_mask(cu_seqlens: torch.Tensor, causal: bool) -> torch.Tensor:
    """Bool [T, T]: True where query token i may attend key token j of the packed row.

    Tokens attend only inside their own sequence (block-diagonal); with causal=True also only to
    earlier or equal positions. This is the mask flash-attn's varlen kernel applies implicitly.
    """
    ### HINT: give every token the index of its sequence; compare those indices pairwise
    ### BEGIN SOLUTION
    total = int(cu_seqlens[-1])
    lens = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    seq_id = torch.repeat_interleave(torch.arange(len(lens)), lens)
    keep = seq_id[:, None] == seq_id[None, :]
    if causal:
        pos = torch.arange(total)
        keep = keep & (pos[None, :] <= pos[:, None])
    return keep
    ### END SOLUTION


def assign_to_ranks(costs: list[float], n_ranks: int) -> list[list[int]]:
    """Split micro-batch indices among n_ranks data-parallel ranks so the largest per-rank
    total cost is small: at most (4/3 - 1/(3 n_ranks)) times the optimum (LPT's guarantee)."""
    ### HINT: largest cost first, each to the rank whose load is currently smallest
    ### BEGIN SOLUTION
    ranks: list[list[int]] = [[] for _ in range(n_ranks)]
    load = [0.0] * n_ranks
    for i in sorted(range(len(costs)), key=lambda i: -costs[i]):
        r = min(range(n_ranks), key=lambda r: load[r])
        ranks[r].append(i)
        load[r] += costs[i]
    return ranks
    ### END SOLUTION
