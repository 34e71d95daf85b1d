from __future__ import annotations

from pathlib import Path

import pytest

from pytest_hpccourse.grading import capabilities


@pytest.fixture
def course(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester folder with the course rubric and an importlib-friendly layout."""
    (pytester.path / "scoring.toml").write_text(
        (Path(__file__).parent.parent / "scoring.toml").read_text(encoding="utf-8"), encoding="utf-8")
    return pytester


@pytest.fixture(autouse=True)
def _fresh_capabilities():
    capabilities.available.cache_clear()
    yield
    capabilities.available.cache_clear()
