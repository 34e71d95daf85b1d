"""`hpccourse new`: a scaffolded lesson validates, is sound apart from its placeholders."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from pytest_hpccourse.authoring import check, scaffold
from pytest_hpccourse.authoring.regions import blank, find_regions
from pytest_hpccourse.grading import manifest

REPO = Path(__file__).resolve().parent.parent
SECTIONS = ("## 概念", "## 为什么重要（生产环境）", "## 任务", "## 提示", "## 延伸阅读")


@pytest.fixture
def course(tmp_path: Path) -> Path:
    shutil.copyfile(REPO / "scoring.toml", tmp_path / "scoring.toml")
    (tmp_path / "modules").mkdir()
    return tmp_path


def test_new_python_lesson(course: Path, capsys):
    module = course / "modules" / "02-cuda"
    assert scaffold.main([str(module), "04-warp-shuffle"]) == 0
    folder = module / "04-warp-shuffle"
    assert sorted(p.name for p in folder.iterdir()) == \
           ["README.md", "answers.yaml", "kernel.py", "lesson.toml", "test_kernel.py"]
    lesson = manifest.load_lesson(folder)
    assert lesson.id == "cuda-04" and lesson.files == ("kernel.py",) and lesson.tests == ("test_kernel.py",)
    assert [q.kind for q in lesson.questions] == ["numeric", "choice", "formula"]
    assert len(lesson.mutants) == 1
    code = (folder / "kernel.py").read_text(encoding="utf-8")
    assert len(find_regions(code, "kernel.py")) == 1
    mutant = lesson.mutants[0]
    assert code.count(mutant.find) == mutant.count
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert all(section in readme for section in SECTIONS)
    assert (module / "pyproject.toml").is_file() and (module / "README.md").is_file()
    out = capsys.readouterr().out
    assert "created" in out and "cuda-04" in out and "pyproject.toml" in out


def test_new_cuda_lesson(course: Path):
    module = course / "modules" / "02-cuda"
    folder = scaffold.scaffold(module, "05-scan", lang="cu")
    lesson = manifest.load_lesson(folder)
    assert lesson.files == ("kernel.cu",) and lesson.requires == ("cuda",)
    code = (folder / "kernel.cu").read_text(encoding="utf-8")
    blanked = blank(code, "kernel.cu", lesson.id)
    assert "// TODO(cuda-05): n need not be a multiple of the block size" in blanked
    assert "out[i] = alpha * x[i]" not in blanked and blanked.rstrip().endswith("}")
    assert code.count(lesson.mutants[0].find) == 1


def test_ids_and_folder_numbers(course: Path):
    module = course / "modules" / "09-train-advanced"
    first = scaffold.scaffold(module, "zero-bubble", lid="train-06")
    assert first.name == "01-zero-bubble" and manifest.read_id(first) == "train-06"
    second = scaffold.scaffold(module, "sequence-parallel")
    assert second.name == "02-sequence-parallel" and manifest.read_id(second) == "train-07"
    assert scaffold.lesson_id(course / "modules" / "05-mlir", "03-pass") == "mlir-03"


@pytest.mark.parametrize("args, message", [
    (["02-cuda", "Bad Slug"], "lower-case"),
    (["02-cuda", "03-z", "--id", "CUDA1"], "a lesson id looks like"),
    (["02-cuda", "01-x"], "already exists"),
    (["02-cuda", "02-y", "--id", "cuda-01"], "already used"),
])
def test_errors(course: Path, capsys, args, message):
    scaffold.scaffold(course / "modules" / "02-cuda", "01-x")
    args[0] = str(course / "modules" / args[0])
    assert scaffold.main(args) == 2
    assert message in capsys.readouterr().err


def test_scaffold_is_sound_once_the_placeholders_are_replaced(course: Path):
    module = course / "modules" / "07-infer"
    folder = scaffold.scaffold(module, "01-paged-kv", lid="infer-01")
    runner = check.Runner(timeout=300, threads=1)
    res = check.check_lesson(folder, runner, "x", course)
    assert res.verdict == "UNSOUND"
    assert all(check.PLACEHOLDER in r for r in res.reasons), res.reasons
    assert (res.reference, res.blank, res.caught) == ("10/10", "0/10", "1/1")
    for p in [*folder.iterdir(), module / "pyproject.toml", module / "README.md"]:
        p.write_text(p.read_text(encoding="utf-8").replace(check.PLACEHOLDER, "draft"), encoding="utf-8")
    assert tomllib.loads((folder / "lesson.toml").read_text(encoding="utf-8"))["id"] == "infer-01"
    res = check.check_lesson(folder, runner, "x", course)
    assert res.verdict == "SOUND", res.reasons
