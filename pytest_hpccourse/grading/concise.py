"""Concise learner output: the course report, not pages of tracebacks, is what a graded run shows.

When the run prints the course report (`--course-report` or ini `course_report`) and the user chose no
output detail of their own (`--tb`, `-v`/`--verbose`/`--verbosity`, `-r`, `-l`/`--showlocals`,
`--full-trace`, on the command line, in `addopts` or in `PYTEST_ADDOPTS`), pytest's progress lines stay
but its FAILURES/ERRORS sections, warnings summary and short test summary are left out; the report,
printed after pytest's final counts, says per lesson where points were lost and which command shows
one lesson's tracebacks in full (`pytest <lesson> --tb=long`). Only what the terminal shows changes:
reports, JUnit XML, `--course-json`, Classroom output and exit codes are the same in both modes.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from pathlib import Path

import pytest

# Short options that take a value: letters after them in one token are that value (`-kvec`, `-n2`).
_VALUE_SHORT = frozenset("kmcpoWnr")
_LONG = ("--tb", "--verbose", "--verbosity", "--showlocals", "--full-trace")
MAX_OTHER_FAILURES = 10


def user_chose_output(args: Iterable[str]) -> bool:
    """Whether these command-line tokens set traceback style, verbosity or report characters."""
    for token in args:
        if token == "--":
            break
        if token.startswith("--"):
            if token.split("=", 1)[0] in _LONG:
                return True
            continue
        if not token.startswith("-") or token == "-":
            continue
        for letter in token[1:]:
            if letter in "vrl":
                return True
            if letter in _VALUE_SHORT:
                break
    return False


def _all_args(config: pytest.Config) -> list[str]:
    args = list(config.invocation_params.args)
    args += shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    args += list(config.getini("addopts"))
    return args


def wants_concise(config: pytest.Config) -> bool:
    """Concise output for this run: the report is printed and the user asked for no detail of their own."""
    report = bool(config.getoption("course_report") or config.getini("course_report"))
    return report and not user_chose_output(_all_args(config))


def hide_details(config: pytest.Config) -> None:
    """Leave out pytest's failure sections and summaries (called at session finish, after every report
    was made, so reports and JUnit XML keep their tracebacks)."""
    config.option.tbstyle = "no"
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None:
        terminal.reportchars = ""


def traceback_hint(lesson_dir: Path, invocation_dir: Path) -> str:
    """The command that shows one lesson's tracebacks in full, from where pytest was started."""
    try:
        rel = os.path.relpath(lesson_dir, invocation_dir)
    except ValueError:  # another drive (Windows)
        rel = str(lesson_dir)
    return f"Tracebacks are hidden; one lesson's in full: pytest {shlex.quote(rel)} --tb=long"
