"""pytest hooks of pytest-hpccourse. This module only wires the pieces together.

The course's own seams are hook specifications (hookspecs.py, docs/hooks.md), added to pytest's plugin
manager in `pytest_addhooks` together with the built-in capabilities, question kinds and reporters
(grading/builtins.py), which then go through the same hook calls as a third-party plugin's."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_hpccourse import hookspecs
from pytest_hpccourse.grading import builtins, capabilities, concise, isolate, manifest
from pytest_hpccourse.grading.collect import LessonFile, ManifestItem, QuestionItem
from pytest_hpccourse.grading.course import COURSE_KEY, Course
from pytest_hpccourse.grading.results import PROPERTY, failure_line
from pytest_hpccourse.runtimes.triton import interpreter

pytest_plugins = ("pytest_hpccourse.grading.fixtures",)

LESSON_KEY = pytest.StashKey[Path]()
LESSON_DIRS_KEY = pytest.StashKey[tuple[tuple, list[Path]]]()  # ((paths, ignored), lessons found)


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
    group.addoption("--course-isolate", choices=isolate.MODES, default=None,
                    help="run lesson code tests in a forked process, so a crash costs that test only: auto "
                         "(Triton lessons on the CPU interpreter), on (every fork-safe lesson), off; "
                         "default: ini course_isolate, else auto")
    parser.addini("course_report", type="bool", default=False, help="always print the course report")
    parser.addini("course_isolate", default="auto", help="default for --course-isolate (auto|on|off)")
    parser.addini("course_json", default="", help="default for --course-json")
    parser.addini("course_keys", default="", help="default for --course-keys")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)
    builtins.register(pluginmanager)


_option = builtins.option


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
    config.addinivalue_line("markers", interpreter.MARKER_HELP)
    paths = [Path(str(a).split("::")[0]) for a in config.args]
    lesson_dirs = _lesson_dirs(config, paths, config.getoption("ignore") or ())
    if not lesson_dirs:
        return
    if not _explicit_import_mode(list(config.invocation_params.args)):
        config.option.importmode = "importlib"
    # A lesson whose test file cannot even be imported must not stop the others from grading.
    config.option.continue_on_collection_errors = True
    course = Course(config.rootpath, lesson_dirs, _option(config, "course_keys"),
                    capabilities=capabilities.Capabilities(builtins.merged(config.hook.pytest_hpccourse_capabilities())),
                    kinds=builtins.merged(config.hook.pytest_hpccourse_question_kinds()))
    config.stash[COURSE_KEY] = course
    hooks = CourseHooks(config, course)
    config.pluginmanager.register(hooks, "hpccourse-course")
    isolate.register(config, _option(config, "course_isolate"), hooks.code_test_lesson, course.capabilities.missing)
    # `requires` as written, so a lesson whose manifest does not validate yet still gets the interpreter.
    if any("triton" in r.raw_requires for r in course.results.values()):
        if "TRITON_INTERPRET" not in os.environ and not capabilities.has_torch_cuda():
            os.environ["TRITON_INTERPRET"] = "1"
        from pytest_hpccourse.runtimes.triton import guard
        guard.enable_for_interpreter()  # interpreter only: bounds check + tf32 emulation (its README)
    try:
        from pytest_hpccourse.runtimes.ray import drills  # the Ray fixtures, when that module exists
    except ImportError:
        pass
    else:
        if not config.pluginmanager.is_registered(drills):
            config.pluginmanager.register(drills, "hpccourse-distributed")


class CourseHooks:
    """The hooks that act only when the run holds lessons (registered by pytest_configure)."""

    def __init__(self, config: pytest.Config, course: Course) -> None:
        self.config = config
        self.course = course
        self.concise = concise.wants_concise(config)
        self.other_failures: list[str] = []  # failures outside the lessons, one line each in concise mode

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
            found = self.code_test_lesson(item)
            if found is not None:  # after the timeout marker: the interpreter child gets the test's timeout
                interpreter.redirect(item, found[1], isolate.item_timeout(item))

    def _scoring_lesson(self, path: Path) -> Path | None:
        result = self.course.result_for_path(Path(path))
        if result is None:
            return None
        if result.lesson is not None and Path(path).relative_to(result.dir).as_posix() not in result.lesson.tests:
            return None  # a helper test file the lesson does not list: runs, but is not scored
        return result.dir

    def code_test_lesson(self, item: pytest.Item) -> tuple[Path, list[str]] | None:
        """A scored code test's lesson folder and the capabilities it needs (its lesson's and its own);
        None for any other item."""
        folder = item.stash.get(LESSON_KEY, None)
        if folder is None:
            return None
        result = self.course.result_for(folder)
        requires = list(result.lesson.requires if result.lesson else result.raw_requires)
        return folder, requires + [c for m in item.iter_markers("requires") for c in m.args]

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        # The score properties go on the item before any phase runs, so every report carries them, also
        # one the isolation makes in this process for a test whose forked process crashed.
        folder = item.stash.get(LESSON_KEY, None)
        if folder is not None:
            result = self.course.result_for(folder)
            marker = item.get_closest_marker("points")
            item.user_properties.append((PROPERTY, {
                "lesson": result.id, "dir": result.path,
                "weight": float(marker.args[0]) if marker and marker.args else 1.0,
                "needs": self.course.capabilities.missing(result.lesson.requires if result.lesson else ()),
                "optional_needs": self.course.capabilities.missing(
                    [c for m in item.iter_markers("requires") for c in m.args]),
            }))
        return (yield)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        props = next((value for name, value in item.user_properties if name == PROPERTY), None)
        if props is None:
            return
        if props["needs"]:
            pytest.skip("NEEDS " + ", ".join(props["needs"]))
        if props["optional_needs"]:
            pytest.skip("NEEDS " + ", ".join(props["optional_needs"]) + " (this test only)")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Under xdist this runs in the controller for every worker's report: scores come from reports only.
        self.course.add_report(report)
        if report.failed and not any(name == PROPERTY for name, _ in report.user_properties) \
                and not report.nodeid.split("::")[0].endswith(manifest.FILENAME):
            self.other_failures.append(f"FAILED {report.nodeid} - {failure_line(report)}")

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.course.add_collect_error(report)
            path = report.nodeid.split("::")[0]
            if not path or manifest.lesson_dir_of(self.config.rootpath / path) is None:
                self.other_failures.append(f"ERROR collecting {report.nodeid or '.'} - {failure_line(report)}")

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Any:
        # Outermost wrapper: the reporters (hook pytest_hpccourse_report) run before pytest's own summary; the
        # built-in terminal table keeps its lines until after it (grading/builtins.TerminalReport).
        if _is_worker(self.config):
            return (yield)
        if self.config.getoption("course_classroom"):
            self._mark_tampered()
        self.config.hook.pytest_hpccourse_report(course=self.course, config=self.config)
        if self.concise:
            concise.hide_details(self.config)
        return (yield)

    def _mark_tampered(self) -> None:
        try:
            from pytest_hpccourse.grading import integrity
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
        if self.concise and self.other_failures:  # failures the course report does not list
            shown = self.other_failures[:concise.MAX_OTHER_FAILURES]
            more = len(self.other_failures) - len(shown)
            for line in shown + ([f"... and {more} more failures outside the lessons"] if more else []):
                terminalreporter.write_line(line)
