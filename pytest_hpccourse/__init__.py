"""pytest-hpccourse: the pytest plugin and tools that grade the HPC / AI-infrastructure course.

Layout (docs/architecture.md): `plugin` (the pytest11 entry point), `cli` (`hpccourse`), and the
subpackages `grading`, `runtimes`, `authoring` and `site`.
"""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path


def _installed_version() -> str:
    """The version pip recorded for this package (set from the git tag at build time: docs/release.md)."""
    try:
        return metadata.version("pytest-hpccourse")
    except metadata.PackageNotFoundError:  # imported from a source tree that was never installed
        return "0+unknown"


__version__ = _installed_version()
PLUGIN = "pytest_hpccourse.plugin"  # the pytest11 entry point: `-p` it where the package is not installed


def plugin_registered() -> bool:
    """Whether pytest loads the plugin by itself (installed entry point, plugin autoload on)."""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    return any(ep.value == PLUGIN for ep in metadata.entry_points(group="pytest11"))


def package_parent() -> str:
    """The folder that holds this package: put it on a child's PYTHONPATH where the plugin is not installed."""
    return str(Path(__file__).resolve().parent.parent)
