"""`hpccourse check`: SOUND on the demo module, UNSOUND with the right reasons on the planted
lessons, never writing to the source tree; the verdict logic with a stub pytest runner."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_hpccourse.authoring import check

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "release"
DEMO = FIXTURES / "modules"
PLANTED = FIXTURES / "planted"
REPO = Path(__file__).resolve().parent.parent


def tree_digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def run_main(*args: str) -> tuple[int, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = check.main(list(args))
    return rc, buf.getvalue()


def checked(paths: list[Path], tmp_path: Path) -> tuple[int, str, dict[str, Any]]:
    """`hpccourse check PATHS -j 2`: exit status, output, results by lesson id; and the source
    tree is left as it was."""
    before = tree_digest(FIXTURES)
    rc, out = run_main(*map(str, paths), "-j", "2", "--json", str(tmp_path / "check.json"))
    assert tree_digest(FIXTURES) == before, "check wrote to the source tree"
    results = json.loads((tmp_path / "check.json").read_text(encoding="utf-8"))
    return rc, out, {r["id"]: r for r in results}


def test_demo_module_is_sound(tmp_path: Path):
    rc, out, results = checked([DEMO], tmp_path)
    assert rc == 0, out
    for lid, mutants in (("demo-01", 2), ("demo-02", 1)):
        r = results[lid]
        assert (r["verdict"], r["reference"], r["blank"]) == ("SOUND", "10/10", "0/10"), r
        assert r["reasons"] == [] and r["unproven"] == []
        assert [m["result"] for m in r["mutants"]] == ["caught"] * mutants
        for m in r["mutants"]:
            assert m["detail"].startswith("caught by test_")  # which test caught it
    assert "2 lesson(s): 2 SOUND, 0 UNSOUND, 0 UNPROVEN" in out
    assert "mutant 2 (forgets the scale factor): caught by test_axpy.py::" in out


def test_planted_lessons_are_unsound_with_reasons(tmp_path: Path):
    rc, out, results = checked([PLANTED], tmp_path)
    assert rc == 1, out
    no_assert = results["planted-01"]
    assert no_assert["verdict"] == "UNSOUND"
    assert no_assert["blank"] == "4/10"
    assert any(r.startswith("blank scores code 4/4: passes without the solution: "
                            "test_double.py::test_double_runs") for r in no_assert["reasons"])
    assert "mutant 1 (wrong factor) survived: every code test passes" in no_assert["reasons"]
    survivor = results["planted-02"]
    assert survivor["verdict"] == "UNSOUND" and survivor["blank"] == "0/10"
    assert survivor["reasons"] == [
        "mutant 1 (negative inputs pass through) survived: every code test passes",
        ("mutant 2 (find text that is not in the reference) does not apply: "
         "find text occurs 0 time(s), count = 1"),
    ]
    table = out.split("\n\n")[1]
    assert table.splitlines()[0].split() == ["lesson", "verdict", "reference", "blank", "mutants",
                                             "time", "reasons"]
    assert any(line.split()[:5] == ["planted-01", "UNSOUND", "10/10", "4/10", "0/1"]
               for line in table.splitlines())
    assert any(line.split()[:5] == ["planted-02", "UNSOUND", "10/10", "0/10", "0/2"]
               for line in table.splitlines())
    assert "2 lesson(s): 0 SOUND, 2 UNSOUND, 0 UNPROVEN" in out


def test_usage_errors(tmp_path: Path, capsys):
    assert check.main([str(tmp_path / "nope")]) == 2
    assert "no such path" in capsys.readouterr().err
    assert check.main([str(tmp_path)]) == 2
    assert "no lesson.toml" in capsys.readouterr().err


# ---- verdicts, with a stub in place of the pytest subprocess ---------------------------------

def entry(lid: str, code: tuple[float, str], qs: tuple[float, float, float] = (2, 2, 2),
          q_status: str | None = None, status: str = "PASS", message: str = "",
          tests: list[dict] | None = None) -> dict[str, Any]:
    score, code_status = code
    return {
        "id": lid, "status": status, "message": message, "needs": [],
        "score": score + sum(qs), "max_score": 10.0,
        "code": {"score": score, "max_score": 4.0, "status": code_status,
                 "message": "NEEDS cuda-gpu" if code_status == "NEEDS" else "",
                 "tests": tests if tests is not None else
                 [{"nodeid": "m/01/test_k.py::test_a", "outcome": "passed" if score else "failed"}]},
        "questions": [{"id": f"Q{i + 1}", "score": s, "max_score": 2.0,
                       "status": q_status or ("PASS" if s == 2 else "FAIL"), "message": ""}
                      for i, s in enumerate(qs)],
    }


class StubRunner:
    """Answers each run by its kind: reference, blank (the released copy) or mutant (`-x`)."""

    def __init__(self, ref: dict | None, blank: dict | None, mutant: dict | None = None) -> None:
        self.answers = {"ref": ref, "blank": blank, "mutant": mutant}
        self.calls: list[str] = []

    def run(self, cwd: Path, args, lesson_id: str, report: Path):
        kind = "blank" if "blank" in cwd.parts else "mutant" if "-x" in args else "ref"
        self.calls.append(kind)
        found = self.answers[kind]
        return (found, "") if found is not None else (None, "pytest exited 4 without a report: boom")


@pytest.fixture
def lesson(tmp_path: Path) -> Path:
    module = tmp_path / "course" / "modules" / "00-demo"
    shutil.copytree(DEMO / "00-demo", module)
    shutil.copyfile(REPO / "scoring.toml", tmp_path / "course" / "scoring.toml")
    return module / "01-axpy"


GOOD_MUTANT = entry("demo-01", (0.0, "FAIL"))


def test_stub_sound(lesson: Path):
    stub = StubRunner(entry("demo-01", (4.0, "PASS")), entry("demo-01", (0.0, "FAIL"), (0, 0, 0)), GOOD_MUTANT)
    res = check.check_lesson(lesson, stub, "x")
    assert res.verdict == "SOUND", res.reasons
    assert stub.calls == ["ref", "blank", "mutant", "mutant"]
    assert [m.detail for m in res.mutants] == ["caught by test_k.py::test_a"] * 2


def test_needs_capability_is_unproven_not_unsound(lesson: Path):
    needs = entry("demo-01", (0.0, "NEEDS"), status="NEEDS")
    stub = StubRunner(needs, entry("demo-01", (0.0, "NEEDS"), (0, 0, 0), status="NEEDS"), GOOD_MUTANT)
    res = check.check_lesson(lesson, stub, "x")
    assert res.verdict == "UNPROVEN" and res.reasons == []
    assert res.unproven == ["NEEDS cuda-gpu", "2 mutant(s) not run"]
    assert "mutant" not in stub.calls


def test_strict_turns_unproven_into_failure(lesson: Path, monkeypatch):
    needs = entry("demo-01", (0.0, "NEEDS"), status="NEEDS")
    stub = StubRunner(needs, entry("demo-01", (0.0, "NEEDS"), (0, 0, 0), status="NEEDS"))
    monkeypatch.setattr(check, "Runner", lambda **_: stub)
    assert run_main(str(lesson))[0] == 0
    rc, out = run_main(str(lesson), "--strict")
    assert rc == 1 and "1 UNPROVEN" in out


@pytest.mark.parametrize("ref, blank, reason", [
    (entry("demo-01", (2.0, "FAIL")), None, "reference scores code 2/4"),
    (entry("demo-01", (4.0, "PASS"), (2, 0, 2)), None, "reference Q2 scores 0/2"),
    (entry("demo-01", (4.0, "PASS"), (2, 2, 0), q_status="NEEDS"), None, "reference Q1: NEEDS key"),
    (entry("demo-01", (0.0, "ERROR"), status="INVALID", message="bad"), None, "reference INVALID: bad"),
    (None, None, "reference run: pytest exited 4 without a report: boom"),
    (entry("demo-01", (4.0, "PASS")), entry("demo-01", (0.0, "FAIL"), (0, 2, 0)),
     "blank Q2 scores 2/2 with an empty answers.yaml"),
    (entry("demo-01", (4.0, "PASS")), entry("demo-01", (0.0, "FAIL"), (0, 0, 0), q_status="NEEDS"),
     "blank Q1: NEEDS key: the release lost the key"),
    (entry("demo-01", (4.0, "PASS")), entry("demo-01", (1.0, "FAIL"), (0, 0, 0)),
     "blank scores code 1/4: passes without the solution: test_k.py::test_a"),
])
def test_unsound_reasons(lesson: Path, ref, blank, reason):
    blank = blank or entry("demo-01", (0.0, "FAIL"), (0, 0, 0))
    res = check.check_lesson(lesson, StubRunner(ref, blank, GOOD_MUTANT), "x")
    assert res.verdict == "UNSOUND"
    assert any(r.startswith(reason) for r in res.reasons), res.reasons


def test_failing_reference_skips_mutants(lesson: Path):
    stub = StubRunner(entry("demo-01", (2.0, "FAIL")), entry("demo-01", (0.0, "FAIL"), (0, 0, 0)), GOOD_MUTANT)
    res = check.check_lesson(lesson, stub, "x")
    assert "mutant" not in stub.calls and res.mutants == []


def test_mutant_caught_at_collection_and_survivor(lesson: Path):
    collection = entry("demo-01", (0.0, "ERROR"), tests=[])
    collection["code"]["message"] = "test_axpy.py: cannot be collected: SyntaxError"
    stub = StubRunner(entry("demo-01", (4.0, "PASS")), entry("demo-01", (0.0, "FAIL"), (0, 0, 0)), collection)
    res = check.check_lesson(lesson, stub, "x")
    assert res.verdict == "SOUND"
    assert res.mutants[0].detail == "caught at collection: test_axpy.py: cannot be collected: SyntaxError"
    stub = StubRunner(entry("demo-01", (4.0, "PASS")), entry("demo-01", (0.0, "FAIL"), (0, 0, 0)),
                      entry("demo-01", (4.0, "PASS")))
    res = check.check_lesson(lesson, stub, "x")
    assert res.verdict == "UNSOUND" and [m.result for m in res.mutants] == ["survived"] * 2


def test_mutant_is_applied_to_the_copy_and_reverted(lesson: Path):
    seen: list[str] = []
    original = (lesson / "axpy.py").read_text()

    class Spy(StubRunner):
        def run(self, cwd, args, lesson_id, report):
            if "-x" in args:
                seen.append((cwd / "01-axpy" / "axpy.py").read_text())
            return super().run(cwd, args, lesson_id, report)

    stub = Spy(entry("demo-01", (4.0, "PASS")), entry("demo-01", (0.0, "FAIL"), (0, 0, 0)), GOOD_MUTANT)
    check.check_lesson(lesson, stub, "x")
    assert seen == [original.replace("range(0, n, BLOCK)", "range(0, n - BLOCK, BLOCK)"),
                    original.replace("alpha * x[start:stop]", "x[start:stop]")]
    assert (lesson / "axpy.py").read_text() == original


@pytest.mark.parametrize("edit, reason", [
    (lambda d: (d / "lesson.toml").write_text((d / "lesson.toml").read_text().replace('kind = "choice"', 'kind = "essay"')),
     "manifest: "),
    (lambda d: (d / "axpy.py").write_text("\n".join(line for line in (d / "axpy.py").read_text().splitlines()
                                                    if "###" not in line) + "\n"),
     "no solution region in axpy.py"),
    (lambda d: (d / "axpy.py").write_text((d / "axpy.py").read_text().replace("### END SOLUTION", "## END SOLUTION")),
     "solution markers: "),
    (lambda d: (d / "lesson.toml").write_text((d / "lesson.toml").read_text().split("[[mutants]]")[0]
                                              + "[[questions]]" + (d / "lesson.toml").read_text().split("[[questions]]", 1)[1]),
     "no [[mutants]]"),
    (lambda d: (d / "README.md").write_text("TODO(scaffold): write me\n"),
     "README.md: scaffold placeholder TODO(scaffold) left in"),
])
def test_static_problems(lesson: Path, edit, reason):
    edit(lesson)
    stub = StubRunner(entry("demo-01", (4.0, "PASS")), entry("demo-01", (0.0, "FAIL"), (0, 0, 0)), GOOD_MUTANT)
    res = check.check_lesson(lesson, stub, "x")
    assert res.verdict == "UNSOUND"
    assert any(r.startswith(reason) for r in res.reasons), res.reasons


def test_duplicate_ids_are_unsound(tmp_path: Path, monkeypatch):
    module = tmp_path / "course" / "modules" / "00-demo"
    shutil.copytree(DEMO / "00-demo", module)
    shutil.copyfile(REPO / "scoring.toml", tmp_path / "course" / "scoring.toml")
    toml = module / "02-scan" / "lesson.toml"
    toml.write_text(toml.read_text().replace('"demo-02"', '"demo-01"'))
    stub = StubRunner(entry("demo-01", (4.0, "PASS")), entry("demo-01", (0.0, "FAIL"), (0, 0, 0)), GOOD_MUTANT)
    results = check.check_paths([module], 2, stub)
    assert [r.verdict for r in results] == ["SOUND", "UNSOUND"]
    assert results[1].reasons[-1].startswith("id 'demo-01' is also used by ")


def test_a_lesson_folder_still_being_written_does_not_affect_its_siblings(lesson: Path):
    draft = lesson.parent / "03-draft"
    draft.mkdir()
    (draft / "k.py").write_text("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n")
    stub = StubRunner(entry("demo-01", (4.0, "PASS")), entry("demo-01", (0.0, "FAIL"), (0, 0, 0)), GOOD_MUTANT)
    res = check.check_lesson(lesson, stub, "x")
    assert res.verdict == "SOUND", res.reasons


def test_mutant_surviving_only_where_gpu_tests_are_skipped_is_unproven(lesson: Path):
    tests = [{"nodeid": "m/01/test_k.py::test_cpu", "outcome": "passed"},
             {"nodeid": "m/01/test_k.py::test_gpu", "outcome": "skipped",
              "message": "NEEDS cuda-gpu (this test only)"}]
    stub = StubRunner(entry("demo-01", (4.0, "PASS")), entry("demo-01", (0.0, "FAIL"), (0, 0, 0)),
                      entry("demo-01", (4.0, "PASS"), tests=tests))
    res = check.check_lesson(lesson, stub, "x")
    assert res.verdict == "UNPROVEN" and res.reasons == []
    assert res.unproven == ["mutant 1: passes the tests that ran; skipped: NEEDS cuda-gpu (this test only)",
                            "mutant 2: passes the tests that ran; skipped: NEEDS cuda-gpu (this test only)"]


# ---- the static rules (audit.py) run before any pytest run and are UNSOUND reasons -----------

def test_static_rules_are_reasons_before_the_runs(lesson: Path):
    toml = lesson / "lesson.toml"
    toml.write_text(toml.read_text().replace('find = "alpha * x[start:stop]"',
                                             'find = "def axpy("').replace('replace = "x[start:stop]"',
                                                                           'replace = "def axpy_("'))
    (lesson / "README.md").write_text("```python\nfor start in range(0, n, BLOCK):\n"
                                      "    stop = min(start + BLOCK, n)\n```\n")
    stub = StubRunner(entry("demo-01", (4.0, "PASS")), entry("demo-01", (0.0, "FAIL"), (0, 0, 0)), GOOD_MUTANT)
    res = check.check_lesson(lesson, stub, "x")
    assert res.verdict == "UNSOUND"
    assert res.reasons == [
        ("mutant 2 (forgets the scale factor) edits axpy.py:8 outside every solution region: "
         "a mutant must change what the learner writes"),
        ("README.md:2 copies two consecutive lines of the solution region axpy.py:11-16: "
         "'for start in range(0, n, BLOCK):' / 'stop = min(start + BLOCK, n)'; hints state invariants "
         "and shapes, not code"),
    ]
    assert stub.calls == ["ref", "blank", "mutant", "mutant"]  # the runs still report their part


def test_static_only_runs_nothing(lesson: Path):
    stub = StubRunner(None, None)
    res = check.check_lesson(lesson, stub, "x", static_only=True)
    assert stub.calls == [] and res.verdict == "UNPROVEN" and res.reasons == []
    res = check.check_lesson(lesson, stub, "x", reasons=["module 00-demo: planted"], static_only=True)
    assert res.verdict == "UNSOUND" and res.reasons == ["module 00-demo: planted"]


def test_module_rules_reach_every_lesson_of_the_module_and_print_a_line(lesson: Path, monkeypatch):
    for folder in (lesson, lesson.parent / "02-scan"):  # both keys now the longest option
        toml = folder / "lesson.toml"
        toml.write_text(toml.read_text().replace('"C. PCIe 带宽 (host-to-device)"', '"C. PCIe"')
                        .replace(' (naive, one sum per prefix)"', '"'))
    stub = StubRunner(entry("demo-01", (4.0, "PASS")), entry("demo-01", (0.0, "FAIL"), (0, 0, 0)), GOOD_MUTANT)
    monkeypatch.setattr(check, "Runner", lambda **_: stub)
    rc, out = run_main(str(lesson.parent), "-j", "1")
    assert rc == 1
    reason = ("module 00-demo: the keyed option is the longest in 2 of 2 choice/multi questions "
              "(100% > 60%)")
    assert out.count(f"UNSOUND: {reason}") == 2
    assert ("module 00-demo: choice keys A0 B1 C0 D0 (of 1); multi keys A1 B0 C1 D0 (of 1); "
            "keyed option longest in 2/2: UNSOUND") in out.split("\n\n")[2]
