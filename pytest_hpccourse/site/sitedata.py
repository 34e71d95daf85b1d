"""The course site's data files under `site/`: the course plan, the formula cheatsheet and the
system-design cases.

Each loader validates its file and evaluates every worked number from its expression with the
grader's own evaluator (`formula.py`), then compares it with the number the author wrote down
(`expect`). The site shows the evaluated number, and a disagreement is an error, so a page can never
show a figure its formula does not give. `SiteDataError` messages name the file and the entry.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_hpccourse.grading import formula

PLAN = "plan.toml"
CHEATSHEET = "cheatsheet.toml"
SYSTEM_DESIGN = "system-design.toml"
EXPECT_REL_TOL = 1e-3
NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
REF = re.compile(r"^([a-z][a-z0-9]*(?:-[a-z0-9]+)*-\d{2})/(Q[1-3])$")


class SiteDataError(ValueError):
    """A site data file that does not validate, or a worked number its expression does not give."""


@dataclass(frozen=True)
class PlannedLesson:
    id: str
    title: str


@dataclass(frozen=True)
class ModulePlan:
    number: int
    dir: str
    title: str
    short: str  # the learning-path node's label
    phase: int
    skills: str
    prerequisites: tuple[int, ...]
    lessons: tuple[PlannedLesson, ...]


@dataclass(frozen=True)
class Phase:
    number: int
    title: str


@dataclass(frozen=True)
class Plan:
    phases: tuple[Phase, ...]
    modules: tuple[ModulePlan, ...]


@dataclass(frozen=True)
class Variable:
    name: str
    latex: str
    meaning: str


@dataclass(frozen=True)
class Worked:
    """One number computed from an expression: `value` is the evaluated result divided by `scale`."""

    values: dict[str, float]
    value: float
    show_unit: str


@dataclass(frozen=True)
class Formula:
    id: str
    section: str
    title: str
    latex: str
    expr: str
    unit: str
    explain: str
    graded_by: tuple[tuple[str, str], ...]  # (lesson id, "Q1")
    source: str
    variables: tuple[Variable, ...]
    setting: str
    example: Worked


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    intro: str


@dataclass(frozen=True)
class Cheatsheet:
    sections: tuple[Section, ...]
    formulas: tuple[Formula, ...]


@dataclass(frozen=True)
class CapacityRow:
    name: str
    label: str
    expr: str
    is_input: bool
    value: float
    show_unit: str
    note: str


@dataclass(frozen=True)
class Case:
    id: str
    title: str
    summary: str
    requirements: str
    architecture: str
    diagram: str
    failure_modes: str
    trade_offs: str
    capacity: tuple[CapacityRow, ...]
    lesson: str = ""  # the id of the graded capstone lesson (module 12) that turns this case into code


@dataclass(frozen=True)
class SystemDesign:
    intro: str
    steps: tuple[tuple[str, str], ...]
    cases: tuple[Case, ...]


class _Reader:
    """Typed field access with messages that name the file and the entry."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Any]:
        try:
            with self.path.open("rb") as fh:
                return tomllib.load(fh)
        except FileNotFoundError:
            raise SiteDataError(f"{self.path}: missing") from None
        except tomllib.TOMLDecodeError as exc:
            raise SiteDataError(f"{self.path}: {exc}") from None

    def fail(self, where: str, message: str) -> SiteDataError:
        return SiteDataError(f"{self.path}: {where}: {message}")

    def text(self, table: dict, key: str, where: str, *, optional: bool = False) -> str:
        value = table.get(key, "" if optional else None)
        if not isinstance(value, str) or (not optional and not value.strip()):
            raise self.fail(where, f"`{key}` must be a non-empty string")
        return value

    def number(self, table: dict, key: str, where: str) -> float:
        value = table.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(where, f"`{key}` must be a finite number")
        return float(value)

    def tables(self, table: dict, key: str, where: str) -> list[dict]:
        value = table.get(key, [])
        if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
            raise self.fail(where, f"`{key}` must be a non-empty array of tables")
        return value


