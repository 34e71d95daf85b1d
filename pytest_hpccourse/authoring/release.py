"""`hpccourse release`: turn a course module into the learner's standalone repo.

    hpccourse release modules/NN-name --out DIR [--no-keys] [--gpu-runner] [--template DIR]

The released repo holds the module (README, pyproject, lessons) with every solution region blanked
(regions.py), each lesson.toml without its answer keys and mutants, each answers.yaml emptied with
the prompts as comments, the course `scoring.toml`, the `template-repo/` files (Classroom
workflow, learner guide appended to the module README, .gitignore), the keys in
`.hpccourse/keys.toml` (left out with --no-keys) and `.hpccourse/manifest.sha256` (integrity.py).
The source tree is never written to.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w
from packaging.version import Version

from pytest_hpccourse import __version__
from pytest_hpccourse.grading import integrity, manifest

from .regions import RegionError, Style, blank, find_regions, style_for

KEY_FIELDS = ("answer", "groups", "explanation")
IGNORED = ("__pycache__", "*.pyc", "*.pyo", ".pytest_cache", ".hpccourse-cache", "*.egg-info",
           ".venv", ".git", ".mypy_cache", ".ruff_cache")
INSTRUCTOR_DIR = "instructor"  # template-repo/instructor/ is for instructors, never released
GPU_WORKFLOW = "instructor/classroom-gpu.yml"
WORKFLOW = ".github/workflows/classroom.yml"


class ReleaseError(Exception):
    """The module cannot be released as it is; the message names the file."""


@dataclass
class LessonRelease:
    dir: str  # relative to the released repo, '/' separators
    id: str
    regions: int = 0
    keys: int = 0


@dataclass
class ReleaseResult:
    out: Path
    lessons: list[LessonRelease] = field(default_factory=list)
    keys_file: Path | None = None


# ---------------------------------------------------------------------------------------------
# locating things


def find_course_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` with a `scoring.toml` and a `template-repo/`,
    else the nearest with just a `scoring.toml`."""
    start = start.resolve()
    with_scoring = [d for d in (start, *start.parents) if (d / "scoring.toml").is_file()]
    for d in with_scoring:
        if (d / "template-repo").is_dir():
            return d
    return with_scoring[0] if with_scoring else None


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ReleaseError(f"{path}: {e}") from e


def _lesson_id(path: Path, data: Mapping[str, Any]) -> str:
    lid = data.get("id")
    if not isinstance(lid, str) or not lid:
        raise ReleaseError(f"{path}: missing string `id`")
    return lid


# ---------------------------------------------------------------------------------------------
# lesson.toml, keys and answers.yaml


def toml_text(doc: Mapping[str, Any]) -> str:
    """`doc` as TOML (tomli-w): multi-line strings stay multi-line, so a released prompt reads as written."""
    return tomli_w.dumps(doc, multiline_strings=True)


