"""The course report: the per-lesson table for the terminal and the JSON document (schema in README)."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any

from .rubric import Rubric

JSON_VERSION = 1


def width(text: str) -> int:
    """Terminal columns `text` takes: East Asian wide and full-width characters count two."""
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 0 if unicodedata.combining(ch) else 1
               for ch in text)


def clip(text: str, columns: int) -> str:
    if width(text) <= columns:
        return text
    out, used = "", 0
    for ch in text:
        w = width(ch)
        if used + w > columns - 1:
            break
        out += ch
        used += w
    return out + "…"


def pad(text: str, columns: int, right: bool = False) -> str:
    fill = " " * max(0, columns - width(text))
    return fill + text if right else text + fill


def num(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def document(lessons: Sequence[dict[str, Any]], rubric: Rubric) -> dict[str, Any]:
    statuses = [lesson["status"] for lesson in lessons]
    return {
        "version": JSON_VERSION,
        "scoring": {"code": rubric.code, "questions": list(rubric.questions), "pass": rubric.pass_score,
                    "total": rubric.total},
        "lessons": list(lessons),
        "summary": {
            "lessons": len(lessons),
            "passed": statuses.count("PASS"),
            "failed": statuses.count("FAIL"),
            "needs": statuses.count("NEEDS"),
            "invalid": statuses.count("INVALID"),
            "score": round(sum(lesson["score"] for lesson in lessons), 2),
            "max_score": round(sum(lesson["max_score"] for lesson in lessons), 2),
        },
    }


def _code_cell(code: dict[str, Any]) -> str:
    if code["status"] == "NEEDS":
        return "NEEDS"
    return f"{num(code['score'])}/{num(code['max_score'])}"


def _question_cell(q: dict[str, Any]) -> str:
    return "NEEDS" if q["status"] == "NEEDS" else num(q["score"])


def lines(doc: dict[str, Any], title_columns: int = 26, hint: str = "") -> list[str]:
    """The table, the reasons for lost points, and the summary, as terminal lines.

    `hint` (how to see one lesson's tracebacks) closes "Where points were lost" when code points were lost.
    """
    header = ["lesson", "title", "code", "Q1", "Q2", "Q3", "total", "status"]
    rows = []
    for lesson in doc["lessons"]:
        qs = [_question_cell(q) for q in lesson["questions"]] or ["-", "-", "-"]
        rows.append([
            lesson["id"], clip(lesson["title"], title_columns),
            "-" if lesson["status"] == "INVALID" else _code_cell(lesson["code"]),
            *qs,
            f"{num(lesson['score'])}/{num(lesson['max_score'])}",
            lesson["status"] + (f" {','.join(lesson['needs'])}" if lesson["needs"] else ""),
        ])
    widths = [max(width(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    right = {2, 3, 4, 5, 6}
    out = ["  ".join(pad(h, widths[i], i in right) for i, h in enumerate(header)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    for row in rows:
        out.append("  ".join(pad(str(c), widths[i], i in right) for i, c in enumerate(row)).rstrip())

    lost = []
    for lesson in doc["lessons"]:
        if lesson["status"] == "INVALID":
            lost.append(f"{lesson['id']}: INVALID: {lesson['message']}")
            continue
        code = lesson["code"]
        if code["status"] != "PASS" and code["message"]:
            lost.append(f"{lesson['id']} code: {code['message']}")
        for q in lesson["questions"]:
            if q["status"] != "PASS" and q["message"]:
                lost.append(f"{lesson['id']} {q['message']}")
    if lost:
        out += ["", "Where points were lost:"]
        out += [f"  {line.splitlines()[0]}" for line in lost]
        if hint and any(lesson["status"] != "INVALID" and lesson["code"]["status"] in ("FAIL", "ERROR")
                        for lesson in doc["lessons"]):
            out.append(f"  {hint}")

    s = doc["summary"]
    extra = []
    if s["needs"]:
        extra.append(f"{s['needs']} NEEDS")
    if s["invalid"]:
        extra.append(f"{s['invalid']} INVALID")
    out += ["", f"Lessons passed: {s['passed']}/{s['lessons']}   Score: {num(s['score'])}/{num(s['max_score'])}"
            + (f"   ({', '.join(extra)})" if extra else "")]
    return out
