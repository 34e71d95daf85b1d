"""Read `answers.yaml` and grade each question kind (DESIGN.md, "lesson.toml").

Nothing here raises on bad learner input: a missing file, a missing or empty answer, a wrong type,
malformed YAML or a YAML tag each give that question 0 points and a message saying why.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import formula
from .manifest import Question
from .rubric import Rubric

FILENAME = "answers.yaml"
DEFAULT_MAX_CHARS = 600


@dataclass(frozen=True)
class Grade:
    score: float
    max_score: float
    status: str  # PASS | FAIL | NEEDS
    message: str = ""


@dataclass(frozen=True)
class AnswerSheet:
    """The learner's answers, or the reason they could not be read."""

    answers: dict[str, Any]
    error: str = ""

    def get(self, qid: str) -> tuple[bool, Any]:
        for key, value in self.answers.items():
            if isinstance(key, str) and key.strip().upper() == qid:
                return True, value
        return False, None


# A question kind's grader: (question, the learner's answer, its points, the rubric) -> Grade.
Grader = Callable[[Question, Any, float, Rubric], Grade]


def read_sheet(path: Path) -> AnswerSheet:
    name = path.name
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return AnswerSheet({}, f"{name} not found")
    except (OSError, UnicodeDecodeError) as exc:
        return AnswerSheet({}, f"{name} cannot be read: {exc}")
    try:
        # The C SafeLoader when PyYAML has it: the same safe subset, faster.
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        return AnswerSheet({}, f"{name} is not valid YAML{where}: {first}")
    if data is None:
        return AnswerSheet({}, "")
    if not isinstance(data, dict):
        return AnswerSheet({}, f"{name} must map question ids to answers (Q1: ...), not a {type(data).__name__}")
    return AnswerSheet(data)


def _fail(q: Question, max_score: float, message: str) -> Grade:
    return Grade(0.0, max_score, "FAIL", f"{q.id}: {message}")


def _letter(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    m = re.fullmatch(r"\s*[(（]?\s*([A-Za-z])\s*[).．、)]?\s*", value)
    return m.group(1).upper() if m else None


def _letters(value: Any) -> list[str] | None:
    if isinstance(value, str):
        parts = [p for p in re.split(r"[\s,，;；/、]+", value.strip()) if p]
        if len(parts) == 1 and re.fullmatch(r"[A-Za-z]{2,}", parts[0]):
            parts = list(parts[0])  # "AC"
    elif isinstance(value, list):
        parts = value
    else:
        return None
    letters = [_letter(p) for p in parts]
    if not letters or any(x is None for x in letters):
        return None
    return [x for x in letters if x is not None]


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip().replace("_", ""))
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def _squash(text: str) -> str:
    return re.sub(r"[\s\-_·/]+", "", text.casefold())


def grade(q: Question, present: bool, value: Any, max_score: float, *,
          keywords_max_chars: int = DEFAULT_MAX_CHARS, formula_points: int = 24,
          rubric: Rubric | None = None, kinds: Mapping[str, Grader] | None = None) -> Grade:
    """Grade one answer. `present` says whether the sheet had the key at all.

    The question's kind is graded by `kinds[q.kind]` (default: the built-in `KINDS`; a run passes the
    kinds of hook `pytest_hpccourse_question_kinds`). `rubric` defaults to one with `keywords_max_chars` and
    `formula_points`."""
    if not q.has_key:
        return Grade(0.0, max_score, "NEEDS", f"{q.id}: NEEDS key (no answer key; see --course-keys)")
    if not present:
        return _fail(q, max_score, f"no answer in {FILENAME}")
    if value is None or (isinstance(value, str) and not value.strip()) or value == []:
        return _fail(q, max_score, "answer is empty")
    grader = (KINDS if kinds is None else kinds).get(q.kind)
    if grader is None:
        return _fail(q, max_score, f"unknown question kind {q.kind!r}")
    if rubric is None:
        rubric = Rubric(keywords_max_chars=keywords_max_chars, formula_points=formula_points)
    return grader(q, value, max_score, rubric)


