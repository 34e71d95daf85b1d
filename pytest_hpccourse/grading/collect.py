"""Collection nodes: each lesson.toml becomes a collector whose items are the lesson's questions.

Node ids read `modules/02-cuda/04-warp-shuffle/lesson.toml::cuda-04::Q1`. An invalid manifest
collects one failing `manifest` item carrying the validation message.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import answers
from .manifest import Lesson, Question


class QuestionFailed(Exception):
    """Raised by a question item that did not earn full points."""


class LessonFile(pytest.File):
    """A lesson.toml."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        from .course import course_of

        course = course_of(self.config)
        if course is None:
            return
        result = course.result_for(self.path.parent)
        if result.lesson is None:
            yield ManifestItem.from_parent(self, name=f"{result.id}::manifest", message=result.invalid)
            return
        yield LessonNode.from_parent(self, name=result.lesson.id, lesson=result.lesson)


class LessonNode(pytest.Collector):
    def __init__(self, *, lesson: Lesson, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lesson = lesson

    def collect(self) -> Iterator[pytest.Item]:
        for index, question in enumerate(self.lesson.questions):
            yield QuestionItem.from_parent(self, name=question.id, lesson=self.lesson, index=index)


class _MessageItem(pytest.Item):
    """An item whose failure is a one-line grading message, not a traceback."""

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, QuestionFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class ManifestItem(_MessageItem):
    def __init__(self, *, message: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:
        raise QuestionFailed(f"INVALID lesson: {self.message}")

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, self.name


class QuestionItem(_MessageItem):
    """Grades one question from the lesson's answers.yaml; fails with the reason points were lost."""

    def __init__(self, *, lesson: Lesson, index: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lesson = lesson
        self.index = index

    @property
    def question(self) -> Question:
        return self.lesson.questions[self.index]

    def runtest(self) -> None:
        from .course import course_of

        course = course_of(self.config)
        result = course.grade_questions_for(self.lesson.dir) if course else None
        if result is None or len(result.grades) <= self.index:
            raise QuestionFailed("not graded")
        grade = result.grades[self.index]
        self.user_properties.append(("hpccourse_question", {"id": self.question.id, "score": grade.score,
                                                             "max_score": grade.max_score, "status": grade.status}))
        if grade.status == "NEEDS":
            pytest.skip(grade.message)
        if grade.status != "PASS":
            raise QuestionFailed(f"{grade.message} [{grade.score:g}/{grade.max_score:g}]")

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"{self.lesson.id}::{self.question.id} ({self.question.kind}, {answers.FILENAME})"
