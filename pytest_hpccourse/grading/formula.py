"""A restricted arithmetic evaluator for `formula` questions — Python's `ast`, never `eval`.

Allowed: numbers, + - * / // % **, unary + -, parentheses, the declared variables, the constants
`pi` and `e`, and the functions in FUNCTIONS. Anything else (attributes, other calls, strings,
comprehensions, lambdas, subscripts, comparisons, huge exponents) is rejected before evaluation.
"""

from __future__ import annotations

import ast
import math
import operator
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MAX_LENGTH = 400
MAX_NODES = 200
MAX_EXPONENT = 64.0
MAX_MAGNITUDE = 1e300

FUNCTIONS: dict[str, tuple[Callable[..., float], int | None]] = {
    # name: (function, arity or None for variadic >= 1)
    "sqrt": (math.sqrt, 1),
    "log": (math.log, 1),
    "log2": (math.log2, 1),
    "exp": (math.exp, 1),
    "ceil": (math.ceil, 1),
    "floor": (math.floor, 1),
    "min": (min, None),
    "max": (max, None),
}
CONSTANTS = {"pi": math.pi, "e": math.e}
_BINOPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_TRANSLATE = str.maketrans({"×": "*", "·": "*", "−": "-", "（": "(", "）": ")", "÷": "/"})


class FormulaError(ValueError):
    """The expression is not allowed or cannot be evaluated."""


@dataclass(frozen=True)
class Expression:
    source: str
    tree: ast.Expression
    variables: tuple[str, ...]

    def __call__(self, values: dict[str, float]) -> float:
        return _evaluate(self.tree.body, values)


def _describe(node: ast.AST) -> str:
    return {
        ast.Attribute: "attribute access", ast.Subscript: "subscripts", ast.Lambda: "lambda",
        ast.ListComp: "comprehensions", ast.GeneratorExp: "comprehensions", ast.Compare: "comparisons",
        ast.BoolOp: "and/or", ast.IfExp: "conditional expressions", ast.NamedExpr: "assignment",
        ast.JoinedStr: "strings",
    }.get(type(node), type(node).__name__)


def _check(node: ast.AST, variables: Sequence[str]) -> None:
    if isinstance(node, ast.Expression):
        _check(node.body, variables)
    elif isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise FormulaError(f"only numbers are allowed, not {node.value!r}")
    elif isinstance(node, ast.Name):
        if node.id not in variables and node.id not in CONSTANTS:
            allowed = ", ".join(list(variables) + list(CONSTANTS))
            raise FormulaError(f"unknown name {node.id!r} (allowed: {allowed})")
    elif isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.BitXor):
            raise FormulaError("'^' is not a power here; write ** instead")
        if type(node.op) not in _BINOPS:
            raise FormulaError(f"operator {type(node.op).__name__} is not allowed")
        _check(node.left, variables)
        _check(node.right, variables)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.UAdd, ast.USub)):
            raise FormulaError(f"operator {type(node.op).__name__} is not allowed")
        _check(node.operand, variables)
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            name = node.func.id if isinstance(node.func, ast.Name) else _describe(node.func)
            raise FormulaError(f"call to {name!r} is not allowed (functions: {', '.join(FUNCTIONS)})")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise FormulaError(f"{node.func.id}() takes plain positional arguments only")
        arity = FUNCTIONS[node.func.id][1]
        if (arity is None and not node.args) or (arity is not None and len(node.args) != arity):
            raise FormulaError(f"{node.func.id}() takes {arity or 'one or more'} argument(s)")
        for arg in node.args:
            _check(arg, variables)
    else:
        raise FormulaError(f"{_describe(node)} is not allowed")


def compile_expression(source: str, variables: Sequence[str]) -> Expression:
    """Parse and vet `source`; raises FormulaError with the reason. Nothing is executed."""
    if not isinstance(source, str):
        raise FormulaError("a formula must be text")
    text = source.translate(_TRANSLATE).strip()
    if not text:
        raise FormulaError("empty formula")
    if len(text) > MAX_LENGTH:
        raise FormulaError(f"formula longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"not an arithmetic expression ({exc.msg})") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise FormulaError("formula too long")
    _check(tree, variables)
    return Expression(source=text, tree=tree, variables=tuple(variables))


def _evaluate(node: ast.AST, values: dict[str, float]) -> float:
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Name):
        return float(values[node.id]) if node.id in values else CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp):
        value = _evaluate(node.operand, values)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left = _evaluate(node.left, values)
        right = _evaluate(node.right, values)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise FormulaError(f"exponent {right:g} is too large")
            if left < 0 and right != int(right):
                raise FormulaError("fractional power of a negative number")
        try:
            result = _BINOPS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise FormulaError("division by zero") from None
        except OverflowError:
            raise FormulaError("number too large") from None
        return _finite(result)
    if isinstance(node, ast.Call):
        func, _ = FUNCTIONS[node.func.id]  # type: ignore[union-attr]
        args = [_evaluate(a, values) for a in node.args]
        try:
            return _finite(float(func(*args)))
        except (ValueError, OverflowError) as exc:
            raise FormulaError(f"{node.func.id}() failed: {exc}") from None  # type: ignore[union-attr]
    raise FormulaError(f"{_describe(node)} is not allowed")  # unreachable after _check


def _finite(value: float) -> float:
    if isinstance(value, complex) or not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:
        raise FormulaError("result is not a finite number")
    return float(value)


def sample_point(rng: random.Random, variables: Sequence[str], domain: tuple[float, float],
                 whole: bool) -> dict[str, float]:
    """One sample point: each variable log-uniform over `domain`; with `whole`, rounded to a whole
    number >= 2 (formulas with ceil/floor or N-1 terms must match at whole numbers too)."""
    lo, hi = math.log(domain[0]), math.log(domain[1])
    values = {name: math.exp(rng.uniform(lo, hi)) for name in variables}
    if whole:
        values = {name: float(max(2, round(v))) for name, v in values.items()}
    return values


def equivalent(answer: str, key: str, variables: Sequence[str], *, points: int = 24,
               rel_tol: float = 1e-6, domain: tuple[float, float] = (1.0, 1000.0),
               seed: int = 0) -> tuple[bool, str]:
    """Compare `answer` with `key` at `points` seeded random positive points.

    Returns (equal, reason). The learner expression is vetted first and never executed otherwise.
    Points where the key itself cannot be evaluated (e.g. a pole) are redrawn.
    """
    try:
        learner = compile_expression(answer, variables)
    except FormulaError as exc:
        return False, f"formula rejected: {exc}"
    reference = compile_expression(key, variables)
    rng = random.Random(seed)
    checked = 0
    for _ in range(points * 10):
        if checked >= points:
            break
        values = sample_point(rng, variables, domain, whole=bool(checked % 2))
        try:
            expected = reference(values)
        except FormulaError:
            continue
        try:
            got = learner(values)
        except FormulaError as exc:
            return False, f"cannot evaluate at {_fmt(values)}: {exc}"
        if abs(got - expected) > rel_tol * max(abs(expected), abs(got)) + 1e-12:
            return False, f"not equivalent to the key: at {_fmt(values)} your formula gives {got:.6g}"
        checked += 1
    if checked < points:
        return False, "the key could not be evaluated at enough points"
    return True, ""


def _fmt(values: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in values.items())
