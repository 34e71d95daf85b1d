"""`hpccourse grade-class` end to end: real git repositories of a synthetic class (tests/classgrade_factory.py:
reference, blank, mutant, tampered tests, a hang, a memory hog, answers only, a late commit), graded on Ray's own
multi-node test cluster (`ray.cluster_utils.Cluster`: a head and a CPU node of one CPU each, and a node that
declares one GPU). Every gradebook row must equal the student's known grade.

Costs (idle 2-core machine): the cluster starts once for the module (~10 s); the class run ~30 s (the hang
sleeps through 5 × 3 s of per-test timeouts); the kill-and-resume and node-removal runs ~20 s each.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import classgrade_factory as factory
import pytest

from pytest_hpccourse.classgrade import command, fetch, overlay, tasks
from pytest_hpccourse.classgrade.roster import Submission

pytestmark = pytest.mark.xdist_group("grade-class")


@pytest.fixture(autouse=True)
def _no_ray_in_this_process() -> None:
    """grade-class's driver runs in this process (`command.main`) and calls `ray.init` itself. Under xdist this
    worker may have run other Ray tests first, so its own Ray (pooled drill actors included) goes first; a later
    drill starts a new one (`drills.ray_session` re-initializes when Ray is down)."""
    ray = pytest.importorskip("ray")
    from pytest_hpccourse.runtimes.ray import drills

    drills.shutdown()
    if ray.is_initialized():
        ray.shutdown()
RESUME_CLASS = ["ref", "blank", "mutant", "tamper", "late"]
COMMON = ["--deadline", factory.DEADLINE, "--test-timeout", "3", "--memory", "1.5G", "--timeout", "120",
          "--progress", "lines"]


@pytest.fixture(scope="module")
def klass(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, dict[str, str]]:
    """(root, pristine module, roster, student -> the commit that must be graded)."""
    root = tmp_path_factory.mktemp("class")
    module, roster, commits = factory.make_class(root)
    return root, module, roster, commits


def _rows(book: Path) -> list[sqlite3.Row]:
    db = sqlite3.connect(book)
    db.row_factory = sqlite3.Row
    try:
        return db.execute("SELECT * FROM grades ORDER BY student, lesson").fetchall()
    finally:
        db.close()


def _query(book: Path, sql: str) -> list[tuple]:
    db = sqlite3.connect(book, timeout=30)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def assert_expected(book: Path, students: list[str], commits: dict[str, str]) -> None:
    rows = _rows(book)
    got = {(r["student"], r["lesson"]): r for r in rows}
    assert len(rows) == len(got) == 3 * len(students)
    for student in students:
        for lesson, (total, status) in factory.EXPECTED[student].items():
            row = got[(student, lesson)]
            assert (row["total"], row["status"]) == (pytest.approx(total), status), (student, lesson, row["reasons"])
            assert row["commit_sha"] == commits[student]
        assert got[(student, factory.GPU_LESSON)]["status"] == "NEEDS"


# ---- fetch and overlay (git only) ------------------------------------------------------------
def test_deadline_grades_the_last_commit_before_it(klass, tmp_path: Path) -> None:
    root, _, _, commits = klass
    sub = Submission("late", str(root / "repos" / "late"))
    tip = fetch.fetch(sub, tmp_path).commit
    assert tip != commits["late"]
    assert fetch.fetch(sub, tmp_path, factory.DEADLINE).commit == commits["late"]
    assert fetch.fetch(sub, tmp_path, "2026-01-10T00:00:00+00:00").first == \
        fetch.fetch(sub, tmp_path, "2026-01-10T00:00:00+00:00").commit  # only the release was there
    assert fetch.fetch(sub, tmp_path, "2025-12-01T00:00:00+00:00").commit == ""  # nothing before it
    assert fetch.fetch(Submission("late", sub.repo, commits["late"][:10]), tmp_path).commit == commits["late"]


def test_overlay_takes_only_the_learners_files_and_names_what_was_ignored(klass, tmp_path: Path) -> None:
    root, module, _, _ = klass
    pristine = overlay.load_pristine(module)
    assert "01-axpy/axpy.py" not in pristine.files and "01-axpy/answers.yaml" not in pristine.files  # reference
    assert "scoring.toml" in pristine.files and "01-axpy/test_axpy.py" in pristine.files
    assert [(lesson.id, lesson.gpu) for lesson in pristine.lessons] == [
        ("demo-01", ""), ("demo-02", ""), ("demo-03", "lesson")]
    checkout = fetch.fetch(Submission("tamper", str(root / "repos" / "tamper")), tmp_path)
    laid = overlay.overlay(checkout, pristine)
    assert set(laid.files) == pristine.editable()
    assert laid.ignored == factory.TAMPERED
    assert laid.files["01-axpy/answers.yaml"] == (module / "01-axpy" / "answers.yaml").read_bytes()
    clean = overlay.overlay(fetch.fetch(Submission("ref", str(root / "repos" / "ref")), tmp_path), pristine)
    assert clean.ignored == [] and clean.missing == []


def test_a_test_fix_changes_the_grader_version(klass, tmp_path: Path) -> None:
    _, module, _, _ = klass
    copy = tmp_path / "00-demo"
    import shutil

    shutil.copytree(module, copy)
    shutil.copyfile(module.parent / "scoring.toml", tmp_path / "scoring.toml")
    before = command.grader_version(overlay.load_pristine(copy))
    assert command.grader_version(overlay.load_pristine(copy)) == before
    test = copy / "02-scan" / "test_scan.py"
    test.write_text(test.read_text().replace("[1, 5, 1000]", "[1, 5, 1001]"))
    assert command.grader_version(overlay.load_pristine(copy)) != before


# ---- one task without Ray -------------------------------------------------------------------
def _spec(klass, student: str, tmp_path: Path, **kw) -> tuple[tasks.TaskSpec, overlay.Pristine]:
    root, module, _, _ = klass
    pristine = overlay.load_pristine(module)
    checkout = fetch.fetch(Submission(student, str(root / "repos" / student)), tmp_path)
    laid = overlay.overlay(checkout, pristine)
    spec = tasks.TaskSpec(student, pristine.name, "cpu", checkout.commit, "test", ["01-axpy", "02-scan"],
                          laid.files, **kw)
    return spec, pristine


def test_a_run_past_the_task_timeout_is_killed_and_costs_its_task(klass, tmp_path: Path) -> None:
    spec, pristine = _spec(klass, "hang", tmp_path, timeout=8, memory=0)  # no per-test timeout: the rubric's 120 s
    started = time.monotonic()
    result = tasks.grade(spec, pristine.files)
    assert time.monotonic() - started < 30
    assert result.status == "timeout" and "8 s" in result.reason and result.doc is None


def test_released_module_with_course_keys_grades_the_reference_full(klass, tmp_path: Path) -> None:
    """The instructor's pristine copy may be the release itself (no keys inside) plus --course-keys."""
    from pytest_hpccourse.authoring import release

    _, module, _, _ = klass
    keyed = tmp_path / "keyed"
    assert release.main([str(module), "--out", str(keyed), "--template", str(factory.REPO / "template-repo")]) == 0
    pristine = overlay.load_pristine(factory.released(module, tmp_path / "rel"), keyed / ".hpccourse" / "keys.toml")
    assert not any(b"answer =" in data for rel, data in pristine.files.items() if rel.endswith("lesson.toml"))
    files = {rel: (module / rel).read_bytes() for rel in pristine.editable() if not rel.startswith("03-")}
    spec = tasks.TaskSpec("ref", pristine.name, "cpu", "x", "test", ["01-axpy", "02-scan"], files, timeout=120)
    result = tasks.grade(spec, pristine.files, pristine.keys)
    assert result.status == "ok", result.output
    assert result.doc["summary"]["score"] == 20.0, result.output


