"""`hpccourse attack`: grade learner-style variants of a lesson's reference and say which are misgraded.

    hpccourse attack LESSON_DIR VARIANTS.toml [-j N] [--json PATH] [--timeout S]

A validity round attacks a lesson with solutions written from its README alone (by someone who never
saw the tests): wrong-but-plausible ones must lose code points, different-but-correct ones must keep
all of them. VARIANTS.toml holds them as edits of the reference, in lesson.toml's mutant format:

    [[wrong]]                      # must lose code points
    name = "last-tile"             # optional; shown in the table
    why = "mask uses < n-1: the last element is never written"
    file = "kernel.py"             # one of the lesson's files
    find = "offs < n"              # occurs exactly `count` times (default 1)
    replace = "offs < n - 1"

    [[correct]]                    # must keep full code points
    why = "two-pass softmax instead of online"
    edits = [{file = "kernel.py", find = "...", replace = "..."}]   # several edits: a list

Each variant is graded in its own copy of the module (the source tree is never written to) by
`pytest <copy>/<lesson> --course-json`, all code tests run (no -x), exactly as a learner's
`pytest --course-report` would grade it. A wrong variant that keeps full code points, or a correct
one that loses any, is a MISGRADE; the exit status is 1 when there is one. Found misgrades become
`[[mutants]]` (wrong) and `[[alternatives]]` (correct) of the lesson once fixed, so `hpccourse check`
keeps proving them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_hpccourse.grading import manifest
from pytest_hpccourse.grading.report import clip, pad, width
from pytest_hpccourse.runtimes.ray import shared

from . import check, release

KINDS = ("wrong", "correct")


class VariantError(ValueError):
    """VARIANTS.toml is malformed or an edit does not apply."""


@dataclass(frozen=True)
class Edit:
    file: str
    find: str
    replace: str
    count: int = 1


@dataclass(frozen=True)
class Variant:
    kind: str  # wrong | correct
    name: str
    why: str
    edits: tuple[Edit, ...]


@dataclass
class Graded:
    kind: str
    name: str
    why: str
    code: str = "-"  # "score/max" or NEEDS / error
    verdict: str = "ok"  # ok | MISGRADE | unproven | error
    detail: str = ""
    tests: dict[str, str] = field(default_factory=dict)  # nodeid -> outcome


def _edit(raw: Any, where: str, files: Sequence[str]) -> Edit:
    if not isinstance(raw, dict):
        raise VariantError(f"{where}: must be a table")
    for key in ("file", "find", "replace"):
        if not isinstance(raw.get(key), str):
            raise VariantError(f"{where}.{key}: must be a string")
    if raw["file"] not in files:
        raise VariantError(f"{where}.file: {raw['file']!r} is not one of the lesson's files {list(files)}")
    count = raw.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise VariantError(f"{where}.count: must be a positive integer")
    if raw["find"] == raw["replace"]:
        raise VariantError(f"{where}: replace must differ from find")
    return Edit(raw["file"], raw["find"], raw["replace"], count)


def load_variants(path: Path, lesson: manifest.Lesson) -> list[Variant]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise VariantError(f"{path}: {e}") from e
    unknown = set(data) - set(KINDS)
    if unknown:
        raise VariantError(f"{path}: unknown table(s) {sorted(unknown)}; use [[wrong]] and [[correct]]")
    variants = []
    for kind in KINDS:
        for i, raw in enumerate(data.get(kind, []), 1):
            where = f"{kind}[{i}]"
            if not isinstance(raw, dict):
                raise VariantError(f"{path}: {where}: must be a table")
            if "edits" in raw:
                if not isinstance(raw["edits"], list) or not raw["edits"]:
                    raise VariantError(f"{path}: {where}.edits: must be a non-empty list of tables")
                edits = tuple(_edit(e, f"{where}.edits[{j}]", lesson.files) for j, e in enumerate(raw["edits"]))
            else:
                edits = (_edit(raw, where, lesson.files),)
            name = raw.get("name", f"{kind[0]}{i}")
            why = raw.get("why", "")
            if not isinstance(name, str) or not isinstance(why, str) or not why:
                raise VariantError(f"{path}: {where}: `why` (a non-empty string) says what the variant does")
            variants.append(Variant(kind, name, why, edits))
    if not variants:
        raise VariantError(f"{path}: no [[wrong]] or [[correct]] variant")
    return variants


def _apply(edits: Sequence[Edit], lesson_root: Path) -> None:
    for e in edits:
        target = lesson_root / e.file
        text = target.read_text(encoding="utf-8")
        found = text.count(e.find)
        if found != e.count:
            raise VariantError(f"{e.file}: find text occurs {found} time(s), count = {e.count}: {e.find[:60]!r}")
        target.write_text(text.replace(e.find, e.replace), encoding="utf-8")


def grade_variant(variant: Variant, lesson: manifest.Lesson, runner: check.Runner,
                  course: Path | None) -> Graded:
    """Grade one variant in a fresh copy of the lesson's module."""
    g = Graded(variant.kind, variant.name, variant.why)
    with tempfile.TemporaryDirectory(prefix=f"hpccourse-attack-{lesson.id}-") as tmp_name:
        tmp = Path(tmp_name)
        stage = tmp / "copy" / lesson.dir.parent.name
        rel = check._copy_lesson_module(lesson.dir, stage)
        scoring = course / "scoring.toml" if course and (course / "scoring.toml").is_file() else None
        if scoring and not (stage / "scoring.toml").is_file():
            shutil.copyfile(scoring, stage.parent / "scoring.toml")
        try:
            _apply(variant.edits, stage / rel)
        except VariantError as e:
            g.verdict, g.code, g.detail = "error", "error", str(e)
            return g
        entry, output = runner.run(stage, [f"{rel}/{t}" for t in lesson.tests], lesson.id, tmp / "report.json")
    if entry is None:
        if output.startswith("timed out") and variant.kind == "wrong":
            g.code, g.detail = "0 (timeout)", output
            return g
        g.verdict, g.code, g.detail = "error", "error", output[-300:]
        return g
    code = entry["code"]
    g.tests = {t["nodeid"].split("/")[-1]: t["outcome"] for t in code["tests"]}
    if code["status"] == "NEEDS":
        g.verdict, g.code, g.detail = "unproven", "NEEDS", code["message"]
        return g
    g.code = check._score(code)
    full = code["score"] >= code["max_score"]
    failed = [t for t in code["tests"] if t["outcome"] in ("failed", "error")]
    g.detail = (failed[0]["nodeid"].split("/")[-1] + ": " + (failed[0].get("message") or "")) if failed \
        else (code["message"] or "")
    if (variant.kind == "wrong") == full:
        g.verdict = "MISGRADE"
    return g


