"""rl-08: Direct Preference Optimisation (DPO) from policy and reference log-probs.

One DPO step, the way TRL's `DPOTrainer` does it:

    [chosen; rejected] --policy----> logits --sequence_logprobs--> log π(y_c|x), log π(y_r|x)      (n,), (n,)
                       --reference-> logits --sequence_logprobs--> log π_ref(y_c|x), log π_ref(y_r|x)   (no grad)
                       --dpo_loss--> mean_i −log σ(β[(log π_c − log π_ref,c) − (log π_r − log π_ref,r)])
                                     and the implicit rewards β(log π − log π_ref) (detached)

Layout (TRL's): `input_ids` (B, L) holds a LEFT-padded prompt followed by a RIGHT-padded response;
`completion_mask` (B, L), int64 0/1, is 1 exactly on the response tokens (0 on padding and prompt; column 0 is
always 0). The logits at position t are the model's distribution of the token at position t + 1.
A preference batch stacks the n chosen rows first and the n rejected rows after them (one forward pass).

The model is a tiny randomly initialised causal transformer (2 layers, d_model 32, 24 tokens); the synthetic
preference set prefers responses that count up from the prompt's last token (see `make_preferences`).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 24
PAD = 0
FIRST = 2  # tokens 0 (PAD) and 1 (unused) never appear in prompts or responses


class Block(nn.Module):
    """Pre-LN transformer block."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        x = x + self.out(o.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    """A causal LM: logits (B, L, VOCAB) for input_ids (B, L) and attention_mask (B, L).

    Padded keys are masked out and position ids count only real tokens, so a sequence gets the same logits
    whatever its left padding (the same model as rl-07).
    """

    def __init__(self, seed: int = 0, vocab: int = VOCAB, d_model: int = 32, n_layers: int = 2,
                 n_heads: int = 2, max_len: int = 32) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.tok = nn.Embedding(vocab, d_model)
            self.pos = nn.Embedding(max_len, d_model)
            self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
            self.ln_f = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, s = input_ids.shape
        pos = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        causal = torch.ones(s, s, dtype=torch.bool, device=input_ids.device).tril()
        # a padded query sees only itself (its output is never used, but softmax needs one key)
        allowed = causal & (attention_mask.bool()[:, None, :] | torch.eye(s, dtype=torch.bool))
        x = self.tok(input_ids) + self.pos(pos)
        for block in self.blocks:
            x = block(x, allowed[:, None])
        return self.head(self.ln_f(x))


def make_reference(policy: nn.Module) -> nn.Module:
    """π_ref: a frozen copy of the policy at the start of DPO (in practice the SFT model)."""
    return copy.deepcopy(policy).requires_grad_(False).eval()


def counting_response(last_prompt_token: int, length: int) -> list[int]:
    """The preferred behaviour: count up from the prompt's last token, wrapping inside [FIRST, VOCAB)."""
    span = VOCAB - FIRST
    return [FIRST + (last_prompt_token - FIRST + k) % span for k in range(1, length + 1)]


def make_preferences(n: int, g: torch.Generator, prompt_width: int = 6,
                     response_width: int = 6) -> dict[str, torch.Tensor]:
    """n preference pairs in TRL's layout: input_ids, attention_mask, completion_mask, all (2n, P + R) int64.

    Rows 0..n−1 are the chosen responses (they count up from the prompt's last token), rows n..2n−1 the rejected
    ones (uniformly random tokens) for the same prompts. Prompt lengths 1..P, response lengths 1..R, drawn
    independently for the chosen and the rejected response of a pair.
    """
    rows, attn, comp = [], [], []
    prompts = []
    for _ in range(n):
        p_len = int(torch.randint(1, prompt_width + 1, (1,), generator=g))
        prompts.append(torch.randint(FIRST, VOCAB, (p_len,), generator=g))
    for chosen in (True, False):
        for prompt in prompts:
            r_len = int(torch.randint(1, response_width + 1, (1,), generator=g))
            if chosen:
                response = torch.tensor(counting_response(int(prompt[-1]), r_len))
            else:
                response = torch.randint(FIRST, VOCAB, (r_len,), generator=g)
            left, right = prompt_width - len(prompt), response_width - r_len
            rows.append(torch.cat([torch.full((left,), PAD), prompt, response, torch.full((right,), PAD)]))
            attn.append(torch.tensor([0] * left + [1] * (len(prompt) + r_len) + [0] * right))
            comp.append(torch.tensor([0] * (left + len(prompt)) + [1] * r_len + [0] * right))
    return {"input_ids": torch.stack(rows), "attention_mask": torch.stack(attn),
            "completion_mask": torch.stack(comp)}