# ---- the class on a multi-node Ray cluster --------------------------------------------------
@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[object, dict[str, object]]]:
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes = {"head": c.head_node, "cpu": c.add_node(num_cpus=1), "gpu": c.add_node(num_cpus=1, num_gpus=1)}
    c.wait_for_nodes()
    yield c, nodes
    c.shutdown()


def test_the_class_on_a_multi_node_cluster_gets_its_known_grades(klass, cluster, tmp_path: Path) -> None:
    root, module, roster, commits = klass
    c, nodes = cluster
    book = root / "class.sqlite"
    argv = [str(roster), "--module", str(module), "--gradebook", str(book), "--address", c.address, *COMMON,
            "--csv", str(tmp_path / "class.csv"), "--html", str(tmp_path / "html"), "--json-dir", str(tmp_path / "j")]
    assert command.main(argv) == 0
    students = [*factory.STUDENTS, "late"]
    assert_expected(book, students, commits)
    rows = {(r["student"], r["lesson"]): r for r in _rows(book)}
    # scheduling by resource: every GPU part ran, on the node that has the GPU, and pytest there says NEEDS
    gpu_node = nodes["gpu"].node_id
    assert {rows[(s, factory.GPU_LESSON)]["node"] for s in students} == {gpu_node}
    assert all("needs cuda-gpu" in rows[(s, factory.GPU_LESSON)]["reasons"] for s in students)
    assert rows[("tamper", "demo-01")]["ignored"] == str(factory.TAMPERED).replace("'", '"')
    assert "Timeout" in rows[("hang", "demo-01")]["reasons"]
    assert "MemoryError" in rows[("hog", "demo-01")]["reasons"]
    assert len((tmp_path / "class.csv").read_text().splitlines()) == 1 + 3 * len(students)
    assert (tmp_path / "html" / "index.html").read_text().count("<svg") == 1 + 3  # heat map + 3 histograms
    assert (tmp_path / "j" / "ref" / "00-demo.json").is_file()
    # a second run grades nothing: same commits, same grader version
    writes = _query(book, "SELECT count(*) FROM writes")[0][0]
    assert command.main(argv) == 0
    assert _query(book, "SELECT count(*) FROM writes")[0][0] == writes == 2 * len(students)


