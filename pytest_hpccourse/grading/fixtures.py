"""Fixtures lesson tests use: `lesson` (the lesson's files, learner code loaded safely) and `device`."""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from . import manifest

_counter = itertools.count()


class LessonFiles:
    """The files of one lesson. `load` imports a learner file under a name no other lesson shares."""

    def __init__(self, lesson_dir: Path, lesson_id: str) -> None:
        self.dir = Path(lesson_dir)
        self.id = lesson_id

    def __repr__(self) -> str:
        return f"<lesson {self.id} at {self.dir}>"

    def path(self, name: str) -> Path:
        """Path of `name` inside the lesson folder; FileNotFoundError if it is not there."""
        target = (self.dir / name).resolve()
        if self.dir.resolve() not in (target, *target.parents):
            raise ValueError(f"{name!r} is outside lesson {self.id}")
        if not target.exists():
            raise FileNotFoundError(f"lesson {self.id} has no file {name!r}")
        return target

    def load(self, name: str) -> ModuleType:
        """Import the lesson's Python file `name` afresh as a uniquely named module."""
        path = self.path(name)
        slug = re.sub(r"\W", "_", f"{self.id}_{path.stem}")
        module_name = f"hpccourse_lesson_{slug}_{next(_counter)}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        # Registered so that pickling, dataclasses and inspect.getsource (Triton's @jit) work.
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
        return module


def _lesson_for(node: pytest.Item) -> LessonFiles:
    folder = manifest.lesson_dir_of(Path(node.path))
    if folder is None:
        raise pytest.UsageError(f"{node.nodeid}: the `lesson` fixture is only available inside a lesson folder")
    return LessonFiles(folder, manifest.read_id(folder) or folder.name)


@pytest.fixture(scope="module")
def lesson(request: pytest.FixtureRequest) -> LessonFiles:
    """The lesson this test belongs to: `lesson.load("kernel.py")`, `lesson.path("x.cu")`, `lesson.id`.

    Module scope (a test file belongs to one lesson), so module-scoped fixtures can load learner code once
    for several tests; `load` still imports afresh on every call."""
    return _lesson_for(request.node)


@pytest.fixture
def device() -> str:
    """"cuda" when PyTorch sees a CUDA GPU, else "cpu" (where Triton runs through its interpreter)."""
    from . import capabilities

    return "cuda" if capabilities.has_torch_cuda() else "cpu"
