"""The static rules of `hpccourse check`: what no test run can see, read from the lesson files alone.

Per lesson (`lesson_reasons`):
- formula keys: every `formula` key evaluates to a finite number at the grader's own sample points,
  and the grader gives full points to equivalent rewrites of the key that this module generates;
- mutants and alternatives: every occurrence of their `find` text lies inside a solution region;
- alternatives: a README that says another approach is also right has an `[[alternatives]]` entry;
- hints: the lesson README does not hold two consecutive non-trivial lines of a solution region;
- giveaways: the README carries no question tags and prints no numeric key or keyed option (`giveaways.py`).
Across lessons (`audit_course`):
- per module, keyed letters of `choice` / `multi` questions are spread and the keyed option is not
  the longest option by habit (`ModuleStats`);
- no two questions share a normalised prompt (`normalize_prompt`), and no two formula keys are
  the same formula under other variable names (`formula_fingerprints`).

Nothing here runs pytest or learner code; `docs/lesson-api.md` ("What check enforces") lists every
rule with its threshold and message. `python -m pytest_hpccourse.authoring.audit PATHS` prints the findings.
"""

from __future__ import annotations

import ast
import itertools
import random
import re
import sys
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_hpccourse.grading import answers, formula, manifest, rubric
from pytest_hpccourse.grading.manifest import Lesson, Question

from . import giveaways
from .regions import RegionError, find_regions

CHOICE_LETTER_MAX = 0.50  # share of a module's choice keys one letter may hold
MULTI_LETTER_MAX = 0.80  # share of a module's multi questions whose key may hold one letter
LONGEST_MAX = 0.60  # share of choice+multi questions whose keyed option may be the longest
MIN_FOR_LETTERS = 3  # below this many choice (multi) questions the letter rule is not applied
MIN_LINE = 10  # a solution line shorter than this (normalised) is trivial for the hint rule
DUPLICATE_MIN_NODES = 12  # formula keys this size or larger must not recur under other names


# ---------------------------------------------------------------------------------------------
# formula keys


def grader_points(q: Question, points: int) -> Iterator[dict[str, float]]:
    """The points at which `answers.grade` compares a formula answer with the key, in its order.

    Mirrors `formula.equivalent` (seed crc32(question id), log-uniform over `domain`, every second
    point rounded to a whole number >= 2) for as long as the key evaluates: the grader silently
    redraws a point where the key fails, so the sequences agree up to the first such point.
    """
    rng = random.Random(zlib.crc32(q.id.encode()))
    for checked in range(points):
        yield formula.sample_point(rng, q.variables, q.domain, whole=bool(checked % 2))


def _fmt(values: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in values.items())


def _call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=[])


def _is_call(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
            and len(node.args) == 1)


_STEPS = ("floor", "ceil")  # discontinuous: a rounding change in their argument can move the result


def _has_steps(tree: ast.AST) -> bool:
    return any((isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _STEPS)
               or (isinstance(n, ast.BinOp) and isinstance(n.op, (ast.FloorDiv, ast.Mod)))
               for n in ast.walk(tree))


class _Rewrite(ast.NodeTransformer):
    """Rewrites every matching node, innermost first; `apply` gives None when nothing matched.
    The insides of floor, ceil, // and % are left alone: n/49 and n*(1/49) differ at n = 49 after
    rounding, so such a rewrite is not an equivalent answer in floating point."""

    def rewrite(self, node: ast.BinOp | ast.Call) -> ast.expr | None:
        raise NotImplementedError

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)):
            return node
        self.generic_visit(node)
        return self.rewrite(node) or node

    def visit_Call(self, node: ast.Call) -> ast.expr:
        if isinstance(node.func, ast.Name) and node.func.id in _STEPS:
            return node
        self.generic_visit(node)
        return self.rewrite(node) or node

    def apply(self, tree: ast.expr) -> ast.expr | None:
        before = ast.dump(tree)
        after = self.visit(_copy(tree))
        return after if ast.dump(after) != before else None


