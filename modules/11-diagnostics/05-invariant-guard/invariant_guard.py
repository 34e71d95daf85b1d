"""diag-05: invariant guard — static (AST) and runtime checks for the hot-path rules of a training step.

Static part: `find_host_syncs(source, step)` reads a training script and reports `(line, rule)` for every host
synchronisation the rules below can decide from the source alone, inside the hot path (the step function, every
def marked `# hot-path`, and every top-level function they call, transitively).
Runtime part: `HotPathGuard`, a `TorchFunctionMode` that records host syncs and silent dtype promotions while a step
runs, and `bitwise_deterministic(fn, seed)`, which runs a step twice under the same seed and compares bit by bit.
The rules are spelled out in README.md ("任务"); the constants below are part of the contract.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_leaves

RULES = ("item", "cpu", "numpy", "tolist", "scalar-cast", "print-tensor", "cuda-sync", "tensor-if")
MARKER = "# hot-path"

# ----------------------------------------------------------------------------------------------------------------
# static part: given helpers (imports, qualified names, markers, the tables of what yields a tensor)
# ----------------------------------------------------------------------------------------------------------------

TENSOR_NAMESPACES = ("torch", "torch.nn.functional", "torch.linalg", "torch.special", "torch.fft")
NON_TENSOR_FUNCTIONS = {"numel", "manual_seed", "seed", "initial_seed", "result_type", "promote_types", "can_cast",
                        "no_grad", "enable_grad", "inference_mode", "device", "dtype", "Generator", "Size", "compile"}
NON_TENSOR_PREFIXES = ("is_", "are_", "get_", "set_", "use_")
NON_TENSOR_METHODS = {"item", "tolist", "numpy", "dim", "ndimension", "size", "numel", "nelement", "stride",
                      "element_size", "data_ptr", "get_device", "is_contiguous", "is_floating_point", "backward"}
TENSOR_ATTRIBUTES = {"T", "mT", "H", "mH", "grad", "data", "real", "imag"}
SYNC_METHODS = {"item": "item", "cpu": "cpu", "numpy": "numpy", "tolist": "tolist"}
SCALAR_CASTS = {"float", "int", "bool"}


def torch_names(tree: ast.AST) -> dict[str, str]:
    """Local name -> the dotted torch path it is bound to, from every `import` in the file (any scope).

    `import torch as T` -> {"T": "torch"}; `from torch import cuda` -> {"cuda": "torch.cuda"};
    `import torch.nn.functional as F` -> {"F": "torch.nn.functional"}; `import torch.cuda` -> {"torch": "torch"}.
    """
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch" or a.name.startswith("torch."):
                    names[a.asname or "torch"] = a.name if a.asname else "torch"  # `import torch.x` binds torch
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "torch" or node.module.startswith("torch."):
                for a in node.names:
                    names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def qualified_name(node: ast.AST, names: dict[str, str]) -> str | None:
    """`T.cuda.synchronize` -> "torch.cuda.synchronize" under `import torch as T`; None when not rooted in torch."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        base = qualified_name(node.value, names)
        return f"{base}.{node.attr}" if base else None
    return None


def marker_lines(source: str) -> set[int]:
    """Lines that carry the comment `# hot-path` (a real comment token, not text inside a string)."""
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and tok.string.strip() == MARKER:
            lines.add(tok.start[0])
    return lines


def is_tensor_call(qualname: str | None) -> bool:
    """A call of a torch tensor-op function (`torch.sum`, `F.mse_loss`, ...) returns a tensor."""
    if qualname is None or "." not in qualname:
        return False
    module, _, fn = qualname.rpartition(".")
    return module in TENSOR_NAMESPACES and fn not in NON_TENSOR_FUNCTIONS and not fn.startswith(NON_TENSOR_PREFIXES) \
        and not fn[:1].isupper()


# ----------------------------------------------------------------------------------------------------------------
# static part: what the learner writes
# ----------------------------------------------------------------------------------------------------------------


