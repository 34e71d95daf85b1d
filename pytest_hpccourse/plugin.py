"""pytest hooks of pytest-hpccourse. This module only wires the pieces together."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from . import capabilities, classroom, manifest, report
from .collect import LessonFile, ManifestItem, QuestionItem
from .course import Course
from .results import PROPERTY

pytest_plugins = ("pytest_hpccourse.fixtures",)

COURSE_KEY = pytest.StashKey[Course]()
LESSON_KEY = pytest.StashKey[Path]()
LESSON_DIRS_KEY = pytest.StashKey[tuple[tuple, list[Path]]]()  # ((paths, ignored), lessons found)


def course_of(config: pytest.Config) -> Course | None:
    return config.stash.get(COURSE_KEY, None)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hpccourse", "course grading (pytest-hpccourse)")
    group.addoption("--course-report", action="store_true", default=None,
                    help="print the per-lesson score table at the end of the run")
    group.addoption("--course-json", metavar="PATH", default=None,
                    help="write the course report as JSON to PATH")
    group.addoption("--course-classroom", action="store_true", default=None,
                    help="write GitHub Classroom's autograding result to $GITHUB_OUTPUT (stdout when unset)")
    group.addoption("--course-keys", metavar="PATH", default=None,
                    help="answer keys file (else $HPCCOURSE_KEYS, else the repo's .hpccourse/keys.toml)")
    parser.addini("course_report", type="bool", default=False, help="always print the course report")
    parser.addini("course_json", default="", help="default for --course-json")
    parser.addini("course_keys", default="", help="default for --course-keys")


def _option(config: pytest.Config, name: str) -> Any:
    """A command-line option, falling back to its ini equivalent (`course_json`, `course_keys`)."""
    value = config.getoption(name)
    if value is None:
        value = config.getini(name) or None
    return value


def _explicit_import_mode(args: list[str]) -> bool:
    return any(a == "--import-mode" or a.startswith("--import-mode=") for a in args)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    # Lessons reuse file names (kernel.py, test_kernel.py): importlib mode tolerates duplicate basenames.
    namespace = early_config.known_args_namespace
    paths = [Path(p.split("::")[0]) for p in (namespace.file_or_dir or [])] or [Path.cwd()]
    if _explicit_import_mode(args + early_config.getini("addopts")):
        return
    if _lesson_dirs(early_config, paths, namespace.ignore or ()):
        namespace.importmode = "importlib"


def _lesson_dirs(config: pytest.Config, paths: list[Path], ignore: Any) -> list[Path]:
    """The lesson folders at or below `paths`; the walk is done once per run for the same paths."""
    existing = tuple(p.resolve() for p in paths if p.exists())
    key = (existing, tuple(str(i) for i in ignore))
    cached = config.stash.get(LESSON_DIRS_KEY, None)
    if cached is not None and cached[0] == key:
        return cached[1]
    found = list(manifest.iter_lesson_dirs(existing, config.getini("norecursedirs"), ignore))
    config.stash[LESSON_DIRS_KEY] = (key, found)
    return found


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "points(n): weight of this code test in its lesson's code score (default 1)")
    config.addinivalue_line("markers", "requires(*capabilities): this test needs these capabilities on top of "
                                       "its lesson's `requires`; skipped as NEEDS without them")
    paths = [Path(str(a).split("::")[0]) for a in config.args]
    lesson_dirs = _lesson_dirs(config, paths, config.getoption("ignore") or ())
    if not lesson_dirs:
        return
    if not _explicit_import_mode(list(config.invocation_params.args)):
        config.option.importmode = "importlib"
    # A lesson whose test file cannot even be imported must not stop the others from grading.
    config.option.continue_on_collection_errors = True
    course = Course(config.rootpath, lesson_dirs, _option(config, "course_keys"))
    config.stash[COURSE_KEY] = course
    config.pluginmanager.register(CourseHooks(config, course), "hpccourse-course")
    # `requires` as written, so a lesson whose manifest does not validate yet still gets the interpreter.
    if any("triton" in r.raw_requires for r in course.results.values()):
        if "TRITON_INTERPRET" not in os.environ and not capabilities.has_torch_cuda():
            os.environ["TRITON_INTERPRET"] = "1"
    try:
        import pytest_hpccourse.distributed as distributed  # the Ray fixtures, when that module exists
    except ImportError:
        pass
    else:
        if not config.pluginmanager.is_registered(distributed):
            config.pluginmanager.register(distributed, "hpccourse-distributed")


class CourseHooks:
    """The hooks that act only when the run holds lessons (registered by pytest_configure)."""

    def __init__(self, config: pytest.Config, course: Course) -> None:
        self.config = config
        self.course = course

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if file_path.name == manifest.FILENAME:
            return LessonFile.from_parent(parent, path=file_path)
        if file_path.suffix == ".py":
            # A test file a lesson lists but that python_files would not match is still collected.
            folder = manifest.lesson_dir_of(file_path)
            if folder is None:
                return None
            result = self.course.result_for(folder)
            listed = result.lesson.tests if result.lesson else ()
            patterns = self.config.getini("python_files")
            if file_path.relative_to(folder).as_posix() in listed and not any(file_path.match(p) for p in patterns):
                return pytest.Module.from_parent(parent, path=file_path)
        return None

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        timeout_plugin = self.config.pluginmanager.hasplugin("timeout")
        default_timeout = timeout_plugin and not self.config.getoption("timeout", None) \
            and not self.config.getini("timeout")
        scored: dict[Path, Path | None] = {}  # test file -> its lesson folder when the lesson lists it
        for item in items:
            if isinstance(item, (QuestionItem, ManifestItem)):
                continue
            if item.path not in scored:
                scored[item.path] = self._scoring_lesson(item.path)
            folder = scored[item.path]
            if folder is None:
                continue
            result = self.course.result_for(folder)
            item.stash[LESSON_KEY] = folder
            if default_timeout and item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(result.rubric.timeout))

    def _scoring_lesson(self, path: Path) -> Path | None:
        result = self.course.result_for_path(Path(path))
        if result is None:
            return None
        if result.lesson is not None and Path(path).relative_to(result.dir).as_posix() not in result.lesson.tests:
            return None  # a helper test file the lesson does not list: runs, but is not scored
        return result.dir

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        folder = item.stash.get(LESSON_KEY, None)
        if folder is None:
            return
        result = self.course.result_for(folder)
        marker = item.get_closest_marker("points")
        weight = float(marker.args[0]) if marker and marker.args else 1.0
        lesson_needs = capabilities.missing(result.lesson.requires if result.lesson else ())
        optional_needs = capabilities.missing([c for m in item.iter_markers("requires") for c in m.args])
        item.user_properties.append((PROPERTY, {
            "lesson": result.id, "dir": result.path, "weight": weight,
            "needs": lesson_needs, "optional_needs": optional_needs,
        }))
        if lesson_needs:
            pytest.skip("NEEDS " + ", ".join(lesson_needs))
        if optional_needs:
            pytest.skip("NEEDS " + ", ".join(optional_needs) + " (this test only)")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Under xdist this runs in the controller for every worker's report: scores come from reports only.
        self.course.add_report(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.course.add_collect_error(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if _is_worker(self.config):
            return
        classroom_mode = self.config.getoption("course_classroom")
        if classroom_mode:
            self._mark_tampered()
        json_path = _option(self.config, "course_json")
        if not json_path and not classroom_mode:
            return  # nothing to write; the terminal report builds the document itself
        doc = self.course.document()
        if json_path:
            path = Path(json_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        if classroom_mode:
            terminal = self.config.pluginmanager.get_plugin("terminalreporter")
            classroom.write(classroom.payload(doc, self.course.durations()),
                            terminal.write_line if terminal is not None else None)

    def _mark_tampered(self) -> None:
        try:
            from . import integrity
        except ImportError:
            return
        root = integrity.find_repo_root(self.config.rootpath)
        if root is not None:
            self.course.mark_tampered(integrity.modified_protected_files(root), root)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if _is_worker(self.config):
            return
        for notice in self.course.notices:
            terminalreporter.write_line(notice)
        if self.config.getoption("course_report") or self.config.getini("course_report"):
            terminalreporter.section("course report")
            for line in report.lines(self.course.document()):
                terminalreporter.write_line(line)
