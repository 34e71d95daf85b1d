"""Planted syncs behind import aliases: `import torch as T`, `from torch import cuda, Tensor`,
`from torch.nn import functional as nnf`.

runtime-syncs: bool, int, repr
runtime-promotions: 0
deterministic: yes
"""

import torch as T
from torch import Tensor, cuda
from torch.nn import functional as nnf


def make_state(seed: int) -> dict:
    T.manual_seed(seed)
    model = T.nn.Linear(4, 3)
    return {"model": model, "opt": T.optim.SGD(model.parameters(), lr=0.1)}


def make_batch(seed: int) -> tuple[Tensor, Tensor]:
    g = T.Generator().manual_seed(seed)
    return T.randn(8, 4, generator=g), T.randint(0, 3, (8,), generator=g)


def train_step(state: dict, x: Tensor, y: Tensor) -> Tensor:
    model, opt = state["model"], state["opt"]
    loss = nnf.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    finite = bool(T.isfinite(loss))  # expect: scalar-cast
    if cuda.is_available():
        cuda.synchronize()  # expect: cuda-sync
    state["n"] = int(y.sum())  # expect: scalar-cast
    print("loss", loss)  # expect: print-tensor
    assert finite
    return loss.detach()
