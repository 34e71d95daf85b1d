"""Screenshot of a `hpccourse grade-class` summary page in headless Chromium (Debian's `chromium` through
Playwright, as tests/test_site_browser.py drives it).

    .venv/bin/python benchmarks/grade_class_screenshot.py GRADEBOOK.sqlite [GRADEBOOK.sqlite …] \
        --out docs/screenshots/grade-class-summary.png

The page is written from the gradebooks' rows (several gradebooks: their rows together) into a temp folder and
loaded from disk; no network.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from pytest_hpccourse.classgrade import summary
from pytest_hpccourse.classgrade.gradebook import Gradebook


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("gradebooks", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--width", type=int, default=1100)
    args = parser.parse_args()
    rows = []
    for path in args.gradebooks:
        with Gradebook(path) as book:
            rows += book.rows()
    page = summary.write_html(rows, Path(tempfile.mkdtemp(prefix="gc-html-")))
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        tab = browser.new_page(viewport={"width": args.width, "height": 900})
        tab.goto(page.as_uri())
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(args.out), full_page=True)
        browser.close()
    print(f"{args.out} from {page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