def is_tensor_expr(node: ast.AST, tensors: set[str], names: dict[str, str]) -> bool:
    """True when the rules of README "静态可判定的张量" say `node` evaluates to a tensor (or, for `not t`, forces
    `bool(t)`): a name in `tensors`; a tensor-op call (`is_tensor_call`); a method call on a tensor that is not in
    NON_TENSOR_METHODS; a TENSOR_ATTRIBUTES attribute or a subscript of a tensor; a BinOp / UnaryOp / BoolOp with a
    tensor operand; a Compare with a tensor operand and no `is` / `is not`. Everything else (names not in `tensors`,
    calls of unknown callables such as `model(x)`, constants) is not."""
    ### HINT: recurse on the operands; a method call is `Call(func=Attribute(value=receiver, attr=method))`
    ### BEGIN SOLUTION
    if isinstance(node, ast.Name):
        return node.id in tensors
    if isinstance(node, ast.Call):
        if is_tensor_call(qualified_name(node.func, names)):
            return True
        func = node.func
        return isinstance(func, ast.Attribute) and func.attr not in NON_TENSOR_METHODS \
            and is_tensor_expr(func.value, tensors, names)
    if isinstance(node, ast.Attribute):
        return node.attr in TENSOR_ATTRIBUTES and is_tensor_expr(node.value, tensors, names)
    if isinstance(node, ast.Subscript):
        return is_tensor_expr(node.value, tensors, names)
    if isinstance(node, ast.BinOp):
        return is_tensor_expr(node.left, tensors, names) or is_tensor_expr(node.right, tensors, names)
    if isinstance(node, ast.UnaryOp):
        return is_tensor_expr(node.operand, tensors, names)
    if isinstance(node, ast.Compare):
        if any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            return False
        return any(is_tensor_expr(n, tensors, names) for n in [node.left, *node.comparators])
    if isinstance(node, ast.BoolOp):
        return any(is_tensor_expr(n, tensors, names) for n in node.values)
    return False
    ### END SOLUTION


def tensor_names(func: ast.FunctionDef | ast.AsyncFunctionDef, names: dict[str, str]) -> set[str]:
    """Names that hold a tensor somewhere in `func` (flow-insensitive): parameters annotated `torch.Tensor` (under
    any alias), then, to a fixed point, every plain name assigned a tensor expression (`x = ...`, `x: T = ...`,
    `x += ...` whose value is one); tuple targets are not tracked."""
    a = func.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    tensors = {p.arg for p in params if p.annotation is not None
               and qualified_name(p.annotation, names) == "torch.Tensor"}
    assigns: list[tuple[str, ast.AST]] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            assigns += [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name) and node.value:
            assigns.append((node.target.id, node.value))
    changed = True
    while changed:
        changed = False
        for name, value in assigns:
            if name not in tensors and is_tensor_expr(value, tensors, names):
                tensors.add(name)
                changed = True
    return tensors


