"""The course rubric (`scoring.toml`): points per part, the pass line, per-test timeout."""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

FILENAME = "scoring.toml"


@dataclass(frozen=True)
class Rubric:
    code: float = 4.0
    questions: tuple[float, ...] = (2.0, 2.0, 2.0)
    pass_score: float = 8.0
    total: float = 10.0
    exclude_ungradable_from_max: bool = True
    timeout: float = 120.0
    keywords_max_chars: int = 600
    formula_points: int = 24
    source: Path | None = field(default=None, compare=False)


class RubricError(ValueError):
    pass


def _number(table: dict, key: str, default: float, where: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise RubricError(f"{where}: {key}: must be a non-negative number")
    return float(value)


def parse(data: dict, source: Path | None = None) -> Rubric:
    where = str(source or FILENAME)
    points = data.get("points", {})
    ungradable = data.get("ungradable", {})
    run = data.get("run", {})
    for name, table in (("points", points), ("ungradable", ungradable), ("run", run)):
        if not isinstance(table, dict):
            raise RubricError(f"{where}: [{name}] must be a table")
    questions = points.get("questions", [2, 2, 2])
    if not isinstance(questions, list) or len(questions) != 3:
        raise RubricError(f"{where}: points.questions: must be a list of three numbers")
    qs = tuple(_number({"q": q}, "q", 0, f"{where}: points.questions") for q in questions)
    code = _number(points, "code", 4, where + ": points")
    total = _number(points, "total", code + sum(qs), where + ": points")
    if abs(total - (code + sum(qs))) > 1e-9:
        raise RubricError(f"{where}: points.total: must equal code + sum(questions) = {code + sum(qs):g}")
    exclude = ungradable.get("exclude_from_max", True)
    if not isinstance(exclude, bool):
        raise RubricError(f"{where}: ungradable.exclude_from_max: must be true or false")
    return Rubric(
        code=code,
        questions=qs,
        pass_score=_number(points, "pass", 8, where + ": points"),
        total=total,
        exclude_ungradable_from_max=exclude,
        timeout=_number(run, "timeout", 120, where + ": run"),
        keywords_max_chars=int(_number(run, "keywords_max_chars", 600, where + ": run")),
        formula_points=max(20, int(_number(run, "formula_points", 24, where + ": run"))),
        source=source,
    )


def find(start: Path) -> Path | None:
    """The nearest `scoring.toml` in `start` or one of its parents."""
    start = start.resolve()
    for folder in (start, *start.parents):
        candidate = folder / FILENAME
        if candidate.is_file():
            return candidate
    return None


def load(start: Path) -> Rubric:
    """The rubric that governs `start`; the defaults when no scoring.toml is found."""
    path = find(start)
    if path is None:
        return Rubric()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise RubricError(f"{path}: {exc}") from exc
    return parse(data, path)
