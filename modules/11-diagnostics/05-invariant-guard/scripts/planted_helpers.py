"""Planted syncs reached through helpers (two calls deep) and in a `# hot-path` method.

`save_preview` syncs but is only stored as a callback, never called from the hot path.
runtime-syncs: item, tolist
runtime-promotions: 0
deterministic: yes
"""

import torch


def to_host(t: torch.Tensor) -> list:
    return t.tolist()  # expect: tolist


def log_metrics(state: dict, loss: torch.Tensor) -> None:
    state["log"].append(to_host(loss.detach()))
    state["last"] = loss.item()  # expect: item


def save_preview(model: torch.nn.Module) -> object:
    return model.weight.detach().cpu().numpy()


def make_state(seed: int) -> dict:
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.2), "log": [], "cb": save_preview}


def make_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(5, 3, generator=g), torch.randn(5, 2, generator=g)


def train_step(state: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    model, opt = state["model"], state["opt"]
    loss = torch.nn.functional.smooth_l1_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    log_metrics(state, loss)
    return loss.detach()


class Evaluator:
    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def evaluate(self, model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:  # hot-path
        probs = torch.softmax(model(x), dim=-1)
        if probs.max() > self.threshold:  # expect: tensor-if
            probs = probs.clamp(max=self.threshold)
        return probs