def hot_functions(tree: ast.Module, source: str, step: str | None) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The hot path: top-level functions named `step` (none when `step` is None), every def (top-level, method or
    nested) whose `def` line carries the `# hot-path` comment, and, transitively, every top-level function called by
    its bare name (`helper(...)`) from a hot function's body. Each function once, in source order."""
    ### HINT: a worklist over the call graph; only `ast.Call` whose func is an `ast.Name` naming a top-level def counts
    ### BEGIN SOLUTION
    top = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    marked = marker_lines(source)
    roots = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
             and (n.lineno in marked or (step is not None and top.get(n.name) is n and n.name == step))]
    hot: dict[int, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    work = list(roots)
    while work:
        fn = work.pop()
        if id(fn) in hot:
            continue
        hot[id(fn)] = fn
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in top:
                work.append(top[node.func.id])
    return sorted(hot.values(), key=lambda f: f.lineno)
    ### END SOLUTION


class HostSyncFinder(ast.NodeVisitor):
    """Visits ONE hot function and collects `(line, rule)` findings in `self.found` (see README for each rule)."""

    def __init__(self, tensors: set[str], names: dict[str, str]) -> None:
        self.tensors = tensors
        self.names = names
        self.found: set[tuple[int, str]] = set()

    def tensor(self, node: ast.AST) -> bool:
        return is_tensor_expr(node, self.tensors, self.names)

    ### HINT: visit_Call for item/cpu/numpy/tolist/scalar-cast/print-tensor/cuda-sync; the four test-bearing nodes
    ### HINT: for tensor-if; always call generic_visit so nested expressions are seen too
    ### BEGIN SOLUTION
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in SYNC_METHODS:
            self.found.add((node.lineno, SYNC_METHODS[func.attr]))
        if qualified_name(func, self.names) == "torch.cuda.synchronize":
            self.found.add((node.lineno, "cuda-sync"))
        if isinstance(func, ast.Name) and func.id in SCALAR_CASTS and len(node.args) == 1 \
                and self.tensor(node.args[0]):
            self.found.add((node.lineno, "scalar-cast"))
        if isinstance(func, ast.Name) and func.id == "print" and any(self.printed_tensor(a) for a in node.args):
            self.found.add((node.lineno, "print-tensor"))
        self.generic_visit(node)

    def printed_tensor(self, arg: ast.AST) -> bool:
        if isinstance(arg, ast.JoinedStr):
            return any(isinstance(v, ast.FormattedValue) and self.tensor(v.value) for v in arg.values)
        return self.tensor(arg)

    def visit_test(self, node: ast.If | ast.While | ast.IfExp | ast.Assert) -> None:
        if self.tensor(node.test):
            self.found.add((node.lineno, "tensor-if"))
        self.generic_visit(node)

    visit_If = visit_While = visit_IfExp = visit_Assert = visit_test
    ### END SOLUTION


def find_host_syncs(source: str, step: str | None = "train_step") -> set[tuple[int, str]]:
    """Every `(line, rule)` host sync in the hot path of the script `source` (README "任务" for the rules)."""
    tree = ast.parse(source)
    names = torch_names(tree)
    found: set[tuple[int, str]] = set()
    for fn in hot_functions(tree, source, step):
        finder = HostSyncFinder(tensor_names(fn, names), names)
        for stmt in fn.body:
            finder.visit(stmt)
        found |= finder.found
    return found


# ----------------------------------------------------------------------------------------------------------------
# runtime part
# ----------------------------------------------------------------------------------------------------------------

SYNC_FUNCTIONS = {"item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__", "__repr__",
                  "__format__"}
EXPLICIT_CASTS = {"to", "type", "type_as", "float", "double", "half", "bfloat16", "copy_"}


def _name(func: Callable[..., Any]) -> str:
    return getattr(func, "__name__", repr(func)).strip("_")


class HotPathGuard(TorchFunctionMode):
    """Records, in call order, `("sync", name)` for every call of a SYNC_FUNCTIONS entry and `("promotion", name)`
    for every silent dtype promotion (README "运行时规则"), `name` being `func.__name__` without leading/trailing
    underscores. Returns every op's result unchanged. One instance = one fresh, empty `events` list."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        ### HINT: participating inputs follow torch.result_type: dimensioned tensors outrank zero-dim ones
        ### BEGIN SOLUTION
        name = getattr(func, "__name__", "")
        if name in SYNC_FUNCTIONS:
            self.events.append(("sync", _name(func)))
            return out
        if name in EXPLICIT_CASTS or kwargs.get("dtype") is not None:
            return out
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        dimensioned = [t for t in inputs if t.dim() > 0]
        participating = {t.dtype for t in (dimensioned or inputs) if t.is_floating_point()}
        produced = {t.dtype for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()}
        if participating and produced and len(participating | produced) > 1:
            self.events.append(("promotion", _name(func)))
        ### END SOLUTION
        return out


def _same_bits(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        ### BEGIN SOLUTION
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        a, b = a.detach().contiguous().reshape(-1), b.detach().contiguous().reshape(-1)
        return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        ### END SOLUTION
    return type(a) is type(b) and a == b


def bitwise_deterministic(fn: Callable[[], Any], seed: int) -> bool:
    """Run `fn()` twice, each run preceded by `torch.manual_seed(seed)` and under
    `torch.use_deterministic_algorithms(True)`; True iff both results have the same structure (torch pytree) and
    every leaf is bitwise equal (tensors: same dtype, shape and bytes, so NaN == NaN; other leaves: same type and ==).
    The deterministic-algorithms setting (and its warn_only flag) is restored afterwards, also when `fn` raises."""
    ### HINT: seed before EACH run; compare bits, not values (allclose and torch.equal both answer another question)
    ### BEGIN SOLUTION
    was_on = torch.are_deterministic_algorithms_enabled()
    was_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        torch.manual_seed(seed)
        first = fn()
        torch.manual_seed(seed)
        second = fn()
    finally:
        torch.use_deterministic_algorithms(was_on, warn_only=was_warn)
    leaves_a, spec_a = tree_flatten(first)
    leaves_b, spec_b = tree_flatten(second)
    return spec_a == spec_b and all(_same_bits(a, b) for a, b in zip(leaves_a, leaves_b, strict=True))
    ### END SOLUTION
