"""The pieces of `hpccourse grade-class` that need neither git nor Ray: roster, gradebook, rows, progress, summary
and the cost model (the end-to-end run: tests/test_grade_class.py)."""

from __future__ import annotations

import argparse
import io
import json
import sqlite3
from pathlib import Path

import pytest

from pytest_hpccourse.classgrade import command, costmodel, progress, rows, summary
from pytest_hpccourse.classgrade.gradebook import Gradebook, Row, TaskLine
from pytest_hpccourse.classgrade.overlay import LessonPart
from pytest_hpccourse.classgrade.roster import RosterError, read_roster, safe_name

CLASSROOM_EXPORT = (
    "assignment_name,assignment_url,starter_code_url,github_username,roster_identifier,student_repository_name,"
    "student_repository_url,submission_timestamp,points_awarded,points_available\n"
    "hw,https://classroom.github.com/a/x,,alice,A01,hw-alice,https://github.com/org/hw-alice,,0,30\n"
    "hw,https://classroom.github.com/a/x,,,B02,,,,0,30\n"
    "hw,https://classroom.github.com/a/x,,bob,B03,hw-bob,git@github.com:org/hw-bob.git,,0,30\n")


def test_roster_reads_github_classrooms_export(tmp_path: Path) -> None:
    path = tmp_path / "grades.csv"
    path.write_text(CLASSROOM_EXPORT)
    roster = read_roster(path)
    assert [(s.student, s.repo, s.commit) for s in roster.submissions] == [
        ("alice", "https://github.com/org/hw-alice", ""), ("bob", "git@github.com:org/hw-bob.git", "")]
    assert roster.skipped == ["B02: no repository (assignment not accepted?)"]


def test_roster_resolves_local_paths_and_keeps_pinned_commits(tmp_path: Path) -> None:
    path = tmp_path / "r" / "roster.csv"
    path.parent.mkdir()
    path.write_text("Student,Repo,Commit\ncarol,../repos/carol,abc123\n")
    (sub,) = read_roster(path).submissions
    assert (sub.student, sub.repo, sub.commit) == ("carol", str(tmp_path / "repos" / "carol"), "abc123")


def test_roster_with_a_module_column_has_a_row_per_student_and_module(tmp_path: Path) -> None:
    path = tmp_path / "roster.csv"
    path.write_text("student,module,repo\nann,00-demo,/r/ann-demo\nann,12-system-design,/r/ann-sd\n")
    subs = read_roster(path).submissions
    assert [(s.module, s.key) for s in subs] == [("00-demo", "ann--00-demo"),
                                                 ("12-system-design", "ann--12-system-design")]


@pytest.mark.parametrize("text, message", [("name\nx\n", "repository column"),
                                           ("student,repo\na,x\na,y\n", "already on line 2"),
                                           ("student,module,repo\na,,x\na,m,y\n", "already on line 2")])
def test_roster_errors_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "roster.csv"
    path.write_text(text)
    with pytest.raises(RosterError, match=message):
        read_roster(path)


def test_safe_names_stay_apart() -> None:
    assert safe_name("alice") == "alice"
    assert safe_name("a b") != safe_name("a_b") and "/" not in safe_name("../x")


def test_sizes() -> None:
    assert command.parse_size("4G") == 4 * 1024**3 and command.parse_size("1.5GiB") == int(1.5 * 1024**3)
    assert command.parse_size("512M") == 512 * 1024**2 and command.parse_size("0") == 0
    with pytest.raises(argparse.ArgumentTypeError):
        command.parse_size("lots")


LESSONS = [LessonPart("01-a", "x-01", ("01-a/a.py", "01-a/answers.yaml"), title="A"),
           LessonPart("02-b", "x-02", ("02-b/b.py", "02-b/answers.yaml"), title="B")]
BASE = {"student": "s", "module": "m", "part": "cpu", "commit_sha": "c1", "grader": "g1"}


def _doc(code: float = 4.0, answers: float = 2.0) -> dict:
    def lesson(path: str, lid: str) -> dict:
        score = code + 3 * answers
        return {"id": lid, "title": lid.upper(), "path": path, "status": "PASS" if score >= 8 else "FAIL",
                "score": score, "max_score": 10.0, "needs": [], "message": "",
                "code": {"score": code, "max_score": 4.0, "status": "PASS" if code == 4 else "FAIL",
                         "message": "" if code == 4 else "test_a.py::test_x: AssertionError",
                         "tests": [{"nodeid": f"{path}/test_a.py::test_x", "outcome": "passed" if code == 4 else
                                    "failed", "weight": 1.0, "duration": 0.5, "message": ""}]},
                "questions": [{"id": q, "kind": "choice", "score": answers, "max_score": 2.0,
                               "status": "PASS" if answers == 2 else "FAIL", "message": ""} for q in ("Q1", "Q2", "Q3")]}
    return {"version": 1, "scoring": {"code": 4, "questions": [2, 2, 2], "pass": 8, "total": 10},
            "lessons": [lesson("01-a", "x-01"), lesson("02-b", "x-02")], "summary": {}}


