"""`hpccourse site`: build or serve the course site (MkDocs Material) from the lesson folders.

    hpccourse site build [--edition learner|reference] [--out DIR]
    hpccourse site serve [--edition learner|reference] [--addr HOST:PORT]

The Markdown pages come from `sitepages.py`; this file lays them out as a MkDocs project under
`build/site-src/<edition>/` (only files whose content changed are rewritten, so `serve`'s rebuilds
stay quiet), copies the browser libraries (KaTeX, Mermaid) from `site/node_modules/` — installed by
`scripts/setup` with `npm ci --prefix site` — and runs MkDocs. Nothing is fetched at build time and
the pages reference no external host; `theme.font` is off.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pytest_hpccourse.grading import manifest

from . import notebook, sitedata, sitepages

# (source under site/node_modules, destination under docs/assets/vendor); a trailing "/" copies a folder
VENDOR = (
    ("katex/dist/katex.min.js", "katex/katex.min.js"),
    ("katex/dist/katex.min.css", "katex/katex.min.css"),
    ("katex/dist/fonts/", "katex/fonts/"),
    ("katex/dist/contrib/auto-render.min.js", "katex/contrib/auto-render.min.js"),
    ("mermaid/dist/mermaid.min.js", "mermaid/mermaid.min.js"),
)
SITE_NAME = "HPC / AI Infra 工程师课程"
ROOT_ENV, EDITION_ENV = "HPCCOURSE_SITE_ROOT", "HPCCOURSE_SITE_EDITION"


class SiteError(RuntimeError):
    """The site cannot be built (a missing dependency, a data file that does not validate)."""


def source_dir(root: Path, edition: str) -> Path:
    return root / "build" / "site-src" / edition


def default_out(root: Path, edition: str) -> Path:
    return root / "build" / "site" / edition


def _write(path: Path, data: bytes) -> bool:
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return True


def _files(node_modules: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for src, dst in VENDOR:
        path = node_modules / src
        if src.endswith("/"):
            if not path.is_dir():
                raise SiteError(f"{path} is missing: run `npm ci --prefix site` (scripts/setup does)")
            for f in sorted(p for p in path.rglob("*") if p.is_file()):
                out[f"assets/vendor/{dst}{f.relative_to(path).as_posix()}"] = f.read_bytes()
        else:
            if not path.is_file():
                raise SiteError(f"{path} is missing: run `npm ci --prefix site` (scripts/setup does)")
            out[f"assets/vendor/{dst}"] = path.read_bytes()
    return out


def generate(root: Path, edition: str, work: Path | None = None) -> Path:
    """Write the MkDocs project of `edition` into `work` (default build/site-src/<edition>);
    returns its mkdocs.yml."""
    try:
        course = sitepages.read_course(root)
    except sitedata.SiteDataError as exc:
        raise SiteError(str(exc)) from None
    import nbformat

    files = {path: text.encode("utf-8") for path, text in sitepages.pages(course, edition).items()}
    for src in course.lessons():
        files[src.notebook] = nbformat.writes(notebook.build(src.lesson.dir, edition)).encode("utf-8")
    for asset in sorted((root / "site" / "assets").rglob("*")):
        if asset.is_file():
            files[f"assets/{asset.relative_to(root / 'site' / 'assets').as_posix()}"] = asset.read_bytes()
    files.update(_files(root / "site" / "node_modules"))
    base = work or source_dir(root, edition)
    docs = base / "docs"
    for path, data in files.items():
        _write(docs / path, data)
    for stale in [p for p in docs.rglob("*") if p.is_file() and p.relative_to(docs).as_posix() not in files]:
        stale.unlink()
    config = base / "mkdocs.yml"
    _write(config, mkdocs_yml(course, edition).encode("utf-8"))
    return config


def _yaml(value: object, level: int = 0) -> str:
    """A small YAML writer for the config (keeps `!!python/name:` tags verbatim)."""
    pad = "  " * level
    if isinstance(value, dict):
        lines = []
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{_scalar(k)}:\n{_yaml(v, level + 1)}")
            else:
                lines.append(f"{pad}{_scalar(k)}: {_scalar(v)}")
        return "\n".join(lines)
    if isinstance(value, list):
        lines = []
        for item in value:
            if isinstance(item, (dict, list)) and item:
                inner = _yaml(item, level + 1).lstrip()
                lines.append(f"{pad}- {inner}")
            else:
                lines.append(f"{pad}- {_scalar(item)}")
        return "\n".join(lines)
    return pad + _scalar(value)


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if value == {} or value == []:
        return "{}" if value == {} else "[]"
    text = str(value)
    if text.startswith("!!python/name:"):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def mkdocs_config(course: sitepages.Course, edition: str) -> dict:
    suffix = "" if edition == "learner" else "（参考版：含答案）"
    return {
        "site_name": SITE_NAME + suffix,
        "site_description": "CUDA / Triton / CuTe / MLIR / 运行时 / 推理 / 集群 / 训练 / RL / 诊断：自动评分的面试深度课程",
        "docs_dir": "docs",
        "use_directory_urls": True,
        "theme": {
            "name": "material",
            "language": "zh",
            "font": False,
            "features": ["navigation.tabs", "navigation.sections", "navigation.top", "navigation.footer",
                         "navigation.indexes", "search.highlight", "search.suggest", "search.share",
                         "content.code.copy", "toc.follow"],
            "palette": [
                {"media": "(prefers-color-scheme: light)", "scheme": "default", "primary": "indigo",
                 "accent": "teal", "toggle": {"icon": "material/weather-night", "name": "切换到深色模式"}},
                {"media": "(prefers-color-scheme: dark)", "scheme": "slate", "primary": "indigo",
                 "accent": "teal", "toggle": {"icon": "material/weather-sunny", "name": "切换到浅色模式"}},
            ],
        },
        "plugins": [{"search": {"lang": ["zh", "en"],
                                "separator": r'[\s\u200b\-_,:!=\[\]()"`/]+|\.(?!\d)|&[lg]t;|(?!\b)(?=[A-Z][a-z])'}}],
        "markdown_extensions": [
            "admonition", "attr_list", "md_in_html", "tables", "footnotes", "def_list",
            {"toc": {"permalink": True}},
            "pymdownx.details",
            {"pymdownx.highlight": {"anchor_linenums": False}},
            "pymdownx.inlinehilite",
            {"pymdownx.superfences": {"custom_fences": [
                {"name": "mermaid", "class": "mermaid",
                 "format": "!!python/name:pymdownx.superfences.fence_code_format"}]}},
            {"pymdownx.arithmatex": {"generic": True}},
            "pymdownx.tabbed",
        ],
        "extra_javascript": ["assets/vendor/mermaid/mermaid.min.js", "assets/vendor/katex/katex.min.js",
                             "assets/vendor/katex/contrib/auto-render.min.js", "assets/katex-init.js"],
        "extra_css": ["assets/vendor/katex/katex.min.css", "assets/extra.css"],
        "nav": sitepages.nav(course),
        "extra": {"generator": False},
        "validation": {"links": {"not_found": "warn", "anchors": "info", "unrecognized_links": "info"}},
    }


def mkdocs_yml(course: sitepages.Course, edition: str) -> str:
    return "# generated by `hpccourse site`; edit pytest_hpccourse/site/builder.py instead\n" + \
        _yaml(mkdocs_config(course, edition)) + "\n"


def build(root: Path, edition: str = "learner", out: Path | None = None, work: Path | None = None) -> Path:
    """Build the site of `edition` into `out` (default build/site/<edition>); returns `out`."""
    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config

    config_file = generate(root, edition, work)
    out = (out or default_out(root, edition)).resolve()
    cfg = load_config(config_file=str(config_file), site_dir=str(out))
    mkdocs_build(cfg)
    return out


def serve(root: Path, edition: str = "learner", addr: str = "127.0.0.1:8000") -> None:
    """Serve with live reload: editing a lesson (or site/) regenerates the pages and rebuilds."""
    from mkdocs.commands.serve import serve as mkdocs_serve

    config_file = generate(root, edition)
    os.environ[ROOT_ENV], os.environ[EDITION_ENV] = str(root), edition
    text = config_file.read_text(encoding="utf-8")
    hook = Path(__file__).with_name("hook.py")
    extra = (f"hooks:\n  - {_scalar(str(hook))}\nwatch:\n  - {_scalar(str(root / 'modules'))}\n"
             f"  - {_scalar(str(root / 'site' / 'plan.toml'))}\n  - {_scalar(str(root / 'site' / 'cheatsheet.toml'))}\n"
             f"  - {_scalar(str(root / 'site' / 'system-design.toml'))}\n  - {_scalar(str(root / 'site' / 'assets'))}\n")
    serve_config = config_file.with_name("mkdocs.serve.yml")
    _write(serve_config, (text + extra).encode("utf-8"))
    mkdocs_serve(str(serve_config), dev_addr=addr, livereload=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hpccourse site", description="Build or serve the course site.")
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, help_text in (("build", "build the static site"), ("serve", "serve it with live reload")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--edition", choices=sitepages.EDITIONS, default="learner",
                       help="learner: blanks, no keys (default); reference: reference code and answers, collapsed")
        p.add_argument("--root", type=Path, default=Path("."), help="the course root or a folder below it")
        if name == "build":
            p.add_argument("--out", type=Path, help="output folder (default build/site/<edition>)")
        else:
            p.add_argument("--addr", default="127.0.0.1:8000", help="host:port (default 127.0.0.1:8000)")
    return parser


def main(args: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(args)
    try:
        root = sitepages.find_root(ns.root)
        if ns.action == "serve":
            serve(root, ns.edition, ns.addr)
            return 0
        start = time.perf_counter()
        out = build(root, ns.edition, ns.out)
    except (SiteError, sitedata.SiteDataError, manifest.ManifestError) as exc:
        print(f"hpccourse site: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:
        print(f"hpccourse site: {exc.name} is missing: pip install 'pytest-hpccourse[site]'", file=sys.stderr)
        return 1
    pages = sum(1 for _ in out.rglob("*.html"))
    print(f"built the {ns.edition} edition: {pages} pages in {time.perf_counter() - start:.1f} s -> {out}")
    return 0
