"""`@pytest.mark.interpreter` (pytest_hpccourse/runtimes/triton/interpreter.py): on a GPU box a marked Triton test runs through the
guarded interpreter in a child pytest. No GPU here: HPCCOURSE_INTERPRET_SUBPROCESS=1 forces that path."""

from __future__ import annotations

import json

import pytest
from lesson_factory import write_lesson

from pytest_hpccourse.grading import capabilities
from pytest_hpccourse.runtimes.triton import interpreter

pytest_plugins = ("pytester",)
pytest.importorskip("triton")
pytest.importorskip("torch")

KERNEL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    ### BEGIN SOLUTION
    x = tl.load(x_ptr + offs{load_mask})
    ### END SOLUTION
    tl.store(out_ptr + offs, 2 * x, mask=mask)


def scale(x):
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
    return out
'''

# Each test and the setup hook append {"where", "test", "pid", "timeout", "cuda"} to $PROBE: the setup hook
# runs in the process that owns the item (parent, and child too), the body where the test really runs;
# "timeout" is the one pytest-timeout applies (the closest marker, else --timeout).
CONFTEST = '''
import json, os


def record(where, item):
    marker = item.get_closest_marker("timeout")
    with open(os.environ["PROBE"], "a") as f:
        f.write(json.dumps({"where": where, "test": item.name, "pid": os.getpid(),
                            "timeout": marker.args[0] if marker else item.config.getoption("timeout", None),
                            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}) + "\\n")


def pytest_runtest_setup(item):
    record("setup", item)
'''

TEST = '''
import pytest
import torch
from conftest import record


@pytest.mark.interpreter
def test_scale_marked(lesson, request):
    record("body", request.node)
    x = torch.randn(1000)[:100]  # a view inside a larger buffer: an unmasked load reads valid memory
    torch.testing.assert_close(lesson.load("kernel.py").scale(x), 2 * x)


def test_unmarked(lesson, request):
    record("body", request.node)
'''

SKIP_TEST = '''

@pytest.mark.interpreter
def test_skips_in_the_child(request):
    record("body", request.node)
    pytest.skip("NEEDS nothing-here")
'''


def _setup(course: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *, bad: bool) -> None:
    (course.path / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    monkeypatch.setenv("PROBE", str(course.path / "probe.jsonl"))
    write_lesson(course.path, "m/01-bad", "demo-01", requires='["triton"]',
                 kernel=KERNEL.format(load_mask="" if bad else ", mask=mask"), test=TEST)
    write_lesson(course.path, "m/02-good", "demo-02", requires='["triton"]',
                 kernel=KERNEL.format(load_mask=", mask=mask"), test=TEST + SKIP_TEST)


def _run(course: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict, list[dict]]:
    out = course.path / "course.json"
    result = course.runpytest_subprocess("-p", "no:cacheprovider", "--course-isolate=off", "--course-json",
                                         str(out), "m", *args)
    probe = course.path / "probe.jsonl"
    records = [json.loads(line) for line in probe.read_text(encoding="utf-8").splitlines()] if probe.exists() else []
    return result, json.loads(out.read_text(encoding="utf-8")), records


def _tests(doc: dict, lesson_id: str) -> dict[str, dict]:
    lesson = next(le for le in doc["lessons"] if le["id"] == lesson_id)
    return {t["nodeid"].split("::")[-1]: t for t in lesson["code"]["tests"]}


def test_subprocess_path_grades_by_the_interpreter_run(course, monkeypatch):
    _setup(course, monkeypatch, bad=True)
    monkeypatch.setenv(interpreter.FORCE_ENV, "1")
    result, doc, records = _run(course)
    bad, good = _tests(doc, "demo-01"), _tests(doc, "demo-02")
    # the missing load mask fails the marked test with the guard's message, from the child
    assert bad["test_scale_marked"]["outcome"] == "failed"
    message = bad["test_scale_marked"]["message"]
    assert "in the Triton interpreter (memory-safety run): TritonOutOfBoundsError: load of 4 B" in message
    assert "past the end of argument 'x_ptr'" in message
    assert "TritonOutOfBoundsError" in result.stdout.str()  # the child's output is in the long report
    # a correct kernel passes; a child's skip is the parent's skip
    assert good["test_scale_marked"]["outcome"] == "passed"
    skipped = good["test_skips_in_the_child"]
    assert (skipped["outcome"], skipped["message"]) == ("skipped", "NEEDS nothing-here")
    assert bad["test_unmarked"]["outcome"] == good["test_unmarked"]["outcome"] == "passed"

    parent = {r["pid"] for r in records if r["where"] == "setup" and r["timeout"] == 120 + interpreter.STARTUP}
    assert len(parent) == 1  # the marked items' timeout was raised for the child's start-up, in one process
    for r in records:
        if r["where"] != "body":
            continue
        if r["test"] == "test_unmarked":  # untouched: runs in the parent, CUDA as it was
            assert r["pid"] in parent and r["timeout"] == 120, r
        else:  # in a child: CUDA hidden, the test's own timeout
            assert r["pid"] not in parent and r["cuda"] == "" and r["timeout"] == 120, r
    assert sorted(r["test"] for r in records if r["where"] == "body") == [
        "test_scale_marked", "test_scale_marked", "test_skips_in_the_child", "test_unmarked", "test_unmarked"]


def test_marker_changes_nothing_where_the_interpreter_is_on(course, monkeypatch):
    if capabilities.has_torch_cuda():
        pytest.skip("a GPU is visible: the marker takes the subprocess path here")
    monkeypatch.delenv(interpreter.FORCE_ENV, raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    _setup(course, monkeypatch, bad=True)
    result, doc, records = _run(course, "-k", "marked and not unmarked")
    bad = _tests(doc, "demo-01")["test_scale_marked"]
    assert bad["outcome"] == "failed" and bad["message"].startswith("pytest_hpccourse.runtimes.triton.guard"), bad
    assert "memory-safety run" not in result.stdout.str()
    assert {r["pid"] for r in records} == {records[0]["pid"]}  # setup and body in the one pytest process
    assert {r["timeout"] for r in records} == {120}


def test_outcome_from_the_child_report() -> None:
    doc = {"lessons": [{"code": {"status": "ERROR", "message": "test_k.py: cannot be collected: SyntaxError",
                                 "tests": []}}]}
    assert interpreter._outcome(doc, "m/x::t") == ("failed", "test_k.py: cannot be collected: SyntaxError")
    assert interpreter._outcome(None, "m/x::t") == (None, "")
    one = {"lessons": [{"code": {"tests": [{"nodeid": "other::t", "outcome": "error", "message": "error in setup"}]}}]}
    assert interpreter._outcome(one, "m/x::t") == ("failed", "error in setup")
    assert interpreter._short("pytest_hpccourse.runtimes.triton.guard.bounds.TritonOutOfBoundsError: x") == \
        "TritonOutOfBoundsError: x"
    assert interpreter._short("AssertionError: a.b.c") == "AssertionError: a.b.c"
