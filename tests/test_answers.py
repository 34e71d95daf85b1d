from pathlib import Path

import pytest

from pytest_hpccourse.grading import answers
from pytest_hpccourse.grading.manifest import Question

CHOICE = Question(id="Q1", kind="choice", prompt="?", answer="B", options=("A. x", "B. y", "C. z"))
MULTI = Question(id="Q2", kind="multi", prompt="?", answer=["A", "C"], options=("A. x", "B. y", "C. z"))
NUMERIC = Question(id="Q1", kind="numeric", prompt="?", answer=14.0, rel_tol=0.01, unit="GiB")
ABS = Question(id="Q1", kind="numeric", prompt="?", answer=0.0, abs_tol=0.5)
FORMULA = Question(id="Q3", kind="formula", prompt="?", answer="16*psi/N", variables=("psi", "N"), rel_tol=1e-6)
KEYWORDS = Question(id="Q3", kind="keywords", prompt="?", groups=(("reduce-scatter", "规约散射"), ("all-gather", "全收集")))


def g(q, value, present=True, **kw):
    return answers.grade(q, present, value, 2.0, **kw)


@pytest.mark.parametrize("value", ["B", "b", " B ", "B.", "(B)", "B)", "b、"])
def test_choice_letters_are_normalised(value):
    assert g(CHOICE, value).score == 2.0


@pytest.mark.parametrize("value, msg", [("A", "not the right option"), ("D", "not one of the options"),
                                         ("BC", "one option letter"), (2, "one option letter"),
                                         (["B"], "one option letter")])
def test_choice_wrong(value, msg):
    grade = g(CHOICE, value)
    assert grade.score == 0 and msg in grade.message


@pytest.mark.parametrize("value", [["A", "C"], ["c", "a"], "A,C", "A, C", "a c", "AC", "C，A", ["A", "C", "A"]])
def test_multi_forms(value):
    assert g(MULTI, value).score == 2.0


@pytest.mark.parametrize("value", [["A"], ["A", "B", "C"], "B", "A,B"])
def test_multi_all_or_nothing(value):
    assert g(MULTI, value).score == 0


def test_multi_unknown_letter():
    assert "not among the options" in g(MULTI, "A,C,Z").message


@pytest.mark.parametrize("value", [14, 14.0, "14", "1.4e1", " 14.1 ", 13.9])
def test_numeric_accepts(value):
    assert g(NUMERIC, value).score == 2.0


@pytest.mark.parametrize("value, msg", [
    (15, "outside"), ("nan", "finite number"), (float("nan"), "finite number"), (float("inf"), "finite number"),
    ("inf", "finite number"), (True, "finite number"), ("14 GiB", "finite number"), ([14], "finite number"),
    ({"a": 1}, "finite number"),
])
def test_numeric_rejects(value, msg):
    grade = g(NUMERIC, value)
    assert grade.score == 0 and msg in grade.message


def test_numeric_absolute_tolerance():
    assert g(ABS, 0.4).score == 2.0 and g(ABS, -0.6).score == 0


def test_formula_equivalent_and_wrong_type():
    assert g(FORMULA, "psi*16/N").score == 2.0
    assert g(FORMULA, "psi*12/N").score == 0
    assert "as text" in g(FORMULA, ["16*psi/N"]).message
    assert "rejected" in g(FORMULA, "__import__('os')").message


def test_keywords_partial_and_cap():
    assert g(KEYWORDS, "先 Reduce Scatter 再 all-gather").score == 2.0
    assert g(KEYWORDS, "先做规约散射").score == 1.0
    assert g(KEYWORDS, "nothing relevant").score == 0
    long = "reduce-scatter all-gather " + "x" * 600
    grade = g(KEYWORDS, long)
    assert grade.score == 0 and "cap" in grade.message
    assert g(KEYWORDS, "reduce-scatter all-gather", keywords_max_chars=10).score == 0
    assert "text" in g(KEYWORDS, 42).message


@pytest.mark.parametrize("value", [None, "", "   ", []])
def test_empty_answers(value):
    grade = g(NUMERIC, value)
    assert grade.score == 0 and "empty" in grade.message


def test_missing_answer():
    assert "no answer" in g(NUMERIC, None, present=False).message


def test_missing_key_is_needs():
    grade = g(Question(id="Q1", kind="numeric", prompt="?", rel_tol=0.1), 3)
    assert grade.status == "NEEDS" and grade.score == 0 and "NEEDS key" in grade.message


@pytest.mark.parametrize("text, msg", [
    ("Q1: [1, 2\n", "not valid YAML"),
    ("Q1: !!python/object/apply:os.system ['echo pwned']\n", "not valid YAML"),
    ("- 1\n- 2\n", "must map question ids"),
    ("just text\n", "must map question ids"),
])
def test_bad_sheets(tmp_path: Path, text, msg):
    path = tmp_path / "answers.yaml"
    path.write_text(text, encoding="utf-8")
    sheet = answers.read_sheet(path)
    assert msg in sheet.error


def test_missing_sheet(tmp_path: Path):
    assert "not found" in answers.read_sheet(tmp_path / "answers.yaml").error


def test_sheet_ids_case_insensitive(tmp_path: Path):
    path = tmp_path / "answers.yaml"
    path.write_text("q1: 3\nQ2: B\n", encoding="utf-8")
    sheet = answers.read_sheet(path)
    assert sheet.get("Q1") == (True, 3) and sheet.get("Q3") == (False, None)