def split_keys(data: Mapping[str, Any], path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(released lesson.toml data, {question id: key fields}). Mutants and alternatives leave the
    release too: their `find` and `replace` texts are (edits of) reference code."""
    released = {k: v for k, v in data.items() if k not in ("mutants", "alternatives")}
    questions = data.get("questions", [])
    if not isinstance(questions, list) or not all(isinstance(q, Mapping) for q in questions):
        raise ReleaseError(f"{path}: `questions` must be an array of tables")
    keys: dict[str, Any] = {}
    stripped = []
    for q in questions:
        qid = q.get("id")
        if not isinstance(qid, str):
            raise ReleaseError(f"{path}: a question without a string `id`")
        key = {k: q[k] for k in KEY_FIELDS if k in q}
        if key:
            keys[qid] = key
        stripped.append({k: v for k, v in q.items() if k not in KEY_FIELDS})
    if "questions" in data:
        released["questions"] = stripped
    return released, keys


_KIND_HELP = {
    "choice": "一个选项字母 / one option letter",
    "multi": "选项字母列表，形如 [X, Y]，全对才得分 / a list of letters like [X, Y], all-or-nothing",
    "numeric": "一个数 / a number",
    "formula": "算式字符串 / an expression as a string",
    "keywords": "简短文字 / short free text",
}


def _comment(text: str, prefix: str = "# ") -> list[str]:
    return [(prefix + line).rstrip() for line in str(text).splitlines() or [""]]


def answers_template(data: Mapping[str, Any]) -> str:
    """The learner's answers.yaml: every prompt (and its options) as comments, empty values."""
    lid = data.get("id", "?")
    title = " / ".join(str(t) for t in (data.get("title"), data.get("title_en")) if t)
    out = [
        f"# {lid}: {title}",
        "# 在每个冒号后填写答案；保存后运行 `pytest --course-report` 查看得分。",
        "# Write each answer after its colon; run `pytest --course-report` to see your score.",
        "# YAML: 文字答案或算式请加引号 / quote text and expressions, like Qn: \"a*b/c\"",
    ]
    for q in data.get("questions", []):
        kind = str(q.get("kind", ""))
        help_ = _KIND_HELP.get(kind, kind)
        details = []
        if kind == "numeric":
            if q.get("unit"):
                details.append(f"单位 unit: {q['unit']}")
            if "rel_tol" in q:
                details.append(f"相对误差 rel_tol: {q['rel_tol']}")
            if "abs_tol" in q:
                details.append(f"绝对误差 abs_tol: {q['abs_tol']}")
        if kind == "formula" and q.get("variables"):
            details.append("变量 variables: " + ", ".join(map(str, q["variables"])))
        if kind == "keywords" and q.get("max_chars"):
            details.append(f"最多 max {q['max_chars']} 字符 chars")
        out.append("")
        out.append(f"# {q.get('id')} [{kind}] {help_}" + (f" ({'; '.join(details)})" if details else ""))
        out.extend(_comment(q.get("prompt", "")))
        for opt in q.get("options", []) or []:
            out.extend(_comment(opt, "#   "))
        out.append(f"{q.get('id')}:")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# the release


def _owner(path: Path, lessons: Mapping[Path, str]) -> Path | None:
    for parent in path.parents:
        if parent in lessons:
            return parent
    return None


def _blank_file(path: Path, rel: str, lesson_id: str | None) -> int:
    style = style_for(path)
    raw = path.read_bytes()
    if style is None:
        if b"SOLUTION" in raw and path.suffix.lower() not in (".md", ".rst"):
            try:
                find_regions(raw.decode("utf-8"), rel)  # raises on markers
            except UnicodeDecodeError:
                pass
        return 0
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return 0
    regions = find_regions(text, rel)
    if not regions:
        return 0
    if lesson_id is None:
        raise RegionError(rel, regions[0].begin, "solution region outside a lesson folder")
    new = blank(text, rel, lesson_id)
    if style is Style.PYTHON:
        try:
            compile(new, rel, "exec")
        except SyntaxError as e:
            raise RegionError(rel, e.lineno or 0, f"the released blank does not compile ({e.msg}); "
                              "put the region markers around whole statements") from e
    path.write_bytes(new.encode("utf-8"))
    return len(regions)


def _copy_template(template: Path, out: Path, gpu_runner: bool) -> None:
    guide = template / "README.md"
    for src in sorted(template.rglob("*")):
        rel = src.relative_to(template)
        if not src.is_file() or rel.parts[0] == INSTRUCTOR_DIR or src == guide:
            continue
        if set(rel.parts) & {"__pycache__", ".pytest_cache"}:
            continue
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    if gpu_runner:
        gpu = template / GPU_WORKFLOW
        if not gpu.is_file():
            raise ReleaseError(f"{gpu}: missing (needed by --gpu-runner)")
        (out / WORKFLOW).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(gpu, out / WORKFLOW)
    if guide.is_file():
        readme = out / "README.md"
        text = guide.read_text(encoding="utf-8")
        if readme.is_file():
            text = readme.read_text(encoding="utf-8").rstrip() + "\n\n---\n\n" + text
        readme.write_text(text, encoding="utf-8")


def compatible_range(version: str = __version__) -> str:
    """The requirement a released module puts on the plugin it was made with: `>=X.Y,<X+1` (any later release of
    the same major version). A development build (`0.1.1.dev3+g…`, a tree between tags) names itself as the lower
    bound, `>=0.1.1.dev3,<1`, which also tells pip that a pre-release is acceptable."""
    v = Version(version)
    major, minor = (*v.release, 0)[:2]
    lower = v.public if (v.is_prerelease or v.is_devrelease) else f"{major}.{minor}"
    return f">={lower},<{major + 1}"


def pin_plugin(pyproject: Path, url: str | None = None, version: str = __version__) -> int:
    """Point the `pytest-hpccourse` requirements of `pyproject` at the plugin this release was made with, so a
    learner's fork keeps grading the same way after the course moves on: `compatible_range(version)` by default
    (`pytest-hpccourse>=0.2,<1`, found on PyPI like any pytest plugin), or the PEP 508 direct reference `url` for
    work that is not released yet (e.g. `git+https://github.com/ORG/pytest-hpccourse@main`). Extras are kept.
    Returns how many requirements changed.
    """
    text = pyproject.read_text(encoding="utf-8")
    pattern = re.compile(r'"pytest-hpccourse(\[[^\]]*\])?[^"]*"')
    pin = f" @ {url}" if url else compatible_range(version)
    new, count = pattern.subn(lambda m: f'"pytest-hpccourse{m.group(1) or ""}{pin}"', text)
    pyproject.write_text(new, encoding="utf-8")
    return count


def release_module(module: Path, out: Path, *, keys: bool = True, template: Path | None = None,
                   scoring: Path | None = None, gpu_runner: bool = False,
                   plugin_url: str | None = None) -> ReleaseResult:
    """Write the learner repo for `module` into `out` (which must not exist or be empty)."""
    module = module.resolve()
    out = out.resolve()
    if not module.is_dir():
        raise ReleaseError(f"{module}: not a directory")
    if out == module or module in out.parents:
        raise ReleaseError(f"--out {out} is inside the module {module}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ReleaseError(f"--out {out} exists and is not an empty directory")
    if not (module / "pyproject.toml").is_file():
        raise ReleaseError(f"{module}: no pyproject.toml (learners install the module with it)")
    course = find_course_root(module)
    if scoring is None and not (module / "scoring.toml").is_file():
        if course is None:
            raise ReleaseError(f"{module}: no scoring.toml here or above; pass --scoring")
        scoring = course / "scoring.toml"
    if template is None:
        if course is None or not (course / "template-repo").is_dir():
            raise ReleaseError(f"{module}: no template-repo/ above it; pass --template")
        template = course / "template-repo"

    for lesson_dir in manifest.iter_lesson_dirs([module]):
        try:  # the validation the plugin applies, on the reference
            manifest.load_lesson(lesson_dir)
        except manifest.ManifestError as e:
            raise ReleaseError(str(e)) from e

    created = not out.exists()
    try:
        shutil.copytree(module, out, ignore=shutil.ignore_patterns(*IGNORED), dirs_exist_ok=True)
        if not pin_plugin(out / "pyproject.toml", plugin_url):
            raise ReleaseError(f"{module / 'pyproject.toml'}: no pytest-hpccourse requirement to pin")
        return _release_in_place(out, keys, template, scoring, gpu_runner)
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for child in out.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        raise


def _release_in_place(out: Path, keys: bool, template: Path, scoring: Path | None,
                      gpu_runner: bool) -> ReleaseResult:
    shutil.rmtree(out / ".hpccourse", ignore_errors=True)
    lesson_data: dict[Path, dict[str, Any]] = {}
    for toml_path in sorted(out.rglob("lesson.toml")):
        lesson_data[toml_path.parent] = _load_toml(toml_path)
    if not lesson_data:
        raise ReleaseError(f"{out}: the module has no lesson (no lesson.toml)")
    ids = {d: _lesson_id(d / "lesson.toml", data) for d, data in lesson_data.items()}
    seen: dict[str, Path] = {}
    for d, lid in ids.items():
        if lid in seen:
            raise ReleaseError(f"{d / 'lesson.toml'}: id {lid!r} already used by {seen[lid]}")
        seen[lid] = d

    result = ReleaseResult(out=out)
    per_lesson = {d: LessonRelease(d.relative_to(out).as_posix() or ".", ids[d]) for d in ids}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        rel = path.relative_to(out).as_posix()
        owner = _owner(path, ids)
        n = _blank_file(path, rel, ids[owner] if owner else None)
        if n and owner is not None:
            per_lesson[owner].regions += n

    all_keys: dict[str, Any] = {}
    for d, data in lesson_data.items():
        released, lesson_keys = split_keys(data, d / "lesson.toml")
        (d / "lesson.toml").write_text(
            f"# Released lesson: answer keys, mutants and alternatives are not in this file.\n"
            f"{toml_text(released)}", encoding="utf-8")
        (d / "answers.yaml").write_text(answers_template(released), encoding="utf-8")
        if lesson_keys:
            all_keys[ids[d]] = lesson_keys
        per_lesson[d].keys = len(lesson_keys)

    if scoring is not None:
        shutil.copyfile(scoring, out / "scoring.toml")
    _copy_template(template, out, gpu_runner)
    if keys and all_keys:
        result.keys_file = out / integrity.KEYS
        result.keys_file.parent.mkdir(parents=True, exist_ok=True)
        result.keys_file.write_text(
            "# Answer keys and reference explanations of this module (hpccourse release).\n"
            f"{toml_text(all_keys)}", encoding="utf-8")
    integrity.write_manifest(out)
    result.lessons = sorted(per_lesson.values(), key=lambda r: r.dir)
    return result


# ---------------------------------------------------------------------------------------------
# CLI


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hpccourse release",
                                description="Write the learner's standalone repo for a module.")
    p.add_argument("module", type=Path, help="the module folder, e.g. modules/02-cuda")
    p.add_argument("--out", type=Path, required=True, help="target folder (new or empty)")
    p.add_argument("--no-keys", action="store_true",
                   help="leave the answer keys out (instructors then grade with --course-keys "
                        "PATH or HPCCOURSE_KEYS)")
    p.add_argument("--gpu-runner", action="store_true",
                   help="use the self-hosted GPU runner workflow (modules that need cuda-gpu)")
    p.add_argument("--template", type=Path, help="template repo (default: <course>/template-repo)")
    p.add_argument("--scoring", type=Path, help="rubric (default: <course>/scoring.toml)")
    p.add_argument("--plugin-url", metavar="URL",
                   help="install pytest-hpccourse from URL in the released pyproject, for work not yet on "
                        "PyPI, e.g. git+https://github.com/ORG/pytest-hpccourse@main; default: the releases "
                        f"compatible with this plugin ({compatible_range()})")
    return p


def main(args: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(args)
    try:
        res = release_module(ns.module, ns.out, keys=not ns.no_keys, template=ns.template,
                             scoring=ns.scoring, gpu_runner=ns.gpu_runner, plugin_url=ns.plugin_url)
    except (ReleaseError, RegionError, OSError) as e:
        print(f"hpccourse release: error: {e}", file=sys.stderr)
        return 2
    for lesson in res.lessons:
        print(f"  {lesson.dir:<32} {lesson.id:<14} {lesson.regions} region(s) blanked, "
              f"{lesson.keys} key(s) {'moved' if res.keys_file else 'left out'}")
    keys = (res.keys_file.relative_to(res.out).as_posix() if res.keys_file
            else "none (--no-keys)" if ns.no_keys else "none")
    print(f"released {len(res.lessons)} lesson(s) to {res.out} (keys: {keys})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
