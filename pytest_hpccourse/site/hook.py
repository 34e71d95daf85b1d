"""MkDocs hook used by `hpccourse site serve`: regenerate the pages from the lesson folders before
each rebuild, so editing a lesson (or `site/*.toml`) shows up on the served site."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def on_pre_build(config: Any) -> None:
    from pytest_hpccourse.site.builder import EDITION_ENV, ROOT_ENV, generate

    root, edition = os.environ.get(ROOT_ENV), os.environ.get(EDITION_ENV, "learner")
    if root:
        generate(Path(root), edition)
