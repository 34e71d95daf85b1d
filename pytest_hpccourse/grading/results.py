"""Turn test reports into lesson scores (DESIGN.md, "The plugin").

Only `TestReport`s (with their `user_properties`) and collection reports feed this, so a serial run
and an xdist run (`-n 2`, where the controller sees only reports) give the same scores. Questions are
graded from `answers.yaml` by the same code everywhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import answers, manifest
from . import rubric as rubric_mod

PROPERTY = "hpccourse"


@dataclass
class TestOutcome:
    nodeid: str
    outcome: str = "passed"      # passed | failed | error | skipped
    weight: float = 1.0
    duration: float = 0.0
    message: str = ""
    needs: tuple[str, ...] = ()  # lesson-level capabilities missing
    optional_needs: tuple[str, ...] = ()


@dataclass
class LessonResult:
    dir: Path
    path: str
    id: str
    title: str = ""
    title_en: str = ""
    lesson: manifest.Lesson | None = None
    raw_requires: tuple[str, ...] = ()  # `requires` as written, even when the manifest is invalid
    rubric: rubric_mod.Rubric = field(default_factory=rubric_mod.Rubric)
    invalid: str = ""
    tests: dict[str, TestOutcome] = field(default_factory=dict)
    collect_errors: list[str] = field(default_factory=list)
    tampered: list[str] = field(default_factory=list)
    grades: list[answers.Grade] = field(default_factory=list)

    # ---- code ---------------------------------------------------------------------------
    def code(self) -> dict[str, Any]:
        r = self.rubric
        # Sorted by node id, so a serial run and an xdist run (reports in any order) say the same.
        tests = sorted(self.tests.values(), key=lambda t: t.nodeid)
        needs = sorted({c for t in tests for c in t.needs})
        ran = [t for t in tests if t.outcome in ("passed", "failed", "error")]
        failed = [t for t in ran if t.outcome != "passed"]
        message = ""
        if self.tampered:
            return self._code(0.0, r.code, "FAIL", "tests modified: " + ", ".join(self.tampered), tests)
        if self.collect_errors:
            return self._code(0.0, r.code, "ERROR", self.collect_errors[0], tests)
        if needs and not ran:
            return self._code(0.0, r.code, "NEEDS", "NEEDS " + ", ".join(needs), tests)
        if not ran:
            return self._code(0.0, r.code, "ERROR", "no code test ran", tests)
        total = sum(t.weight for t in ran)
        passed = sum(t.weight for t in ran if t.outcome == "passed")
        score = round(r.code * passed / total, 2) if total > 0 else 0.0
        if failed:
            first = failed[0]
            message = f"{_short_nodeid(first.nodeid)}: {first.message or first.outcome}"
            if len(failed) > 1:
                message += f" (+{len(failed) - 1} more failing)"
        status = "PASS" if not failed else "FAIL"
        return self._code(score, r.code, status, message, tests)

    @staticmethod
    def _code(score: float, max_score: float, status: str, message: str, tests: list[TestOutcome]) -> dict:
        return {
            "score": score, "max_score": max_score, "status": status, "message": message,
            "tests": [
                {"nodeid": t.nodeid, "outcome": t.outcome, "weight": t.weight,
                 "duration": round(t.duration, 4), "message": t.message}
                for t in tests
            ],
        }

    # ---- whole lesson ---------------------------------------------------------------------
    def grade_questions(self, keys: dict[str, dict[str, dict]] | None, *,
                        kinds: Mapping[str, answers.Grader] | None = None,
                        capabilities: Collection[str] | None = None) -> None:
        """Grade the three questions; `kinds`, `capabilities`: the run's (None: the built-in ones)."""
        if self.lesson is None:
            return
        if keys:
            try:
                self.lesson = manifest.apply_keys(self.lesson, keys, kinds=kinds, capabilities=capabilities)
            except manifest.ManifestError as exc:
                self.invalid = str(exc)
                return
        sheet = answers.read_sheet(self.dir / answers.FILENAME)
        self.grades = []
        for q, max_score in zip(self.lesson.questions, self.rubric.questions):
            if sheet.error and q.has_key:
                self.grades.append(answers.Grade(0.0, max_score, "FAIL", f"{q.id}: {sheet.error}"))
                continue
            present, value = sheet.get(q.id)
            self.grades.append(answers.grade(q, present, value, max_score, rubric=self.rubric, kinds=kinds))

    def to_dict(self) -> dict[str, Any]:
        r = self.rubric
        if self.invalid:
            return {
                "id": self.id, "title": self.title, "title_en": self.title_en, "path": self.path,
                "status": "INVALID", "score": 0.0, "max_score": r.total, "needs": [],
                "message": self.invalid,
                "code": self._code(0.0, r.code, "ERROR", self.invalid, list(self.tests.values())),
                "questions": [],
            }
        code = self.code()
        if self.tampered:
            # Classroom mode: a lesson whose protected files changed scores nothing at all.
            return {
                "id": self.id, "title": self.title, "title_en": self.title_en, "path": self.path,
                "status": "FAIL", "score": 0.0, "max_score": r.total, "needs": [], "message": code["message"],
                "code": code,
                "questions": [{"id": q.id, "kind": q.kind, "score": 0.0, "max_score": m, "status": "FAIL",
                               "message": f"{q.id}: tests modified"}
                              for q, m in zip(self.lesson.questions if self.lesson else (), r.questions)],
            }
        questions = [
            {"id": q.id, "kind": q.kind, "score": g.score, "max_score": g.max_score,
             "status": g.status, "message": g.message}
            for q, g in zip(self.lesson.questions if self.lesson else (), self.grades)
        ]
        needs: list[str] = []
        if code["status"] == "NEEDS":
            needs += sorted({c for t in self.tests.values() for c in t.needs})
        if any(q["status"] == "NEEDS" for q in questions):
            needs.append("key")
        score = round(code["score"] + sum(q["score"] for q in questions), 2)
        max_score = r.total
        if r.exclude_ungradable_from_max:
            max_score -= code["max_score"] if code["status"] == "NEEDS" else 0.0
            max_score -= sum(q["max_score"] for q in questions if q["status"] == "NEEDS")
        if needs:
            status = "NEEDS"
        elif score >= r.pass_score - 1e-9:
            status = "PASS"
        else:
            status = "FAIL"
        return {
            "id": self.id, "title": self.title, "title_en": self.title_en, "path": self.path,
            "status": status, "score": score, "max_score": max_score, "needs": needs,
            "message": "", "code": code, "questions": questions,
        }


