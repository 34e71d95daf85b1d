"""The package's architecture (docs/architecture.md), read from the source with `ast` (nothing is imported).

- Dependencies point one way: `runtimes` imports nothing from `grading`, `authoring` or `site`; `grading`
  nothing from `authoring` or `site`; `authoring` nothing from `site`; `classgrade` (grade-class) only `grading`,
  `runtimes` and `authoring`, and no other subpackage imports it; no subpackage imports `plugin` or
  `cli` (the two top-level modules that wire everything); the package's `__init__` imports none of it.
- `hookspecs` (the hook specifications) imports nothing of the package, and only `plugin` imports it.
- Each runtime (cuda, triton, ray, cute, mlirrun) imports no other runtime.
- No import circles between modules (lazy imports inside functions count too).
- Every `pytest_hpccourse...` import anywhere in the repository (package, tests, lessons, benchmarks, scripts,
  template) names a module that exists, so a stale path after a move fails here, not in a learner's run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "pytest_hpccourse"
SUBPACKAGES = ("runtimes", "grading", "authoring", "site", "classgrade")
# what each layer may import from the package, besides itself and the package's own __init__
ALLOWED = {
    "runtimes": set(),
    "grading": {"runtimes"},
    "authoring": {"runtimes", "grading"},
    "site": {"runtimes", "grading", "authoring"},
    "classgrade": {"runtimes", "grading", "authoring"},  # the instructor's side; only cli reaches it
}
TOP = ("plugin", "cli")  # wiring: may import every layer; nothing in the package imports them
HOOKSPECS = "hookspecs"  # the hook specifications: import nothing of the package; only `plugin` imports them


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    return {module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imports_of(path: Path, module: str, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import in `path`, at any depth (lazy imports included).
    `from pkg import name` counts as an import of `pkg.name` when that is a module, else of `pkg`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                source = _resolve_relative(module, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                yield (sub if sub in known else source), node.lineno


def _layer(module: str) -> str | None:
    """The subpackage (or top-level module) a package module belongs to; None for the package __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _runtime(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "runtimes" else None


def package_graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """module -> {imported package module: first line}, only edges inside the package."""
    known = package_modules(root)
    graph: dict[str, dict[str, int]] = {}
    for module, path in known.items():
        edges: dict[str, int] = {}
        for target, line in imports_of(path, module, known):
            if target in known and target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def violations(graph: dict[str, dict[str, int]], root: Path = ROOT) -> list[str]:
    """The imports that break the direction rules, one line each."""
    bad = []
    for module, edges in graph.items():
        where = f"{PACKAGE}/{Path(*module.split('.')[1:])}" if "." in module else f"{PACKAGE}/__init__"
        layer = _layer(module)
        for target, line in edges.items():
            to = _layer(target)
            if to is None:
                continue  # the package's __init__ (version, plugin name): anyone may import it
            if layer is None:
                bad.append(f"{where}:{line}: the package __init__ imports {target}")
            elif layer == HOOKSPECS:
                bad.append(f"{where}:{line}: the hook specifications import {target}")
            elif to == HOOKSPECS and layer != "plugin":
                bad.append(f"{where}:{line}: only plugin imports the hook specifications ({module} -> {target})")
            elif layer in TOP:
                continue
            elif to in TOP:
                bad.append(f"{where}:{line}: {module} imports the top-level {target}")
            elif to != layer and to not in ALLOWED.get(layer, set()):
                bad.append(f"{where}:{line}: {layer} must not import {to} ({module} -> {target})")
            elif layer == to == "runtimes" and _runtime(module) != _runtime(target) and _runtime(target):
                bad.append(f"{where}:{line}: runtime {_runtime(module)} imports runtime {_runtime(target)} "
                           f"({module} -> {target})")
    return bad


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_layout() -> None:
    top = {p.name for p in (ROOT / PACKAGE).iterdir() if not p.name.startswith((".", "__pycache__"))}
    assert top == {"__init__.py", "py.typed", "plugin.py", "cli.py", "hookspecs.py", *SUBPACKAGES}, top
    for sub in SUBPACKAGES:
        for folder in [ROOT / PACKAGE / sub, *(ROOT / PACKAGE / sub).rglob("*")]:
            if folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("*.py")):
                assert (folder / "__init__.py").is_file(), f"{folder} is not a package"


def test_dependencies_point_one_way() -> None:
    assert violations(package_graph()) == []


def test_no_import_circles() -> None:
    assert cycles(package_graph()) == []


def test_the_checks_see_a_forbidden_import_and_a_circle(tmp_path: Path) -> None:
    """The rules on a planted package: a runtime that imports grading, and two grading modules that import
    each other (lazily)."""
    pkg = tmp_path / PACKAGE
    for folder in (pkg, pkg / "runtimes", pkg / "grading"):
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
    (pkg / "runtimes" / "cuda.py").write_text("from pytest_hpccourse.grading import course\n")
    (pkg / "grading" / "course.py").write_text("from . import collect\n")
    (pkg / "grading" / "collect.py").write_text("def f():\n    from .course import x\n")
    graph = package_graph(tmp_path)
    assert graph["pytest_hpccourse.runtimes.cuda"] == {"pytest_hpccourse.grading.course": 1}
    assert violations(graph, tmp_path) == [
        "pytest_hpccourse/runtimes/cuda:1: runtimes must not import grading "
        "(pytest_hpccourse.runtimes.cuda -> pytest_hpccourse.grading.course)"]
    assert cycles(graph) == [["pytest_hpccourse.grading.collect", "pytest_hpccourse.grading.course"]]


def _repository_python_files() -> Iterator[Path]:
    skip = {".git", ".venv", "venv", "build", "dist", "node_modules", "__pycache__"}
    for path in sorted(ROOT.rglob("*.py")):
        if not skip.intersection(path.relative_to(ROOT).parts):
            yield path


@pytest.mark.parametrize("area", ["pytest_hpccourse", "tests", "modules", "benchmarks", "scripts", "template-repo"])
def test_every_import_of_the_package_exists(area: str) -> None:
    known = package_modules()
    stale = []
    for path in _repository_python_files():
        if path.relative_to(ROOT).parts[0] != area:
            continue
        module = module_name(path) if area == PACKAGE else path.stem
        try:
            found = list(imports_of(path, module, known))
        except SyntaxError:
            continue  # a planted broken file (tests/fixtures)
        for target, line in found:
            if (target == PACKAGE or target.startswith(PACKAGE + ".")) and target not in known:
                stale.append(f"{path.relative_to(ROOT)}:{line}: {target}")
    assert stale == []
