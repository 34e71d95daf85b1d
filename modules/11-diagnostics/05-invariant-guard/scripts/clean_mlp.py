"""Clean: an MLP regression step (float32, SGD with momentum).

Decoys for a static checker: `.item` as a dict key, `cpu` as a variable, `.item()` inside a string and a comment,
a sync in `report()` that the step never calls, `float()` of a Python int, `if` on Python values.
runtime-syncs:
runtime-promotions: 0
deterministic: yes
"""

import torch
import torch.nn.functional as F

cpu = torch.device("cpu")
LOG_EVERY = 2


def make_state(seed: int) -> dict:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(cpu)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return {"model": model, "opt": opt, "item": 0, "history": []}


def make_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(7, 6, generator=g)
    return x, x.sum(dim=1, keepdim=True).sin()


def report(loss: torch.Tensor) -> str:
    return f"loss {loss.item():.4f}"  # a sync, but report() runs outside the step


def train_step(state: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    model, opt = state["model"], state["opt"]
    state["item"] += 1  # `.item` here is a dict key
    scale = float(state["item"] % 3 + 1)  # float() of a Python int: no sync
    if state["item"] % LOG_EVERY == 0:  # a Python condition
        state["history"].append("x.item() in a string is not a call")
    pred = model(x.to(cpu))
    loss = F.mse_loss(pred, y) * scale  # loss.item() in a comment is not a call
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


if __name__ == "__main__":
    state = make_state(0)
    for i in range(3):
        loss = train_step(state, *make_batch(i))
        print(report(loss), loss)
