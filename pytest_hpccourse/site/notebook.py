"""`hpccourse notebook`: one lesson as a Jupyter notebook.

    hpccourse notebook LESSON_DIR -o lesson.ipynb [--edition learner|reference]

The lesson text becomes Markdown cells (one per `##` section), each code file a `%%writefile` cell
(the released blank, or the reference in the reference edition), the questions a Markdown cell and
an `answers.yaml` cell, and the last cell runs the lesson's tests with the course report. Opened in
the lesson's folder of a module repo, running all cells writes the files back and grades them.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_hpccourse.authoring import release
from pytest_hpccourse.grading import manifest, rubric

from . import sitepages

RUN_CELL = "!python -m pytest . --course-report"


def _sections(readme: str) -> list[str]:
    """The lesson text split before each `## ` heading (outside code fences)."""
    chunks: list[list[str]] = [[]]
    in_fence = False
    for line in readme.splitlines():
        if re.match(r"^\s*(```|~~~)", line):
            in_fence = not in_fence
        if not in_fence and line.startswith("## ") and any(s.strip() for s in chunks[-1]):
            chunks.append([])
        chunks[-1].append(line)
    return ["\n".join(c).strip() for c in chunks if any(s.strip() for s in c)]


def build(folder: Path, edition: str = "learner") -> Any:  # an nbformat.NotebookNode (imported lazily)
    """The notebook of the lesson in `folder` (nbformat v4)."""
    import nbformat.v4 as nbf

    if edition not in sitepages.EDITIONS:
        raise ValueError(f"edition must be one of {sitepages.EDITIONS}, not {edition!r}")
    src = sitepages.read_lesson(folder, folder.parent.name)
    lesson = src.lesson
    cells = [nbf.new_markdown_cell(text) for text in _sections(src.readme or f"# {lesson.id} {lesson.title}")]
    cells.append(nbf.new_markdown_cell(
        "## 代码任务\n\n把这个 notebook 放进模块仓库里这一课的文件夹（`" + src.slug + "/`）再运行："
        "每个代码单元用 `%%writefile` 把内容写回对应文件。补全 `TODO(" + lesson.id + ")` 的部分。"))
    for f in src.code:
        code = f.reference if edition == "reference" else f.blank
        cells.append(nbf.new_code_cell(f"%%writefile {f.name}\n{code.rstrip()}\n"))
    points = rubric.load(folder).questions
    questions = "\n\n".join(sitepages.question_md(q, points[i] if i < len(points) else 0, "learner")
                            for i, q in enumerate(lesson.questions))
    cells.append(nbf.new_markdown_cell("## 题目\n\n在下面的 `answers.yaml` 单元里作答。\n\n" + questions))
    if edition == "reference":
        answers = (folder / "answers.yaml").read_text(encoding="utf-8")
    else:
        answers = release.answers_template(manifest.read_raw(folder))
    cells.append(nbf.new_code_cell(f"%%writefile answers.yaml\n{answers.rstrip()}\n"))
    cells.append(nbf.new_markdown_cell("## 评分\n\n运行这一课的测试并打印课程报告（代码 + 三道题）。"))
    cells.append(nbf.new_code_cell(RUN_CELL))
    nb = nbf.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata["hpccourse"] = {"lesson": lesson.id, "edition": edition}
    return nb


def write(folder: Path, out: Path, edition: str = "learner") -> None:
    import nbformat

    nb = build(folder, edition)
    nbformat.validate(nb)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(nbformat.writes(nb), encoding="utf-8")


def main(args: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hpccourse notebook", description="Write one lesson as a Jupyter notebook.")
    parser.add_argument("lesson", type=Path, help="the lesson folder (holds lesson.toml)")
    parser.add_argument("-o", "--out", type=Path, help="the .ipynb to write (default: <lesson id>.ipynb)")
    parser.add_argument("--edition", choices=sitepages.EDITIONS, default="learner",
                        help="learner: the released blank and an empty answers.yaml (default); "
                             "reference: the reference code and answers")
    ns = parser.parse_args(args)
    try:
        lesson = manifest.load_lesson(ns.lesson)
        out = ns.out or Path(f"{lesson.id}.ipynb")
        write(ns.lesson, out, ns.edition)
    except (manifest.ManifestError, OSError, ValueError) as exc:
        print(f"hpccourse notebook: {exc}", file=sys.stderr)
        return 1
    except ImportError:
        print("hpccourse notebook: needs nbformat (pip install 'pytest-hpccourse[site]')", file=sys.stderr)
        return 1
    print(f"wrote {out} ({ns.edition} edition)")
    return 0
