"""Planted host syncs in the step of a classifier, one of each kind a static checker can decide.

`print(logits)` is a sync too, but `logits = model(x)` comes from an unknown callable, so only the runtime guard
sees it (repr); `torch.cuda.synchronize()` only runs on a GPU, so only the static checker sees it.
runtime-syncs: item, tolist, float, bool, bool, format, cpu, numpy, repr
runtime-promotions: 0
deterministic: yes
"""

import torch
import torch.nn.functional as F


def make_state(seed: int) -> dict:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 10), torch.nn.ReLU(), torch.nn.Linear(10, 3))
    return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.1)}


def make_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(6, 4, generator=g), torch.randint(0, 3, (6,), generator=g)


def train_step(state: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    model, opt = state["model"], state["opt"]
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    acc = (logits.argmax(dim=1) == y).float().mean()
    state["loss"] = loss.item()  # expect: item
    state["preds"] = logits.argmax(dim=1).tolist()  # expect: tolist
    state["acc"] = float(acc)  # expect: scalar-cast
    if torch.isnan(loss):  # expect: tensor-if
        raise FloatingPointError("nan loss")
    if acc > 0.99:  # expect: tensor-if
        state["done"] = True
    print(f"acc={acc:.3f}")  # expect: print-tensor
    state["w"] = model[0].weight.detach().cpu().numpy()  # expect: cpu, numpy
    if torch.cuda.is_available():
        torch.cuda.synchronize()  # expect: cuda-sync
    print(logits)
    return loss.detach()
