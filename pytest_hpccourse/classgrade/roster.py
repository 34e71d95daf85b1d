"""The class roster: who is graded and where their work lives (CSV).

Columns are matched by name, case-insensitively; the first header found of each group wins:

- student: `student`, `github_username`, `login`, `roster_identifier`, `name`
- repository (a clone URL or a local path, relative to the roster's folder): `repo`, `repository`, `url`,
  `path`, `student_repository_url`
- commit (optional; pins the graded commit): `commit`, `sha`
- module (optional): the folder name of the `--module` this repository is a fork of (`00-demo`). GitHub
  Classroom makes one repository per student and assignment, so a course with one assignment per module has a
  row per student and module; without the column, every row is graded against every `--module`.

GitHub Classroom's "Download grades" export of an assignment has `github_username`, `roster_identifier` and
`student_repository_url`, so it is a roster as it is. A row without a repository (the student never accepted
the assignment) is listed in `Roster.skipped`, not graded.
"""

from __future__ import annotations

import csv
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

STUDENT_COLUMNS = ("student", "github_username", "login", "roster_identifier", "name")
REPO_COLUMNS = ("repo", "repository", "url", "path", "student_repository_url")
COMMIT_COLUMNS = ("commit", "sha")
MODULE_COLUMNS = ("module",)
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://|^[^/\s]+@[^/\s]+:")  # scheme://… or scp-like user@host:path


class RosterError(Exception):
    """The roster cannot be read: no header we know, a duplicate student, an unreadable file."""


@dataclass(frozen=True)
class Submission:
    student: str
    repo: str  # clone URL, or an absolute local path
    commit: str = ""  # pinned commit ('' = by deadline or the tip)
    module: str = ""  # the module this repository is for ('' = every module graded)

    @property
    def key(self) -> str:
        """The name of its mirror in the cache: one per student and module."""
        return safe_name(self.student) + (f"--{safe_name(self.module)}" if self.module else "")


@dataclass
class Roster:
    submissions: list[Submission] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "student: why", one per row not graded


def _column(header: list[str], names: tuple[str, ...]) -> int | None:
    lowered = [h.strip().lower() for h in header]
    for name in names:
        if name in lowered:
            return lowered.index(name)
    return None


def is_url(repo: str) -> bool:
    return bool(_URL.match(repo))


def read_roster(path: Path) -> Roster:
    """The submissions of the roster at `path` (module docstring for the columns)."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise RosterError(f"cannot read the roster {path}: {exc}") from exc
    rows = [row for row in csv.reader(text.splitlines()) if any(cell.strip() for cell in row)]
    if not rows:
        raise RosterError(f"{path}: empty roster")
    header, body = rows[0], rows[1:]
    student_col, repo_col = _column(header, STUDENT_COLUMNS), _column(header, REPO_COLUMNS)
    commit_col, module_col = _column(header, COMMIT_COLUMNS), _column(header, MODULE_COLUMNS)
    if student_col is None or repo_col is None:
        raise RosterError(f"{path}: the header needs a student column ({', '.join(STUDENT_COLUMNS)}) and a "
                          f"repository column ({', '.join(REPO_COLUMNS)}); found {', '.join(header)}")
    roster = Roster()
    seen: dict[tuple[str, str], int] = {}
    for line, row in enumerate(body, 2):
        def cell(col: int | None, row: list[str] = row) -> str:
            return row[col].strip() if col is not None and col < len(row) else ""

        student = cell(student_col)
        if not student:  # Classroom: a roster entry not linked to a GitHub account
            student = cell(_column(header, ("roster_identifier",)))
        if not student:
            raise RosterError(f"{path}:{line}: no student name")
        module = cell(module_col)
        for (other, other_module), first in seen.items():  # '' means every module: it clashes with any
            if other == student and (other_module == module or not other_module or not module):
                raise RosterError(f"{path}:{line}: student {student!r} already on line {first}"
                                  + (f" for module {module}" if module else ""))
        seen[(student, module)] = line
        repo = cell(repo_col)
        if not repo:
            roster.skipped.append(f"{student}: no repository (assignment not accepted?)")
            continue
        if not is_url(repo):
            repo = str((Path(path).parent / repo).resolve())
        roster.submissions.append(Submission(student, repo, cell(commit_col), module))
    return roster


def safe_name(student: str) -> str:
    """The student's name as a file name (letters, digits, `._-`; anything else becomes `_`)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", student).strip(".")[:80] or "_"
    if cleaned != student:  # two names that clean to the same text stay apart
        cleaned += "-" + hashlib.sha1(student.encode("utf-8")).hexdigest()[:8]
    return cleaned
