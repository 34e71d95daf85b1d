"""A third-party plugin of pytest-hpccourse: the worked example of docs/hooks.md (not shipped).

It adds a capability (`fakeaccel`, always present), a question kind (`regex`: the answer, stripped, must
fully match the key's regular expression) and a reporter (`--gradebook-csv PATH`: one CSV line per lesson,
what an LMS import reads). Load it like any pytest plugin: `pytest -p example_hooks_plugin`, a `pytest11`
entry point, or `pytest_plugins` in the rootdir's conftest.py.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_hpccourse.grading.answers import Grade


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("hpccourse").addoption("--gradebook-csv", metavar="PATH", default=None,
                                           help="write one CSV line per lesson to PATH")


@pytest.hookimpl
def pytest_hpccourse_capabilities() -> dict[str, Any]:
    return {"fakeaccel": lambda: True}


def grade_regex(question: Any, value: Any, max_score: float, rubric: Any) -> Grade:
    if not isinstance(value, str):
        return Grade(0.0, max_score, "FAIL", f"{question.id}: expected text, got {type(value).__name__}")
    if re.fullmatch(question.answer, value.strip()):
        return Grade(max_score, max_score, "PASS")
    return Grade(0.0, max_score, "FAIL", f"{question.id}: {value.strip()!r} is not of the expected form")


def _validate_regex(question: Any) -> str | None:
    try:
        re.compile(question.answer)
    except (re.error, TypeError) as exc:
        return f"must be a regular expression ({exc})"
    return None


grade_regex.validate = _validate_regex  # type: ignore[attr-defined]  # checked when lesson.toml loads


@pytest.hookimpl
def pytest_hpccourse_question_kinds() -> dict[str, Any]:
    return {"regex": grade_regex}


@pytest.hookimpl
def pytest_hpccourse_report(course: Any, config: pytest.Config) -> None:
    path = config.getoption("gradebook_csv")
    if not path:
        return
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["lesson", "status", "score", "max_score", "code", "Q1", "Q2", "Q3"])
        for lesson in course.document()["lessons"]:
            questions = [q["score"] for q in lesson["questions"]] or ["", "", ""]
            writer.writerow([lesson["id"], lesson["status"], lesson["score"], lesson["max_score"],
                             lesson["code"]["score"], *questions])
