"""The state of one graded run: which lessons, their results so far, and the final document."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from . import answers, manifest, report
from . import capabilities as caps_mod
from . import rubric as rubric_mod
from .results import PROPERTY, LessonResult, combine, failure_line

KEYS_ENV = "HPCCOURSE_KEYS"
REPO_KEYS = Path(".hpccourse") / "keys.toml"


class Course:
    def __init__(self, rootdir: Path, lesson_dirs: list[Path], keys_path: str | None = None, *,
                 capabilities: caps_mod.Capabilities | None = None,
                 kinds: Mapping[str, answers.Grader] | None = None) -> None:
        self.rootdir = Path(rootdir).resolve()
        # What the run's plugins provide (hooks pytest_hpccourse_capabilities, pytest_hpccourse_question_kinds; the
        # built-in ones come through them too); the defaults are the built-in ones.
        self.capabilities = capabilities if capabilities is not None else caps_mod.Capabilities()
        self.kinds: Mapping[str, answers.Grader] = kinds if kinds is not None else dict(answers.KINDS)
        self.results: dict[Path, LessonResult] = {}
        self.notices: list[str] = []
        self.explicit_keys: dict[str, dict[str, dict]] = {}
        keys_path = keys_path or os.environ.get(KEYS_ENV) or None
        if keys_path:
            try:
                self.explicit_keys = manifest.read_keys(Path(keys_path))
            except manifest.ManifestError as exc:
                self.notices.append(f"hpccourse: {exc}")
        self._repo_keys: dict[Path, dict[str, dict[str, dict]]] = {}
        self._by_rel: dict[str, LessonResult] = {}
        self._by_given: dict[str, LessonResult] = {}
        self._rubrics: dict[Path | None, rubric_mod.Rubric] = {}
        self._graded: set[Path] = set()
        self._doc: dict[str, Any] | None = None
        for folder in lesson_dirs:
            self.result_for(folder)
        if self.results and any(r.rubric.source is None for r in self.results.values()):
            self.notices.append("hpccourse: no scoring.toml found above the lessons; using the default rubric "
                                "(code 4, questions 2+2+2, pass 8)")

    # ---- lessons --------------------------------------------------------------------------
    def result_for(self, folder: Path) -> LessonResult:
        known = self._by_given.get(str(folder))
        if known is not None:
            return known
        given = str(folder)
        folder = Path(folder).resolve()
        if folder in self.results:
            self._by_given[given] = self.results[folder]
            return self.results[folder]
        try:
            rel = folder.relative_to(self.rootdir).as_posix()
        except ValueError:
            rel = folder.as_posix()
        result = LessonResult(dir=folder, path=rel, id=folder.name)
        try:
            result.rubric = self._rubric(folder)
        except rubric_mod.RubricError as exc:
            result.invalid = str(exc)
        try:
            lesson = manifest.load_lesson(folder, kinds=self.kinds, capabilities=self.capabilities.known())
        except manifest.ManifestError as exc:
            result.invalid = result.invalid or str(exc)
            raw = manifest.read_raw(folder)
            result.id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else folder.name
            result.title = raw.get("title") if isinstance(raw.get("title"), str) else ""
            requires = raw.get("requires")
            if isinstance(requires, list):
                result.raw_requires = tuple(str(c) for c in requires)
        else:
            result.lesson, result.id, result.title, result.title_en = lesson, lesson.id, lesson.title, lesson.title_en
            result.raw_requires = tuple(lesson.requires)
        self.results[folder] = result
        self._by_rel[rel] = result
        return result

    def _rubric(self, folder: Path) -> rubric_mod.Rubric:
        source = rubric_mod.find(folder)
        if source not in self._rubrics:
            self._rubrics[source] = rubric_mod.load(folder)
        return self._rubrics[source]

    def result_for_rel(self, rel: str) -> LessonResult:
        """The result of the lesson at `rel` (relative to the rootdir, as reports carry it)."""
        result = self._by_rel.get(rel)
        return result if result is not None else self.result_for(self.rootdir / rel)

    def result_for_path(self, path: Path) -> LessonResult | None:
        folder = manifest.lesson_dir_of(path)
        return self.result_for(folder) if folder is not None else None

    def keys_for(self, folder: Path) -> dict[str, dict[str, dict]]:
        """Explicit keys (--course-keys / HPCCOURSE_KEYS) first, then the repo's .hpccourse/keys.toml."""
        merged: dict[str, dict[str, dict]] = {}
        sources = [self.explicit_keys]
        for parent in (folder, *folder.parents):
            candidate = parent / REPO_KEYS
            if candidate.is_file():
                if candidate not in self._repo_keys:
                    try:
                        self._repo_keys[candidate] = manifest.read_keys(candidate)
                    except manifest.ManifestError as exc:
                        self.notices.append(f"hpccourse: {exc}")
                        self._repo_keys[candidate] = {}
                sources.append(self._repo_keys[candidate])
                break
        for source in sources:
            for lesson_id, table in source.items():
                slot = merged.setdefault(lesson_id, {})
                for qid, fields in table.items():
                    target = slot.setdefault(qid, {})
                    for key, value in fields.items():
                        target.setdefault(key, value)
        return merged

    def grade_questions_for(self, folder: Path) -> LessonResult:
        result = self.result_for(folder)
        if result.dir not in self._graded:
            result.grade_questions(self.keys_for(result.dir), kinds=self.kinds,
                                   capabilities=self.capabilities.known())
            self._graded.add(result.dir)
        return result

    # ---- reports --------------------------------------------------------------------------
    def add_report(self, rep: Any) -> None:
        props = next((value for name, value in rep.user_properties if name == PROPERTY), None)
        if not props:
            return
        result = self.result_for_rel(props["dir"])
        result.tests[rep.nodeid] = combine(result.tests.get(rep.nodeid), rep, props)
        self._doc = None

    def add_collect_error(self, rep: Any) -> None:
        path = rep.nodeid.split("::")[0]
        if not path:
            return
        result = self.result_for_path(self.rootdir / path)
        if result is None or Path(path).name == manifest.FILENAME:
            return
        result.collect_errors.append(f"{Path(path).name}: cannot be collected: {failure_line(rep)}".replace(
            "error in collect: ", ""))
        self._doc = None

    def mark_tampered(self, changed: dict[str, list[str]], repo_root: Path) -> None:
        for rel_dir, files in changed.items():
            result = self.results.get((repo_root / rel_dir).resolve())
            if result is not None:
                result.tampered = list(files)
        self._doc = None

    # ---- output ---------------------------------------------------------------------------
    def document(self) -> dict[str, Any]:
        if self._doc is None:
            lessons = []
            for folder in sorted(self.results, key=lambda f: self.results[f].path):
                lessons.append(self.grade_questions_for(folder).to_dict())
            rubric = next(iter(self.results.values())).rubric if self.results else rubric_mod.Rubric()
            self._doc = report.document(lessons, rubric)
        return self._doc

    def durations(self) -> dict[str, float]:
        return {r.id: sum(t.duration for t in r.tests.values()) for r in self.results.values()}


COURSE_KEY = pytest.StashKey[Course]()  # the run's Course, stashed on the config by the plugin


def course_of(config: pytest.Config) -> Course | None:
    """The run's `Course` (None when the run holds no lessons)."""
    return config.stash.get(COURSE_KEY, None)
