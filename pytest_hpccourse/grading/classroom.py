"""GitHub Classroom output: one autograding "test" per lesson, base64 JSON in `$GITHUB_OUTPUT`.

The shape is what classroom-resources/autograding-grading-reporter reads from `<STEP_ID>_RESULTS`.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def payload(doc: dict[str, Any], durations: dict[str, float] | None = None) -> dict[str, Any]:
    durations = durations or {}
    tests = []
    for lesson in doc["lessons"]:
        reasons = []
        if lesson["status"] == "INVALID":
            reasons.append(lesson["message"])
        else:
            if lesson["code"]["status"] != "PASS" and lesson["code"]["message"]:
                reasons.append("code: " + lesson["code"]["message"])
            reasons += [q["message"] for q in lesson["questions"] if q["status"] != "PASS" and q["message"]]
        tests.append({
            "name": f"{lesson['id']} {lesson['title']}",
            # INVALID is "fail" too: for "error" tests the reporter prints only the message, not the name.
            "status": "pass" if lesson["status"] == "PASS" else "fail",
            "score": lesson["score"],
            "max_score": doc["scoring"]["total"],
            "message": f"{lesson['status']} {lesson['score']:g}/{doc['scoring']['total']:g}"
                       + ("; " + "; ".join(r.splitlines()[0] for r in reasons) if reasons else ""),
            "test_code": f"pytest {lesson['path']} --course-report",
            "filename": lesson["path"],
            "line_no": 0,
            "execution_time": f"{durations.get(lesson['id'], 0.0):.2f}s",
        })
    statuses = {t["status"] for t in tests}
    status = "error" if not tests else ("fail" if "fail" in statuses else "pass")
    return {"version": 1, "status": status, "max_score": sum(t["max_score"] for t in tests), "tests": tests}


def encode(data: dict[str, Any]) -> str:
    return base64.b64encode(json.dumps(data, ensure_ascii=False).encode("utf-8")).decode("ascii")


def write(data: dict[str, Any], echo: Callable[[str], None] | None = None) -> str:
    """Append `result=<base64>` to $GITHUB_OUTPUT, or `echo` it (default: stdout) when unset."""
    line = f"result={encode(data)}"
    target = os.environ.get("GITHUB_OUTPUT")
    if target:
        with Path(target).open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        return target
    (echo or (lambda text: print(text, flush=True)))(line)
    return "stdout"
