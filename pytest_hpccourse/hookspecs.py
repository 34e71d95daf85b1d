"""Hook specifications of pytest-hpccourse: the course's seams (docs/hooks.md).

pytest recognises a hook implementation only by a `pytest_` name, hence `pytest_hpccourse_*` (as
pytest-xdist names its hooks `pytest_xdist_*`).

They are registered with pytest's own plugin manager (`pytest_addhooks` in plugin.py), so a plugin
implements them with `@pytest.hookimpl` like any pytest hook: an installed `pytest11` plugin, a `-p`
module, or a conftest.py that pytest loads before `pytest_configure` (the rootdir's or one given on the
command line). The built-in capabilities, question kinds and reporters are registered through these
same hooks (`pytest_hpccourse.grading.builtins`), with `trylast=True`, so a plugin's entry of the same
name replaces the built-in one.

This module imports nothing of the package: types are named in strings only.
"""

from __future__ import annotations

from typing import Any

import pytest

hookspec = pytest.hookspec


@hookspec
def pytest_hpccourse_capabilities() -> dict[str, Any]:
    """Capabilities a lesson may `require`: `{name: detector}`, a detector being a no-argument callable
    that returns whether the capability is present on this machine.

    Called once per run in `pytest_configure`, when the run holds lessons; every implementation's dict is
    merged (a plugin's name replaces a built-in one). A detector runs at most once per run, only when a
    lesson asks for its capability; `HPCCOURSE_CAPS_OFF=name,...` turns it off like a built-in one.
    Built-in: `grading.builtins.BuiltinCapabilities` (`grading.capabilities.DETECTORS`)."""


@hookspec
def pytest_hpccourse_question_kinds() -> dict[str, Any]:
    """Question kinds a `lesson.toml` may use: `{kind: grader}`.

    A grader is called `grader(question, value, max_score, rubric) -> grading.answers.Grade` with the
    `grading.manifest.Question`, the learner's answer from `answers.yaml` (present and non-empty: a missing
    key, an empty answer and a missing answer key are handled before the grader is called), the question's
    points and the `grading.rubric.Rubric`. It must not raise on bad learner input. Optional attributes:
    `grader.validate(question) -> str | None` checks the key when the manifest is loaded (a message makes
    the lesson INVALID at `questions[i].answer`), and `grader.objective` (default True) says whether the
    kind counts towards the two objectively graded questions a lesson needs.

    Called once per run in `pytest_configure`, when the run holds lessons; every implementation's dict is
    merged (a plugin's kind replaces a built-in grader; the built-in field validation stays).
    Built-in: `grading.builtins.BuiltinKinds` (`grading.answers.KINDS`: choice, multi, numeric, formula,
    keywords)."""


@hookspec
def pytest_hpccourse_report(course: Any, config: pytest.Config) -> None:
    """Report the graded course: every implementation is called once, when every test has run, in the
    process that holds the results (the xdist controller, never a worker): in `pytest_sessionfinish`, before
    pytest's own summary (a reporter that prints and wants to come after it keeps its lines until then, as
    the built-in table does).

    `course` is the run's `grading.course.Course`: `course.document()` is the `--course-json` document
    (docs/report-json.md), `course.durations()` the code-test seconds per lesson id. A reporter decides
    from `config` (its own options) whether to write anything. Built-in, in call order:
    `grading.builtins.JsonReport` (`--course-json`), `ClassroomReport` (`--course-classroom`) and
    `TerminalReport` (`--course-report`, the table, printed after pytest's summary)."""
