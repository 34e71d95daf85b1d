"""runtime-04: a graph-recording Dynamo backend, and a function rewritten to compile into ONE graph.

A Dynamo backend is any callable `backend(gm: torch.fx.GraphModule, example_inputs: list) -> callable`:
Dynamo hands it each FX graph it captured (one per compiled frame, resume functions included) and runs
whatever callable it returns in place of that graph's bytecode, for every later call the guards admit.

`route` below is production-style code with graph breaks (torch 2.13.0: 4 or 5 graphs, depending on the branches
the data takes).
`route_fixed` must return the same tensor as `route` for every input, and compile into one graph.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

CLIP = 4.0  # logits are rescaled so that max |logit| <= CLIP
STATS: dict[str, float] = {}


def route(scores: torch.Tensor, bias: torch.Tensor, temperature: float) -> torch.Tensor:
    """Given code (do not edit). scores [T, E] router logits, bias [E]; returns [T, E] routing weights."""
    logits = scores + bias
    peak = logits.abs().amax().item()  # break: Tensor.item() leaves the graph
    if peak > CLIP:  # Python control flow on that Python float
        logits = logits * (CLIP / peak)
    print(f"[route] peak={peak:.2f}")  # break: print is a side effect Dynamo cannot put in a graph
    t0 = time.perf_counter()  # a builtin Dynamo does not trace (skipped function)
    if logits.mean() > 0:  # break: a data-dependent branch on a tensor
        probs = torch.softmax(logits / temperature, dim=-1)
    else:
        probs = torch.sigmoid(logits)
    load = (probs > 0.25).sum(dim=0).tolist()  # break: tolist() turns every element into a Python int
    penalty = torch.tensor([1.0 / (1 + c) for c in load])
    spread = np.std(probs.numpy(), axis=-1, keepdims=True)  # numpy on a tensor: Dynamo traces this one
    out = probs * penalty + torch.from_numpy(spread)
    STATS["route_ms"] = (time.perf_counter() - t0) * 1e3
    return out


def route_fixed(scores: torch.Tensor, bias: torch.Tensor, temperature: float) -> torch.Tensor:
    """Same result as `route` (fp32, up to rounding), without prints or timing, in ONE graph:
    `torch._dynamo.explain(route_fixed)(...)` reports graph_count == 1 and graph_break_count == 0, and
    `torch.compile(route_fixed, fullgraph=True)` compiles once for every input of one shape, whichever
    branch the data takes. Keep every value a tensor: no .item(), .tolist(), Python `if` on tensor data."""
    ### HINT: min(1, CLIP/peak) is the scale in both cases; select between the branches on a 0-d bool tensor; load stays an int tensor [E]
    ### BEGIN SOLUTION
    logits = scores + bias
    peak = logits.abs().amax()  # a 0-d tensor, never a Python float
    logits = logits * (CLIP / peak).clamp(max=1.0)  # exactly 1.0 when peak <= CLIP: the no-op branch
    soft = torch.softmax(logits / temperature, dim=-1)
    probs = torch.where(logits.mean() > 0, soft, torch.sigmoid(logits))  # both branches computed, one selected
    load = (probs > 0.25).sum(dim=0)
    penalty = 1.0 / (1 + load)
    spread = probs.std(dim=-1, keepdim=True, correction=0)  # np.std is the population std
    return probs * penalty + spread
    ### END SOLUTION


def op_names(gm: torch.fx.GraphModule) -> list[str]:
    """The operations of a Dynamo graph in node order: for a call_function node the target's __name__
    (operator.matmul -> "matmul", torch.relu -> "relu"), for a call_method node the method name
    (x.sin() -> "sin"), for a call_module node the module's class name. Placeholders and outputs are not ops."""
    ### HINT: node.op is one of placeholder, get_attr, call_function, call_method, call_module, output
    ### BEGIN SOLUTION
    names = []
    for node in gm.graph.nodes:
        if node.op == "call_function":
            names.append(getattr(node.target, "__name__", str(node.target)))
        elif node.op == "call_method":
            names.append(node.target)
        elif node.op == "call_module":
            names.append(type(gm.get_submodule(node.target)).__name__)
    return names
    ### END SOLUTION


class GraphRecorder:
    """A Dynamo backend that keeps every graph it is handed and runs it unchanged (like backend="eager").

        rec = GraphRecorder()
        f = torch.compile(fn, backend=rec)
        f(x)
        rec.graph_count, rec.ops[0]   # graphs compiled so far; op_names of the first one
    """

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []
        self.ops: list[list[str]] = []  # op_names(graph) for each recorded graph

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        ### HINT: called once per captured graph, at compile time; what it returns runs on every later call's real inputs
        ### BEGIN SOLUTION
        self.graphs.append(gm)
        self.ops.append(op_names(gm))
        return gm.forward
        ### END SOLUTION
