"""The gradebook: one SQLite file, one row per student and lesson, written by the driver only.

Tables:

- `grades`: (student, module, lesson) -> part, commit, code, q1–q3, total, status, reasons, failed tests,
  ignored files, grader version, node, seconds, graded_at. `status` is the lesson's (PASS | FAIL | NEEDS |
  INVALID), or what stopped its task: TIMEOUT, CRASHED, MISSING (no commit to grade), ERROR (the grader failed:
  fetch, a task that died on every retry).
- `tasks`: (student, module, part) -> the commit and grader version it was graded at, its status and reason,
  node, seconds and the `--course-json` document. This is what resume reads.
- `writes`: append-only, one line per task the driver recorded (run id, time): the proof that a task's rows
  were written once.

Exactly once: `record` replaces a task's rows and its `tasks` line in one transaction, so after a crash or a
SIGKILL of the driver either all of a finished task is there or none of it. A later run skips a task whose line
has the same commit and grader version and a final status (ok, timeout, crashed, missing; a GPU part that was
NEEDS only while the cluster still has no GPU); `--regrade` skips nothing.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
FINAL = frozenset({"ok", "timeout", "crashed", "missing"})
COLUMNS = ("student", "module", "lesson", "path", "title", "part", "commit_sha", "code", "q1", "q2", "q3", "total",
           "max_score", "status", "reasons", "failed_tests", "ignored", "grader", "node", "seconds", "graded_at")
CSV_COLUMNS = ("student", "module", "lesson", "title", "commit_sha", "code", "q1", "q2", "q3", "total", "status",
               "reasons", "ignored", "grader", "graded_at")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS grades (
  student TEXT NOT NULL, module TEXT NOT NULL, lesson TEXT NOT NULL, path TEXT NOT NULL, title TEXT NOT NULL,
  part TEXT NOT NULL, commit_sha TEXT NOT NULL,
  code REAL NOT NULL, q1 REAL NOT NULL, q2 REAL NOT NULL, q3 REAL NOT NULL, total REAL NOT NULL,
  max_score REAL NOT NULL, status TEXT NOT NULL,
  reasons TEXT NOT NULL, failed_tests TEXT NOT NULL, ignored TEXT NOT NULL,
  grader TEXT NOT NULL, node TEXT NOT NULL, seconds REAL NOT NULL, graded_at TEXT NOT NULL,
  PRIMARY KEY (student, module, lesson));
CREATE TABLE IF NOT EXISTS tasks (
  student TEXT NOT NULL, module TEXT NOT NULL, part TEXT NOT NULL, commit_sha TEXT NOT NULL, grader TEXT NOT NULL,
  status TEXT NOT NULL, reason TEXT NOT NULL, node TEXT NOT NULL, seconds REAL NOT NULL, graded_at TEXT NOT NULL,
  run_id TEXT NOT NULL, course_json TEXT,
  PRIMARY KEY (student, module, part));
CREATE TABLE IF NOT EXISTS writes (
  run_id TEXT NOT NULL, student TEXT NOT NULL, module TEXT NOT NULL, part TEXT NOT NULL, at TEXT NOT NULL);
"""


@dataclass
class Row:
    """One lesson's grade for one student."""

    student: str
    module: str
    lesson: str
    path: str
    title: str
    part: str
    commit_sha: str
    code: float = 0.0
    q1: float = 0.0
    q2: float = 0.0
    q3: float = 0.0
    total: float = 0.0
    max_score: float = 10.0
    status: str = "ERROR"
    reasons: list[str] = field(default_factory=list)
    failed_tests: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    grader: str = ""
    node: str = ""
    seconds: float = 0.0
    graded_at: str = ""

    def values(self) -> tuple[Any, ...]:
        out = []
        for name in COLUMNS:
            value = getattr(self, name)
            out.append(json.dumps(value, ensure_ascii=False) if isinstance(value, list) else value)
        return tuple(out)

    @classmethod
    def from_db(cls, record: sqlite3.Row) -> Row:
        data = {name: record[name] for name in COLUMNS}
        for name in ("reasons", "failed_tests", "ignored"):
            data[name] = json.loads(data[name])
        return cls(**data)