def _copy(tree: ast.expr) -> ast.expr:
    return ast.parse(ast.unparse(tree), mode="eval").body


class _Reciprocal(_Rewrite):
    """a/b -> a*(1/b)"""

    def rewrite(self, node: ast.BinOp | ast.Call) -> ast.expr | None:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and not (
                isinstance(node.left, ast.Constant) and node.left.value == 1):
            return ast.BinOp(node.left, ast.Mult(), ast.BinOp(ast.Constant(1), ast.Div(), node.right))
        return None


class _SplitExp(_Rewrite):
    """exp(a-b) -> exp(a)/exp(b), exp(a+b) -> exp(a)*exp(b), exp(-a) -> 1/exp(a)"""

    def rewrite(self, node: ast.BinOp | ast.Call) -> ast.expr | None:
        if not _is_call(node, "exp"):
            return None
        arg = node.args[0]  # type: ignore[union-attr]
        if isinstance(arg, ast.BinOp) and isinstance(arg.op, (ast.Add, ast.Sub)):
            op = ast.Mult() if isinstance(arg.op, ast.Add) else ast.Div()
            return ast.BinOp(_call("exp", arg.left), op, _call("exp", arg.right))
        if isinstance(arg, ast.UnaryOp) and isinstance(arg.op, ast.USub):
            return ast.BinOp(ast.Constant(1), ast.Div(), _call("exp", arg.operand))
        return None


class _Distribute(_Rewrite):
    """a*(b+c) -> a*b + a*c, (b+c)*a -> b*a + c*a, (b+c)/a -> b/a + c/a (and with -)"""

    def rewrite(self, node: ast.BinOp | ast.Call) -> ast.expr | None:
        if not isinstance(node, ast.BinOp):
            return None

        def additive(n: ast.expr) -> bool:
            return isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub))

        if isinstance(node.op, ast.Mult) and additive(node.right):
            s = node.right
            assert isinstance(s, ast.BinOp)
            return ast.BinOp(ast.BinOp(node.left, ast.Mult(), s.left), s.op,
                             ast.BinOp(_copy(node.left), ast.Mult(), s.right))
        if isinstance(node.op, (ast.Mult, ast.Div)) and additive(node.left):
            s = node.left
            assert isinstance(s, ast.BinOp)
            return ast.BinOp(ast.BinOp(s.left, type(node.op)(), node.right), s.op,
                             ast.BinOp(s.right, type(node.op)(), _copy(node.right)))
        return None


def _swapped(tree: ast.expr) -> ast.expr | None:
    if isinstance(tree, ast.BinOp) and isinstance(tree.op, (ast.Add, ast.Mult)):
        return ast.BinOp(tree.right, tree.op, tree.left)
    if isinstance(tree, ast.BinOp) and isinstance(tree.op, ast.Sub):  # a - b -> -b + a
        return ast.BinOp(ast.UnaryOp(ast.USub(), tree.right), ast.Add(), tree.left)
    return None


def _sympy() -> Any:
    try:
        import sympy
    except ImportError:  # optional: only the AST rewrites are tried
        return None
    return sympy


def _to_sympy(node: ast.expr, sp: Any, variables: Sequence[str]) -> Any:
    """A vetted formula tree as a sympy expression (variables positive: the grader's domain is)."""
    if isinstance(node, ast.Constant):
        return sp.Integer(node.value) if isinstance(node.value, int) else sp.Float(node.value)
    if isinstance(node, ast.Name):
        if node.id in variables:
            return sp.Symbol(node.id, positive=True)
        return {"pi": sp.pi, "e": sp.E}[node.id]
    if isinstance(node, ast.UnaryOp):
        value = _to_sympy(node.operand, sp, variables)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        a, b = _to_sympy(node.left, sp, variables), _to_sympy(node.right, sp, variables)
        ops: dict[type, Callable[[Any, Any], Any]] = {
            ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y, ast.Mult: lambda x, y: x * y,
            ast.Div: lambda x, y: x / y, ast.Pow: lambda x, y: x**y,
            ast.FloorDiv: lambda x, y: sp.floor(x / y), ast.Mod: lambda x, y: sp.Mod(x, y)}
        return ops[type(node.op)](a, b)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        args = [_to_sympy(a, sp, variables) for a in node.args]
        funcs: dict[str, Callable[..., Any]] = {
            "sqrt": sp.sqrt, "log": sp.log, "log2": lambda x: sp.log(x) / sp.log(2), "exp": sp.exp,
            "ceil": sp.ceiling, "floor": sp.floor, "min": sp.Min, "max": sp.Max}
        return funcs[node.func.id](*args)
    raise ValueError(f"cannot convert {ast.dump(node)}")