def _short_nodeid(nodeid: str) -> str:
    path, sep, rest = nodeid.partition("::")
    return f"{os.path.basename(path)}{sep}{rest}"


def combine(previous: TestOutcome | None, report: Any, props: dict[str, Any]) -> TestOutcome:
    """Fold one phase report (setup / call / teardown) into the test's outcome."""
    outcome = previous or TestOutcome(nodeid=report.nodeid)
    outcome.weight = float(props.get("weight", outcome.weight))
    outcome.needs = tuple(props.get("needs", outcome.needs))
    outcome.optional_needs = tuple(props.get("optional_needs", outcome.optional_needs))
    outcome.duration += float(getattr(report, "duration", 0.0) or 0.0)
    if report.when == "call" and getattr(report, "wasxfail", None) is not None and report.passed:
        # an unexpected pass of a non-strict xfail: the check it guards did not hold
        outcome.outcome, outcome.message = "failed", "XPASS"
        return outcome
    if report.failed:
        if outcome.outcome not in ("failed", "error"):
            outcome.outcome = "failed" if report.when == "call" else "error"
            outcome.message = failure_line(report)
    elif report.skipped and report.when in ("setup", "call") and outcome.outcome == "passed":
        outcome.outcome = "skipped"
        outcome.message = skip_reason(report)
    return outcome


def failure_line(report: Any) -> str:
    """The first line of why a test failed: the exception message pytest would show after `E`."""
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    text = ""
    if crash is not None and getattr(crash, "message", ""):
        text = crash.message
    elif longrepr is not None:
        lines = [ln[1:].strip() for ln in str(longrepr).splitlines() if ln.startswith("E ")]
        text = lines[0] if lines else str(longrepr).strip().splitlines()[-1] if str(longrepr).strip() else ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    located = re.match(r'File "(.+)", line (\d+)', first)
    if located and len(lines) > 1:
        # A SyntaxError-style message: say the error, then where it is.
        first = f"{lines[-1]} ({os.path.basename(located.group(1))}, line {located.group(2)})"
    if report.when != "call":
        first = f"error in {report.when}: {first}"
    return first[:300]


def skip_reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
        return reason.removeprefix("Skipped: ")
    return str(longrepr or "")
