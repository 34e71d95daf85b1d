"""A task's outcome as gradebook rows: one per lesson of the task's part."""

from __future__ import annotations

from typing import Any

from .gradebook import Row
from .overlay import LessonPart

FAILED = ("failed", "error")


def _short(nodeid: str, lesson_path: str) -> str:
    """A test id without its lesson folder: `test_axpy.py::test_axpy_empty`."""
    return nodeid[len(lesson_path) + 1:] if nodeid.startswith(lesson_path + "/") else nodeid


def _from_lesson(row: Row, entry: dict[str, Any], pass_line: float, answers_changed: bool) -> None:
    code = entry.get("code") or {}
    questions = {q.get("id"): q for q in entry.get("questions", [])}
    row.code = float(code.get("score", 0.0))
    row.q1, row.q2, row.q3 = (float((questions.get(q) or {}).get("score", 0.0)) for q in ("Q1", "Q2", "Q3"))
    row.total = float(entry.get("score", 0.0))
    row.max_score = float(entry.get("max_score", row.max_score)) or row.max_score
    row.status = str(entry.get("status", "ERROR"))
    if entry.get("message"):
        row.reasons.append(str(entry["message"]).splitlines()[0])
    if entry.get("needs"):
        row.reasons.append("needs " + ", ".join(map(str, entry["needs"])))
    if code.get("status") not in (None, "PASS") and code.get("message"):
        row.reasons.append("code: " + str(code["message"]).splitlines()[0])
    for qid in ("Q1", "Q2", "Q3"):
        q = questions.get(qid) or {}
        if q.get("status") not in (None, "PASS") and q.get("message"):
            row.reasons.append(f"{qid}: " + str(q["message"]).splitlines()[0])
    row.failed_tests = [_short(str(t.get("nodeid", "")), row.path) for t in code.get("tests", [])
                        if t.get("outcome") in FAILED]
    if answers_changed:  # the learner's code rewrote answers.yaml while it ran: the questions do not count
        row.q1 = row.q2 = row.q3 = 0.0
        row.total = row.code
        row.reasons.append("answers.yaml was rewritten while the tests ran: questions scored 0")
        if row.status == "PASS" and row.total < pass_line:
            row.status = "FAIL"


def rows_for(base: dict[str, Any], lessons: list[LessonPart], result: dict[str, Any] | None, *,
             missing: list[str] = (), ignored: list[str] = (), status: str = "", reason: str = "") -> list[Row]:
    """Rows of the lessons of one task. `base`: student, module, part, commit_sha, grader. `result`: a
    `TaskResult.to_dict()`; without one, every lesson gets `status` (NEEDS, MISSING, ERROR) and `reason`."""
    doc = (result or {}).get("doc") or {}
    by_path = {str(entry.get("path", "")): entry for entry in doc.get("lessons", [])}
    pass_line = float((doc.get("scoring") or {}).get("pass", 8))
    changed = set((result or {}).get("answers_changed", []))
    rows = []
    for lesson in lessons:
        row = Row(lesson=lesson.id, path=lesson.path, title=lesson.title, **base,
                  ignored=list(ignored), node=(result or {}).get("node", ""),
                  seconds=float((result or {}).get("seconds", 0.0)))
        gone = [p.rsplit("/", 1)[-1] for p in missing if p.startswith(lesson.path + "/")]
        if result is None:
            row.status, row.reasons = status, [reason] if reason else []
        elif result.get("status") != "ok":
            row.status = {"timeout": "TIMEOUT", "crashed": "CRASHED"}.get(str(result.get("status")), "ERROR")
            row.reasons = [str(result.get("reason", ""))]
        elif lesson.path in by_path:
            entry = by_path[lesson.path]
            row.title = str(entry.get("title") or lesson.title)
            _from_lesson(row, entry, pass_line, lesson.path in changed)
        else:
            row.status, row.reasons = "ERROR", ["the lesson is missing from pytest's report"]
        if gone:
            row.reasons.append("not in the submission: " + ", ".join(gone))
        rows.append(row)
    return rows