def _sympy_printer(sp: Any) -> Any:
    from sympy.printing.str import StrPrinter

    class Printer(StrPrinter):  # type: ignore[misc]  # prints in the grader's function names
        def _print_Max(self, e: Any) -> str:
            return "max(" + ", ".join(self._print(a) for a in e.args) + ")"

        def _print_Min(self, e: Any) -> str:
            return "min(" + ", ".join(self._print(a) for a in e.args) + ")"

        def _print_ceiling(self, e: Any) -> str:
            return f"ceil({self._print(e.args[0])})"

        def _print_Exp1(self, e: Any) -> str:
            return "e"

    return Printer()


def _sympy_forms(tree: ast.expr, variables: Sequence[str]) -> list[tuple[str, str]]:
    sp = _sympy()
    if sp is None:
        return []
    try:
        sym = _to_sympy(tree, sp, variables)
        printer = _sympy_printer(sp)
        return [("sympy.expand", printer.doprint(sp.expand(sym))),
                ("sympy.factor", printer.doprint(sp.factor(sym)))]
    except Exception:  # noqa: BLE001  # sympy cannot take it: the AST rewrites still count
        return []


def formula_rewrites(key: str, variables: Sequence[str]) -> list[tuple[str, str]]:
    """Equivalent forms of `key` as (how it was rewritten, formula text), each accepted by
    `formula.compile_expression` (forms over the grader's size limits are left out).

    Always: (key)*1, (key)+0, 1*(key), the root's operands swapped (+, *; a-b as -b+a), a/b as
    a*(1/b), exp(a-b) as exp(a)/exp(b), products distributed over sums; with sympy installed also
    sympy.expand and sympy.factor of the key (not for keys with floor, ceil, // or %, whose
    arguments are never rewritten).
    """
    expr = formula.compile_expression(key, variables)
    tree = expr.tree.body
    text = expr.source
    found: list[tuple[str, str]] = [("(key)*1", f"({text})*1"), ("(key)+0", f"({text})+0"),
                                    ("1*(key)", f"1*({text})")]
    candidates: list[tuple[str, ast.expr | None]] = [
        ("top-level operands swapped", _swapped(_copy(tree))),
        ("a/b -> a*(1/b)", _Reciprocal().apply(tree)),
        ("exp(a-b) -> exp(a)/exp(b)", _SplitExp().apply(tree)),
        ("products distributed over sums", _Distribute().apply(tree)),
    ]
    found += [(how, ast.unparse(t)) for how, t in candidates if t is not None]
    if not _has_steps(tree):  # sympy may rewrite inside floor/ceil
        found += _sympy_forms(tree, variables)
    seen = {ast.dump(tree)}
    usable = []
    for how, form in found:
        try:
            dump = ast.dump(formula.compile_expression(form, variables).tree.body)
        except formula.FormulaError:
            continue  # over the grader's length/size limits, or a function it does not know
        if how.startswith(("(key)", "1*(")) or dump not in seen:
            seen.add(dump)
            usable.append((how, form))
    return usable