def _evaluate(reader: _Reader, where: str, expr: str, names: list[str], values: dict[str, float]) -> float:
    try:
        result = formula.compile_expression(expr, names)(values)
    except (formula.FormulaError, ArithmeticError, ValueError) as exc:
        raise reader.fail(where, f"`{expr}`: {exc}") from None
    if not math.isfinite(result):
        raise reader.fail(where, f"`{expr}` is not finite")
    return result


def _shown(reader: _Reader, where: str, raw: float, table: dict) -> float:
    """`raw / scale`, checked against the author's `expect`."""
    scale = reader.number(table, "scale", where) if "scale" in table else 1.0
    if scale <= 0:
        raise reader.fail(where, "`scale` must be positive")
    expect = reader.number(table, "expect", where)
    shown = raw / scale
    if not math.isclose(shown, expect, rel_tol=EXPECT_REL_TOL, abs_tol=1e-12):
        raise reader.fail(where, f"the expression gives {shown:.6g}, but `expect` says {expect:.6g}")
    return shown


def load_plan(path: Path) -> Plan:
    reader = _Reader(path)
    data = reader.load()
    phases = tuple(Phase(int(reader.number(p, "number", f"phase[{i}]")), reader.text(p, "title", f"phase[{i}]"))
                   for i, p in enumerate(reader.tables(data, "phase", "top level")))
    modules = []
    for i, m in enumerate(reader.tables(data, "module", "top level")):
        where = f"module[{i}]"
        lessons = m.get("lessons")
        if not isinstance(lessons, list) or not all(isinstance(x, dict) for x in lessons):
            raise reader.fail(where, "`lessons` must be an array of {id, title}")
        prereq = m.get("prerequisites", [])
        if not isinstance(prereq, list) or not all(isinstance(x, int) for x in prereq):
            raise reader.fail(where, "`prerequisites` must be a list of module numbers")
        phase = int(reader.number(m, "phase", where))
        if phase not in {p.number for p in phases}:
            raise reader.fail(where, f"phase {phase} is not declared")
        modules.append(ModulePlan(
            number=int(reader.number(m, "number", where)), dir=reader.text(m, "dir", where),
            title=reader.text(m, "title", where), short=reader.text(m, "short", where), phase=phase, skills=reader.text(m, "skills", where),
            prerequisites=tuple(prereq),
            lessons=tuple(PlannedLesson(reader.text(x, "id", f"{where}.lessons[{j}]"),
                                        reader.text(x, "title", f"{where}.lessons[{j}]"))
                          for j, x in enumerate(lessons))))
    numbers = {m.number for m in modules}
    for m in modules:
        missing = set(m.prerequisites) - numbers
        if missing:
            raise reader.fail(f"module {m.number}", f"unknown prerequisites {sorted(missing)}")
    return Plan(phases, tuple(modules))


def _refs(reader: _Reader, where: str, value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list):
        raise reader.fail(where, "`graded_by` must be a list like [\"train-01/Q1\"]")
    refs = []
    for ref in value:
        m = REF.match(ref) if isinstance(ref, str) else None
        if not m:
            raise reader.fail(where, f"`graded_by` entry {ref!r} is not <lesson id>/Q<n>")
        refs.append((m.group(1), m.group(2)))
    return tuple(refs)