def _driver(roster: Path, module: Path, book: Path, address: str, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "pytest_hpccourse.cli", "grade-class", str(roster), "--module", str(module),
           "--gradebook", str(book), *COMMON, *extra]
    return subprocess.Popen(cmd, env={**os.environ, "RAY_ADDRESS": address}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_for_writes(book: Path, n: int, proc: subprocess.Popen[str], timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if book.is_file():
            try:
                done = _query(book, "SELECT count(*) FROM writes")[0][0]
            except sqlite3.OperationalError:  # the driver is still creating the tables
                done = 0
            if done >= n:
                return done
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} tasks recorded in {timeout} s")


def test_resume_after_the_driver_is_killed_writes_every_task_once(klass, cluster, tmp_path: Path) -> None:
    root, module, _, commits = klass
    c, _ = cluster
    roster = factory.write_roster(tmp_path / "roster.csv", root, RESUME_CLASS)
    book = root / "resume.sqlite"
    first = _driver(roster, module, book, c.address)
    _wait_for_writes(book, 3, first)
    first.send_signal(signal.SIGKILL)
    first.wait()
    before = dict(((s, m, p), at) for s, m, p, at in _query(book, "SELECT student, module, part, graded_at FROM tasks"))
    assert 3 <= len(before) < 2 * len(RESUME_CLASS), "the driver was killed after the run, not during it"
    second = _driver(roster, module, book, c.address)
    out = second.communicate(timeout=300)[0]
    assert second.returncode == 0, out
    assert f"{len(before)} already graded" in out
    writes = Counter(_query(book, "SELECT student, module, part FROM writes"))
    assert len(writes) == 2 * len(RESUME_CLASS) and set(writes.values()) == {1}  # every task written once
    after = dict(((s, m, p), at) for s, m, p, at in _query(book, "SELECT student, module, part, graded_at FROM tasks"))
    assert all(after[key] == at for key, at in before.items())  # what was recorded was not graded again
    assert_expected(book, RESUME_CLASS, commits)


def test_regrade_finishes_when_a_node_is_removed_mid_run(klass, cluster, tmp_path: Path) -> None:
    root, module, _, commits = klass
    c, nodes = cluster
    roster = factory.write_roster(tmp_path / "roster.csv", root, RESUME_CLASS)
    book = tmp_path / "regrade.sqlite"
    first = _driver(roster, module, book, c.address)
    assert first.communicate(timeout=300)[0] and first.returncode == 0
    proc = _driver(roster, module, book, c.address, "--regrade")
    _wait_for_writes(book, 2 * len(RESUME_CLASS) + 1, proc)
    removed = nodes["cpu"].node_id
    c.remove_node(nodes["cpu"])
    gone_at = _query(book, "SELECT max(rowid) FROM writes")[0][0]
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
    runs = _query(book, "SELECT run_id, count(*) FROM writes GROUP BY run_id ORDER BY min(rowid)")
    assert [n for _, n in runs] == [2 * len(RESUME_CLASS)] * 2  # --regrade: every task again, each once
    after = _query(book, "SELECT t.node FROM writes w JOIN tasks t USING (student, module, part) "
                         f"WHERE w.rowid > {gone_at}")
    assert after and removed not in {n for (n,) in after}  # what finished after the removal ran elsewhere
    assert_expected(book, RESUME_CLASS, commits)
