"""`lesson.toml`: load, validate and find lessons (DESIGN.md, "lesson.toml").

Validation errors read `<path>/lesson.toml: questions[1].rel_tol: must be a positive number`:
one message, the first problem found, naming the field. Answer keys (`answer`, `groups`,
`explanation`) may be absent from a released manifest; `apply_keys` merges them from a keys file.
"""

from __future__ import annotations

import fnmatch
import functools
import math
import os
import re
import tomllib
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import capabilities, formula

FILENAME = "lesson.toml"
QUESTION_IDS = ("Q1", "Q2", "Q3")
KINDS = ("choice", "multi", "numeric", "formula", "keywords")
OBJECTIVE_KINDS = frozenset({"choice", "multi", "numeric", "formula"})
KEY_FIELDS = ("answer", "groups", "explanation")
LESSON_ID = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*-\d{2}$")
OPTION = re.compile(r"^\s*([A-Z])[.．、)]")


class ManifestError(ValueError):
    """A lesson.toml that does not validate; `str()` is the full message with path and field."""


@dataclass(frozen=True)
class Mutant:
    file: str
    find: str
    replace: str
    count: int
    why: str


@dataclass(frozen=True)
class Question:
    id: str
    kind: str
    prompt: str
    answer: Any = None
    explanation: str = ""
    options: tuple[str, ...] = ()
    rel_tol: float | None = None
    abs_tol: float | None = None
    unit: str = ""
    variables: tuple[str, ...] = ()
    domain: tuple[float, float] = (1.0, 1000.0)
    groups: tuple[tuple[str, ...], ...] = ()
    max_chars: int | None = None

    @property
    def has_key(self) -> bool:
        if self.kind == "keywords":
            return bool(self.groups)
        return self.answer is not None

    def option_letters(self) -> list[str]:
        letters = []
        for option in self.options:
            m = OPTION.match(option)
            letters.append(m.group(1) if m else "")
        return letters


@dataclass(frozen=True)
class Lesson:
    dir: Path
    id: str
    title: str
    title_en: str = ""
    requires: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    mutants: tuple[Mutant, ...] = ()
    questions: tuple[Question, ...] = ()
    alternatives: tuple[Mutant, ...] = ()  # different-but-correct edits: must keep full code points
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def manifest(self) -> Path:
        return self.dir / FILENAME


def display_path(path: Path) -> str:
    """`path` relative to the working directory when it lies below it, with '/' separators."""
    try:
        rel = Path(os.path.relpath(path))
    except ValueError:
        return path.as_posix()
    return path.as_posix() if rel.as_posix().startswith("../") else rel.as_posix()


