"""Planted silent dtype promotions in a bf16 regression step (no host sync).

`pred - y` mixes a bf16 and a float32 tensor (-> float32); `gsum.add_(grad)` adds a bf16 gradient into a float32
buffer. `pred * 0.5` (a Python scalar) and `.float()` (explicit) are not promotions.
runtime-syncs:
runtime-promotions: 2
deterministic: yes
"""

import torch


def make_state(seed: int) -> dict:
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2).to(torch.bfloat16)
    return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.05),
            "gsum": torch.zeros(2, 4)}


def make_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(6, 4, generator=g).to(torch.bfloat16), torch.randn(6, 2, generator=g)


def train_step(state: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    model, opt = state["model"], state["opt"]
    pred = model(x) * 0.5
    loss = ((pred - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    state["gsum"].add_(model.weight.grad)
    opt.step()
    return loss.detach().float()
