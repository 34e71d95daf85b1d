"""A synthetic class for `hpccourse grade-class`: a pristine module and real git repositories of students whose
expected grades are known (tests/test_grade_class.py, benchmarks/grade_class_throughput.py).

The module is the release fixture `00-demo` (demo-01 AXPY, demo-02 scan) plus `03-tensor-core`, a copy of
demo-01 that requires `cuda-gpu` (its code tests run only on a GPU node; on a CPU they are NEEDS). Each student
repository starts, as a GitHub Classroom repository does, with one commit of the released module, followed by the
student's work; every commit is dated in January 2026, except the "late" student's last one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from pytest_hpccourse.authoring import release

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "tests" / "fixtures" / "release" / "modules" / "00-demo"
DEADLINE = "2026-02-01T00:00:00+00:00"
CODE = {"01-axpy": "axpy.py", "02-scan": "scan.py", "03-tensor-core": "axpy.py"}
CPU_LESSONS = ("demo-01", "demo-02")
GPU_LESSON = "demo-03"
MUTANT_CODE = round(4 * 0.5 / 4.5, 2)  # the dropped-last-block mutant passes only test_axpy_empty (0.5 of 4.5)

HANG = '''"""Blocked AXPY that never returns."""

import time

import numpy as np

BLOCK = 256


def axpy(alpha: float, x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
    ### BEGIN SOLUTION
    time.sleep(600)
    ### END SOLUTION
'''
HOG = '''"""Blocked AXPY that first asks for an 8 GiB scratch buffer."""

import numpy as np

BLOCK = 256


def axpy(alpha: float, x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
    ### BEGIN SOLUTION
    scratch = np.ones(2**30)
    out[:] = alpha * x + y + 0 * scratch[0]
    ### END SOLUTION
'''
CHEAT_TEST = "def test_everything_passes():\n    assert True\n"


def make_module(root: Path) -> Path:
    """The pristine module (course source, reference solutions and keys inside): `root/00-demo`."""
    module = root / "00-demo"
    shutil.copytree(DEMO, module)
    shutil.copyfile(REPO / "scoring.toml", root / "scoring.toml")  # the course's rubric, above the module
    gpu = module / "03-tensor-core"
    shutil.copytree(module / "01-axpy", gpu)
    toml = (gpu / "lesson.toml").read_text(encoding="utf-8")
    toml = toml.replace('id = "demo-01"', 'id = "demo-03"').replace('requires = ["numpy"]',
                                                                     'requires = ["numpy", "cuda-gpu"]')
    (gpu / "lesson.toml").write_text(toml.replace("分块 AXPY", "Tensor-core AXPY"), encoding="utf-8")
    return module


def _git(repo: Path, *args: str, date: str = "2026-01-05T12:00:00+00:00") -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "student", "GIT_AUTHOR_EMAIL": "s@example.org",
           "GIT_COMMITTER_NAME": "student", "GIT_COMMITTER_EMAIL": "s@example.org",
           "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def commit_all(repo: Path, message: str, date: str = "2026-01-05T12:00:00+00:00") -> str:
    _git(repo, "add", "-A", date=date)
    _git(repo, "commit", "-q", "--allow-empty", "-m", message, date=date)
    return _git(repo, "rev-parse", "HEAD")


def reference(module: Path, repo: Path, *, code: bool = True, answers: bool = True) -> None:
    for lesson, name in CODE.items():
        if code:
            shutil.copyfile(module / lesson / name, repo / lesson / name)
        if answers:
            shutil.copyfile(module / lesson / "answers.yaml", repo / lesson / "answers.yaml")


def mutant(module: Path, repo: Path) -> None:
    reference(module, repo)
    path = repo / "01-axpy" / "axpy.py"
    path.write_text(path.read_text().replace("range(0, n, BLOCK)", "range(0, n - BLOCK, BLOCK)"))


def tamper(module: Path, repo: Path) -> None:
    """Blank code, reference answers, and a test, a conftest.py and pyproject.toml edited to pass anyway."""
    reference(module, repo, code=False)
    (repo / "01-axpy" / "test_axpy.py").write_text(CHEAT_TEST)
    (repo / "conftest.py").write_text("def pytest_collection_modifyitems(items):\n    items.clear()\n")
    with open(repo / "pyproject.toml", "a") as fh:
        fh.write("\n[tool.pytest.ini_options]\naddopts = '-p no:hpccourse'\n")


def hang(module: Path, repo: Path) -> None:
    reference(module, repo)
    (repo / "01-axpy" / "axpy.py").write_text(HANG)


def hog(module: Path, repo: Path) -> None:
    reference(module, repo)
    (repo / "01-axpy" / "axpy.py").write_text(HOG)


def answers_only(module: Path, repo: Path) -> None:
    reference(module, repo, code=False)


STUDENTS: dict[str, Callable[[Path, Path], None] | None] = {
    "ref": reference, "blank": None, "mutant": mutant, "tamper": tamper, "hang": hang, "hog": hog,
    "answers-only": answers_only,
}
# expected (total, status) of demo-01 and demo-02; demo-03 is NEEDS for all of them on CPU-only nodes
EXPECTED: dict[str, dict[str, tuple[float, str]]] = {
    "ref": {"demo-01": (10.0, "PASS"), "demo-02": (10.0, "PASS")},
    "blank": {"demo-01": (0.0, "FAIL"), "demo-02": (0.0, "FAIL")},
    "mutant": {"demo-01": (6 + MUTANT_CODE, "FAIL"), "demo-02": (10.0, "PASS")},
    "tamper": {"demo-01": (6.0, "FAIL"), "demo-02": (6.0, "FAIL")},
    "hang": {"demo-01": (6.0, "FAIL"), "demo-02": (10.0, "PASS")},
    "hog": {"demo-01": (6.0, "FAIL"), "demo-02": (10.0, "PASS")},
    "answers-only": {"demo-01": (6.0, "FAIL"), "demo-02": (6.0, "FAIL")},
    "late": {"demo-01": (10.0, "PASS"), "demo-02": (10.0, "PASS")},
}
TAMPERED = ["01-axpy/test_axpy.py", "conftest.py", "pyproject.toml"]


def released(module: Path, out: Path) -> Path:
    assert release.main([str(module), "--out", str(out), "--no-keys", "--template", str(REPO / "template-repo")]) == 0
    return out


def make_student(module: Path, blank: Path, repo: Path, work: Callable[[Path, Path], None] | None) -> str:
    """A repository at `repo`: the release as its first commit, then `work` (none: the blank as handed out)."""
    shutil.copytree(blank, repo)
    _git(repo, "init", "-q", "-b", "main")
    commit_all(repo, "Initial commit (release)", "2026-01-02T09:00:00+00:00")
    if work is not None:
        work(module, repo)
        return commit_all(repo, "my work", "2026-01-20T18:00:00+00:00")
    return _git(repo, "rev-parse", "HEAD")


def make_late(module: Path, blank: Path, repo: Path) -> str:
    """Reference work before the deadline, then a commit after it that breaks everything; returns the former."""
    graded = make_student(module, blank, repo, reference)
    for lesson, name in CODE.items():
        shutil.copyfile(blank / lesson / name, repo / lesson / name)
    commit_all(repo, "oops, after the deadline", "2026-02-03T10:00:00+00:00")
    return graded


def make_class(root: Path, students: list[str] | None = None) -> tuple[Path, Path, dict[str, str]]:
    """(pristine module, roster.csv, student -> expected graded commit) under `root`."""
    module = make_module(root / "pristine")
    blank = released(module, root / "release")
    commits = {}
    names = students or [*STUDENTS, "late"]
    lines = ["student,repo"]
    for name in names:
        repo = root / "repos" / name
        commits[name] = (make_late(module, blank, repo) if name == "late"
                         else make_student(module, blank, repo, STUDENTS[name]))
        lines.append(f"{name},{repo}")
    roster = root / "roster.csv"
    roster.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return module, roster, commits


def write_roster(path: Path, root: Path, names: list[str]) -> Path:
    path.write_text("student,repo\n" + "".join(f"{n},{root / 'repos' / n}\n" for n in names), encoding="utf-8")
    return path