def sequence_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
    """log π(y | x) of each row's response: the sum of log π(y_t | x, y_<t) over the positions t where
    completion_mask is 1. Returns (B,), dtype of `logits`, differentiable w.r.t. `logits`.

    logits (B, L, V) are the model's outputs for input_ids (B, L). Logits that score no response token may hold
    anything (±inf, nan): the result must not depend on them. A row without response tokens gives 0.
    """
    ### HINT: the logits at position t score the token at t + 1; padding is excluded by selection, not by a product
    ### BEGIN SOLUTION
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    targets = input_ids[:, 1:]
    keep = completion_mask[:, 1:].bool()
    picked = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return torch.where(keep, picked, torch.zeros_like(picked)).sum(-1)
    ### END SOLUTION


def dpo_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
             ref_chosen_logps: torch.Tensor, ref_rejected_logps: torch.Tensor,
             beta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The DPO loss (Rafailov et al. 2023, eq. 7; TRL's loss_type="sigmoid") over n pairs, all inputs (n,).

    Returns (loss, chosen_rewards, rejected_rewards):
      loss: 0-dim, the mean over pairs of −log σ(β[(log π_c − log π_ref,c) − (log π_r − log π_ref,r)]),
            finite and exact for any margin; gradient flows into the policy log-probs only.
      chosen_rewards, rejected_rewards: (n,) implicit rewards β(log π − log π_ref), detached (TRL's logs).
    """
    ### HINT: the reference log-probs are constants; −log σ(z) must not go through σ(z)
    ### BEGIN SOLUTION
    chosen_logratios = policy_chosen_logps - ref_chosen_logps.detach()
    rejected_logratios = policy_rejected_logps - ref_rejected_logps.detach()
    logits = beta * (chosen_logratios - rejected_logratios)
    loss = -F.logsigmoid(logits).mean()
    chosen_rewards = beta * chosen_logratios.detach()
    rejected_rewards = beta * rejected_logratios.detach()
    return loss, chosen_rewards, rejected_rewards
    ### END SOLUTION


def reward_stats(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> dict[str, float]:
    """TRL's logged metrics: {"accuracy": fraction of pairs with chosen > rejected (strictly; a tie counts as
    wrong), "margin": mean of chosen − rejected}, both Python floats."""
    ### BEGIN SOLUTION
    accuracy = (chosen_rewards > rejected_rewards).double().mean().item()
    margin = (chosen_rewards - rejected_rewards).double().mean().item()
    return {"accuracy": accuracy, "margin": margin}
    ### END SOLUTION


def pair_logprobs(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(log π(y_c|x), log π(y_r|x)) of a preference batch: one forward over [chosen; rejected]."""
    ids = batch["input_ids"]
    logps = sequence_logprobs(model(ids, batch["attention_mask"]), ids, batch["completion_mask"])
    return logps.chunk(2)


def train_dpo(policy: nn.Module, reference: nn.Module, batch: dict[str, torch.Tensor],
              optimizer: torch.optim.Optimizer, steps: int, beta: float) -> list[float]:
    """`steps` full-batch DPO updates; returns the loss before each update."""
    with torch.no_grad():  # TRL's precompute_ref_log_probs: the reference is scored once
        ref_chosen, ref_rejected = pair_logprobs(reference, batch)
    losses = []
    for _ in range(steps):
        chosen, rejected = pair_logprobs(policy, batch)
        loss, _, _ = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def evaluate(policy: nn.Module, reference: nn.Module, batch: dict[str, torch.Tensor], beta: float) -> dict[str, float]:
    """Held-out implicit-reward accuracy and margin of `policy` against `reference`."""
    chosen, rejected = pair_logprobs(policy, batch)
    ref_chosen, ref_rejected = pair_logprobs(reference, batch)
    _, r_c, r_r = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta)
    return reward_stats(r_c, r_r)
