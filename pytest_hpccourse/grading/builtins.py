"""The built-in capabilities, question kinds and reporters, as plugins of the course's hooks
(pytest_hpccourse/hookspecs.py, docs/hooks.md).

`register(pluginmanager)` registers them with pytest's plugin manager (plugin.py does, from
`pytest_addhooks`); they then go through the same hook calls as a third-party plugin. Each is
`trylast=True`, so a plugin's capability or kind of the same name replaces the built-in one (`merged`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from . import answers, capabilities, classroom, concise, report
from .course import Course


def option(config: pytest.Config, name: str) -> Any:
    """A command-line option, falling back to its ini equivalent (`course_json`, `course_keys`, ...)."""
    value = config.getoption(name)
    if value is None:
        value = config.getini(name) or None
    return value


def merged(results: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """One dict from a hook's results (in call order: plugins first, the trylast built-ins last); an entry
    of a result called earlier replaces the same name from one called later."""
    out: dict[str, Any] = {}
    for result in reversed(list(results)):
        out.update(result or {})
    return out


class BuiltinCapabilities:
    @pytest.hookimpl(trylast=True)
    def pytest_hpccourse_capabilities(self) -> dict[str, Any]:
        return dict(capabilities.DETECTORS)


class BuiltinKinds:
    @pytest.hookimpl(trylast=True)
    def pytest_hpccourse_question_kinds(self) -> dict[str, Any]:
        return dict(answers.KINDS)


class JsonReport:
    """`--course-json PATH` (ini `course_json`): the document, docs/report-json.md."""

    @pytest.hookimpl(trylast=True)
    def pytest_hpccourse_report(self, course: Course, config: pytest.Config) -> None:
        json_path = option(config, "course_json")
        if not json_path:
            return
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(course.document(), ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


class ClassroomReport:
    """`--course-classroom`: GitHub Classroom's autograding result in `$GITHUB_OUTPUT` (stdout when unset)."""

    @pytest.hookimpl(trylast=True)
    def pytest_hpccourse_report(self, course: Course, config: pytest.Config) -> None:
        if not config.getoption("course_classroom"):
            return
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        classroom.write(classroom.payload(course.document(), course.durations()),
                        terminal.write_line if terminal is not None else None)


class TerminalReport:
    """`--course-report` (ini `course_report`): the per-lesson table. The hook runs before pytest's own
    summary; the table is kept until after it (this plugin's outer `pytest_sessionfinish` wrapper), so the
    course report is the last thing a run prints."""

    @pytest.hookimpl(trylast=True)
    def pytest_hpccourse_report(self, course: Course, config: pytest.Config) -> None:
        if config.pluginmanager.get_plugin("terminalreporter") is None \
                or not (config.getoption("course_report") or config.getini("course_report")):
            return
        doc = course.document()
        hint = ""
        if concise.wants_concise(config):
            failed = next((le for le in doc["lessons"]
                           if le["status"] != "INVALID" and le["code"]["status"] in ("FAIL", "ERROR")), None)
            if failed is not None:
                folder = course.result_for_rel(failed["path"]).dir
                hint = concise.traceback_hint(folder, config.invocation_params.dir)
        config.stash[_TABLE] = report.lines(doc, hint=hint)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Any:
        result = yield
        lines = session.config.stash.get(_TABLE, None)
        terminal = session.config.pluginmanager.get_plugin("terminalreporter")
        if lines is not None and terminal is not None:
            terminal.section("course report")
            for line in lines:
                terminal.write_line(line)
        return result


_TABLE = pytest.StashKey[list[str]]()  # the table's lines, from the report hook to the end of the run

# Registration order is call order here: pluggy calls `trylast` implementations in the order they were
# registered, after every other one. The reporters run JSON, Classroom, table.
PLUGINS: dict[str, object] = {
    "hpccourse-capabilities": BuiltinCapabilities(),
    "hpccourse-kinds": BuiltinKinds(),
    "hpccourse-report-json": JsonReport(),
    "hpccourse-report-classroom": ClassroomReport(),
    "hpccourse-report-terminal": TerminalReport(),
}


def register(pluginmanager: pytest.PytestPluginManager) -> None:
    """Register the built-in plugins (each once per plugin manager)."""
    for name, plugin in PLUGINS.items():
        if pluginmanager.get_plugin(name) is None:
            pluginmanager.register(plugin, name)