def load_cheatsheet(path: Path) -> Cheatsheet:
    reader = _Reader(path)
    data = reader.load()
    sections = tuple(Section(reader.text(s, "id", f"section[{i}]"), reader.text(s, "title", f"section[{i}]"),
                             reader.text(s, "intro", f"section[{i}]", optional=True))
                     for i, s in enumerate(reader.tables(data, "section", "top level")))
    section_ids = {s.id for s in sections}
    formulas: list[Formula] = []
    for i, f in enumerate(reader.tables(data, "formula", "top level")):
        fid = reader.text(f, "id", f"formula[{i}]")
        where = f"formula {fid!r}"
        if fid in {x.id for x in formulas}:
            raise reader.fail(where, "duplicate id")
        section = reader.text(f, "section", where)
        if section not in section_ids:
            raise reader.fail(where, f"unknown section {section!r}")
        variables = tuple(Variable(reader.text(v, "name", where), reader.text(v, "latex", where),
                                   reader.text(v, "meaning", where))
                          for v in reader.tables(f, "vars", where))
        names = [v.name for v in variables]
        bad = [n for n in names if not NAME.match(n)]
        if bad or len(set(names)) != len(names):
            raise reader.fail(where, f"variable names must be distinct identifiers: {names}")
        example = f.get("example")
        if not isinstance(example, dict) or not isinstance(example.get("values"), dict):
            raise reader.fail(where, "`example` with `values` is required")
        values = example["values"]
        if set(values) != set(names):
            raise reader.fail(where, f"`example.values` must give exactly {sorted(names)}, not {sorted(values)}")
        for k, v in values.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise reader.fail(where, f"`example.values.{k}` must be a number")
        expr = reader.text(f, "expr", where)
        raw = _evaluate(reader, where, expr, names, {k: float(v) for k, v in values.items()})
        shown = _shown(reader, where + " example", raw, example)
        formulas.append(Formula(
            id=fid, section=section, title=reader.text(f, "title", where), latex=reader.text(f, "latex", where),
            expr=expr, unit=reader.text(f, "unit", where, optional=True), explain=reader.text(f, "explain", where),
            graded_by=_refs(reader, where, f.get("graded_by", [])), source=reader.text(f, "source", where),
            variables=variables, setting=reader.text(example, "setting", where),
            example=Worked({k: float(v) for k, v in values.items()}, shown,
                           reader.text(example, "show_unit", where, optional=True))))
    return Cheatsheet(sections, tuple(formulas))


def load_system_design(path: Path) -> SystemDesign:
    reader = _Reader(path)
    data = reader.load()
    method = data.get("method")
    if not isinstance(method, dict):
        raise reader.fail("top level", "`[method]` is required")
    steps = tuple((reader.text(s, "title", f"method.steps[{i}]"), reader.text(s, "body", f"method.steps[{i}]"))
                  for i, s in enumerate(reader.tables(method, "steps", "method")))
    if len(steps) != 4:
        raise reader.fail("method", f"the method has four steps, not {len(steps)}")
    cases = []
    for i, c in enumerate(reader.tables(data, "case", "top level")):
        cid = reader.text(c, "id", f"case[{i}]")
        where = f"case {cid!r}"
        rows: list[CapacityRow] = []
        known: dict[str, float] = {}
        for j, r in enumerate(reader.tables(c, "capacity", where)):
            name = reader.text(r, "name", f"{where} capacity[{j}]")
            row_where = f"{where} capacity {name!r}"
            if not NAME.match(name) or name in known:
                raise reader.fail(row_where, "names are distinct identifiers")
            expr = reader.text(r, "expr", row_where)
            raw = _evaluate(reader, row_where, expr, list(known), known)
            known[name] = raw
            is_input = bool(re.fullmatch(r"[-+]?[\d_.]+(?:[eE][-+]?\d+)?", expr.strip()))
            rows.append(CapacityRow(name, reader.text(r, "label", row_where), expr, is_input,
                                    _shown(reader, row_where, raw, r),
                                    reader.text(r, "show_unit", row_where, optional=True),
                                    reader.text(r, "note", row_where, optional=True)))
        cases.append(Case(
            id=cid, title=reader.text(c, "title", where), summary=reader.text(c, "summary", where),
            requirements=reader.text(c, "requirements", where), architecture=reader.text(c, "architecture", where),
            diagram=reader.text(c, "diagram", where), failure_modes=reader.text(c, "failure_modes", where),
            trade_offs=reader.text(c, "trade_offs", where), capacity=tuple(rows),
            lesson=reader.text(c, "lesson", where, optional=True)))
    return SystemDesign(reader.text(method, "intro", "method"), steps, tuple(cases))


def format_number(value: float) -> str:
    """A worked number for a page: four significant digits, thousands separators, ×10ⁿ when huge or tiny."""
    if value == 0:
        return "0"
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e7:
        if value == round(value):
            return f"{int(round(value)):,}"
        decimals = 3 - math.floor(math.log10(magnitude))  # four significant digits
        if decimals > 0:
            return f"{value:,.{decimals}f}".rstrip("0").rstrip(".")
        return f"{int(round(value, decimals)):,}"
    mantissa, exponent = f"{value:.3e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}×10<sup>{int(exponent)}</sup>"
