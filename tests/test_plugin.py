"""The plugin end to end, through pytester."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from lesson_factory import QUESTIONS, TEST, write_lesson

pytest_plugins = ("pytester",)


def run_json(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    out = pytester.path / "course.json"
    result = pytester.runpytest("--course-report", "--course-json", str(out), *args)
    return result, json.loads(out.read_text(encoding="utf-8"))


def lesson_of(doc: dict, lesson_id: str) -> dict:
    return next(item for item in doc["lessons"] if item["id"] == lesson_id)


def test_reference_lesson_scores_ten(course):
    write_lesson(course.path, "modules/00-demo/01-add", "demo-01")
    result, doc = run_json(course)
    result.stdout.fnmatch_lines(["*course report*", "demo-01 *向量加法 * 4/4 * 2 * 2 * 2 * 10/10 * PASS",
                                 "Lessons passed: 1/1   Score: 10/10"])
    lesson = lesson_of(doc, "demo-01")
    assert lesson["status"] == "PASS" and lesson["score"] == 10
    assert lesson["path"] == "modules/00-demo/01-add"
    assert {t["outcome"] for t in lesson["code"]["tests"]} == {"passed"}
    assert doc["summary"] == {"lessons": 1, "passed": 1, "failed": 0, "needs": 0, "invalid": 0,
                              "score": 10.0, "max_score": 10.0}


def test_questions_are_items_with_reasons(course):
    write_lesson(course.path, "m/01-add", "demo-01", answers="Q1: 13\nQ2: A\n")
    result = course.runpytest("-v", "-rf")
    result.stdout.fnmatch_lines([
        "*lesson.toml::demo-01::Q1 FAILED*", "*lesson.toml::demo-01::Q2 FAILED*", "*lesson.toml::demo-01::Q3 FAILED*",
        "*Q1: 13 (B) is outside the accepted tolerance*", "*Q3: no answer in answers.yaml*",
    ])


def test_duplicate_basenames_do_not_collide(course):
    write_lesson(course.path, "modules/00-demo/01-add", "demo-01")
    other = TEST.replace("[11, 22, 33]", "[10, 40, 90]")
    write_lesson(course.path, "modules/00-demo/02-mul", "demo-02",
                 kernel="def add(a, b):\n    return [x * y for x, y in zip(a, b)]\n", test=other)
    result, doc = run_json(course)
    assert result.ret == 0, result.stdout.str()
    assert [item["status"] for item in doc["lessons"]] == ["PASS", "PASS"]


def test_points_weight_code_score(course):
    test = TEST.replace("assert kernel.add([], []) == []", "assert kernel.add([1], [1]) == [3]")
    write_lesson(course.path, "m/01", "demo-01", test=test)
    result, doc = run_json(course)
    code = lesson_of(doc, "demo-01")["code"]
    assert code["score"] == 1.0  # 4 * 1 / (1 + 3)
    assert code["status"] == "FAIL"
    assert "test_kernel.py::test_add_empty" in code["message"] and "assert" in code["message"]
    assert lesson_of(doc, "demo-01")["status"] == "FAIL"
    result.stdout.fnmatch_lines(["*demo-01 code: test_kernel.py::test_add_empty: assert*"])


def test_blank_solution_scores_zero(course):
    blank = 'def add(a, b):\n    raise NotImplementedError("TODO(demo-01): add")\n'
    write_lesson(course.path, "m/01", "demo-01", kernel=blank, answers="Q1:\nQ2:\nQ3:\n")
    _, doc = run_json(course)
    lesson = lesson_of(doc, "demo-01")
    assert lesson["score"] == 0 and lesson["status"] == "FAIL"
    assert "NotImplementedError: TODO(demo-01): add" in lesson["code"]["message"]
    assert all("empty" in q["message"] for q in lesson["questions"])


@pytest.mark.parametrize("kernel, reason", [
    ("import sys\ndef add(a, b):\n    sys.exit(3)\n", "SystemExit"),
    ("def add(a, b):\n    raise RuntimeError('kaboom')\n", "kaboom"),
    ("import no_such_module_xyz\ndef add(a, b):\n    return a\n", "No module named 'no_such_module_xyz'"),
    ("def add(a, b)\n    return a\n", "SyntaxError"),
    ("import sys\nsys.exit(0)\n", "SystemExit"),
])
def test_broken_learner_code_costs_code_points_only(course, kernel, reason):
    write_lesson(course.path, "m/01", "demo-01", kernel=kernel)
    write_lesson(course.path, "m/02", "demo-02")
    result, doc = run_json(course)
    broken = lesson_of(doc, "demo-01")
    assert broken["code"]["score"] == 0 and reason in broken["code"]["message"], broken["code"]
    assert broken["score"] == 6 and broken["status"] == "FAIL"
    assert lesson_of(doc, "demo-02")["status"] == "PASS"
    result.stdout.fnmatch_lines(["*course report*"])


def test_hang_is_cut_by_the_timeout(course):
    (course.path / "scoring.toml").write_text(
        (course.path / "scoring.toml").read_text().replace("timeout = 120", "timeout = 1"))
    write_lesson(course.path, "m/01", "demo-01", kernel="def add(a, b):\n    while True:\n        pass\n")
    _, doc = run_json(course)
    code = lesson_of(doc, "demo-01")["code"]
    assert code["score"] == 0 and "Timeout" in code["message"]


def test_uncollectable_test_file(course):
    write_lesson(course.path, "m/01", "demo-01", test="import pytest\ndef test_x(lesson:\n    pass\n")
    write_lesson(course.path, "m/02", "demo-02")
    _, doc = run_json(course)
    broken = lesson_of(doc, "demo-01")
    assert broken["code"]["status"] == "ERROR" and "cannot be collected" in broken["code"]["message"]
    assert broken["score"] == 6
    assert lesson_of(doc, "demo-02")["status"] == "PASS"


def test_missing_capability_reports_needs(course, monkeypatch):
    monkeypatch.setenv("HPCCOURSE_CAPS_OFF", "cuda")
    write_lesson(course.path, "m/01", "demo-01", requires='["cuda"]')
    result, doc = run_json(course)
    lesson = lesson_of(doc, "demo-01")
    assert lesson["status"] == "NEEDS" and lesson["needs"] == ["cuda"]
    assert lesson["code"]["status"] == "NEEDS" and lesson["score"] == 6 and lesson["max_score"] == 6
    assert {t["outcome"] for t in lesson["code"]["tests"]} == {"skipped"}
    result.stdout.fnmatch_lines(["demo-01 * NEEDS * 2 * 2 * 2 * 6/6 * NEEDS cuda"])


def test_per_test_requires_is_optional(course, monkeypatch):
    monkeypatch.setenv("HPCCOURSE_CAPS_OFF", "cuda-gpu")
    test = TEST + "\n@pytest.mark.requires('cuda-gpu')\ndef test_gpu_only(lesson):\n    assert False\n"
    write_lesson(course.path, "m/01", "demo-01", test=test)
    _, doc = run_json(course)
    lesson = lesson_of(doc, "demo-01")
    assert lesson["status"] == "PASS" and lesson["score"] == 10
    skipped = [t for t in lesson["code"]["tests"] if t["outcome"] == "skipped"]
    assert len(skipped) == 1 and "NEEDS cuda-gpu" in skipped[0]["message"]


def test_invalid_manifest_is_reported_and_others_grade(course):
    bad = QUESTIONS.replace("rel_tol = 0.01", "rel_tol = -1")
    write_lesson(course.path, "modules/02-cuda/04-warp-shuffle", "cuda-04", questions=bad)
    write_lesson(course.path, "modules/02-cuda/05-scan", "cuda-05")
    result, doc = run_json(course, "-rf")  # -rf: pytest's short summary too (concise output leaves it out)
    invalid = lesson_of(doc, "cuda-04")
    assert invalid["status"] == "INVALID"
    assert invalid["message"] == ("modules/02-cuda/04-warp-shuffle/lesson.toml: questions[0].rel_tol: "
                                  "must be a positive number")
    assert lesson_of(doc, "cuda-05")["status"] == "PASS"
    assert ("cuda-04: INVALID: modules/02-cuda/04-warp-shuffle/lesson.toml: questions[0].rel_tol: "
            "must be a positive number") in result.stdout.str()
    result.stdout.fnmatch_lines(["FAILED modules/02-cuda/04-warp-shuffle/lesson.toml::cuda-04::manifest*"])


@pytest.mark.parametrize("text, message", [
    (None, "answers.yaml not found"),
    ("Q1: [12\n", "not valid YAML"),
    ("Q1: !!python/object/apply:os.system ['touch pwned']\n", "not valid YAML"),
    ("- 12\n", "must map question ids"),
    ("Q1: ''\nQ2: B\nQ3: n*12\n", "Q1: answer is empty"),
    ("Q1: {a: 1}\nQ2: B\nQ3: n*12\n", "Q1: expected a finite number"),
    ("Q1: 12\nQ2: B\n", "Q3: no answer in answers.yaml"),
])
def test_bad_answer_files_never_crash(course, text, message):
    write_lesson(course.path, "m/01", "demo-01", answers=text)
    _, doc = run_json(course)
    lesson = lesson_of(doc, "demo-01")
    assert lesson["code"]["score"] == 4
    assert any(message in q["message"] for q in lesson["questions"]), lesson["questions"]
    assert not (course.path / "pwned").exists()


def test_missing_scoring_toml_uses_defaults_with_notice(pytester):
    write_lesson(pytester.path, "m/01", "demo-01")
    result, doc = run_json(pytester)
    assert doc["scoring"] == {"code": 4.0, "questions": [2.0, 2.0, 2.0], "pass": 8.0, "total": 10.0}
    result.stdout.fnmatch_lines(["hpccourse: no scoring.toml found*using the default rubric*"])


def test_custom_rubric_changes_pass_line(course):
    (course.path / "scoring.toml").write_text("[points]\ncode = 4\nquestions = [2, 2, 2]\npass = 10\n")
    write_lesson(course.path, "m/01", "demo-01", answers="Q1: 12\nQ2: B\nQ3: n\n")
    _, doc = run_json(course)
    assert lesson_of(doc, "demo-01")["status"] == "FAIL" and doc["scoring"]["pass"] == 10


def test_keys_from_option_env_and_missing(course, monkeypatch, tmp_path):
    stripped = "\n".join(line for line in QUESTIONS.splitlines()
                         if not line.startswith(("answer", "explanation")))
    write_lesson(course.path, "m/01", "demo-01", questions=stripped)
    _, doc = run_json(course)
    lesson = lesson_of(doc, "demo-01")
    assert lesson["status"] == "NEEDS" and lesson["needs"] == ["key"] and lesson["max_score"] == 4
    assert all("NEEDS key" in q["message"] for q in lesson["questions"])

    keys = tmp_path / "keys.toml"
    keys.write_text('["demo-01".Q1]\nanswer = 12.0\n["demo-01".Q2]\nanswer = "B"\n["demo-01".Q3]\nanswer = "12*n"\n')
    _, doc = run_json(course, "--course-keys", str(keys))
    assert lesson_of(doc, "demo-01")["score"] == 10

    monkeypatch.setenv("HPCCOURSE_KEYS", str(keys))
    _, doc = run_json(course)
    assert lesson_of(doc, "demo-01")["score"] == 10

    monkeypatch.delenv("HPCCOURSE_KEYS")
    (course.path / ".hpccourse").mkdir()
    (course.path / ".hpccourse" / "keys.toml").write_text(keys.read_text().replace('"B"', '"A"'))
    _, doc = run_json(course)
    assert lesson_of(doc, "demo-01")["score"] == 8  # the repo's own keys say A
    _, doc = run_json(course, "--course-keys", str(keys))
    assert lesson_of(doc, "demo-01")["score"] == 10  # explicit keys win over the repo's


def test_classroom_output(course, monkeypatch):
    write_lesson(course.path, "m/01", "demo-01")
    write_lesson(course.path, "m/02", "demo-02", answers="Q1: 1\nQ2: A\nQ3: 12*n\n")
    out = course.path / "gh_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    course.runpytest("--course-classroom")
    line = out.read_text().strip()
    assert line.startswith("result=")
    data = json.loads(base64.b64decode(line.removeprefix("result=")))
    assert data["version"] == 1 and data["status"] == "fail" and data["max_score"] == 20
    first, second = data["tests"]
    assert first["name"] == "demo-01 向量加法" and first["status"] == "pass" and first["score"] == 10
    assert second["status"] == "fail" and second["score"] == 6 and "Q1: 1 (B) is outside" in second["message"]
    for test in data["tests"]:
        assert set(test) == {"name", "status", "score", "max_score", "message", "test_code", "filename",
                             "line_no", "execution_time"}


def test_classroom_to_stdout_when_no_github_output(course, monkeypatch):
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    write_lesson(course.path, "m/01", "demo-01")
    result = course.runpytest("--course-classroom")
    line = next(ln for ln in result.outlines if ln.startswith("result="))
    assert json.loads(base64.b64decode(line[7:]))["status"] == "pass"


def test_listed_test_file_with_other_name_is_collected(course):
    folder = write_lesson(course.path, "m/01", "demo-01")
    (folder / "test_kernel.py").rename(folder / "grading.py")
    toml = (folder / "lesson.toml").read_text().replace('tests = ["test_kernel.py"]', 'tests = ["grading.py"]')
    (folder / "lesson.toml").write_text(toml)
    _, doc = run_json(course)
    assert len(lesson_of(doc, "demo-01")["code"]["tests"]) == 2


def test_no_lessons_no_output(pytester):
    pytester.makepyfile(test_plain="def test_x():\n    assert True\n")
    result = pytester.runpytest("--course-report")
    result.assert_outcomes(passed=1)
    assert "course report" not in result.stdout.str()


def test_run_of_one_lesson_reports_only_it(course):
    write_lesson(course.path, "m/01", "demo-01")
    write_lesson(course.path, "m/02", "demo-02")
    _, doc = run_json(course, "m/02")
    assert [item["id"] for item in doc["lessons"]] == ["demo-02"]


def test_ini_course_report(course):
    course.makeini("[pytest]\ncourse_report = true\n")
    write_lesson(course.path, "m/01", "demo-01")
    result = course.runpytest()
    result.stdout.fnmatch_lines(["*course report*"])


def test_xdist_gives_the_identical_report(course):
    pytest.importorskip("xdist")
    write_lesson(course.path, "m/01", "demo-01")
    write_lesson(course.path, "m/02", "demo-02", answers="Q1: 1\nQ2: B\nQ3: 12*n\n")
    write_lesson(course.path, "m/03", "demo-03", kernel="def add(a, b):\n    raise ValueError('no')\n")
    serial_json, parallel_json = course.path / "serial.json", course.path / "parallel.json"
    serial = course.runpytest_subprocess("--course-report", "--course-json", str(serial_json), "-p", "no:randomly")
    parallel = course.runpytest_subprocess("-n", "2", "--course-report", "--course-json", str(parallel_json))

    def table(result: pytest.RunResult) -> list[str]:
        lines = result.outlines
        start = next(i for i, ln in enumerate(lines) if "course report" in ln)
        end = next(i for i, ln in enumerate(lines) if ln.startswith("Lessons passed"))
        return lines[start + 1:end + 1]

    assert table(serial) == table(parallel)

    def scores(path: Path) -> list:
        doc = json.loads(path.read_text())
        for lesson in doc["lessons"]:
            lesson["code"]["tests"] = sorted((t["nodeid"], t["outcome"], t["weight"]) for t in lesson["code"]["tests"])
        return doc

    assert scores(serial_json) == scores(parallel_json)
    assert [item["status"] for item in scores(serial_json)["lessons"]] == ["PASS", "PASS", "FAIL"]


def test_fixture_course_prints_the_table():
    """The README's learner command on the fixture course, as a learner runs it (a subprocess)."""
    import subprocess
    import sys

    course_dir = Path(__file__).parent / "fixtures" / "course"
    proc = subprocess.run([sys.executable, "-m", "pytest", "--course-report", "-p", "no:cacheprovider"],
                          cwd=course_dir, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "demo-01  向量加法   4/4   2   2   2  10/10  PASS" in proc.stdout
    assert "Lessons passed: 1/1   Score: 10/10" in proc.stdout


ENV_PROBE = 'import os\n\ndef test_env():\n    print("INTERPRET=" + os.environ.get("TRITON_INTERPRET", "unset"))\n'


@pytest.mark.parametrize("valid", [True, False])
def test_triton_lessons_get_the_interpreter_without_a_gpu(course, monkeypatch, valid):
    from pytest_hpccourse.grading import capabilities

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    # An invalid manifest (one question short) must not cost the lesson its interpreter.
    questions = QUESTIONS if valid else QUESTIONS[:QUESTIONS.index('[[questions]]\nid = "Q3"')]
    write_lesson(course.path, "m/01", "demo-01", requires='["triton"]', test=ENV_PROBE, questions=questions)
    write_lesson(course.path, "m/02", "demo-02")
    result = course.runpytest_subprocess("-s", "-p", "no:cacheprovider", "--course-report")
    expected = "unset" if capabilities.has_torch_cuda() else "1"
    result.stdout.fnmatch_lines([f"*INTERPRET={expected}*"])
    assert ("INVALID" in result.stdout.str()) == (not valid)  # the manifest really is (in)valid


def test_no_triton_lesson_no_interpreter(course, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    write_lesson(course.path, "m/01", "demo-01", test=ENV_PROBE)
    result = course.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*INTERPRET=unset*"])