def test_rows_from_a_report_a_fault_and_rewritten_answers() -> None:
    ok = rows.rows_for(BASE, LESSONS, {"status": "ok", "doc": _doc(code=0.0), "node": "n1", "seconds": 3.0,
                                       "answers_changed": ["02-b"]}, missing=["01-a/a.py"])
    assert [(r.lesson, r.code, r.q1, r.total, r.status) for r in ok] == [
        ("x-01", 0.0, 2.0, 6.0, "FAIL"), ("x-02", 0.0, 0.0, 0.0, "FAIL")]
    assert ok[0].failed_tests == ["test_a.py::test_x"] and "not in the submission: a.py" in ok[0].reasons
    assert any("answers.yaml was rewritten" in r for r in ok[1].reasons)
    hung = rows.rows_for(BASE, LESSONS, {"status": "timeout", "reason": "killed after 9 s"})
    assert [(r.status, r.total, r.reasons) for r in hung] == [("TIMEOUT", 0.0, ["killed after 9 s"])] * 2
    needs = rows.rows_for(BASE, LESSONS, None, status="NEEDS", reason="no GPU")
    assert [(r.status, r.title) for r in needs] == [("NEEDS", "A"), ("NEEDS", "B")]


def test_gradebook_replaces_a_task_in_one_transaction_and_resumes_by_commit_and_grader(tmp_path: Path) -> None:
    book = Gradebook(tmp_path / "g.sqlite")
    line = TaskLine(**{k: BASE[k] for k in ("student", "module", "part", "commit_sha", "grader")}, status="ok",
                    course_json=_doc())
    book.record(line, rows.rows_for(BASE, LESSONS, {"status": "ok", "doc": _doc()}), "run1")
    assert book.is_done("s", "m", "cpu", "c1", "g1", gpus=False)
    assert not book.is_done("s", "m", "cpu", "c2", "g1", gpus=False)  # a new commit
    assert not book.is_done("s", "m", "cpu", "c1", "g2", gpus=False)  # a fixed test
    book.record(line, rows.rows_for(BASE, LESSONS[:1], {"status": "ok", "doc": _doc(code=0.0)}), "run2")
    assert [(r.lesson, r.total) for r in book.rows()] == [("x-01", 6.0)]  # replaced, not added
    with pytest.raises(sqlite3.Error):  # a write that fails half-way (after the DELETE) leaves the task as it was
        book.record(line, [Row(**BASE, lesson="x-09", path="09", title="", code=object())], "run3")  # type: ignore
    assert [(r.lesson, r.total) for r in book.rows()] == [("x-01", 6.0)]
    assert [tuple(w) for w in book.db.execute("SELECT run_id FROM writes")] == [("run1",), ("run2",)]
    gpu = TaskLine("s", "m", "gpu", "c1", "g1", status="needs")
    book.record(gpu, [], "run4")
    assert book.is_done("s", "m", "gpu", "c1", "g1", gpus=False) and not book.is_done("s", "m", "gpu", "c1", "g1",
                                                                                       gpus=True)
    assert book.course_json("s", "m")["summary"]["lessons"] == 2
    assert book.write_csv(tmp_path / "g.csv") == 1
    book.close()


def test_progress_prints_plain_lines_off_a_terminal() -> None:
    out = io.StringIO()
    bar = progress.Progress(3, "auto", out)
    assert bar.mode == "lines"
    bar.skip()
    bar.started()
    bar.finished("alice m cpu: 20/20")
    bar.close()
    assert out.getvalue().splitlines()[0] == "[2/3] alice m cpu: 20/20"
    assert "1 task(s) graded, 1 already graded" in out.getvalue()


def _class_rows() -> list[Row]:
    out = []
    for i, total in enumerate([10.0, 9.0, 4.0, 0.0]):
        out.append(Row(student=f"s{i}", module="m", lesson="x-01", path="01-a", title="A", part="cpu",
                       commit_sha="c", total=total, status="PASS" if total >= 8 else "FAIL",
                       failed_tests=["test_a.py::test_x"] if total < 10 else []))
        out.append(Row(student=f"s{i}", module="m", lesson="x-02", path="02-b", title="B", part="gpu",
                       commit_sha="c", status="NEEDS"))
    return out


def test_summary_leaves_needs_out_and_counts_failing_tests() -> None:
    (a, b) = summary.lesson_stats(_class_rows())
    assert (a.pass_rate, len(a.graded), a.failing.most_common(1)) == (0.5, 4, [("test_a.py::test_x", 3)])
    assert (b.pass_rate, b.needs) == (None, 4)
    assert a.histogram() == [1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1]
    table = summary.terminal(_class_rows())
    assert "x-01" in table and "50%" in table and "test_a.py::test_x (3)" in table


def test_summary_page_is_self_contained_html_with_svg_plots(tmp_path: Path) -> None:
    page = summary.write_html(_class_rows(), tmp_path).read_text()
    assert page.count("<svg") == 3 and "<script" not in page and "http" not in page.replace("http://www.w3.org", "")
    assert page.count("<rect") >= 8 + 2 * summary.BINS


def test_cost_model_schedules_longest_first_on_cpu_and_gpu_slots(tmp_path: Path) -> None:
    assert costmodel.schedule([(10.0, "cpu")] * 4 + [(30.0, "gpu")], 2, 1) == 30.0
    assert costmodel.schedule([(10.0, "cpu")] * 5, 2, 0) == 30.0
    report = tmp_path / "r.json"
    doc = _doc()
    doc["lessons"][0]["path"] = "modules/m/01-a"
    doc["lessons"][1].update(path="modules/m/02-b", needs=["cuda-gpu"])
    report.write_text(json.dumps(doc))
    modules: dict[str, costmodel.ModuleTimes] = {}
    costmodel.read_times(report, modules)
    assert modules["m"].cpu_lessons == {"x-01": 0.5} and modules["m"].gpu_lessons == {"x-02": 0.5}
    text = costmodel.model(modules, 300, [1, 4], 1, 16, 1, 3.0, 60.0)
    assert "300 students × 1 modules" in text and "4 CPU node(s) × 16 CPUs + 1 GPU node(s)" in text