def formula_reasons(q: Question, points: int) -> list[str]:
    """Why the key of formula question `q` would fail a correct learner (empty when it would not)."""
    if q.kind != "formula" or not q.has_key:
        return []
    key = str(q.answer)
    expr = formula.compile_expression(key, q.variables)
    for values in grader_points(q, points):
        try:
            expr(values)
        except formula.FormulaError as exc:
            return [(f"{q.id}: the formula key cannot be evaluated at the grader's point {_fmt(values)} "
                     f"({exc}); set `domain` so that every sample point is valid")]
    rejected = []
    for how, form in formula_rewrites(key, q.variables):
        g = answers.grade(q, True, form, 2.0, formula_points=points)
        if g.status != "PASS":
            rejected.append((how, form, g.message.removeprefix(f"{q.id}: ")))
    if not rejected:
        return []
    how, form, message = rejected[0]
    more = f" (+{len(rejected) - 1} more rewrite(s) rejected)" if len(rejected) > 1 else ""
    return [(f"{q.id}: the grader rejects `{form}`, an equivalent form of the key ({how}): "
             f"{message}{more}")]


# ---------------------------------------------------------------------------------------------
# mutants inside solution regions


def region_spans(text: str, path: str) -> list[tuple[int, int]]:
    """Character spans a mutant may edit: from the line break after each BEGIN marker to the first
    non-blank character of its END marker line (the marker texts themselves are outside)."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    spans = []
    for r in find_regions(text, path):
        begin, end = lines[r.begin - 1], lines[r.end - 1]
        spans.append((starts[r.begin - 1] + len(begin.rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")),
                      starts[r.end - 1] + len(end) - len(end.lstrip(" \t"))))
    return spans


def mutant_reasons(lesson: Lesson) -> list[str]:
    """A reason for each mutant or alternative whose `find` text (any occurrence) lies outside
    every region."""
    reasons = []
    edits = [("mutant", i, m) for i, m in enumerate(lesson.mutants, 1)]
    edits += [("alternative", i, m) for i, m in enumerate(lesson.alternatives, 1)]
    for kind, i, m in edits:
        try:
            text = (lesson.dir / m.file).read_text(encoding="utf-8")
            spans = region_spans(text, m.file)
        except (OSError, UnicodeDecodeError, RegionError):
            continue  # the static checks report unreadable files and broken markers
        hits = []
        pos = text.find(m.find)
        while pos != -1:  # the occurrences str.replace edits: left to right, not overlapping
            hits.append(pos)
            pos = text.find(m.find, pos + len(m.find))
        outside = [p for p in hits if not any(lo <= p and p + len(m.find) <= hi for lo, hi in spans)]
        if outside:
            line = text.count("\n", 0, outside[0]) + 1
            which = f", {len(outside)} of {len(hits)} occurrences" if len(hits) > 1 else ""
            reasons.append(f"{kind} {i} ({m.why}) edits {m.file}:{line} outside every solution "
                           f"region{which}: a{'n' if kind == 'alternative' else ''} {kind} must change "
                           f"what the learner writes")
    return reasons


# ---------------------------------------------------------------------------------------------
# "also right" claims in the README


# Sentences in which a README tells the learner that another way of solving the task also gets full
# points. Such a claim is a promise about the tests; an [[alternatives]] entry is its proof.
ALSO_RIGHT = re.compile(
    r"同样正确|也(?:是)?正确|也对|也算对|(?:都|也|同样)(?:能|可以)?(?:拿|得)?满分|同样满分|测试都接受|"
    r"\balso (?:right|correct|accepted|gets? full)", re.IGNORECASE)


def alternative_reasons(lesson: Lesson) -> list[str]:
    """A reason when README.md says another approach is also right and lesson.toml proves none."""
    readme = lesson.dir / "README.md"
    if lesson.alternatives or not readme.is_file():
        return []
    try:
        lines = readme.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    for no, line in enumerate(lines, 1):
        m = ALSO_RIGHT.search(line)
        if m:
            return [f"README.md:{no} says another approach is also right ({m.group(0)!r}) but lesson.toml "
                    f"has no [[alternatives]]: add the alternative as an edit that check proves keeps "
                    f"full code points, or drop the claim"]
    return []


# ---------------------------------------------------------------------------------------------
# hints that hand out the solution


_TRAILING_COMMENT = re.compile(r"\s+(//|#)(\s.*)?$")


def _code_line(line: str) -> str:
    """`line` whitespace-normalised, a trailing `// ...` or `# ...` comment removed."""
    return _TRAILING_COMMENT.sub("", " ".join(line.split()))


def _squash(line: str) -> str:
    """What the hint rule compares: the code part of a line without any whitespace or backticks."""
    return re.sub(r"\s+", "", _code_line(line).replace("`", ""))


def is_trivial(line: str) -> bool:
    """Trivial for the hint rule: empty, a comment only (`//`, `/*`, `*/`, `* `, `# `, `##`, a lone
    `#` or `*`; `#pragma`/`#include` are code), no letter or digit (braces, brackets, punctuation),
    or shorter than MIN_LINE characters once whitespace-normalised and its trailing comment removed."""
    n = _code_line(line)
    if not n or len(n) < MIN_LINE or not any(c.isalnum() for c in n):
        return True
    return n.startswith(("//", "/*", "*/", "* ", "# ", "##")) or n in ("#", "*")


def _solution_pairs(lesson: Lesson) -> list[tuple[str, str, str]]:
    """(line, next line, "file:begin-end") for consecutive non-trivial lines of every region."""
    pairs = []
    for name in lesson.files:
        try:
            text = (lesson.dir / name).read_text(encoding="utf-8")
            regions = find_regions(text, name)
        except (OSError, UnicodeDecodeError, RegionError):
            continue
        lines = text.splitlines()
        for r in regions:
            body = [_code_line(x) for x in lines[r.begin:r.end - 1] if not is_trivial(x)]
            pairs += [(a, b, f"{name}:{r.begin}-{r.end}") for a, b in itertools.pairwise(body)]
    return pairs


def hint_reasons(lesson: Lesson) -> list[str]:
    """A reason when README.md holds two consecutive non-trivial lines of a solution region.

    Both sides drop trivial lines, trailing comments, whitespace and backticks, then the README's
    remaining lines are joined: the pair matches in a code fence (one line each) and in prose
    (both statements on one line, as inline code) alike.
    """
    readme = lesson.dir / "README.md"
    pairs = _solution_pairs(lesson)
    if not pairs or not readme.is_file():
        return []
    try:
        text = readme.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    stream, line_at = "", []  # the joined README and, per character, its 1-based line
    for no, line in enumerate(text.splitlines(), 1):
        if not is_trivial(line):
            part = _squash(line)
            stream += part
            line_at += [no] * len(part)
    for a, b, where in pairs:
        pos = stream.find(_squash(a) + _squash(b))
        if pos != -1:
            return [(f"README.md:{line_at[pos]} copies two consecutive lines of the solution region "
                     f"{where}: {a!r} / {b!r}; hints state invariants and shapes, not code")]
    return []


def lesson_reasons(lesson: Lesson, formula_points: int = 24) -> list[str]:
    """Every per-lesson static rule: formula keys, mutants and alternatives in solution regions,
    README hints, README "also right" claims backed by alternatives, questions the README answers."""
    reasons = [r for q in lesson.questions for r in formula_reasons(q, formula_points)]
    return (reasons + mutant_reasons(lesson) + hint_reasons(lesson) + alternative_reasons(lesson)
            + giveaways.giveaway_reasons(lesson))


# ---------------------------------------------------------------------------------------------
# across lessons: guessable choices per module, duplicate prompts


def option_text(option: str) -> str:
    """An option without its "A. " prefix."""
    m = manifest.OPTION.match(option)
    return option[m.end():].strip() if m else option.strip()


def keyed_is_longest(q: Question) -> bool:
    """Whether the strictly longest option (in characters, prefix stripped) is keyed."""
    lengths = {letter: len(option_text(o)) for letter, o in zip(q.option_letters(), q.options, strict=True)}
    top = max(lengths.values())
    longest = [letter for letter, n in lengths.items() if n == top]
    keys = [q.answer] if q.kind == "choice" else list(q.answer)
    return len(longest) == 1 and longest[0] in keys


@dataclass
class ModuleStats:
    """How guessable a module's choice and multi questions are from their form."""

    module: str
    choice: int = 0
    choice_keys: Counter[str] = field(default_factory=Counter)
    multi: int = 0
    multi_keys: Counter[str] = field(default_factory=Counter)  # letter -> multi questions keyed on it
    longest: int = 0  # choice+multi questions whose strictly longest option is keyed
    letters: set[str] = field(default_factory=set)

    def add(self, q: Question) -> None:
        if q.kind not in ("choice", "multi") or not q.has_key:
            return
        self.letters.update(q.option_letters())
        if q.kind == "choice":
            self.choice += 1
            self.choice_keys[q.answer] += 1
        else:
            self.multi += 1
            self.multi_keys.update(set(q.answer))
        self.longest += keyed_is_longest(q)

    def problems(self) -> list[str]:
        out = []
        if self.choice >= MIN_FOR_LETTERS:
            letter, n = max(sorted(self.choice_keys.items()), key=lambda kv: kv[1])
            if n > CHOICE_LETTER_MAX * self.choice:
                out.append(f"module {self.module}: {letter} is the key of {n} of {self.choice} choice "
                           f"questions ({_pct(n, self.choice)} > {_pct(CHOICE_LETTER_MAX)})")
        if self.multi >= MIN_FOR_LETTERS:
            letter, n = max(sorted(self.multi_keys.items()), key=lambda kv: kv[1])
            if n > MULTI_LETTER_MAX * self.multi:
                out.append(f"module {self.module}: {letter} is keyed in {n} of {self.multi} multi "
                           f"questions ({_pct(n, self.multi)} > {_pct(MULTI_LETTER_MAX)})")
        total = self.choice + self.multi
        if total and self.longest > LONGEST_MAX * total:
            out.append(f"module {self.module}: the keyed option is the longest in {self.longest} of "
                       f"{total} choice/multi questions ({_pct(self.longest, total)} > {_pct(LONGEST_MAX)})")
        return out

    def line(self) -> str:
        letters = sorted(self.letters)
        choice = " ".join(f"{x}{self.choice_keys[x]}" for x in letters) if self.choice else ""
        multi = " ".join(f"{x}{self.multi_keys[x]}" for x in letters) if self.multi else ""
        total = self.choice + self.multi
        verdict = "UNSOUND" if self.problems() else "ok"
        return (f"module {self.module}: choice keys {choice or '-'} (of {self.choice}); multi keys "
                f"{multi or '-'} (of {self.multi}); keyed option longest in {self.longest}/{total}: "
                f"{verdict}")