@dataclass
class TaskLine:
    student: str
    module: str
    part: str
    commit_sha: str
    grader: str
    status: str  # ok | timeout | crashed | missing | needs | error
    reason: str = ""
    node: str = ""
    seconds: float = 0.0
    course_json: dict[str, Any] | None = None


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class Gradebook:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")  # readers (a progress watcher, a test) never block the driver
        self.db.execute("PRAGMA synchronous=FULL")  # a committed task survives a power cut, not only a SIGKILL
        self.db.executescript(_SCHEMA)
        found = self.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if found is None:
            self.db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif int(found[0]) != SCHEMA_VERSION:
            raise RuntimeError(f"{self.path}: gradebook schema {found[0]}, this grader writes {SCHEMA_VERSION}")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Gradebook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- resume ---------------------------------------------------------------------------
    def task(self, student: str, module: str, part: str) -> sqlite3.Row | None:
        return self.db.execute("SELECT * FROM tasks WHERE student=? AND module=? AND part=?",
                               (student, module, part)).fetchone()

    def is_done(self, student: str, module: str, part: str, commit: str, grader: str, *, gpus: bool) -> bool:
        """Whether this task is already graded for this commit and grader version (module docstring)."""
        line = self.task(student, module, part)
        if line is None or line["commit_sha"] != commit or line["grader"] != grader:
            return False
        return line["status"] in FINAL or (line["status"] == "needs" and not gpus)

    # ---- writing --------------------------------------------------------------------------
    def record(self, task: TaskLine, rows: Iterable[Row], run_id: str) -> None:
        """Replace the task's rows and its line, in one transaction (exactly once: module docstring)."""
        stamp = now()
        rows = list(rows)
        for row in rows:
            row.graded_at = row.graded_at or stamp
        doc = json.dumps(task.course_json, ensure_ascii=False) if task.course_json is not None else None
        with self.db:  # BEGIN … COMMIT, ROLLBACK on an exception
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute("DELETE FROM grades WHERE student=? AND module=? AND part=?",
                            (task.student, task.module, task.part))
            self.db.executemany(f"INSERT OR REPLACE INTO grades ({', '.join(COLUMNS)}) "
                                f"VALUES ({', '.join('?' * len(COLUMNS))})", [r.values() for r in rows])
            self.db.execute("INSERT OR REPLACE INTO tasks VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                            (task.student, task.module, task.part, task.commit_sha, task.grader, task.status,
                             task.reason, task.node, task.seconds, stamp, run_id, doc))
            self.db.execute("INSERT INTO writes VALUES (?,?,?,?,?)",
                            (run_id, task.student, task.module, task.part, stamp))

    # ---- reading --------------------------------------------------------------------------
    def rows(self, modules: Iterable[str] | None = None) -> list[Row]:
        query, args = "SELECT * FROM grades", []
        wanted = list(modules) if modules is not None else None
        if wanted is not None:
            query += f" WHERE module IN ({', '.join('?' * len(wanted))})"
            args = wanted
        return [Row.from_db(r) for r in self.db.execute(query + " ORDER BY student, module, path", args)]

    def tasks(self) -> Iterator[sqlite3.Row]:
        yield from self.db.execute("SELECT * FROM tasks ORDER BY student, module, part")

    def course_json(self, student: str, module: str) -> dict[str, Any] | None:
        """The student's `--course-json` document for the module (its CPU and GPU parts merged)."""
        lessons: list[dict[str, Any]] = []
        scoring = None
        for line in self.db.execute("SELECT course_json FROM tasks WHERE student=? AND module=? ORDER BY part",
                                    (student, module)):
            if line["course_json"]:
                doc = json.loads(line["course_json"])
                scoring = scoring or doc.get("scoring")
                lessons += doc.get("lessons", [])
        if scoring is None:
            return None
        lessons.sort(key=lambda le: le.get("path", ""))
        statuses = [le.get("status") for le in lessons]
        summary = {"lessons": len(lessons), "passed": statuses.count("PASS"), "failed": statuses.count("FAIL"),
                   "needs": statuses.count("NEEDS"), "invalid": statuses.count("INVALID"),
                   "score": sum(float(le.get("score", 0)) for le in lessons),
                   "max_score": sum(float(le.get("max_score", 0)) for le in lessons)}
        return {"version": 1, "scoring": scoring, "lessons": lessons, "summary": summary}

    def write_csv(self, path: Path, modules: Iterable[str] | None = None) -> int:
        rows = self.rows(modules)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="", encoding="utf-8") as fh:
            out = csv.writer(fh)
            out.writerow(CSV_COLUMNS)
            for row in rows:
                out.writerow([("; ".join(v) if isinstance(v := getattr(row, c), list) else
                               (f"{v:g}" if isinstance(v, float) else v)) for c in CSV_COLUMNS])
        return len(rows)
