"""The course's hooks (docs/hooks.md): a third-party capability, question kind and reporter end to end, with
the worked example plugin (tests/example_hooks_plugin.py) copied into a pytester folder and loaded with `-p`."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from lesson_factory import QUESTIONS, write_lesson

from pytest_hpccourse.grading import answers, builtins, capabilities, manifest

pytest_plugins = ("pytester",)

EXAMPLE = Path(__file__).with_name("example_hooks_plugin.py")
REGEX_Q1 = QUESTIONS.replace('''kind = "numeric"
prompt = "多少字节？"
answer = 12.0
rel_tol = 0.01
unit = "B"''', '''kind = "regex"
prompt = "写出 GEMM 的形状（MxNxK）"
answer = '\\d+x\\d+x\\d+\'''')


@pytest.fixture
def plugin_course(course: pytest.Pytester) -> pytest.Pytester:
    """The course folder with the example plugin importable (as `-p example_hooks_plugin`)."""
    (course.path / EXAMPLE.name).write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    course.syspathinsert()
    return course


def regex_lesson(root: Path, answer: str) -> Path:
    return write_lesson(root, "m/01-shape", "demo-01", requires='["fakeaccel"]', questions=REGEX_Q1,
                        answers=f'Q1: "{answer}"\nQ2: B\nQ3: "n*12"\n')


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    out = pytester.path / "course.json"
    result = pytester.runpytest("--course-report", "--course-json", str(out), *args)
    return result, json.loads(out.read_text(encoding="utf-8"))


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize(("answer", "q1", "status"), [("4096x4096x512", 2.0, "PASS"), ("4096 by 4096", 0.0, "PASS")])  # 8 is the pass line
def test_third_party_kind_capability_and_reporter(plugin_course, answer, q1, status):
    regex_lesson(plugin_course.path, answer)
    gradebook = plugin_course.path / "gradebook.csv"
    result, doc = run(plugin_course, "-p", "example_hooks_plugin", "--gradebook-csv", str(gradebook))
    [lesson] = doc["lessons"]
    assert lesson["status"] == status, result.stdout.str()
    assert lesson["needs"] == [] and lesson["code"]["status"] == "PASS"  # fakeaccel detected: not NEEDS
    assert lesson["questions"][0]["kind"] == "regex" and lesson["questions"][0]["score"] == q1
    assert lesson["score"] == 8 + q1
    assert rows(gradebook) == [{"lesson": "demo-01", "status": status, "score": str(8 + q1), "max_score": "10.0",
                                "code": "4.0", "Q1": str(q1), "Q2": "2.0", "Q3": "2.0"}]
    result.stdout.fnmatch_lines(["*course report*", f"demo-01 * 4/4 * {q1:g} * 2 * 2 * {8 + q1:g}/10 * {status}"])
    if q1 == 0:
        result.stdout.fnmatch_lines(["Where points were lost:", "  demo-01 Q1: '4096 by 4096' is not of the expected form"])
    assert result.outlines[-1].startswith("Lessons passed:")  # the built-in table is still the last thing printed


def test_third_party_hooks_under_xdist(course):
    """The example as the rootdir's conftest.py (the workers load it too: they validate the manifests and
    grade the question items), under `-n 2`."""
    course.makeconftest(EXAMPLE.read_text(encoding="utf-8"))
    regex_lesson(course.path, "8x8x8")
    gradebook = course.path / "gradebook.csv"
    result, doc = run(course, "--gradebook-csv", str(gradebook), "-n", "2")
    assert doc["lessons"][0]["status"] == "PASS", result.stdout.str()
    assert [r["score"] for r in rows(gradebook)] == ["10.0"]


def test_without_the_plugin_the_lesson_is_invalid(course):
    regex_lesson(course.path, "8x8x8")
    result, doc = run(course)
    [lesson] = doc["lessons"]
    assert lesson["status"] == "INVALID"
    assert lesson["message"].startswith(
        "m/01-shape/lesson.toml: requires: unknown capability 'fakeaccel' (known: cuda, cuda-gpu, cute")
    result.stdout.fnmatch_lines(["demo-01 * - * INVALID", "*1 INVALID*"])
    # without the capability, the regex question is what the manifest does not know
    write_lesson(course.path, "m/01-shape", "demo-01", questions=REGEX_Q1)
    result, doc = run(course)
    assert doc["lessons"][0]["message"] == ("m/01-shape/lesson.toml: questions[0].kind: must be one of choice, "
                                            "multi, numeric, formula, keywords")


def test_a_plugin_capability_turned_off_is_needs(plugin_course, monkeypatch):
    monkeypatch.setenv("HPCCOURSE_CAPS_OFF", "fakeaccel")
    regex_lesson(plugin_course.path, "8x8x8")
    result, doc = run(plugin_course, "-p", "example_hooks_plugin")
    [lesson] = doc["lessons"]
    assert lesson["status"] == "NEEDS" and lesson["needs"] == ["fakeaccel"], result.stdout.str()
    assert lesson["code"]["message"] == "NEEDS fakeaccel"
    assert [q["score"] for q in lesson["questions"]] == [2.0, 2.0, 2.0]  # the questions still graded


def test_a_plugin_kind_validates_its_key(plugin_course):
    folder = regex_lesson(plugin_course.path, "8x8x8")
    toml = folder / "lesson.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace("answer = '\\d+x\\d+x\\d+'", "answer = '(\\d+'"),
                    encoding="utf-8")
    result, doc = run(plugin_course, "-p", "example_hooks_plugin")
    assert doc["lessons"][0]["message"].startswith(
        "m/01-shape/lesson.toml: questions[0].answer: must be a regular expression (missing ), unterminated"), \
        result.stdout.str()


def test_the_built_ins_come_through_the_hooks(course):
    """The built-in detectors, kinds and reporters are registered plugins, called like a third party's."""
    course.makeconftest('''
        import pytest

        from pytest_hpccourse.grading import answers, capabilities

        @pytest.hookimpl(trylast=True)
        def pytest_configure(config):
            assert config.hook.pytest_hpccourse_capabilities() == [capabilities.DETECTORS]
            assert config.hook.pytest_hpccourse_question_kinds() == [answers.KINDS]
            names = {name for name, _ in config.pluginmanager.list_name_plugin()}
            assert {"hpccourse-capabilities", "hpccourse-kinds", "hpccourse-report-json",
                    "hpccourse-report-classroom", "hpccourse-report-terminal"} <= names
            print("built-ins seen")
    ''')
    write_lesson(course.path, "m/01", "demo-01")
    result = course.runpytest("-s")
    result.stdout.fnmatch_lines(["built-ins seen*"])
    assert result.ret == 0