def _pct(n: float, total: float = 1.0) -> str:
    return f"{100 * n / total:.0f}%"


def normalize_prompt(text: str) -> str:
    """NFKC (fullwidth -> halfwidth), casefold, punctuation (Unicode category P*) and whitespace
    dropped: "X？（y）" and "x? (Y)" normalise alike, whichever side of a bracket has a space."""
    return giveaways.normalize(text)


def formula_fingerprints(q: Question) -> list[tuple[int, tuple[str, ...]]]:
    """The key's values at fixed points, with its variables bound by position and by sorted name:
    two keys with a common fingerprint are the same formula up to the names of their variables.
    Keys of fewer than DUPLICATE_MIN_NODES AST nodes (e.g. 4*n) have none: short keys recur
    legitimately."""
    if q.kind != "formula" or not q.has_key:
        return []
    expr = formula.compile_expression(str(q.answer), q.variables)
    if sum(1 for _ in ast.walk(expr.tree.body)) < DUPLICATE_MIN_NODES:
        return []
    rng = random.Random(len(q.variables))  # the same points for every key of this many variables
    points = [[rng.uniform(1.5, 9.0) for _ in q.variables] for _ in range(6)]
    prints = []
    for order in (q.variables, tuple(sorted(q.variables))):
        try:
            prints.append((len(order), tuple(f"{expr(dict(zip(order, p, strict=True))):.9g}" for p in points)))
        except formula.FormulaError:
            continue
    return prints


