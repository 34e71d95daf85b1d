"""Process isolation (`--course-isolate`): a crash of learner code costs its lesson, never the run."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from lesson_factory import TEST, crashing_kernel, write_lesson

from pytest_hpccourse.grading import capabilities, isolate

pytest_plugins = ("pytester",)

SEGFAULT = "os.kill(os.getpid(), signal.SIGSEGV)"


def run(course: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict | None, list[dict] | None]:
    """pytest in a subprocess (a crash there must not take this test run with it): result, JSON, Classroom."""
    out, gh = course.path / "course.json", course.path / "gh_output"
    out.unlink(missing_ok=True)
    gh.unlink(missing_ok=True)
    result = course.runpytest_subprocess("-p", "no:cacheprovider", "--course-report", "--course-json", str(out),
                                         "--course-classroom", *args)
    doc = json.loads(out.read_text(encoding="utf-8")) if out.exists() else None
    tests = None
    if gh.exists():
        line = gh.read_text(encoding="utf-8").strip()
        tests = json.loads(base64.b64decode(line.removeprefix("result=")))["tests"]
    return result, doc, tests


def lesson_of(doc: dict, lesson_id: str) -> dict:
    return next(item for item in doc["lessons"] if item["id"] == lesson_id)


@pytest.fixture
def gh_output(course: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = course.path / "gh_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(path))
    return path


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_segfault_costs_only_its_lesson(course, gh_output, xdist):
    if xdist:
        pytest.importorskip("xdist")
    write_lesson(course.path, "m/01-crash", "demo-01", kernel=crashing_kernel(SEGFAULT))
    write_lesson(course.path, "m/02-add", "demo-02")
    result, doc, classroom = run(course, "--course-isolate=on", *(["-n", "2"] if xdist else []))
    assert result.ret == 1, result.stdout.str()
    assert result.outlines[-1] == "Lessons passed: 1/2   Score: 16/20"  # the report is printed, and last
    crashed = lesson_of(doc, "demo-01")
    assert crashed["code"]["score"] == 0 and crashed["score"] == 6 and crashed["status"] == "FAIL"
    assert {t["message"] for t in crashed["code"]["tests"]} == {"crashed: SIGSEGV (signal 11)"}
    assert "crashed: SIGSEGV (signal 11)" in result.stdout.str()
    assert lesson_of(doc, "demo-02")["status"] == "PASS" and lesson_of(doc, "demo-02")["score"] == 10
    assert [(t["name"][:7], t["score"]) for t in classroom] == [("demo-01", 6.0), ("demo-02", 10.0)]
    assert "SIGSEGV" in classroom[0]["message"]


def test_without_isolation_the_same_crash_loses_the_whole_run(course, gh_output):
    """What the isolation prevents: a crash in the pytest process itself leaves no report at all."""
    write_lesson(course.path, "m/01-crash", "demo-01", kernel=crashing_kernel(SEGFAULT))
    write_lesson(course.path, "m/02-add", "demo-02")
    result, doc, classroom = run(course, "--course-isolate=off")
    assert result.ret not in (0, 1) and doc is None and classroom is None
    assert "Lessons passed" not in result.stdout.str()


@pytest.mark.parametrize("body, message", [
    ("os.abort()", "crashed: SIGABRT (signal 6)"),
    ("os._exit(3)", "crashed: the test process exited with status 3 before the test finished"),
])
def test_other_ways_to_die_are_named(course, gh_output, body, message):
    write_lesson(course.path, "m/01-crash", "demo-01", kernel=crashing_kernel(body))
    write_lesson(course.path, "m/02-add", "demo-02")
    _, doc, _ = run(course, "--course-isolate=on")
    assert lesson_of(doc, "demo-01")["code"]["message"] == f"test_kernel.py::test_add: {message} (+1 more failing)"
    assert lesson_of(doc, "demo-02")["status"] == "PASS"


def test_auto_isolates_triton_lessons_on_the_interpreter(course, gh_output, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    if not capabilities.available("triton") or capabilities.has_torch_cuda():
        pytest.skip("auto isolates Triton lessons only where Triton runs through its CPU interpreter")
    write_lesson(course.path, "m/01-crash", "demo-01", requires='["triton"]', kernel=crashing_kernel(SEGFAULT))
    write_lesson(course.path, "m/02-add", "demo-02")
    result, doc, _ = run(course)  # no option: auto
    assert lesson_of(doc, "demo-01")["code"]["score"] == 0
    assert "crashed: SIGSEGV (signal 11)" in lesson_of(doc, "demo-01")["code"]["message"]
    assert lesson_of(doc, "demo-02")["status"] == "PASS"
    assert result.outlines[-1].startswith("Lessons passed: 1/2")


@pytest.mark.parametrize("body, message", [
    # Python code: pytest-timeout's SIGALRM ends it inside the child, as without isolation
    ("time.sleep(60)", "Failed: Timeout (>1.0s)"),
    # native code that never returns to Python (SIGALRM blocked): the parent kills the child
    ("signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM}); time.sleep(60)",
     "Timeout (>1.0s): the test did not stop and its process was killed"),
])
def test_a_hung_child_cannot_hang_the_run(course, gh_output, body, message):
    scoring = course.path / "scoring.toml"
    scoring.write_text(scoring.read_text().replace("timeout = 120", "timeout = 1"))
    test = TEST.split("@pytest.mark.points(3)")[0]  # one test: one hang
    write_lesson(course.path, "m/01-hang", "demo-01", kernel=crashing_kernel(body), test=test)
    write_lesson(course.path, "m/02-add", "demo-02")
    _, doc, _ = run(course, "--course-isolate=on")
    code = lesson_of(doc, "demo-01")["code"]
    assert code["score"] == 0 and code["message"].startswith(f"test_kernel.py::test_add: {message}"), code
    assert lesson_of(doc, "demo-02")["status"] == "PASS"


FIXTURE_TESTS = '''
import pytest

LOG = __import__("pathlib").Path(__file__).parent.parent / "fixture.log"

@pytest.fixture(scope="module")
def table():
    with LOG.open("a") as fh:
        fh.write("setup\\n")
    yield {"n": 3}
    with LOG.open("a") as fh:
        fh.write("teardown\\n")

def test_a(lesson, table):
    assert lesson.load("kernel.py").add([table["n"]], [1]) == [4]

def test_b(lesson, table):
    assert lesson.load("kernel.py").add([1], [table["n"]]) == [4]

def test_c_prints_then_fails(lesson, table):
    print("the learner's debug line")
    assert lesson.load("kernel.py").add([1], [1]) == [3]
'''


def test_isolated_tests_share_module_fixtures_and_keep_output(course):
    write_lesson(course.path, "m/01-add", "demo-01", test=FIXTURE_TESTS)
    result = course.runpytest_subprocess("-p", "no:cacheprovider", "--course-isolate=on", "--tb=short",
                                         "--course-report")
    # one child per lesson: the module fixture is set up once, and torn down in that child
    assert (course.path / "m" / "fixture.log").read_text().split() == ["setup", "teardown"]
    result.stdout.fnmatch_lines(["E   assert ?2? == ?3?", "*Captured stdout call*", "the learner's debug line",
                                 "demo-01 * 2.67/4 *"])


def test_isolated_and_in_process_runs_grade_alike(course):
    write_lesson(course.path, "m/01", "demo-01")
    write_lesson(course.path, "m/02", "demo-02", kernel="def add(a, b):\n    raise ValueError('no')\n")
    docs = []
    for i, args in enumerate([("--course-isolate=on",), ("--course-isolate=off",),
                              ("--course-isolate=on", "-p", "no:timeout")]):  # no pytest-timeout: no watchdog
        out = course.path / f"{i}.json"
        result = course.runpytest_subprocess("-p", "no:cacheprovider", "--course-json", str(out), *args)
        assert result.ret == 1 and "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
        doc = json.loads(out.read_text())
        for lesson in doc["lessons"]:
            lesson["code"]["tests"] = [(t["nodeid"], t["outcome"], t["message"]) for t in lesson["code"]["tests"]]
        docs.append(doc)
    assert docs[0] == docs[1] == docs[2]
    assert [lesson["status"] for lesson in docs[0]["lessons"]] == ["PASS", "FAIL"]


def test_bad_isolate_mode_is_a_usage_error(course):
    write_lesson(course.path, "m/01", "demo-01")
    course.makeini("[pytest]\ncourse_isolate = sometimes\n")
    result = course.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--course-isolate: expected one of auto, on, off, got 'sometimes'*"])


@pytest.mark.parametrize("mode, requires, interpreter, gpu, expected", [
    ("auto", ["triton"], True, False, True),
    ("auto", ["triton"], False, False, False),   # compiled Triton: a GPU run
    ("auto", ["torch"], True, False, False),     # auto covers only the interpreter's native writes
    ("on", ["torch"], False, False, True),
    ("on", ["numpy"], False, True, True),        # nothing that touches the GPU
    ("on", ["torch"], False, True, False),       # never fork a process that may hold a CUDA context
    ("on", ["cuda"], False, True, False),
    ("on", ["ray", "torch"], False, False, False),  # the session's Ray cluster belongs to the parent
    ("off", ["triton"], True, False, False),
])
def test_which_tests_are_isolated(mode, requires, interpreter, gpu, expected):
    assert isolate.wants_isolation(mode, requires, interpreter=interpreter, gpu=lambda: gpu) is expected
