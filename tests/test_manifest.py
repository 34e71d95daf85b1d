"""Manifest validation: every message names the file and the field."""

from pathlib import Path

import pytest
from lesson_factory import QUESTIONS, write_lesson

from pytest_hpccourse.grading import manifest


def msg(tmp_path: Path, monkeypatch, **kw) -> str:
    folder = write_lesson(tmp_path, "m/01", "demo-01", **kw)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(manifest.ManifestError) as info:
        manifest.load_lesson(folder)
    return str(info.value)


@pytest.mark.parametrize("old, new, expected", [
    ('rel_tol = 0.01', 'rel_tol = 0', "questions[0].rel_tol: must be a positive number"),
    ('rel_tol = 0.01', 'rel_tol = "x"', "questions[0].rel_tol: must be a positive number"),
    ('rel_tol = 0.01', '', "questions[0].rel_tol: numeric questions need rel_tol or abs_tol"),
    ('answer = 12.0', 'answer = "12"', "questions[0].answer: must be a finite number"),
    ('answer = "B"', 'answer = "D"', "questions[1].answer: names option(s) not listed: D"),
    ('answer = "B"', 'answer = ["A", "B"]', "questions[1].answer: must be one option letter"),
    ('"A. 算力"', '"算力"', "questions[1].options: each option must start with a distinct capital letter"),
    ('answer = "12*n"', 'answer = "12*m"', "questions[2].answer: is not a valid formula: unknown name 'm'"),
    ('variables = ["n"]', 'variables = ["sqrt"]', "questions[2].variables: 'sqrt' is not a usable variable name"),
    ('id = "Q2"', 'id = "Q5"', "questions[1].id: must be 'Q2'"),
    ('kind = "choice"', 'kind = "essay"', "questions[1].kind: must be one of"),
    ('prompt = "瓶颈？"', 'prompt = ""', "questions[1].prompt: must be a non-empty string"),
    ('explanation = "每元素 12 字节。"', 'explanation = "每元素"\nhint = 1', "questions[2].hint: is not a known question field"),
])
def test_question_errors(tmp_path, monkeypatch, old, new, expected):
    assert old in QUESTIONS
    message = msg(tmp_path, monkeypatch, questions=QUESTIONS.replace(old, new, 1))
    assert message.startswith("m/01/lesson.toml: ")
    assert expected in message


def test_lesson_level_errors(tmp_path):
    folder = write_lesson(tmp_path, "m/02", "demo-02", requires='["gpu-magic"]')
    with pytest.raises(manifest.ManifestError, match=r"requires: unknown capability 'gpu-magic'"):
        manifest.load_lesson(folder)
    folder = write_lesson(tmp_path, "m/03", "BadId")
    with pytest.raises(manifest.ManifestError, match="id: must look like"):
        manifest.load_lesson(folder)
    folder = write_lesson(tmp_path, "m/04", "demo-04")
    (folder / "kernel.py").unlink()
    with pytest.raises(manifest.ManifestError, match="files: 'kernel.py' does not exist"):
        manifest.load_lesson(folder)
    folder = write_lesson(tmp_path, "m/05", "demo-05", questions=QUESTIONS.split("[[questions]]\nid = \"Q3\"")[0])
    with pytest.raises(manifest.ManifestError, match="questions: must hold exactly three"):
        manifest.load_lesson(folder)
    folder = write_lesson(tmp_path, "m/06", "demo-06")
    (folder / "lesson.toml").write_text("id = [\n")
    with pytest.raises(manifest.ManifestError, match="invalid TOML"):
        manifest.load_lesson(folder)


def test_mutant_errors(tmp_path):
    bad = '[[mutants]]\nfile = "other.py"\nfind = "x"\nreplace = "y"\nwhy = "z"\n'
    folder = write_lesson(tmp_path, "m/01", "demo-01", extra=bad)
    with pytest.raises(manifest.ManifestError, match=r"mutants\[0\].file: 'other.py' is not one of"):
        manifest.load_lesson(folder)
    bad = '[[mutants]]\nfile = "kernel.py"\nfind = "x"\nreplace = "y"\ncount = 0\nwhy = "z"\n'
    folder = write_lesson(tmp_path, "m/02", "demo-02", extra=bad)
    with pytest.raises(manifest.ManifestError, match=r"mutants\[0\].count: must be a positive integer"):
        manifest.load_lesson(folder)


def test_objective_and_keywords_limits(tmp_path):
    kw = ('[[questions]]\nid = "Q{n}"\nkind = "keywords"\nprompt = "?"\ngroups = [["a"]]\nexplanation = "e"\n\n')
    questions = QUESTIONS.split("[[questions]]\nid = \"Q2\"")[0] + kw.format(n=2) + kw.format(n=3)
    folder = write_lesson(tmp_path, "m/01", "demo-01", questions=questions)
    with pytest.raises(manifest.ManifestError, match="at most one keywords question"):
        manifest.load_lesson(folder)


def test_keys_are_applied(tmp_path):
    stripped = "\n".join(ln for ln in QUESTIONS.splitlines() if not ln.startswith(("answer", "explanation")))
    folder = write_lesson(tmp_path, "m/01", "demo-01", questions=stripped)
    lesson = manifest.load_lesson(folder)
    assert not any(q.has_key for q in lesson.questions)
    keyed = manifest.apply_keys(lesson, {"demo-01": {"Q1": {"answer": 12.0}, "Q2": {"answer": "B"}}})
    assert [q.has_key for q in keyed.questions] == [True, True, False]
    with pytest.raises(manifest.ManifestError, match="answer: names option"):
        manifest.apply_keys(lesson, {"demo-01": {"Q2": {"answer": "Z"}}})


def test_discovery_respects_skips(tmp_path):
    write_lesson(tmp_path, "modules/a/01", "demo-01")
    write_lesson(tmp_path, "fixtures/b/01", "demo-02")
    write_lesson(tmp_path, ".hidden/01", "demo-03")
    found = list(manifest.iter_lesson_dirs([tmp_path], skip=["fixtures"]))
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["modules/a/01"]
    inside = list(manifest.iter_lesson_dirs([tmp_path / "modules/a/01/test_kernel.py"]))
    assert inside == [tmp_path / "modules/a/01"]
