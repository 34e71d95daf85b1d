"""Questions their own lesson text answers: `giveaways.py`'s three forms, each refused by `hpccourse check`."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from lesson_factory import write_lesson

from pytest_hpccourse.authoring import check, giveaways
from pytest_hpccourse.grading import manifest

CHOICE = '''
[[questions]]
id = "Q1"
kind = "numeric"
prompt = "多少次？"
answer = {key}
rel_tol = 0.001
unit = "次"
explanation = "推导。"

[[questions]]
id = "Q2"
kind = "multi"
prompt = "哪些正确？"
options = [
  "A. 每个 warp 的 lane 0 把部分和写进 shared memory，之后只需一次 barrier。",
  "B. atomicAdd 的到达顺序固定，因此浮点结果逐位可复现。",
  "C. 4 B",
]
answer = ["A", "C"]
explanation = "推导。"

[[questions]]
id = "Q3"
kind = "formula"
prompt = "n 个元素的字节数？"
variables = ["n"]
answer = "12*n"
explanation = "每元素 12 字节。"
'''


def lesson_with(tmp_path: Path, readme: str, key: str = "3069") -> Path:
    folder = write_lesson(tmp_path, "modules/00-demo/01-x", "demo-01", questions=CHOICE.format(key=key),
                          answers=f'Q1: {key}\nQ2: [A, C]\nQ3: "12*n"\n')
    (folder / "README.md").write_text(readme, encoding="utf-8")
    return folder


def reasons(folder: Path) -> list[str]:
    return giveaways.giveaway_reasons(manifest.load_lesson(folder))


@pytest.mark.parametrize("text", ["（Q1）", "(Q2)", "（见 Q3）", "（Q1、Q2）", "（Q1：每读 2 B 只做约 8 FLOP）",
                                  "（cuda-09 Q3）", "( Q2 的算例 )"])
def test_question_tags_are_found(text: str):
    assert giveaways.TAG.search(f"树形归约的访问次数{text}在这里算出。")


@pytest.mark.parametrize("text", ["(QPS)", "(Q4)", "（Q12）", "（FAQ1）", "Q1 的答案写在 answers.yaml", "(SQ1 队列)"])
def test_other_brackets_and_bare_ids_are_not_tags(text: str):
    assert not giveaways.TAG.search(text)


def test_any_bracket_holding_a_question_id_counts_even_a_quarter():
    # the rule cannot tell a question id from a fiscal quarter: write "2024 年第一季度" in lesson text
    assert giveaways.TAG.search("（2024 Q1 财报）之外")


@pytest.mark.parametrize("numeral,digits", [("71.25", 4), ("0.125", 3), ("1024", 4), ("32", 2), ("2.0", 1),
                                             ("3000", 1), ("0.767", 3), ("270336", 6), ("1,024", 4), ("-8.36", 3)])
def test_significant_digits(numeral: str, digits: int):
    assert giveaways.significant_digits(numeral) == digits


def test_numeral_forms_cover_roundings_and_separators():
    forms = giveaways.numeral_forms(255.7)
    assert {"255.7", "256", "255.70", "255.700"} <= set(forms)
    assert "1,234,567" in giveaways.numeral_forms(1234567.0)
    assert "71.3" in giveaways.numeral_forms(71.25) and "71.2" in giveaways.numeral_forms(71.25)  # half-up, half-even
    assert giveaways.numeral_forms(32.0) == [] and giveaways.numeral_forms(2.5) == []  # too few digits: exempt
    assert "0.13" not in giveaways.numeral_forms(0.125)  # a rounding that drops below three digits is not a form
    assert giveaways.numeral_forms(1e-7) == []


@pytest.mark.parametrize("readme,flagged", [
    ("树形阶段一共 3069 次访问。", True),
    ("树形阶段一共 3,069 次访问。", True),
    ("树形阶段一共 13069 次访问。", False),
    ("用了 0.3069 ms。", False),
    ("大约 3.069e3 次。", False),  # exponent forms are not searched
])
def test_a_printed_numeric_key_is_refused(tmp_path: Path, readme: str, flagged: bool):
    found = [r for r in reasons(lesson_with(tmp_path, readme)) if "numeric key" in r]
    assert bool(found) == flagged, found
    if flagged:
        assert found[0].startswith("Q1: its numeric key 3069 is printed in README.md:1")


def test_a_rounded_key_is_refused(tmp_path: Path):
    [reason] = reasons(lesson_with(tmp_path, "实测带宽约 255.70 GB/s。", key="255.704"))
    assert "printed in README.md:1 as '255.70'" in reason


def test_a_keyed_option_printed_verbatim_is_refused_but_not_a_distractor_or_a_short_option(tmp_path: Path):
    readme = ("每个 warp 的 lane 0 把部分和写进 shared memory —— 之后只需一次 barrier！\n"  # key A, other punctuation
              "atomicAdd 的到达顺序固定，因此浮点结果逐位可复现。\n"  # distractor B: fine
              "每个元素 4 B。\n")  # key C is too short to count
    found = reasons(lesson_with(tmp_path, readme))
    assert len(found) == 1 and found[0].startswith("Q2: the text of its keyed option A is printed verbatim")


def test_tags_are_reported_with_their_line(tmp_path: Path):
    found = reasons(lesson_with(tmp_path, "# 标题\n\n只需一次 barrier（Q2）。\n"))
    assert found == ["README.md:3 tags a question with '（Q2）': a tag points at the sentence that answers it; "
                     "remove the tag (and make the question one the text does not answer)"]


def test_check_static_refuses_a_giveaway_and_passes_a_clean_readme(tmp_path: Path):
    folder = lesson_with(tmp_path, "树形阶段一共 3069 次访问（Q1）。\n")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = check.main([str(folder), "--static", "-j", "1"])
    out = buf.getvalue()
    assert rc == 1 and "UNSOUND: README.md:1 tags a question with '（Q1）'" in out
    assert "UNSOUND: Q1: its numeric key 3069 is printed in README.md:1" in out
    (folder / "README.md").write_text("树形阶段每步有一半线程空闲。\n", encoding="utf-8")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = check.main([str(folder), "--static", "-j", "1"])
    out = buf.getvalue()  # other static rules (no mutants, a long keyed option) still speak; the giveaways do not
    assert "tags a question" not in out and "numeric key" not in out and "printed verbatim" not in out


def test_every_lesson_of_the_course_passes():
    lessons = [manifest.load_lesson(d) for d in manifest.iter_lesson_dirs([Path(__file__).parents[1] / "modules"])]
    found = {lesson.id: r for lesson in lessons if (r := giveaways.giveaway_reasons(lesson))}
    assert not found
