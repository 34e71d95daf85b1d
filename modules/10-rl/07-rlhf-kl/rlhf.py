"""rl-07: token-level KL-penalised rewards and per-token advantages (PPO-RLHF, the way verl does it).

The data path between a rollout and a PPO update, for a batch of prompt+response sequences:

    logits --response_logprobs--> log π(y_t), log π_ref(y_t)     (B, R)
           --kl_estimate-------> k1 / k2 / k3 per token           (B, R)
           --token_level_rewards--> −β·KL_t, + score on the last valid token
           --gae_advantages----> per-token advantages and returns (B, R)

and the GRPO alternative that keeps the KL out of the reward and adds it to the loss (`kl_loss`).

Layout (verl's): `input_ids` is (B, P + R): a LEFT-padded prompt of P columns, then a RIGHT-padded
response of R columns. `response_mask` (B, R), int64 0/1, is 1 on the response tokens up to and
including EOS and 0 on the padding after it (verl's `get_response_mask`); every row is 1…1 0…0.

The model is a tiny randomly initialised causal transformer (2 layers, d_model 32, 40 tokens): the
policy, and a frozen, slightly perturbed copy of it as the reference model.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 40
PAD = 0
EOS = 1


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

    Padding is handled the way HF models are driven by verl: padded keys are masked out and the
    position ids count only real tokens (cumsum of the attention mask), so a sequence gets the same
    logits whatever its left padding.
    """

    def __init__(self, seed: int = 0, vocab: int = VOCAB, d_model: int = 32, n_layers: int = 2,
                 n_heads: int = 2, max_len: int = 64) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.tok = nn.Embedding(vocab, d_model)
            self.pos = nn.Embedding(max_len, d_model)
            self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
            self.ln_f = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab, bias=False)
            nn.init.normal_(self.head.weight, std=0.5)  # peaked enough that KL estimators differ visibly

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


