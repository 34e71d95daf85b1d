"""Concise learner output (issue 11): a released module's first run is a short screen ending with the report."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from lesson_factory import write_lesson, write_module

from pytest_hpccourse.authoring import release
from pytest_hpccourse.grading import concise

pytest_plugins = ("pytester",)

REPO = Path(__file__).resolve().parent.parent
LESSONS, CASES = 8, 20  # 160 failing code tests on the blanks: thousands of traceback lines unless condensed


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh release of a module whose blanks fail every code test and whose answers are empty."""
    root = tmp_path_factory.mktemp("course")
    module = write_module(root, "00-big", LESSONS, CASES)
    out = root / "rel"
    release.release_module(module, out, template=REPO / "template-repo", scoring=REPO / "scoring.toml")
    return out


def pytest_in(folder: Path, *args: str) -> tuple[int, list[str]]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=folder,
                          capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, (proc.stdout + proc.stderr).splitlines()


def test_fresh_release_prints_a_short_run_ending_with_the_report(released):
    code, lines = pytest_in(released, "--course-report", "--junitxml=concise.xml")
    assert code == 1
    assert len(lines) <= 150, "\n".join(lines)
    assert lines[-1] == f"Lessons passed: 0/{LESSONS}   Score: 0/{10 * LESSONS}"
    start = next(i for i, line in enumerate(lines) if "course report" in line)
    assert re.fullmatch(r"=+ \d+ failed in [\d.]+s =+", lines[start - 1]), lines[start - 1]  # pytest's counts
    before = lines[:start]
    assert not any("NotImplementedError" in line or line.startswith("FAILED") for line in before)
    assert "  Tracebacks are hidden; one lesson's in full: pytest 01-add --tb=long" in lines
    assert f"  big-01 code: test_kernel.py::test_add_many[0]: NotImplementedError: TODO(big-01): write this part " \
           f"(+{CASES - 1} more failing)" in lines

    # Only the terminal changed: the JUnit XML of a run with pytest's default output is the same.
    code_full, full = pytest_in(released, "--course-report", "--tb=auto", "--junitxml=full.xml")
    assert code_full == code and len(full) > 1000  # what the learner would have scrolled through

    def junit(name: str) -> str:
        text = (released / name).read_text(encoding="utf-8")
        return re.sub(r' (time|timestamp|hostname)="[^"]*"', "", text)

    assert junit("concise.xml") == junit("full.xml")
    assert "raise NotImplementedError" in junit("concise.xml")  # reports keep their tracebacks


def test_tb_long_prints_one_lessons_tracebacks(released):
    code, lines = pytest_in(released, "01-add", "--tb=long", "--course-report")
    text = "\n".join(lines)
    assert code == 1
    assert "FAILURES" in text and text.count('raise NotImplementedError("TODO(big-01): write this part")') >= CASES
    assert lines[-1] == "Lessons passed: 0/1   Score: 0/10"
    assert "Tracebacks are hidden" not in text


def test_verbose_is_left_as_asked(released):
    _, lines = pytest_in(released, "01-add", "-v", "--course-report")
    assert sum(" FAILED " in line for line in lines) >= CASES
    assert any(line.startswith("FAILED 01-add/test_kernel.py::test_add_many[0]") for line in lines)  # -r default


def test_json_and_exit_code_do_not_depend_on_the_output_mode(released):
    docs = []
    for extra in ((), ("--tb=long", "-rA")):
        out = released / f"doc{len(docs)}.json"
        code, _ = pytest_in(released, "02-add", "--course-report", "--course-json", str(out), *extra)
        assert code == 1
        doc = json.loads(out.read_text(encoding="utf-8"))
        for lesson in doc["lessons"]:
            for test in lesson["code"]["tests"]:
                test.pop("duration")
        docs.append(doc)
    assert docs[0] == docs[1]


def test_failures_outside_lessons_get_one_line_each(course):
    write_lesson(course.path, "m/01", "demo-01")
    course.makepyfile(test_helper="def test_helper():\n    assert 1 == 2, 'helper broke'\n",
                      test_broken="import no_such_module_xyz\n")
    result = course.runpytest("--course-report", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["ERROR collecting test_broken.py - *No module named 'no_such_module_xyz'*",
                                 "FAILED test_helper.py::test_helper - AssertionError: helper broke*",
                                 "*1 failed, 5 passed, 1 error*", "*course report*"])
    assert "def test_helper" not in result.stdout.str()  # no traceback
    assert result.outlines[-1] == "Lessons passed: 1/1   Score: 10/10"


def test_no_report_no_change(course):
    """Without --course-report, pytest's output is untouched: the reasons would be nowhere else."""
    write_lesson(course.path, "m/01", "demo-01", kernel="def add(a, b):\n    raise ValueError('no')\n")
    result = course.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*FAILURES*", "*raise ValueError('no')*", "FAILED m/01/test_kernel.py::test_add*"])


@pytest.mark.parametrize("args, chosen", [
    ([], False),
    (["--course-report", "-q", "-x", "-s", "-p", "no:cacheprovider", "-n", "2"], False),
    (["-kvector", "-m", "not slow", "-W", "error", "-pno:randomly", "-n2"], False),  # values, not flags
    (["--tb=long"], True), (["--tb", "no"], True), (["-v"], True), (["-xvs"], True), (["-vv"], True),
    (["--verbosity=2"], True), (["-rA"], True), (["-r", "fE"], True), (["-l"], True), (["--full-trace"], True),
    (["--", "-v"], False),
])
def test_which_options_are_the_users_own(args, chosen):
    assert concise.user_chose_output(args) is chosen
