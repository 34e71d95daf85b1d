"""Clean: a bf16 classifier step with explicit casts, Python-scalar arithmetic and a `# hot-path` helper.

`logits.float()` is an explicit cast (not a promotion); `* 0.5`, `torch.where(..., -1e4)` and a zero-dim float32
tensor times a bf16 tensor keep bf16 (torch.result_type); `clip_grad_norm_` keeps its norm on the device.
runtime-syncs:
runtime-promotions: 0
deterministic: yes
"""

import torch
import torch.nn.functional as F

MASK_VALUE = -1e4


def make_state(seed: int) -> dict:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 12), torch.nn.GELU(), torch.nn.Linear(12, 3)).to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return {"model": model, "opt": opt, "temperature": torch.tensor(0.7), "norms": []}


def make_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(9, 5, generator=g).to(torch.bfloat16)
    return x, torch.randint(0, 3, (9,), generator=g)


def masked_logits(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:  # hot-path
    return torch.where(allowed, logits * 0.5, MASK_VALUE)


def train_step(state: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    model, opt = state["model"], state["opt"]
    logits = model(x) / state["temperature"]
    allowed = torch.ones_like(logits, dtype=torch.bool)
    loss = F.cross_entropy(masked_logits(logits, allowed).float(), y)
    opt.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    state["norms"].append(norm.detach())
    opt.step()
    return loss.detach()
