"""Build small lessons on disk for the plugin's own tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

QUESTIONS = '''
[[questions]]
id = "Q1"
kind = "numeric"
prompt = "多少字节？"
answer = 12.0
rel_tol = 0.01
unit = "B"
explanation = "读 8 写 4。"

[[questions]]
id = "Q2"
kind = "choice"
prompt = "瓶颈？"
options = ["A. 算力", "B. 带宽", "C. PCIe"]
answer = "B"
explanation = "算术强度低。"

[[questions]]
id = "Q3"
kind = "formula"
prompt = "n 个元素的字节数？"
variables = ["n"]
answer = "12*n"
explanation = "每元素 12 字节。"
'''

KERNEL = '''
def add(a, b):
    ### BEGIN SOLUTION
    return [x + y for x, y in zip(a, b)]
    ### END SOLUTION
'''

TEST = '''
import pytest

def test_add(lesson):
    kernel = lesson.load("kernel.py")
    assert kernel.add([1, 2, 3], [10, 20, 30]) == [11, 22, 33]

@pytest.mark.points(3)
def test_add_empty(lesson):
    kernel = lesson.load("kernel.py")
    assert kernel.add([], []) == []
'''

ANSWERS = 'Q1: 12\nQ2: B\nQ3: "n*12"\n'


def write_lesson(root: Path, rel: str, lesson_id: str, *, title: str = "向量加法", requires: str = "[]",
                 kernel: str = KERNEL, test: str = TEST, answers: str | None = ANSWERS,
                 questions: str = QUESTIONS, extra: str = "") -> Path:
    folder = root / rel
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "lesson.toml").write_text(textwrap.dedent(f'''\
        id = "{lesson_id}"
        title = "{title}"
        title_en = "Vector add"
        requires = {requires}
        files = ["kernel.py"]
        tests = ["test_kernel.py"]
        {extra}
        ''') + questions, encoding="utf-8")
    (folder / "kernel.py").write_text(textwrap.dedent(kernel), encoding="utf-8")
    (folder / "test_kernel.py").write_text(textwrap.dedent(test), encoding="utf-8")
    if answers is not None:
        (folder / "answers.yaml").write_text(answers, encoding="utf-8")
    return folder


def crashing_kernel(body: str) -> str:
    """A learner kernel whose solution region runs `body` (one statement) instead of adding."""
    return ("import os\nimport signal\nimport time\n\n\ndef add(a, b):\n    ### BEGIN SOLUTION\n"
            f"    {body}\n    return [x + y for x, y in zip(a, b)]\n    ### END SOLUTION\n")


MANY_CASES_TEST = '''
import pytest

@pytest.mark.parametrize("n", range({cases}))
def test_add_many(lesson, n):
    kernel = lesson.load("kernel.py")
    assert kernel.add([n, 1], [2, n]) == [n + 2, n + 1]
'''


def write_module(root: Path, name: str, lessons: int, cases: int) -> Path:
    """A releasable module `root/modules/<name>` of `lessons` lessons, each with `cases` code tests."""
    module = root / "modules" / name
    module.mkdir(parents=True, exist_ok=True)
    (module / "README.md").write_text(f"# {name}\n\nRun: `pytest --course-report`\n", encoding="utf-8")
    (module / "pyproject.toml").write_text(textwrap.dedent(f'''\
        [build-system]
        requires = ["setuptools>=77"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "hpccourse-{name}"
        version = "0.1.0"
        requires-python = ">=3.11"
        dependencies = ["pytest-hpccourse"]

        [tool.setuptools]
        packages = []
        '''), encoding="utf-8")
    prefix = name.split("-", 1)[1]
    for index in range(1, lessons + 1):
        folder = write_lesson(module, f"{index:02d}-add", f"{prefix}-{index:02d}",
                              test=MANY_CASES_TEST.format(cases=cases))
        (folder / "README.md").write_text("# 向量加法\n\n逐元素相加。\n", encoding="utf-8")
    return module