def make_reference(policy: TinyLM, noise: float = 0.05, seed: int = 1) -> TinyLM:
    """A frozen copy of `policy` with every weight moved by noise·N(0, 1): the reference model π_ref."""
    ref = copy.deepcopy(policy)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(noise * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return ref.requires_grad_(False).eval()


def make_batch(g: torch.Generator, prompt_lens: list[int], response_lens: list[int], prompt_width: int,
               response_width: int) -> dict[str, torch.Tensor]:
    """Random prompt+response token ids in verl's layout.

    Prompts are LEFT-padded to `prompt_width`, responses RIGHT-padded to `response_width`. A response
    shorter than `response_width` ends with EOS (counted in its length); one of full width was cut
    by the length limit and has no EOS. Length 0 gives an all-padding response row.
    Returns input_ids, attention_mask (B, P + R) and response_mask (B, R), all int64.
    """
    rows, attn, masks = [], [], []
    for p_len, r_len in zip(prompt_lens, response_lens, strict=True):
        assert 1 <= p_len <= prompt_width and 0 <= r_len <= response_width
        prompt = torch.randint(2, VOCAB, (p_len,), generator=g)
        response = torch.randint(2, VOCAB, (r_len,), generator=g)
        if 0 < r_len < response_width:
            response[-1] = EOS
        rows.append(torch.cat([torch.full((prompt_width - p_len,), PAD), prompt, response,
                               torch.full((response_width - r_len,), PAD)]))
        mask = (torch.arange(response_width) < r_len).long()
        attn.append(torch.cat([(torch.arange(prompt_width) >= prompt_width - p_len).long(), mask]))
        masks.append(mask)
    return {"input_ids": torch.stack(rows), "attention_mask": torch.stack(attn), "response_mask": torch.stack(masks)}


def response_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """log π(y_t | prompt, y_<t) of each response token: (B, R), dtype of `logits`, 0 where the mask is 0.

    logits (B, L, V) are the model's outputs for input_ids (B, L); the response is the last R = response_mask.shape[1]
    columns of input_ids.
    """
    ### HINT: the logits at position i are the distribution of the token at position i + 1
    ### BEGIN SOLUTION
    r = response_mask.shape[-1]
    logp = torch.log_softmax(logits[:, -r - 1:-1], dim=-1)
    tokens = input_ids[:, -r:]
    picked = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return torch.where(response_mask.bool(), picked, torch.zeros_like(picked))
    ### END SOLUTION


def kl_estimate(logprob: torch.Tensor, ref_logprob: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-sample estimate of KL(π ‖ π_ref) from log π(y) and log π_ref(y) of tokens y ~ π (elementwise).

    kind: "k1" or "kl"; "k2" or "mse"; "k3" or "low_var_kl" (verl's names). k3 is clamped as verl clamps it.
    Any other kind raises ValueError.
    """
    ### HINT: k1 and k3 are unbiased for KL(π‖π_ref) when y ~ π; k3 is never negative
    ### BEGIN SOLUTION
    if kind in ("k1", "kl"):
        return logprob - ref_logprob
    if kind in ("k2", "mse"):
        return 0.5 * (logprob - ref_logprob).square()
    if kind in ("k3", "low_var_kl"):
        log_r = (ref_logprob - logprob).clamp(min=-20, max=20)  # log(π_ref / π)
        return (log_r.exp() - log_r - 1).clamp(min=-10, max=10)
    raise ValueError(f"unknown KL estimator {kind!r}")
    ### END SOLUTION


def token_level_rewards(scores: torch.Tensor, logprob: torch.Tensor, ref_logprob: torch.Tensor,
                        response_mask: torch.Tensor, beta: float, kind: str = "k1") -> torch.Tensor:
    """PPO-RLHF rewards (B, R): −β·kl_estimate on every response token, plus scores[b] (B,) added on the
    last token whose mask is 1; exactly 0 on padding (an all-padding row is all 0). No autograd history.
    """
    ### HINT: the sequence score is a sparse terminal reward; the KL penalty is dense, one per token
    ### BEGIN SOLUTION
    with torch.no_grad():
        valid = response_mask.bool()
        kl = kl_estimate(logprob, ref_logprob, kind)
        rewards = torch.where(valid, -beta * kl, torch.zeros_like(kl))
        lengths = response_mask.sum(-1)
        last = (lengths - 1).clamp(min=0)
        rows = torch.arange(rewards.shape[0])
        rewards[rows, last] += torch.where(lengths > 0, scores.to(rewards.dtype), 0.0)
        return rewards
    ### END SOLUTION


def gae_advantages(rewards: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor, gamma: float,
                   lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over the response tokens of each row: (advantages, returns), both (B, R), 0 on padding.

    The episode ends after the last valid token (value 0 beyond it); rewards and values at padded
    positions are ignored whatever they hold. returns = advantages + values on valid tokens.
    Advantages are NOT whitened. No autograd history.
    """
    ### HINT: a backward recursion over t; padding must neither add a TD error nor pass on a next value
    ### BEGIN SOLUTION
    with torch.no_grad():
        valid = response_mask.bool()
        advantages = torch.zeros_like(rewards)
        next_value = torch.zeros_like(rewards[:, 0])
        running = torch.zeros_like(rewards[:, 0])
        for t in reversed(range(rewards.shape[-1])):
            delta = rewards[:, t] + gamma * next_value - values[:, t]
            running = torch.where(valid[:, t], delta + gamma * lam * running, running)
            next_value = torch.where(valid[:, t], values[:, t], next_value)
            advantages[:, t] = torch.where(valid[:, t], running, 0.0)
        returns = torch.where(valid, advantages + values, 0.0)
        return advantages, returns
    ### END SOLUTION


def kl_loss(logprob: torch.Tensor, ref_logprob: torch.Tensor, response_mask: torch.Tensor,
            kind: str = "k3") -> torch.Tensor:
    """GRPO's KL term (verl `use_kl_loss`): the token-mean of kl_estimate over every valid token of the batch.

    A differentiable scalar; `logprob` carries the policy's graph. The batch holds at least one valid token.
    """
    ### HINT: one denominator for the whole batch; padded positions contribute neither value nor gradient
    ### BEGIN SOLUTION
    kl = kl_estimate(logprob, ref_logprob, kind)
    valid = response_mask.bool()
    return torch.where(valid, kl, torch.zeros_like(kl)).sum() / valid.sum()
    ### END SOLUTION


@torch.no_grad()
def rlhf_advantages(policy: nn.Module, reference: nn.Module, batch: dict[str, torch.Tensor], scores: torch.Tensor,
                    values: torch.Tensor, beta: float, gamma: float, lam: float,
                    kind: str = "k1") -> dict[str, torch.Tensor]:
    """The PPO-RLHF path from a rollout batch to advantages (verl: compute_log_prob, compute_ref_log_prob,
    apply_kl_penalty, compute_advantage). `values` (B, R) come from the critic."""
    ids, attn, mask = batch["input_ids"], batch["attention_mask"], batch["response_mask"]
    logprob = response_logprobs(policy(ids, attn), ids, mask)
    ref_logprob = response_logprobs(reference(ids, attn), ids, mask)
    rewards = token_level_rewards(scores, logprob, ref_logprob, mask, beta, kind)
    advantages, returns = gae_advantages(rewards, values, mask, gamma, lam)
    return {"logprob": logprob, "ref_logprob": ref_logprob, "rewards": rewards,
            "advantages": advantages, "returns": returns}
