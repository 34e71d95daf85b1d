"""`hpccourse check`: prove every lesson sound.

    hpccourse check [PATHS ...] [-j N] [--strict] [--static] [--json PATH] [--timeout S]

For each lesson, in its own temporary copy of the module (the source tree is never written to):
1. lesson.toml validates (manifest.load_lesson), every `files` entry has well-formed solution
   regions and at least one region among them, at least one `[[mutants]]`, no scaffold placeholder;
   and the static rules of audit.py hold: formula keys evaluate and accept equivalent rewrites,
   mutants edit solution regions, the README copies no solution lines; across the lessons checked
   (plus the other lessons of their modules): choice/multi keys are not guessable per module and
   no two questions share a prompt (or a formula key up to variable names). These run first,
   without pytest (`--static`: only these); docs/lesson-api.md "What check enforces" lists them;
2. the reference scores full marks (code and Q1-Q3, with the reference answers.yaml);
3. the student release of that copy (release.py, with keys) scores 0 on code and on every question;
4. every mutant's `find` occurs exactly `count` times, and applying it makes at least one code test
   fail (only the lesson's code tests run, with `-x`); the first failing test is reported;
5. every alternative (`[[alternatives]]`: a different-but-correct edit of the reference) applies the
   same way and keeps full code points (all code tests run).

A lesson is SOUND when all of that holds, UNSOUND when any of it fails, UNPROVEN when its code
tests cannot run here (NEEDS a capability): listed, not failed, unless --strict. Exit status: 1 when
any lesson is UNSOUND (or UNPROVEN with --strict), 2 on usage errors, else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_hpccourse import PLUGIN, package_parent, plugin_registered
from pytest_hpccourse.grading import manifest
from pytest_hpccourse.grading.report import clip, num, pad, width
from pytest_hpccourse.runtimes.ray import shared

from . import audit, forkrun, release
from .regions import RegionError, find_regions

SOUND, UNSOUND, UNPROVEN = "SOUND", "UNSOUND", "UNPROVEN"
PLACEHOLDER = "TODO(scaffold)"  # what `hpccourse new` leaves for the author to replace
TAIL = 600  # characters of pytest output quoted when a run produced no report
_LESSON_DIR = re.compile(r"^\d{2}-")  # lesson folders are NN-slug


@dataclass
class MutantCheck:
    """The outcome of one edit: a mutant (result caught | survived | count | unproven | error) or an
    alternative (kept | lost | count | unproven | error)."""

    index: int
    why: str
    result: str
    detail: str = ""


AlternativeCheck = MutantCheck


@dataclass
class LessonCheck:
    path: str
    id: str
    verdict: str = SOUND
    reference: str = "-"
    blank: str = "-"
    mutants: list[MutantCheck] = field(default_factory=list)
    alternatives: list[AlternativeCheck] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # why UNSOUND
    unproven: list[str] = field(default_factory=list)  # what could not be shown here
    seconds: float = 0.0

    def fail(self, reason: str) -> None:
        self.reasons.append(reason)

    def finish(self) -> LessonCheck:
        self.verdict = UNSOUND if self.reasons else UNPROVEN if self.unproven else SOUND
        return self

    @property
    def caught(self) -> str:
        if not self.mutants:
            return "-"
        return f"{sum(m.result == 'caught' for m in self.mutants)}/{len(self.mutants)}"


# ---------------------------------------------------------------------------------------------
# running pytest


@dataclass
class Runner:
    """Runs pytest in a fresh process and returns the lesson's entry of the --course-json report.

    On Linux each run is a fork of one warm process that has imported pytest, numpy and torch
    (forkrun.py); elsewhere, or with HPCCOURSE_CHECK_FORK=0, a subprocess."""

    timeout: float
    threads: int
    registered: bool = field(default_factory=plugin_registered)
    fork: bool = field(default_factory=forkrun.enabled)
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. the shared Ray instance (shared.py)
    _forker: forkrun.ForkRunner | None = field(default=None, init=False, repr=False)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("HPCCOURSE_KEYS", "GITHUB_OUTPUT")}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env.setdefault(var, str(self.threads))
        env.update(self.extra_env)
        if not self.registered:  # the package is importable here but not installed: load it by name
            env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent(), env.get("PYTHONPATH")) if p)
        return env

    def _pytest(self, cwd: Path, args: list[str], report: Path) -> tuple[int | None, str]:
        """(exit status or None on timeout, output) of `pytest ARGS` in `cwd`."""
        env = self.env()
        if self.fork:
            if self._forker is None:
                self._forker = forkrun.ForkRunner(env)
            out = report.with_suffix(".out")
            rc = self._forker.run(args, cwd, env, self.timeout, out)
            try:
                output = out.read_text(encoding="utf-8", errors="replace")
            except OSError:
                output = ""
            return rc, output.strip()
        cmd = [sys.executable, "-m", "pytest", *args]
        try:
            proc = subprocess.run(cmd, check=False, cwd=cwd, env=env, capture_output=True,
                                  text=True, timeout=self.timeout, errors="replace")
        except subprocess.TimeoutExpired:
            return None, ""
        return proc.returncode, (proc.stdout + proc.stderr).strip()

    def run(self, cwd: Path, args: Sequence[str], lesson_id: str, report: Path) -> tuple[dict[str, Any] | None, str]:
        full = [*args, "-q", "-p", "no:cacheprovider", "--course-json", str(report)]
        if not self.registered:
            full[0:0] = ["-p", PLUGIN]
        report.unlink(missing_ok=True)
        returncode, output = self._pytest(cwd, full, report)
        if returncode is None:
            return None, f"timed out after {self.timeout:g} s"
        try:
            doc = json.loads(report.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None, f"pytest exited {returncode} without a report: {output[-TAIL:]}"
        entry = next((le for le in doc.get("lessons", []) if le.get("id") == lesson_id), None)
        if entry is None:
            return None, f"pytest exited {returncode}; lesson {lesson_id} not in the report"
        return entry, output


# ---------------------------------------------------------------------------------------------
# one lesson


def _score(part: dict[str, Any]) -> str:
    return f"{num(part['score'])}/{num(part['max_score'])}"


def _static_checks(lesson: manifest.Lesson, res: LessonCheck) -> None:
    regions = 0
    for name in lesson.files:
        path = lesson.dir / name
        try:
            regions += len(find_regions(path.read_text(encoding="utf-8"), f"{res.path}/{name}"))
        except RegionError as e:
            res.fail(f"solution markers: {e}")
        except (OSError, UnicodeDecodeError) as e:
            res.fail(f"{name}: cannot read: {e}")
    if lesson.files and regions == 0 and not res.reasons:
        res.fail(f"no solution region in {', '.join(lesson.files)}: the blank would be the reference")
    if not lesson.files:
        res.fail("lesson.toml lists no `files` for the learner to edit")
    if not lesson.mutants:
        res.fail("no [[mutants]]: at least one realistic bug must be shown to be caught")
    for p in sorted(lesson.dir.iterdir()):
        if p.is_file() and p.suffix in (".toml", ".md", ".py", ".yaml"):
            try:
                if PLACEHOLDER in p.read_text(encoding="utf-8"):
                    res.fail(f"{p.name}: scaffold placeholder {PLACEHOLDER} left in")
            except (OSError, UnicodeDecodeError):
                pass


def _check_reference(entry: dict[str, Any], res: LessonCheck) -> bool:
    """False when the code tests cannot run here (NEEDS)."""
    res.reference = f"{num(entry['score'])}/{num(entry['max_score'])}"
    if entry["status"] == "INVALID":
        res.fail(f"reference INVALID: {entry['message']}")
        return True
    code = entry["code"]
    if code["status"] == "NEEDS":
        res.unproven.append(code["message"] or "NEEDS " + ", ".join(entry.get("needs", [])))
        res.reference = f"code NEEDS, Q {num(sum(q['score'] for q in entry['questions']))}"
    elif code["score"] < code["max_score"]:
        res.fail(f"reference scores code {_score(code)}: {code['message']}")
    for q in entry["questions"]:
        if q["status"] == "NEEDS":
            res.fail(f"reference {q['id']}: NEEDS key: lesson.toml must hold the answer key")
        elif q["score"] < q["max_score"]:
            res.fail(f"reference {q['id']} scores {_score(q)}: {q['message']}")
    return bool(code["status"] != "NEEDS")


def _check_blank(entry: dict[str, Any], res: LessonCheck) -> None:
    res.blank = f"{num(entry['score'])}/{num(entry['max_score'])}"
    code = entry["code"]
    if entry["status"] == "INVALID":
        res.fail(f"released lesson INVALID: {entry['message']}")
        return
    if code["status"] != "NEEDS" and code["score"] > 0:
        passing = [t["nodeid"].split("/")[-1] for t in code["tests"] if t["outcome"] == "passed"]
        res.fail(f"blank scores code {_score(code)}: passes without the solution: "
                 f"{', '.join(passing[:3])}{' ...' if len(passing) > 3 else ''}")
    for q in entry["questions"]:
        if q["status"] == "NEEDS":
            res.fail(f"blank {q['id']}: NEEDS key: the release lost the key")
        elif q["score"] > 0:
            res.fail(f"blank {q['id']} scores {_score(q)} with an empty answers.yaml")


def _run_edited(m: manifest.Mutant, lesson: manifest.Lesson, stage: Path, rel: str, runner: Runner,
                report: Path, extra: Sequence[str] = ()) -> tuple[str, dict[str, Any] | None, str]:
    """Apply a mutant's or an alternative's edit to the staged copy, run the lesson's code tests, undo the edit.
    Returns (why the edit does not apply, or "", the lesson's report entry or None, pytest's output)."""
    target = stage / rel / m.file
    original = target.read_bytes()
    text = original.decode("utf-8")
    found = text.count(m.find)
    if found != m.count:
        return f"find text occurs {found} time(s), count = {m.count}", None, ""
    target.write_text(text.replace(m.find, m.replace), encoding="utf-8")
    try:
        entry, output = runner.run(stage, [f"{rel}/{t}" for t in lesson.tests] + list(extra), lesson.id, report)
    finally:
        target.write_bytes(original)
    return "", entry, output


def _check_mutant(i: int, m: manifest.Mutant, lesson: manifest.Lesson, stage: Path, rel: str,
                  runner: Runner, report: Path) -> MutantCheck:
    bad_count, entry, output = _run_edited(m, lesson, stage, rel, runner, report, ["-x"])
    if bad_count:
        return MutantCheck(i, m.why, "count", bad_count)
    if entry is None:
        if output.startswith("timed out"):
            return MutantCheck(i, m.why, "caught", f"the run {output}")
        return MutantCheck(i, m.why, "error", output)
    code = entry["code"]
    if code["status"] == "NEEDS":
        return MutantCheck(i, m.why, "unproven", code["message"])
    failed = [t for t in code["tests"] if t["outcome"] in ("failed", "error")]
    if failed:
        return MutantCheck(i, m.why, "caught", "caught by " + failed[0]["nodeid"].split("/")[-1])
    if code["status"] == "ERROR":
        return MutantCheck(i, m.why, "caught", f"caught at collection: {code['message']}")
    needs = sorted({t.get("message", "") for t in code["tests"]
                    if t["outcome"] == "skipped" and t.get("message", "").startswith("NEEDS")})
    if needs:  # the tests that could catch it may be the ones that cannot run here
        return MutantCheck(i, m.why, "unproven", "passes the tests that ran; skipped: " + "; ".join(needs))
    return MutantCheck(i, m.why, "survived", "every code test passes")


def _check_alternative(i: int, alt: manifest.Mutant, lesson: manifest.Lesson, stage: Path, rel: str,
                       runner: Runner, report: Path) -> AlternativeCheck:
    bad_count, entry, output = _run_edited(alt, lesson, stage, rel, runner, report)
    if bad_count:
        return AlternativeCheck(i, alt.why, "count", bad_count)
    if entry is None:
        return AlternativeCheck(i, alt.why, "error", output)
    code = entry["code"]
    if code["status"] == "NEEDS":
        return AlternativeCheck(i, alt.why, "unproven", code["message"])
    if code["score"] < code["max_score"]:
        failed = [t for t in code["tests"] if t["outcome"] in ("failed", "error")]
        where = failed[0]["nodeid"].split("/")[-1] if failed else code["message"]
        return AlternativeCheck(i, alt.why, "lost", f"code {_score(code)}, first loss: {where}")
    return AlternativeCheck(i, alt.why, "kept", f"code {_score(code)}")


def _copy_lesson_module(lesson_dir: Path, stage: Path) -> str:
    """Copy the lesson's module into `stage` without the other lessons (nor lesson folders still
    being written: `NN-slug` folders of the module); returns the lesson's path relative to `stage`
    ('/' separators)."""
    module = lesson_dir.parent

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = set(shutil.ignore_patterns(*release.IGNORED)(folder, names))
        for name in names:
            p = Path(folder) / name
            if not p.is_dir() or p == lesson_dir:
                continue
            if (p / manifest.FILENAME).is_file() or (p.parent == module and _LESSON_DIR.match(name)):
                skipped.add(name)
        return skipped

    shutil.copytree(module, stage, ignore=ignore)
    return lesson_dir.relative_to(module).as_posix()


def check_lesson(lesson_dir: Path, runner: Runner, display: str,
                 course: Path | None = None, *, reasons: Sequence[str] = (),
                 static_only: bool = False) -> LessonCheck:
    """Check one lesson. `reasons`: cross-lesson findings for it (audit.audit_course), recorded
    with the static ones; `static_only`: stop after the static rules (the lesson is then at best
    UNPROVEN: nothing was run)."""
    started = time.perf_counter()
    res = LessonCheck(path=display, id=manifest.read_id(lesson_dir) or lesson_dir.name)
    try:
        lesson = manifest.load_lesson(lesson_dir)
    except manifest.ManifestError as e:
        res.fail(f"manifest: {e}")
        return _done(res, started)
    res.id = lesson.id
    _static_checks(lesson, res)
    try:
        static = audit.lesson_reasons(lesson, audit.formula_points(lesson_dir))
    except Exception as e:  # noqa: BLE001  # a bug in a rule costs this lesson, not the whole check
        static = [f"static rules failed: {type(e).__name__}: {e}"]
    for reason in [*static, *reasons]:
        res.fail(reason)
    if static_only:
        res.unproven.append("static rules only (--static): reference, blank and mutants not run")
        return _done(res, started)
    course = course or release.find_course_root(lesson_dir.parent)
    with tempfile.TemporaryDirectory(prefix=f"hpccourse-check-{lesson.id}-") as tmp_name:
        tmp = Path(tmp_name)
        module_name = lesson_dir.parent.name
        stage = tmp / "ref" / module_name
        rel = _copy_lesson_module(lesson_dir, stage)
        scoring = course / "scoring.toml" if course and (course / "scoring.toml").is_file() else None
        if scoring and not (stage / "scoring.toml").is_file():
            shutil.copyfile(scoring, stage.parent / "scoring.toml")
        report = tmp / "report.json"

        entry, output = runner.run(stage, [rel], lesson.id, report)
        runnable = reference_ok = False
        if entry is None:
            res.fail(f"reference run: {output}")
        else:
            runnable = _check_reference(entry, res)
            reference_ok = entry["code"]["score"] >= entry["code"]["max_score"]

        blank_root = tmp / "blank" / module_name
        template = tmp / "no-template"
        template.mkdir()
        try:
            release.release_module(stage, blank_root, keys=True, template=template,
                                   scoring=scoring if not (stage / "scoring.toml").is_file() else None)
        except (release.ReleaseError, RegionError) as e:
            msg = str(e)
            for temp in {str(stage.resolve()), str(stage)}:  # name the source, not the temp copy
                msg = msg.replace(temp, manifest.display_path(lesson_dir.parent))
            res.fail(f"release: {msg}")
        else:
            entry, output = runner.run(blank_root, [rel], lesson.id, report)
            if entry is None:
                res.fail(f"blank run: {output}")
            else:
                _check_blank(entry, res)

        if runnable and reference_ok:
            for i, m in enumerate(lesson.mutants, 1):
                res.mutants.append(_check_mutant(i, m, lesson, stage, rel, runner, report))
            for i, alt in enumerate(lesson.alternatives, 1):
                res.alternatives.append(_check_alternative(i, alt, lesson, stage, rel, runner, report))
        elif not runnable and (lesson.mutants or lesson.alternatives):
            res.unproven.append(f"{len(lesson.mutants)} mutant(s) not run" + (
                f", {len(lesson.alternatives)} alternative(s) not run" if lesson.alternatives else ""))
        # (a reference that fails its own tests is already UNSOUND; mutants would prove nothing)
    for mc in res.mutants:
        if mc.result in ("survived", "count", "error"):
            label = {"survived": "survived", "count": "does not apply", "error": "run failed"}[mc.result]
            res.fail(f"mutant {mc.index} ({mc.why}) {label}: {mc.detail}")
        elif mc.result == "unproven":
            res.unproven.append(f"mutant {mc.index}: {mc.detail}")
    for ac in res.alternatives:
        if ac.result in ("lost", "count", "error"):
            label = {"lost": "loses points", "count": "does not apply", "error": "run failed"}[ac.result]
            res.fail(f"alternative {ac.index} ({ac.why}) {label}: {ac.detail}")
        elif ac.result == "unproven":
            res.unproven.append(f"alternative {ac.index}: {ac.detail}")
    return _done(res, started)


def _done(res: LessonCheck, started: float) -> LessonCheck:
    res.seconds = time.perf_counter() - started
    return res.finish()


# ---------------------------------------------------------------------------------------------
# many lessons


def course_audit(paths: Sequence[Path]) -> audit.CourseAudit:
    """The cross-lesson rules over the lessons under `paths` and the other lessons of their
    modules (a lesson checked alone is still compared with its siblings)."""
    dirs = list(manifest.iter_lesson_dirs(paths))
    scope = sorted(set(dirs) | set(manifest.iter_lesson_dirs({d.parent for d in dirs})))
    return audit.audit_course(audit.load_lessons(scope))


def check_paths(paths: Sequence[Path], jobs: int, runner: Runner,
                progress: Callable[[LessonCheck, int, int], None] | None = None, *,
                course: audit.CourseAudit | None = None, static_only: bool = False) -> list[LessonCheck]:
    dirs = list(manifest.iter_lesson_dirs(paths))
    course = course if course is not None else course_audit(paths)
    ids: dict[str, str] = {}
    duplicates: dict[Path, str] = {}
    for d in dirs:
        lid = manifest.read_id(d)
        if lid and lid in ids:
            duplicates[d] = f"id {lid!r} is also used by {ids[lid]}"
        elif lid:
            ids[lid] = manifest.display_path(d)
    results: list[LessonCheck] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(check_lesson, d, runner, manifest.display_path(d),
                               reasons=course.reasons.get(d, ()), static_only=static_only): d
                   for d in dirs}
        for fut in as_completed(futures):
            res = fut.result()
            if futures[fut] in duplicates:
                res.fail(duplicates[futures[fut]])
                res.finish()
            results.append(res)
            if progress:
                progress(res, len(results), len(dirs))
    return sorted(results, key=lambda r: r.path)


def table(results: Sequence[LessonCheck], columns: int = 120) -> list[str]:
    rows = [["lesson", "verdict", "reference", "blank", "mutants", "time", "reasons"]]
    for r in results:
        why = r.reasons or r.unproven
        rows.append([r.id, r.verdict, r.reference, r.blank, r.caught, f"{r.seconds:.1f}s",
                     (why[0] + (f" (+{len(why) - 1} more)" if len(why) > 1 else "")) if why else ""])
    widths = [max(width(row[i]) for row in rows) for i in range(6)]
    rest = max(20, columns - sum(widths) - 2 * 6)
    lines = []
    for n, row in enumerate(rows):
        cells = [pad(c, widths[i]) for i, c in enumerate(row[:6])] + [clip(row[6], rest)]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in [*widths, min(rest, 7)]))
    return lines


def details(results: Sequence[LessonCheck]) -> list[str]:
    lines = []
    for r in results:
        lines.append(f"{r.id} [{r.verdict}] {r.path}")
        lines.extend(f"  UNSOUND: {reason}" for reason in r.reasons)
        lines.extend(f"  UNPROVEN: {reason}" for reason in r.unproven)
        lines.extend(f"  mutant {m.index} ({m.why}): {m.detail}" for m in r.mutants
                     if m.result == "caught")
        lines.extend(f"  alternative {a.index} ({a.why}): {a.detail}" for a in r.alternatives
                     if a.result == "kept")
    return lines


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hpccourse check",
                                description="Prove lessons sound: the reference scores 10/10, the "
                                            "released blank 0, every mutant is caught, every "
                                            "alternative keeps full code points.")
    p.add_argument("paths", nargs="*", type=Path,
                   help="lesson or module folders (default: modules/, else .)")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                   help="lessons checked in parallel (default: the number of CPUs)")
    p.add_argument("--timeout", type=float, default=900.0,
                   help="seconds one pytest run may take (default 900)")
    p.add_argument("--strict", action="store_true", help="UNPROVEN lessons fail the check too")
    p.add_argument("--static", action="store_true",
                   help="only the static rules (no pytest run): seconds for the whole course")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines, no details")
    return p


def _needs_ray(paths: Sequence[Path]) -> bool:
    for d in manifest.iter_lesson_dirs(paths):
        try:
            if "ray" in (manifest.read_raw(d).get("requires") or ()):
                return True
        except Exception:  # noqa: BLE001 - an invalid manifest is reported by the check itself
            continue
    return False


def main(args: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(args)
    paths = ns.paths or [Path("modules") if Path("modules").is_dir() else Path(".")]
    missing = [p for p in paths if not p.exists()]
    if missing:
        print(f"hpccourse check: error: no such path: {', '.join(map(str, missing))}", file=sys.stderr)
        return 2
    jobs = max(1, ns.jobs)
    runner = Runner(timeout=ns.timeout, threads=max(1, (os.cpu_count() or 1) // jobs))
    started = time.perf_counter()

    def progress(res: LessonCheck, done: int, total: int) -> None:
        if not ns.quiet:
            print(f"[{done}/{total}] {res.id} {res.verdict} ({res.seconds:.1f}s)", flush=True)

    course = course_audit(paths)
    with contextlib.ExitStack() as stack:
        if not ns.static and _needs_ray(paths) and shared.wanted():
            # logical CPUs: room for every concurrent run's actors, as if each had the machine
            runner.extra_env.update(stack.enter_context(shared.shared_ray(cpus=(os.cpu_count() or 1) * (jobs + 1))))
        results = check_paths(paths, jobs, runner, progress, course=course, static_only=ns.static)
    elapsed = time.perf_counter() - started
    if not results:
        print(f"hpccourse check: no lesson.toml under {', '.join(map(str, paths))}", file=sys.stderr)
        return 2
    columns = shutil.get_terminal_size((120, 24)).columns
    print()
    print("\n".join(table(results, columns)))
    if course.modules:  # the distribution of choice/multi keys, even when it passes
        print()
        print("\n".join(stats.line() for stats in course.modules))
    if not ns.quiet:
        print()
        print("\n".join(details(results)))
    counts = {v: sum(r.verdict == v for r in results) for v in (SOUND, UNSOUND, UNPROVEN)}
    print(f"\n{len(results)} lesson(s): {counts[SOUND]} SOUND, {counts[UNSOUND]} UNSOUND, "
          f"{counts[UNPROVEN]} UNPROVEN in {elapsed:.1f}s (-j {jobs})")
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps([asdict(r) for r in results], ensure_ascii=False, indent=2)
                           + "\n", encoding="utf-8")
    failed = counts[UNSOUND] + (counts[UNPROVEN] if ns.strict else 0)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