def test_a_plugin_replaces_a_built_in_of_the_same_name():
    builtin = {"cuda": capabilities.DETECTORS["cuda"], "numpy": capabilities.DETECTORS["numpy"]}

    def plugin_cuda() -> bool:
        return False

    merged = builtins.merged([{"cuda": plugin_cuda}, None, builtin])  # call order: plugins first, built-ins last
    assert merged == {"cuda": plugin_cuda, "numpy": builtin["numpy"]}
    caps = capabilities.Capabilities(merged)
    assert caps.missing(["cuda", "tpu"]) == ["cuda", "tpu"]  # the plugin's detector, and an unknown name


def test_manifest_kinds_outside_pytest_are_the_built_in_ones(tmp_path):
    """`hpccourse check` / `audit` load lessons without a pytest session: the five built-in kinds, and a
    plugin's kind only when given."""
    assert tuple(answers.KINDS) == manifest.KINDS
    folder = regex_lesson(tmp_path, "8x8x8")
    with pytest.raises(manifest.ManifestError, match=r"questions\[0\]\.kind: must be one of choice, multi"):
        manifest.load_lesson(folder, capabilities={"fakeaccel"})
    kinds = {**answers.KINDS, "regex": lambda q, value, max_score, rubric: answers.Grade(max_score, max_score, "PASS")}
    lesson = manifest.load_lesson(folder, kinds=kinds, capabilities={"fakeaccel"})
    assert lesson.questions[0].kind == "regex" and lesson.questions[0].answer == r"\d+x\d+x\d+"
    # a non-objective plugin kind does not count towards the two objective questions
    kinds["regex"].objective = False
    keywords = QUESTIONS.replace('kind = "choice"', 'kind = "keywords"').replace(
        'answer = "B"', 'groups = [["带宽"]]').replace('options = ["A. 算力", "B. 带宽", "C. PCIe"]\n', "")
    write_lesson(tmp_path, "m/01-shape", "demo-01", requires='["fakeaccel"]',
                 questions=keywords.replace(REGEX_SOURCE, REGEX_TARGET))
    with pytest.raises(manifest.ManifestError, match=r"objectively graded \(choice, multi, numeric, formula\)"):
        manifest.load_lesson(folder, kinds=kinds, capabilities={"fakeaccel"})


REGEX_SOURCE = QUESTIONS.split("[[questions]]")[1]
REGEX_TARGET = REGEX_Q1.split("[[questions]]")[1]