def grade_choice(q: Question, value: Any, max_score: float, rubric: Rubric) -> Grade:
    """`choice`: one option letter."""
    letter = _letter(value)
    if letter is None:
        return _fail(q, max_score, f"expected one option letter (e.g. B), got {value!r}")
    if letter not in q.option_letters():
        return _fail(q, max_score, f"{letter} is not one of the options {', '.join(q.option_letters())}")
    return _full(max_score) if letter == q.answer else _fail(q, max_score, f"{letter} is not the right option")


def grade_multi(q: Question, value: Any, max_score: float, rubric: Rubric) -> Grade:
    """`multi`: a set of option letters, all-or-nothing."""
    letters = _letters(value)
    if letters is None:
        return _fail(q, max_score, f"expected option letters (e.g. [A, C] or \"A,C\"), got {value!r}")
    unknown = sorted(set(letters) - set(q.option_letters()))
    if unknown:
        return _fail(q, max_score, f"{', '.join(unknown)} not among the options")
    if sorted(set(letters)) == list(q.answer):
        return _full(max_score)
    return _fail(q, max_score, f"{','.join(sorted(set(letters)))} is not the right set of options (all-or-nothing)")


def grade_numeric(q: Question, value: Any, max_score: float, rubric: Rubric) -> Grade:
    """`numeric`: a finite number within `rel_tol` / `abs_tol` of the key."""
    number = _number(value)
    if number is None:
        return _fail(q, max_score, f"expected a finite number{_unit(q)}, got {value!r}")
    key = float(q.answer)
    allowed = max(q.abs_tol or 0.0, (q.rel_tol or 0.0) * abs(key))
    if abs(number - key) <= allowed:
        return _full(max_score)
    return _fail(q, max_score, f"{number:g}{_unit(q)} is outside the accepted tolerance")


def grade_formula(q: Question, value: Any, max_score: float, rubric: Rubric) -> Grade:
    """`formula`: an expression equal to the key at `rubric.formula_points` random points."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = repr(value)
    if not isinstance(value, str):
        return _fail(q, max_score, f"expected a formula as text, e.g. \"16*psi/N\", got {type(value).__name__}")
    ok, reason = formula.equivalent(value, str(q.answer), q.variables, points=rubric.formula_points,
                                    rel_tol=q.rel_tol or 1e-6, domain=q.domain,
                                    seed=zlib.crc32(q.id.encode()))
    return _full(max_score) if ok else _fail(q, max_score, reason)


def grade_keywords(q: Question, value: Any, max_score: float, rubric: Rubric) -> Grade:
    """`keywords`: short text, points in proportion to the concept groups it covers."""
    if not isinstance(value, str):
        return _fail(q, max_score, f"expected a short text answer, got {type(value).__name__}")
    cap = q.max_chars or rubric.keywords_max_chars
    if len(value) > cap:
        return _fail(q, max_score, f"answer is {len(value)} characters, over the {cap}-character cap")
    text = _squash(value)
    hits = sum(any(_squash(s) in text for s in group) for group in q.groups)
    score = round(max_score * hits / len(q.groups), 2)
    if hits == len(q.groups):
        return _full(max_score)
    return Grade(score, max_score, "FAIL", f"{q.id}: covers {hits} of {len(q.groups)} key concepts")


grade_keywords.objective = False  # type: ignore[attr-defined]  # see hookspecs.pytest_hpccourse_question_kinds

# The built-in question kinds, in the order manifest.KINDS names them (registered through the hook
# `pytest_hpccourse_question_kinds` by grading.builtins, like a plugin's kinds).
KINDS: dict[str, Grader] = {"choice": grade_choice, "multi": grade_multi, "numeric": grade_numeric,
                            "formula": grade_formula, "keywords": grade_keywords}


def _full(max_score: float) -> Grade:
    return Grade(max_score, max_score, "PASS", "")


def _unit(q: Question) -> str:
    return f" ({q.unit})" if q.unit else ""