@dataclass
class CourseAudit:
    """The cross-lesson findings: reasons per lesson folder, and one ModuleStats per module."""

    reasons: dict[Path, list[str]] = field(default_factory=dict)
    modules: list[ModuleStats] = field(default_factory=list)


def audit_course(lessons: Sequence[Lesson]) -> CourseAudit:
    """Module rules over the lessons grouped by their parent folder (the module) and duplicate
    prompts over all of them; every lesson of a failing module gets the module's reasons."""
    result = CourseAudit()
    by_module: dict[Path, list[Lesson]] = defaultdict(list)
    for lesson in lessons:
        by_module[lesson.dir.parent].append(lesson)
    for module, members in sorted(by_module.items()):
        stats = ModuleStats(module.name)
        for lesson in members:
            for q in lesson.questions:
                stats.add(q)
        result.modules.append(stats)
        for lesson in members:
            result.reasons.setdefault(lesson.dir, []).extend(stats.problems())
    prompts: dict[str, list[tuple[Lesson, Question]]] = defaultdict(list)
    for lesson in lessons:
        for q in lesson.questions:
            prompts[normalize_prompt(q.prompt)].append((lesson, q))
    for same in prompts.values():
        for lesson, q in same:
            others = [f"{o.id} {oq.id} ({manifest.display_path(o.dir)})"
                      for o, oq in same if (o, oq) != (lesson, q)]
            if others:
                result.reasons.setdefault(lesson.dir, []).append(
                    f"{q.id}: same prompt as {', '.join(others)} (after normalising)")
    keys: dict[tuple[int, tuple[str, ...]], list[tuple[Lesson, Question]]] = defaultdict(list)
    for lesson in lessons:
        for q in lesson.questions:
            for fp in dict.fromkeys(formula_fingerprints(q)):
                keys[fp].append((lesson, q))
    reported: set[tuple[Path, str, Path, str]] = set()
    for same in keys.values():
        for lesson, q in same:
            for o, oq in same:
                pair = (lesson.dir, q.id, o.dir, oq.id)
                if (o, oq) != (lesson, q) and pair not in reported:
                    reported.add(pair)
                    result.reasons.setdefault(lesson.dir, []).append(
                        f"{q.id}: same formula key as {o.id} {oq.id} ({manifest.display_path(o.dir)}) "
                        "up to the names of its variables")
    return result


def load_lessons(dirs: Sequence[Path]) -> list[Lesson]:
    """The lessons in `dirs` that validate (the others are reported by check's manifest step)."""
    lessons = []
    for d in dirs:
        try:
            lessons.append(manifest.load_lesson(d))
        except manifest.ManifestError:
            continue
    return lessons


def formula_points(lesson_dir: Path) -> int:
    """The number of points the grader compares formulas at for this lesson (its scoring.toml)."""
    try:
        return rubric.load(lesson_dir).formula_points
    except (rubric.RubricError, OSError, UnicodeDecodeError):
        return rubric.Rubric().formula_points


def main(argv: Sequence[str] | None = None) -> int:
    """Print every static finding under PATHS (default modules/); exit 1 when there is one."""
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])] or [Path("modules")]
    lessons = load_lessons(list(manifest.iter_lesson_dirs(paths)))
    course = audit_course(lessons)
    for stats in course.modules:
        print(stats.line())
    found = 0
    for lesson in lessons:
        reasons = lesson_reasons(lesson, formula_points(lesson.dir)) + course.reasons.get(lesson.dir, [])
        found += len(reasons)
        for reason in reasons:
            print(f"{lesson.id}: {reason}")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
