"""Tamper detection for released student repos: `.hpccourse/manifest.sha256`.

`hpccourse release` records the SHA-256 of every file that decides a grade; in Classroom mode the
plugin asks `modified_protected_files` which lessons no longer match and scores them 0 ("tests
modified").

Protected: the repo's `scoring.toml`, `pyproject.toml`, `conftest.py`, `.hpccourse/keys.toml` (when
present), and in each lesson folder (a folder with `lesson.toml`) everything except what the
learner edits (`files` of lesson.toml and `answers.yaml`) and Markdown text: `lesson.toml`, the
tests, helpers, data. Adding a pytest configuration file (`conftest.py`, `pytest.ini`, `tox.ini`,
`setup.cfg`) anywhere also counts as tampering: such a file can rewrite test outcomes.

The manifest uses `sha256sum`'s text format (`<hex>  <path>`, sorted, '/' separators; `sha256sum -c`
verifies it); text files are hashed with CRLF read as LF, so a Windows checkout with autocrlf is not
"tampering".

This is a tripwire, not a lock: a learner who edits both a test and the manifest, or the workflow
itself, is not stopped here (see template-repo/instructor/README.md).
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

MANIFEST = ".hpccourse/manifest.sha256"
KEYS = ".hpccourse/keys.toml"
ROOT_PROTECTED = ("scoring.toml", "pyproject.toml", "conftest.py", KEYS)
PYTEST_CONFIG_NAMES = frozenset({"conftest.py", "pytest.ini", "tox.ini", "setup.cfg"})
SKIP_DIRS = frozenset({".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".hpccourse-cache",
                       "node_modules", ".mypy_cache", ".ruff_cache", "build", "dist"})


class IntegrityError(Exception):
    """The manifest is unreadable or malformed."""


def file_digest(path: Path) -> str:
    """SHA-256 of the file; text files (no NUL byte, git's heuristic) with CRLF read as LF."""
    data = path.read_bytes()
    if b"\0" not in data:
        data = data.replace(b"\r\n", b"\n")
    return hashlib.sha256(data).hexdigest()


def find_repo_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` that holds `.hpccourse/manifest.sha256`."""
    start = start.resolve()
    for d in (start, *start.parents):
        if (d / MANIFEST).is_file():
            return d
    return None


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if not name.endswith((".pyc", ".pyo")):
                yield Path(dirpath) / name


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def lesson_dirs(repo_root: Path) -> list[Path]:
    return sorted(p.parent for p in _walk(repo_root) if p.name == "lesson.toml")


def _editable(lesson_dir: Path) -> set[str]:
    with open(lesson_dir / "lesson.toml", "rb") as f:
        data = tomllib.load(f)
    files = data.get("files", [])
    editable = {"answers.yaml"}
    if isinstance(files, list):
        editable.update(str(x) for x in files)
    return editable


def protected_files(repo_root: Path) -> list[str]:
    """Repo-relative paths ('/' separators) of every protected file, sorted."""
    root = repo_root.resolve()
    out = {name for name in ROOT_PROTECTED if (root / name).is_file()}
    for ldir in lesson_dirs(root):
        editable = _editable(ldir)
        for p in _walk(ldir):
            rel_lesson = _rel(p, ldir)
            if rel_lesson in editable or p.suffix.lower() in (".md", ".rst"):
                continue
            out.add(_rel(p, root))
    return sorted(out)


def write_manifest(repo_root: Path) -> Path:
    """Write `.hpccourse/manifest.sha256` for the repo at `repo_root`; returns its path."""
    root = repo_root.resolve()
    lines = [f"{file_digest(root / rel)}  {rel}\n" for rel in protected_files(root)]
    target = root / MANIFEST
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(lines), encoding="utf-8", newline="\n")
    return target


def read_manifest(repo_root: Path) -> dict[str, str]:
    """path -> sha256 hex from the repo's manifest."""
    path = repo_root / MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise IntegrityError(f"cannot read {path}: {e}") from e
    entries: dict[str, str] = {}
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64 or not rel or rel.startswith("/") or ".." in rel.split("/"):
            raise IntegrityError(f"{path}:{no}: malformed manifest line {line!r}")
        entries[rel] = digest
    return entries


def modified_protected_files(repo_root: Path) -> dict[str, list[str]]:
    """Lesson dir (repo-relative, '/'; '.' for a lesson at the root) -> its changed, missing or
    added protected files (repo-relative). Lessons without changes are absent. A change outside
    every lesson folder (scoring.toml, keys, a new top-level conftest.py) counts for every lesson.
    """
    root = repo_root.resolve()
    manifest = read_manifest(root)
    lessons = sorted({rel.rpartition("/")[0] or "." for rel in manifest
                      if rel == "lesson.toml" or rel.endswith("/lesson.toml")})
    changed = [rel for rel, digest in manifest.items()
               if not (root / rel).is_file() or file_digest(root / rel) != digest]
    changed += [_rel(p, root) for p in _walk(root)
                if p.name in PYTEST_CONFIG_NAMES and _rel(p, root) not in manifest]
    result: dict[str, list[str]] = {}
    for rel in sorted(set(changed)):
        owner = _owner(rel, lessons)
        for lesson in ([owner] if owner is not None else lessons):
            result.setdefault(lesson, []).append(rel)
    return result


def _owner(rel: str, lessons: list[str]) -> str | None:
    best: str | None = None
    for lesson in lessons:
        if lesson == "." or rel.startswith(lesson + "/"):
            if best is None or len(lesson) > len(best) or best == ".":
                best = lesson
    return best
