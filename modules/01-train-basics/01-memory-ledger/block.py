"""The transformer block whose activations train-01 accounts for (given; not part of the task).

Pre-LN GPT block without dropout (as most LLMs train today): the layout of GPT-2 / Megatron-LM with separate
q/k/v projections (as in LLaMA). Shapes: x is (b, s, h); a heads of size d = h / a; MLP width f.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, h: int, a: int, f: int) -> None:
        super().__init__()
        assert h % a == 0, "hidden size must split evenly into heads"
        self.a = a
        self.ln1 = nn.LayerNorm(h)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(h, h) for _ in range(4))
        self.ln2 = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, f)
        self.fc2 = nn.Linear(f, h)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        d = h // self.a
        y = self.ln1(x)
        # (b, s, h) -> (b, a, s, d): a view with the head axis moved, not yet contiguous
        q, k, v = (w(y).view(b, s, self.a, d).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        causal = torch.full((s, s), float("-inf"), dtype=x.dtype, device=x.device).triu(1)
        p = torch.softmax(q @ k.transpose(-2, -1) * (1.0 / math.sqrt(d)) + causal, dim=-1)
        o = (p @ v).transpose(1, 2).reshape(b, s, h)
        return self.wo(o)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(x)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
