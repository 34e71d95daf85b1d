"""What a grading task runs: the instructor's pristine module with only the learner's own files laid over it.

From the pristine module (`--module`: the course source or a released module) every file goes to the task
except the files a learner edits (each lesson's `files` and `answers.yaml`: in the course source they hold the
reference solution). From the submission only those editable files are taken, read from the graded commit.
So a fork that edited a test, `lesson.toml`, a `conftest.py`, `pyproject.toml` or a copy of the plugin is
graded with the pristine ones; `Overlay.ignored` names what it changed, for the gradebook:

- every file changed, added or deleted between the repository's first commit (the release it started from)
  and the graded commit, except the editable files and Markdown;
- every file at a pristine path (a test, a helper, `conftest.py`) whose content differs from the pristine one,
  except `lesson.toml` and `pyproject.toml`, which a release rewrites on purpose (their edits show in the first
  rule), and `.hpccourse/`;
- every pytest configuration file (`conftest.py`, `pytest.ini`, `tox.ini`, `setup.cfg`) the pristine module has
  not got.

The pristine module's grading version (`Pristine.digest`) covers every file sent to the tasks, the rubric and
the keys, so a fixed test or key regrades every submission on the next run.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from pytest_hpccourse.grading import manifest
from pytest_hpccourse.grading import rubric as rubric_mod

from .fetch import Checkout, git, git_blob

ANSWERS = "answers.yaml"
GPU = "cuda-gpu"
SKIP_DIRS = frozenset({".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".hpccourse-cache", ".mypy_cache",
                       ".ruff_cache", "node_modules", "build", "dist"})
PYTEST_CONFIG_NAMES = frozenset({"conftest.py", "pytest.ini", "tox.ini", "setup.cfg"})
REWRITTEN_BY_RELEASE = frozenset({"lesson.toml", "pyproject.toml"})
_GPU_MARK = re.compile(r"""mark\.requires\([^)]*["']cuda-gpu["']""")


@dataclass(frozen=True)
class LessonPart:
    path: str  # the lesson folder, relative to the module ('/' separators)
    id: str
    editable: tuple[str, ...]  # module-relative paths of its `files` and answers.yaml
    gpu: str = ""  # "lesson": requires cuda-gpu; "tests": some tests are marked requires("cuda-gpu"); "" neither
    title: str = ""


@dataclass
class Pristine:
    name: str  # the module's folder name
    files: dict[str, bytes]  # module-relative path -> content, editable files left out
    lessons: list[LessonPart]
    keys: bytes | None = None  # --course-keys, written outside the module in the task
    digest: str = ""

    def editable(self) -> set[str]:
        return {p for lesson in self.lessons for p in lesson.editable}


@dataclass
class Overlay:
    files: dict[str, bytes] = field(default_factory=dict)  # editable path -> the submission's content
    missing: list[str] = field(default_factory=list)  # editable paths the commit does not have
    ignored: list[str] = field(default_factory=list)  # what the submission changed and grading does not use


def blob_id(data: bytes) -> str:
    """git's object id of a blob with this content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _walk(root: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        out += [Path(dirpath) / n for n in sorted(filenames) if not n.endswith((".pyc", ".pyo"))]
    return out


def _lesson_part(module: Path, folder: Path) -> LessonPart:
    rel = folder.relative_to(module).as_posix()
    raw = manifest.read_raw(folder)
    files = raw.get("files") if isinstance(raw.get("files"), list) else []
    requires = raw.get("requires") if isinstance(raw.get("requires"), list) else []
    tests = raw.get("tests") if isinstance(raw.get("tests"), list) else []
    editable = tuple(sorted({f"{rel}/{f}" for f in map(str, files)} | {f"{rel}/{ANSWERS}"}))
    gpu = ""
    if GPU in map(str, requires):
        gpu = "lesson"
    else:
        for name in map(str, tests):
            try:
                if _GPU_MARK.search((folder / name).read_text(encoding="utf-8", errors="replace")):
                    gpu = "tests"
                    break
            except OSError:
                continue
    lesson_id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else folder.name
    title = raw.get("title") if isinstance(raw.get("title"), str) else ""
    return LessonPart(rel, lesson_id, editable, gpu, title)


def load_pristine(module: Path, course_keys: Path | None = None) -> Pristine:
    """The pristine module at `module` as the tasks get it (module docstring)."""
    module = Path(module).resolve()
    if not module.is_dir():
        raise FileNotFoundError(f"no module folder {module}")
    lessons = [_lesson_part(module, folder) for folder in manifest.iter_lesson_dirs([module])]
    if not lessons:
        raise FileNotFoundError(f"{module}: no lesson.toml below it")
    editable = {p for lesson in lessons for p in lesson.editable}
    files: dict[str, bytes] = {}
    for path in _walk(module):
        rel = path.relative_to(module).as_posix()
        if rel not in editable:
            files[rel] = path.read_bytes()
    if rubric_mod.FILENAME not in files:  # the course's scoring.toml above the module governs it
        source = rubric_mod.find(module)
        if source is not None:
            files[rubric_mod.FILENAME] = source.read_bytes()
    keys = Path(course_keys).read_bytes() if course_keys else None
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    digest.update(b"keys\0" + (hashlib.sha256(keys).digest() if keys is not None else b"-"))
    return Pristine(module.name, files, lessons, keys, digest.hexdigest())


def _tree(checkout: Checkout, commit: str) -> dict[str, str]:
    """module-relative path -> blob id of every file in `commit`."""
    out = {}
    for line in git(checkout.git_dir, "ls-tree", "-r", "-z", "--full-tree", commit).split("\0"):
        if not line:
            continue
        meta, _, path = line.partition("\t")
        kind, oid = meta.split()[1:3]
        if kind == "blob":
            out[path] = oid
    return out


def _ignorable(rel: str) -> bool:
    return rel.lower().endswith((".md", ".rst"))


def overlay(checkout: Checkout, pristine: Pristine) -> Overlay:
    """The submission's editable files at the graded commit, and what else it changed (module docstring)."""
    result = Overlay()
    tree = _tree(checkout, checkout.commit)
    editable = pristine.editable()
    for rel in sorted(editable):
        oid = tree.get(rel)
        if oid is None:
            result.missing.append(rel)
            continue
        result.files[rel] = git_blob(checkout.git_dir, oid)
    ignored: set[str] = set()
    if checkout.first and checkout.first != checkout.commit:
        changed = git(checkout.git_dir, "diff", "--name-only", "-z", "--no-renames", checkout.first,
                      checkout.commit).split("\0")
        ignored.update(p for p in changed if p and p not in editable and not _ignorable(p))
    for rel, oid in tree.items():
        name = rel.rsplit("/", 1)[-1]
        if rel in editable or _ignorable(rel) or rel.startswith(".hpccourse/"):
            continue
        if rel in pristine.files:
            if name not in REWRITTEN_BY_RELEASE and blob_id(pristine.files[rel]) != oid:
                ignored.add(rel)
        elif name in PYTEST_CONFIG_NAMES:
            ignored.add(rel)
    result.ignored = sorted(ignored)
    return result