def table(lesson_id: str, rows: Sequence[Graded], columns: int = 120) -> list[str]:
    cells = [["lesson", "kind", "variant", "code", "verdict", "why / first loss"]]
    for g in rows:
        cells.append([lesson_id, g.kind, g.name, g.code, g.verdict, g.why + (f" | {g.detail}" if g.detail else "")])
    widths = [max(width(r[i]) for r in cells) for i in range(5)]
    rest = max(20, columns - sum(widths) - 10)
    return ["  ".join([*(pad(c, widths[i]) for i, c in enumerate(r[:5])), clip(r[5], rest)]).rstrip()
            for r in cells]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hpccourse attack",
                                description="Grade wrong and correct learner-style variants of a lesson; "
                                            "report every misgrade.")
    p.add_argument("lesson", type=Path, help="the lesson folder (holds lesson.toml)")
    p.add_argument("variants", type=Path, help="a TOML file of [[wrong]] and [[correct]] variants")
    p.add_argument("-j", "--jobs", type=int, default=1, help="variants graded in parallel (default 1)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds one pytest run may take")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    return p


def main(args: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(args)
    try:
        lesson = manifest.load_lesson(ns.lesson.resolve())
        variants = load_variants(ns.variants, lesson)
    except (manifest.ManifestError, VariantError) as e:
        print(f"hpccourse attack: error: {e}", file=sys.stderr)
        return 2
    jobs = max(1, ns.jobs)
    runner = check.Runner(timeout=ns.timeout, threads=max(1, (os.cpu_count() or 1) // jobs))
    course = release.find_course_root(lesson.dir.parent)
    with contextlib.ExitStack() as stack:
        if "ray" in lesson.requires and shared.wanted() and not os.environ.get("RAY_ADDRESS"):
            runner.extra_env.update(stack.enter_context(shared.shared_ray(cpus=(os.cpu_count() or 1) * (jobs + 1))))
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            rows = list(pool.map(lambda v: grade_variant(v, lesson, runner, course), variants))
    print("\n".join(table(lesson.id, rows, shutil.get_terminal_size((160, 24)).columns)))
    bad = [g for g in rows if g.verdict in ("MISGRADE", "error")]
    print(f"\n{lesson.id}: {len(rows)} variant(s), {sum(g.verdict == 'MISGRADE' for g in rows)} MISGRADE, "
          f"{sum(g.verdict == 'error' for g in rows)} error, {sum(g.verdict == 'unproven' for g in rows)} unproven")
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps({"lesson": lesson.id, "variants": [asdict(g) for g in rows]},
                                      ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
