"""Clean for the sync and promotion rules, but not reproducible: the learning-rate jitter comes from Python's
`random` module, which `torch.manual_seed` does not seed.
runtime-syncs:
runtime-promotions: 0
deterministic: no
"""

import random

import torch


def make_state(seed: int) -> dict:
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 1)
    return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.1)}


def make_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)


def train_step(state: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    model, opt = state["model"], state["opt"]
    for group in opt.param_groups:
        group["lr"] = 0.1 * (1.0 + 0.1 * random.random())
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach()