class _Validator:
    def __init__(self, where: str, kinds: Mapping[str, Any] | None = None,
                 capabilities: Collection[str] | None = None) -> None:
        self.where = where
        # The question kinds (name -> grader) and capabilities a lesson may use; None: the built-in ones.
        self.kinds = kinds
        self.capabilities = capabilities

    def kind_names(self) -> tuple[str, ...]:
        if self.kinds is None:
            return KINDS
        return tuple(k for k in KINDS if k in self.kinds) + tuple(sorted(k for k in self.kinds if k not in KINDS))

    def objective(self, kind: str) -> bool:
        if kind in KINDS:
            return kind in OBJECTIVE_KINDS
        return self.kinds is not None and bool(getattr(self.kinds.get(kind), "objective", True))

    def known_capabilities(self) -> frozenset[str]:
        return capabilities.known() if self.capabilities is None else frozenset(self.capabilities)

    def fail(self, field_name: str, message: str) -> None:
        raise ManifestError(f"{self.where}: {field_name}: {message}")

    def string(self, table: dict, key: str, prefix: str, *, required: bool = True, default: str = "") -> str:
        name = f"{prefix}{key}"
        if key not in table:
            if required:
                self.fail(name, "is required")
            return default
        value = table[key]
        if not isinstance(value, str) or (required and not value.strip()):
            self.fail(name, "must be a non-empty string")
        return value

    def string_list(self, table: dict, key: str, prefix: str = "", *, nonempty: bool = False) -> tuple[str, ...]:
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            self.fail(f"{prefix}{key}", "must be a list of non-empty strings")
        if nonempty and not value:
            self.fail(f"{prefix}{key}", "must not be empty")
        return tuple(value)

    def tolerance(self, table: dict, key: str, prefix: str) -> float | None:
        if key not in table:
            return None
        value = table[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            self.fail(f"{prefix}{key}", "must be a positive number")
        return float(value)


def _letters(answer: Any) -> list[str] | None:
    """Key letters from "B", ["A", "C"] or "A,C"; None when not of that shape."""
    if isinstance(answer, str):
        parts = [p.strip() for p in answer.split(",")]
    elif isinstance(answer, list):
        parts = answer
    else:
        return None
    if not parts or not all(isinstance(p, str) and re.fullmatch(r"[A-Z]", p.strip()) for p in parts):
        return None
    return [p.strip() for p in parts]


def _question(v: _Validator, raw: Any, index: int) -> Question:
    prefix = f"questions[{index}]."
    if not isinstance(raw, dict):
        v.fail(f"questions[{index}]", "must be a table ([[questions]])")
    qid = v.string(raw, "id", prefix)
    if qid != QUESTION_IDS[index]:
        v.fail(prefix + "id", f"must be {QUESTION_IDS[index]!r} (questions are Q1, Q2, Q3 in order)")
    kind = v.string(raw, "kind", prefix)
    if kind not in v.kind_names():
        v.fail(prefix + "kind", f"must be one of {', '.join(v.kind_names())}")
    prompt = v.string(raw, "prompt", prefix)
    explanation = v.string(raw, "explanation", prefix, required=False)
    if "explanation" in raw and not explanation.strip():
        v.fail(prefix + "explanation", "must be a non-empty string")
    known = {"id", "kind", "prompt", "answer", "explanation", "options", "rel_tol", "abs_tol", "unit",
             "variables", "domain", "groups", "max_chars"}
    for key in raw:
        if key not in known:
            v.fail(prefix + key, "is not a known question field")
    q = Question(id=qid, kind=kind, prompt=prompt, explanation=explanation)
    answer = raw.get("answer")

    if kind in ("choice", "multi"):
        options = v.string_list(raw, "options", prefix, nonempty=True)
        if len(options) < 2:
            v.fail(prefix + "options", "must list at least two options")
        letters = [OPTION.match(o).group(1) if OPTION.match(o) else "" for o in options]
        if not all(letters) or len(set(letters)) != len(letters):
            v.fail(prefix + "options", 'each option must start with a distinct capital letter, like "A. ..."')
        q = replace(q, options=options)
        if answer is not None:
            keys = _letters(answer)
            if keys is None or (kind == "choice" and len(keys) != 1):
                shape = "one option letter" if kind == "choice" else "a list of option letters"
                v.fail(prefix + "answer", f"must be {shape}")
            missing = [k for k in keys if k not in letters]
            if missing:
                v.fail(prefix + "answer", f"names option(s) not listed: {', '.join(missing)}")
            q = replace(q, answer=keys[0] if kind == "choice" else sorted(set(keys)))
    elif kind == "numeric":
        rel_tol = v.tolerance(raw, "rel_tol", prefix)
        abs_tol = v.tolerance(raw, "abs_tol", prefix)
        if rel_tol is None and abs_tol is None:
            v.fail(prefix + "rel_tol", "numeric questions need rel_tol or abs_tol")
        unit = v.string(raw, "unit", prefix, required=False)
        q = replace(q, rel_tol=rel_tol, abs_tol=abs_tol, unit=unit)
        if answer is not None:
            if isinstance(answer, bool) or not isinstance(answer, (int, float)) or not math.isfinite(answer):
                v.fail(prefix + "answer", "must be a finite number")
            q = replace(q, answer=float(answer))
    elif kind == "formula":
        variables = v.string_list(raw, "variables", prefix, nonempty=True)
        for name in variables:
            if not name.isidentifier() or name in formula.FUNCTIONS:
                v.fail(prefix + "variables", f"{name!r} is not a usable variable name")
        domain = raw.get("domain", [1.0, 1000.0])
        if (not isinstance(domain, list) or len(domain) != 2
                or not all(isinstance(d, (int, float)) and not isinstance(d, bool) for d in domain)
                or not 0 < domain[0] < domain[1]):
            v.fail(prefix + "domain", "must be [low, high] with 0 < low < high")
        rel_tol = v.tolerance(raw, "rel_tol", prefix)
        q = replace(q, variables=variables, domain=(float(domain[0]), float(domain[1])),
                    rel_tol=rel_tol if rel_tol is not None else 1e-6)
        if answer is not None:
            if not isinstance(answer, str):
                v.fail(prefix + "answer", "must be an expression string")
            try:
                formula.compile_expression(answer, variables)
            except formula.FormulaError as exc:
                v.fail(prefix + "answer", f"is not a valid formula: {exc}")
            q = replace(q, answer=answer)
    elif kind == "keywords":
        groups_raw = raw.get("groups")
        if groups_raw is not None:
            if (not isinstance(groups_raw, list) or not groups_raw
                    or not all(isinstance(g, list) and g and all(isinstance(s, str) and s.strip() for s in g)
                               for g in groups_raw)):
                v.fail(prefix + "groups", "must be a non-empty list of non-empty lists of strings")
            q = replace(q, groups=tuple(tuple(g) for g in groups_raw))
        if "max_chars" in raw:
            mc = raw["max_chars"]
            if isinstance(mc, bool) or not isinstance(mc, int) or mc <= 0:
                v.fail(prefix + "max_chars", "must be a positive integer")
            q = replace(q, max_chars=mc)
        if answer is not None:
            v.fail(prefix + "answer", "keywords questions are keyed by groups, not answer")
    else:
        # A plugin's kind (hook pytest_hpccourse_question_kinds): `answer` is its key, kept as written; `options`
        # and `unit` as for the built-in kinds; its grader's `validate` checks the key.
        if "options" in raw:
            q = replace(q, options=v.string_list(raw, "options", prefix, nonempty=True))
        q = replace(q, unit=v.string(raw, "unit", prefix, required=False), answer=answer)
        validate = getattr(v.kinds.get(kind) if v.kinds else None, "validate", None)
        if answer is not None and callable(validate):
            problem = validate(q)
            if problem:
                v.fail(prefix + "answer", str(problem))
    return q


def _mutant(v: _Validator, raw: Any, index: int, files: tuple[str, ...], lesson_dir: Path,
            table: str = "mutants") -> Mutant:
    """One `[[mutants]]` entry, or (table="alternatives") one `[[alternatives]]` entry: the same
    fields, an edit of the reference that must keep full code points instead of losing some."""
    prefix = f"{table}[{index}]."
    if not isinstance(raw, dict):
        v.fail(f"{table}[{index}]", f"must be a table ([[{table}]])")
    file = v.string(raw, "file", prefix)
    if file not in files:
        v.fail(prefix + "file", f"{file!r} is not one of the lesson's files")
    find = v.string(raw, "find", prefix)
    if "replace" not in raw or not isinstance(raw["replace"], str):
        v.fail(prefix + "replace", "must be a string (may be empty)")
    count = raw.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        v.fail(prefix + "count", "must be a positive integer")
    why = v.string(raw, "why", prefix)
    if raw["replace"] == find:
        v.fail(prefix + "replace", "must differ from find")
    return Mutant(file=file, find=find, replace=raw["replace"], count=count, why=why)


def parse(data: dict, lesson_dir: Path, where: str | None = None, *, kinds: Mapping[str, Any] | None = None,
          capabilities: Collection[str] | None = None) -> Lesson:
    """Validate a manifest's TOML. `kinds` (kind -> grader) and `capabilities` (names) are those a run's
    plugins provide (hooks `pytest_hpccourse_question_kinds`, `pytest_hpccourse_capabilities`); None: the built-in ones."""
    v = _Validator(where or display_path(lesson_dir / FILENAME), kinds, capabilities)
    known = {"id", "title", "title_en", "requires", "files", "tests", "mutants", "alternatives", "questions"}
    for key in data:
        if key not in known:
            v.fail(key, "is not a known lesson field")
    lesson_id = v.string(data, "id", "")
    if not LESSON_ID.match(lesson_id):
        v.fail("id", 'must look like "<module prefix>-<NN>", e.g. "cuda-04"')
    title = v.string(data, "title", "")
    title_en = v.string(data, "title_en", "", required=False)
    requires = v.string_list(data, "requires")
    for cap in requires:
        if cap not in v.known_capabilities():
            v.fail("requires", f"unknown capability {cap!r} (known: {', '.join(sorted(v.known_capabilities()))})")
    files = v.string_list(data, "files")
    tests = v.string_list(data, "tests", nonempty=True)
    for key, names in (("files", files), ("tests", tests)):
        for name in names:
            if Path(name).is_absolute() or ".." in Path(name).parts:
                v.fail(key, f"{name!r} must be a path inside the lesson folder")
            if not (lesson_dir / name).is_file():
                v.fail(key, f"{name!r} does not exist")
    for name in tests:
        if not name.endswith(".py"):
            v.fail("tests", f"{name!r} must be a Python test file")
    mutants_raw = data.get("mutants", [])
    if not isinstance(mutants_raw, list):
        v.fail("mutants", "must be an array of tables ([[mutants]])")
    mutants = tuple(_mutant(v, m, i, files, lesson_dir) for i, m in enumerate(mutants_raw))
    alternatives_raw = data.get("alternatives", [])
    if not isinstance(alternatives_raw, list):
        v.fail("alternatives", "must be an array of tables ([[alternatives]])")
    alternatives = tuple(_mutant(v, m, i, files, lesson_dir, "alternatives")
                         for i, m in enumerate(alternatives_raw))
    questions_raw = data.get("questions", [])
    if not isinstance(questions_raw, list) or len(questions_raw) != 3:
        v.fail("questions", "must hold exactly three [[questions]] (Q1, Q2, Q3)")
    questions = tuple(_question(v, q, i) for i, q in enumerate(questions_raw))
    if sum(q.kind == "keywords" for q in questions) > 1:
        v.fail("questions", "at most one keywords question per lesson")
    if sum(v.objective(q.kind) for q in questions) < 2:
        objective = ", ".join(k for k in v.kind_names() if v.objective(k))
        v.fail("questions", f"at least two questions must be objectively graded ({objective})")
    return Lesson(dir=lesson_dir, id=lesson_id, title=title, title_en=title_en, requires=requires,
                  files=files, tests=tests, mutants=mutants, questions=questions,
                  alternatives=alternatives, raw=data)


def load_lesson(lesson_dir: Path, *, kinds: Mapping[str, Any] | None = None,
                capabilities: Collection[str] | None = None) -> Lesson:
    """Load and validate `lesson_dir/lesson.toml`; raises ManifestError. `kinds`, `capabilities`: as
    for `parse` (None: the built-in ones, as `hpccourse check` and `audit` load lessons outside pytest)."""
    lesson_dir = Path(lesson_dir).resolve()
    path = lesson_dir / FILENAME
    where = display_path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ManifestError(f"{where}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{where}: not UTF-8 text: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{where}: invalid TOML: {exc}") from exc
    return parse(data, lesson_dir, where, kinds=kinds, capabilities=capabilities)


def read_raw(lesson_dir: Path) -> dict:
    """The manifest's TOML without validation ({} when unreadable), to name an invalid lesson."""
    try:
        return tomllib.loads((lesson_dir / FILENAME).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def read_id(lesson_dir: Path) -> str | None:
    """The lesson id, read without validation (for reporting an invalid lesson); None if unreadable."""
    value = read_raw(lesson_dir).get("id")
    return value if isinstance(value, str) and value else None


SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".pytest_cache", ".tox", "build", "dist"}


def iter_lesson_dirs(paths: Iterable[Path], skip: Iterable[str] = (),
                     ignore: Iterable[Path] = ()) -> Iterator[Path]:
    """Every folder holding a lesson.toml at or below `paths` (sorted, each once).

    `skip` holds fnmatch patterns of folder names not to enter (pytest's `norecursedirs`);
    `ignore` holds paths not to enter (pytest's `--ignore`).
    """
    patterns = list(skip)
    ignored = {Path(p).resolve() for p in ignore}

    def skipped(folder: Path, name: str) -> bool:
        return (name in SKIP_DIRS or name.startswith(".") or any(fnmatch.fnmatch(name, p) for p in patterns)
                or (folder / name).resolve() in ignored)

    seen: set[Path] = set()
    found: list[Path] = []
    for start in paths:
        start = Path(start).resolve()
        if start.is_file():
            start = start.parent
        # A path inside a lesson (a test file, a sub folder) belongs to that lesson.
        for folder in (start, *start.parents):
            if (folder / FILENAME).is_file():
                if folder not in seen:
                    seen.add(folder)
                    found.append(folder)
                break
        if not start.is_dir():
            continue
        for root, dirs, names in os.walk(start):
            dirs[:] = sorted(d for d in dirs if not skipped(Path(root), d))
            if FILENAME in names:
                folder = Path(root)
                if folder not in seen:
                    seen.add(folder)
                    found.append(folder)
    yield from sorted(found)


def lesson_dir_of(path: Path) -> Path | None:
    """The lesson folder that contains `path`, if any."""
    return _lesson_dir_of_path(str(path))


@functools.lru_cache(maxsize=4096)
def _lesson_dir_of_path(path_name: str) -> Path | None:
    path = Path(path_name)
    return _lesson_dir_of_folder(str(path if path.is_dir() else path.parent))


@functools.lru_cache(maxsize=4096)
def _lesson_dir_of_folder(folder_name: str) -> Path | None:
    folder = Path(folder_name).resolve()
    for candidate in (folder, *folder.parents):
        if (candidate / FILENAME).is_file():
            return candidate
    return None


# ---- answer keys ---------------------------------------------------------------------------

def read_keys(path: Path) -> dict[str, dict[str, dict]]:
    """A keys file: `["<lesson id>".Q1]` tables holding answer / groups / explanation."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ManifestError(f"{display_path(Path(path))}: cannot read answer keys: {exc}") from exc
    if not all(isinstance(t, dict) and all(isinstance(q, dict) for q in t.values()) for t in data.values()):
        raise ManifestError(f"{display_path(Path(path))}: keys must be [\"<lesson id>\".Qn] tables")
    return data


def apply_keys(lesson: Lesson, keys: dict[str, dict[str, dict]], where: str = "keys", *,
               kinds: Mapping[str, Any] | None = None, capabilities: Collection[str] | None = None) -> Lesson:
    """`lesson` with key fields filled from `keys` where the manifest lacks them, re-validated."""
    table = keys.get(lesson.id)
    if not table:
        return lesson
    data = dict(lesson.raw)
    questions = []
    for raw in data.get("questions", []):
        raw = dict(raw)
        for key, value in table.get(raw.get("id", ""), {}).items():
            if key in KEY_FIELDS and key not in raw:
                raw[key] = value
        questions.append(raw)
    data["questions"] = questions
    return parse(data, lesson.dir, f"{display_path(lesson.manifest)} (+ {where})", kinds=kinds,
                 capabilities=capabilities)
