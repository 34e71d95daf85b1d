"""The built learner site in a real browser: headless Chromium (Debian's `chromium`, driven by
Playwright) loads it over a local HTTP server with every request to another host blocked and recorded,
and the test reads the rendered DOM. Screenshots go to the test's temp folder; with
HPCCOURSE_UPDATE_SCREENSHOTS=1 they also replace docs/screenshots/*.png.

Without Chromium or Playwright the test is skipped on a developer's machine and fails under CI=true
(scripts/setup installs both).
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_hpccourse.site import builder

pytestmark = pytest.mark.xdist_group("site")
REPO = Path(__file__).resolve().parents[1]
ROOT = Path(os.environ.get("HPCCOURSE_SITE_TEST_ROOT", REPO))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Material renders Mermaid into a closed shadow root; the test opens it to read the SVG.
OPEN_SHADOW_ROOTS = ("const attach = Element.prototype.attachShadow;"
                     "Element.prototype.attachShadow = function (init) { return attach.call(this, {...init, mode: 'open'}); };")


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed"
    return None if CHROMIUM else "chromium is not installed"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    reason = _missing()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"the browser test must run in CI: {reason} (scripts/setup installs it)")
        pytest.skip(reason)
    out = builder.build(ROOT, "learner", tmp_path_factory.mktemp("browser") / "out",
                     work=tmp_path_factory.mktemp("browser-src"))
    handler = functools.partial(_QuietHandler, directory=str(out))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="module")
def browser(server: str) -> Iterator[tuple[object, list[str]]]:
    from playwright.sync_api import sync_playwright

    external: list[str] = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        ctx = b.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
        ctx.add_init_script(OPEN_SHADOW_ROOTS)

        def route(r):  # type: ignore[no-untyped-def]
            if r.request.url.startswith(server):
                return r.continue_()
            external.append(r.request.url)
            return r.abort()

        ctx.route("**/*", route)
        yield ctx, external
        b.close()


def _shot(page, name: str, tmp_path: Path, *, full_page: bool = False) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    if os.environ.get("HPCCOURSE_UPDATE_SCREENSHOTS") == "1":
        target = REPO / "docs" / "screenshots" / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)


def test_home_draws_the_learning_path(browser, server: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ctx, external = browser
    page = ctx.new_page()
    page.goto(server + "/")
    page.wait_for_function("() => { const m = document.querySelector('div.mermaid');"
                           " return m && m.shadowRoot && m.shadowRoot.querySelector('svg'); }", timeout=30_000)
    nodes = page.evaluate("() => [...document.querySelector('div.mermaid').shadowRoot"
                          ".querySelectorAll('svg g.node')].map(n => n.textContent.trim())")
    assert len(nodes) == 12, nodes
    assert sum(t.startswith(f"{i:02d} ") for i in range(1, 13) for t in nodes) == 12
    clusters = page.evaluate("() => document.querySelector('div.mermaid').shadowRoot"
                             ".querySelectorAll('svg g.cluster').length")
    dashed = page.evaluate("() => [...document.querySelector('div.mermaid').shadowRoot"
                           ".querySelectorAll('svg path')].filter(p => (p.getAttribute('class') || '')"
                           ".includes('dotted')).length")
    assert clusters == 6 and dashed == 2
    assert "学习路径" in page.inner_text("article")
    _shot(page, "home", tmp_path, full_page=True)
    phone = ctx.new_page()
    phone.set_viewport_size({"width": 390, "height": 844})
    phone.goto(server + "/")
    phone.wait_for_timeout(500)
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390 + 1  # no sideways scrolling
    assert not external, external


def test_cheatsheet_formulas_are_typeset(browser, server: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ctx, external = browser
    page = ctx.new_page()
    page.goto(server + "/cheatsheet/")
    page.wait_for_selector(".katex", timeout=30_000)
    rendered = page.evaluate("() => document.querySelectorAll('.arithmatex .katex').length")
    raw = page.evaluate("() => [...document.querySelectorAll('.arithmatex')].filter(e => !e.querySelector('.katex'))"
                        ".map(e => e.textContent.slice(0, 60))")
    assert rendered >= 20 and not raw, raw
    text = page.evaluate("() => { const a = document.querySelector('article').cloneNode(true);"
                         " a.querySelectorAll('.katex, pre, code').forEach(e => e.remove()); return a.textContent; }")
    assert "$" not in text and "\\(" not in text and "\\[" not in text
    page.goto(server + "/cheatsheet/#ring-allreduce")
    page.wait_for_timeout(300)
    _shot(page, "cheatsheet", tmp_path)
    assert not external, external


def test_lesson_page_shows_task_and_three_questions(browser, server: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ctx, external = browser
    page = ctx.new_page()
    page.goto(server + "/modules/02-cuda/04-warp-shuffle/")
    for q in ("q1", "q2", "q3"):
        assert page.locator(f"h3#{q}").count() == 1
    assert "TODO(cuda-04)" in page.inner_text("article")
    assert page.locator("details").count() == 0  # the learner edition collapses nothing: it has no answers
    assert page.locator("a[href$='04-warp-shuffle.ipynb']").count() == 1
    page.goto(server + "/modules/02-cuda/04-warp-shuffle/#q2")
    page.wait_for_timeout(300)
    _shot(page, "lesson", tmp_path)
    assert not external, external


@pytest.mark.parametrize(("query", "expect"), [
    ("Warp Shuffle", "/modules/02-cuda/04-warp-shuffle/"),
    ("共享内存", "/modules/02-cuda/03-reduce-smem/"),
])
def test_search_finds_lessons(browser, server: str, query: str, expect: str) -> None:  # type: ignore[no-untyped-def]
    ctx, external = browser
    page = ctx.new_page()
    page.goto(server + "/")
    page.wait_for_load_state("networkidle")  # the search worker has fetched its index
    box = page.locator("input.md-search__input")
    box.click()
    box.press_sequentially(query, delay=20)
    box.press("End")  # CJK text arrives as insertText without a keyup (an IME commit sends one): send a key
    page.wait_for_selector(".md-search-result__item", timeout=30_000)
    links = page.evaluate("() => [...document.querySelectorAll('.md-search-result__item a')].map(a => a.href)")
    assert any(expect in link for link in links), links[:10]
    assert not external, external
