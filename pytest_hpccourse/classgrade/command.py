"""`hpccourse grade-class`: the argument parser and the driver loop (docs/grade-class.md).

The driver is the only writer of the gradebook. It mirrors the repositories in a thread pool, plans the
tasks of each student as soon as their repository is in (a CPU part and, for lessons that need `cuda-gpu`, a
GPU part per module), skips what the gradebook already holds for the same commit and grader version, submits
the rest as Ray tasks, and records each finished task in one transaction. Ray is started (or joined:
`--address`, `RAY_ADDRESS`) only when there is something to grade.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_hpccourse import __version__

from . import costmodel, summary
from .fetch import Checkout, FetchError, fetch, git_deadline
from .gradebook import Gradebook, TaskLine
from .overlay import LessonPart, Overlay, Pristine, load_pristine, overlay
from .progress import Progress
from .roster import RosterError, Submission, read_roster, safe_name
from .rows import rows_for
from .tasks import TaskSpec, remote_grade

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'4G', '512M', '1.5GiB', '0' -> bytes (powers of 1024)."""
    found = _SIZE.match(text)
    if not found:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 4G, 512M)")
    return int(float(found[1]) * 1024 ** " KMGT".index(found[2].upper() or " "))


def _deadline(text: str) -> str:
    try:
        git_deadline(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hpccourse grade-class",
        description="Grade every student's fork of one or more modules on Ray (local, or the cluster at "
                    "--address / RAY_ADDRESS); results go to a resumable SQLite gradebook.")
    p.add_argument("roster", nargs="?", type=Path,
                   help="CSV: student, repository (URL or path), optional commit; GitHub Classroom's export works")
    p.add_argument("--module", action="append", type=Path, default=[], metavar="PATH",
                   help="the instructor's pristine module (course source or released; repeat for several)")
    p.add_argument("--gradebook", type=Path, metavar="FILE.sqlite", help="the gradebook (made when missing)")
    p.add_argument("--csv", type=Path, metavar="FILE", help="also export the gradebook's rows as CSV")
    p.add_argument("--html", type=Path, metavar="DIR", help="write the instructor's summary page DIR/index.html")
    p.add_argument("--json-dir", type=Path, metavar="DIR",
                   help="write each student's --course-json document as DIR/<student>/<module>.json")
    p.add_argument("--course-keys", type=Path, metavar="FILE", help="answer keys for released modules (keys.toml)")
    p.add_argument("--deadline", type=_deadline, metavar="ISO-TIME",
                   help="grade the last commit before this time (e.g. 2026-05-01T23:59:00+08:00)")
    p.add_argument("--regrade", action="store_true", help="grade again what the gradebook already holds")
    p.add_argument("--timeout", type=float, default=900.0, metavar="S",
                   help="seconds one task (a student's module) may run before it is killed (default 900)")
    p.add_argument("--test-timeout", type=float, default=None, metavar="S",
                   help="seconds per code test (default: the rubric's, scoring.toml [run] timeout)")
    p.add_argument("--memory", type=parse_size, default=parse_size("4G"), metavar="SIZE",
                   help="address-space limit of a task's pytest (and its Ray memory request; default 4G; 0: none)")
    p.add_argument("--cache", type=Path, metavar="DIR", help="where the repository mirrors are kept "
                   "(default: next to the gradebook, FILE.repos/)")
    p.add_argument("--address", metavar="ADDR", help="Ray cluster to join (default: RAY_ADDRESS, else local Ray)")
    p.add_argument("--num-cpus", type=int, default=None, metavar="N", help="CPUs of a local Ray (default: all)")
    p.add_argument("--fetch-jobs", type=int, default=8, metavar="N", help="repositories fetched at once")
    p.add_argument("--progress", choices=("auto", "bar", "lines", "off"), default="auto",
                   help="live bar on a terminal, plain lines otherwise (auto)")
    model = p.add_argument_group("cost model (--dry-run: nothing is fetched or graded)")
    model.add_argument("--dry-run", action="store_true", help="state the wall time of a class instead of grading")
    model.add_argument("--times", type=Path, action="append", default=[], metavar="FILE",
                       help="per-lesson times: `hpccourse check --json` output or a --course-json report "
                            "(repeatable); the gradebook's measured task times are used too")
    model.add_argument("--students", type=int, default=300, help="class size (default 300)")
    model.add_argument("--cpu-nodes", type=int, action="append", default=[], metavar="N",
                       help="CPU nodes (repeat to compare several sizes; default 1)")
    model.add_argument("--gpu-nodes", type=int, default=0, metavar="M", help="GPU nodes (default 0)")
    model.add_argument("--cpus-per-node", type=int, default=16, metavar="C", help="CPUs per node (default 16)")
    model.add_argument("--gpus-per-node", type=int, default=1, metavar="G", help="GPUs per GPU node (default 1)")
    model.add_argument("--task-overhead", type=float, default=3.0, metavar="S",
                       help="seconds of pytest start-up added to a task timed from lesson times (default 3)")
    model.add_argument("--gpu-task-seconds", type=float, default=60.0, metavar="S",
                       help="assumed seconds of a GPU part nobody measured (default 60)")
    return p


@dataclass
class Plan:
    """The tasks of one student and module, before submission."""

    sub: Submission
    pristine: Pristine
    grader: str
    checkout: Checkout | None = None
    overlay: Overlay | None = None
    error: str = ""  # the repository could not be fetched or read

    def parts(self, gpus: bool) -> dict[str, list[LessonPart]]:
        """part -> lessons. A lesson that requires cuda-gpu is the GPU part; one with only some GPU-marked tests
        is too when the cluster has a GPU, else it runs on a CPU, where the plugin reports those tests NEEDS."""
        out: dict[str, list[LessonPart]] = {}
        for lesson in self.pristine.lessons:
            part = "gpu" if lesson.gpu == "lesson" or (lesson.gpu == "tests" and gpus) else "cpu"
            out.setdefault(part, []).append(lesson)
        return out


@dataclass
class Driver:
    args: argparse.Namespace
    book: Gradebook
    pristines: list[Pristine]
    progress: Progress
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    pending: dict[Any, tuple[TaskSpec, Plan, list[LessonPart]]] = field(default_factory=dict)
    errors: int = 0
    _ray: Any = None
    _gpus: bool | None = None
    _memory: int | None = None
    _refs: dict[str, Any] = field(default_factory=dict)
    _temp_dir: str | None = None

    # ---- Ray ------------------------------------------------------------------------------
    def ray(self) -> Any:
        if self._ray is None:
            import ray

            address = self.args.address or os.environ.get("RAY_ADDRESS") or None
            if address:
                ray.init(address=address, log_to_driver=False, logging_level="WARNING")
            else:
                self._temp_dir = tempfile.mkdtemp(prefix="hpcray-")  # short: Ray's socket paths are capped
                ray.init(address="local", num_cpus=self.args.num_cpus, include_dashboard=False,
                         log_to_driver=False, logging_level="WARNING", _temp_dir=self._temp_dir,
                         object_store_memory=512 * 1024**2)  # pristine modules are small; /dev/shm is shared
            self._ray = ray
            self._refs = {p.name: ray.put(p.files) for p in self.pristines}
        return self._ray

    def gpus(self) -> bool:
        if self._gpus is None:
            self._gpus = self.ray().cluster_resources().get("GPU", 0) > 0
        return self._gpus

    def task_count(self, pristine: Pristine) -> int:
        """How many tasks (parts) one student's work on this module makes on this cluster."""
        gpus = self.gpus() if any(lesson.gpu for lesson in pristine.lessons) else False
        return len(Plan(Submission("", ""), pristine, "").parts(gpus))

    def _memory_request(self) -> int:
        """The task's Ray `memory` request: the limit, when some node can hold it (else none: no task would
        ever be scheduled)."""
        if not self.args.memory:
            return 0
        if self._memory is None:
            nodes = self.ray().nodes()
            largest = max((n.get("Resources", {}).get("memory", 0) for n in nodes if n.get("Alive")), default=0)
            self._memory = int(self.args.memory) if largest >= self.args.memory else 0
        return self._memory

    def shutdown(self) -> None:
        if self._ray is not None:
            self._ray.shutdown()
        if self._temp_dir:
            shutil.rmtree(self._temp_dir, ignore_errors=True)

    # ---- planning -------------------------------------------------------------------------
    def plan(self, plan: Plan) -> None:
        """Record what needs no task (fetch error, no commit, NEEDS without GPUs), skip what is graded, submit
        the rest."""
        base = {"student": plan.sub.student, "module": plan.pristine.name, "grader": plan.grader}
        gpu_parts = any(lesson.gpu == "lesson" for lesson in plan.pristine.lessons)
        any_gpu = any(lesson.gpu for lesson in plan.pristine.lessons)
        parts = plan.parts(self.gpus() if any_gpu else False)
        if plan.error or plan.checkout is None:
            for part, lessons in parts.items():
                self._record_now(TaskLine(**base, part=part, commit_sha="", status="error", reason=plan.error),
                                 lessons, "ERROR", plan.error)
            return
        commit = plan.checkout.commit
        if not commit:
            why = "no commit before the deadline" if self.args.deadline else "no commit to grade"
            for part, lessons in parts.items():
                line = self.book.task(plan.sub.student, plan.pristine.name, part)
                if self.args.regrade or line is None or line["status"] != "missing" or line["grader"] != plan.grader:
                    self._record_now(TaskLine(**base, part=part, commit_sha="", status="missing", reason=why),
                                     lessons, "MISSING", why)
                else:
                    self.progress.skip()
            return
        assert plan.overlay is not None
        for part, lessons in parts.items():
            if not self.args.regrade and self.book.is_done(plan.sub.student, plan.pristine.name, part, commit,
                                                           plan.grader, gpus=self.gpus() if gpu_parts else False):
                self.progress.skip()
                continue
            if part == "gpu" and not self.gpus():
                why = "needs cuda-gpu: no GPU in the cluster"
                self._record_now(TaskLine(**base, part=part, commit_sha=commit, status="needs", reason=why),
                                 lessons, "NEEDS", why, ignored=plan.overlay.ignored)
                continue
            self._submit(plan, part, lessons)

    def _record_now(self, line: TaskLine, lessons: list[LessonPart], status: str, reason: str,
                    ignored: Sequence[str] = ()) -> None:
        base = {"student": line.student, "module": line.module, "part": line.part, "commit_sha": line.commit_sha,
                "grader": line.grader}
        self.book.record(line, rows_for(base, lessons, None, status=status, reason=reason, ignored=list(ignored)),
                         self.run_id)
        failed = line.status == "error"
        self.errors += int(failed)
        self.progress.finished(f"{line.student} {line.module} {line.part}: {status} ({reason})", failed,
                               was_running=False)

    def _submit(self, plan: Plan, part: str, lessons: list[LessonPart]) -> None:
        assert plan.checkout is not None and plan.overlay is not None
        wanted = {p for lesson in lessons for p in lesson.editable}
        spec = TaskSpec(student=plan.sub.student, module=plan.pristine.name, part=part,
                        commit=plan.checkout.commit, grader=plan.grader, lessons=[lesson.path for lesson in lessons],
                        overlay={k: v for k, v in plan.overlay.files.items() if k in wanted},
                        timeout=self.args.timeout, memory=self.args.memory, test_timeout=self.args.test_timeout)
        self.ray()
        options: dict[str, Any] = {"num_cpus": 1}
        memory = self._memory_request()
        if memory:
            options["memory"] = memory
        if part == "gpu":
            options["num_gpus"] = 1
        ref = remote_grade().options(**options).remote(spec, self._refs[plan.pristine.name], plan.pristine.keys)
        self.pending[ref] = (spec, plan, lessons)
        self.progress.started()

    # ---- results --------------------------------------------------------------------------
    def collect(self, timeout: float) -> None:
        """Record the tasks that finish within `timeout` seconds."""
        if not self.pending:
            return
        ray = self.ray()
        ready, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=timeout)
        for ref in ready:
            spec, plan, lessons = self.pending.pop(ref)
            try:
                result = ray.get(ref)
                status = str(result["status"])
                reason = str(result.get("reason", ""))
            except Exception as exc:  # noqa: BLE001 - a task that died on every retry: a grader error
                result, status = None, "error"
                reason = f"grader error: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}" \
                    if str(exc).strip() else f"grader error: {type(exc).__name__}"
            base = {"student": spec.student, "module": spec.module, "part": spec.part, "commit_sha": spec.commit,
                    "grader": spec.grader}
            assert plan.overlay is not None
            rows = rows_for(base, lessons, result, missing=plan.overlay.missing, ignored=plan.overlay.ignored,
                            status="ERROR", reason=reason)
            line = TaskLine(**base, status=status, reason=reason, node=(result or {}).get("node", ""),
                            seconds=float((result or {}).get("seconds", 0.0)), course_json=(result or {}).get("doc"))
            self.book.record(line, rows, self.run_id)
            failed = status != "ok"
            self.errors += int(status == "error")
            score = f"{sum(r.total for r in rows):g}/{sum(r.max_score for r in rows):g}"
            self.progress.finished(f"{spec.student} {spec.module} {spec.part}: "
                                   + (score if not failed else f"{status.upper()} ({reason})")
                                   + f"  {line.seconds:.1f} s" + (f" on {line.node[:8]}" if line.node else ""),
                                   failed)

    def cancel(self) -> None:
        if self._ray is not None:
            for ref in self.pending:
                try:
                    self._ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - best effort on the way out
                    pass
        self.pending.clear()


def prepare(sub: Submission, pristines: list[Pristine], graders: dict[str, str], cache: Path,
            deadline: str | None) -> list[Plan]:
    """Fetch one student's repository and build the plan of each module (runs in the fetch pool)."""
    plans = [Plan(sub, p, graders[p.name]) for p in pristines if not sub.module or sub.module == p.name]
    try:
        checkout = fetch(sub, cache, deadline)
        for plan in plans:
            plan.checkout = checkout
            if checkout.commit:
                plan.overlay = overlay(checkout, plan.pristine)
    except (FetchError, OSError) as exc:
        for plan in plans:
            plan.error = f"cannot fetch {sub.repo}: {exc}"
    return plans


def grader_version(pristine: Pristine) -> str:
    """What a grade depends on: the plugin's version and the pristine module (tests, lesson.toml, keys)."""
    return f"{__version__}+{pristine.digest[:12]}"


def export(args: argparse.Namespace, book: Gradebook, modules: list[str]) -> None:
    rows = book.rows(modules)
    print(summary.terminal(rows))
    if args.csv:
        n = book.write_csv(args.csv, modules)
        print(f"CSV: {args.csv} ({n} rows)")
    if args.json_dir:
        pairs = sorted({(line["student"], line["module"]) for line in book.tasks() if line["module"] in modules})
        for student, module in pairs:
            doc = book.course_json(student, module)
            if doc is not None:
                target = args.json_dir / safe_name(student) / f"{module}.json"
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(json.dumps(doc, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        print(f"course JSON: {args.json_dir} ({len(pairs)} student-module pairs)")
    if args.html:
        page = summary.write_html(rows, args.html)
        print(f"summary page: {page}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.dry_run:
        return costmodel.main(args)
    if args.roster is None or not args.module or args.gradebook is None:
        parser().error("ROSTER, --module and --gradebook are required (unless --dry-run)")
    try:
        roster = read_roster(args.roster)
        pristines = [load_pristine(m, args.course_keys) for m in args.module]
    except (RosterError, FileNotFoundError, OSError) as exc:
        print(f"hpccourse grade-class: {exc}", file=sys.stderr)
        return 2
    names = [p.name for p in pristines]
    if len(set(names)) != len(names):
        print("hpccourse grade-class: two --module folders have the same name", file=sys.stderr)
        return 2
    unknown = sorted({s.module for s in roster.submissions if s.module and s.module not in names})
    if unknown:
        print(f"hpccourse grade-class: the roster names modules not given with --module: {', '.join(unknown)}",
              file=sys.stderr)
        return 2
    graders = {p.name: grader_version(p) for p in pristines}
    cache = args.cache or args.gradebook.with_name(args.gradebook.name + ".repos")
    for line in roster.skipped:
        print(f"skipped {line}", file=sys.stderr)
    book = Gradebook(args.gradebook)
    progress = Progress(0, args.progress)
    driver = Driver(args, book, pristines, progress)
    counts = {p.name: driver.task_count(p) for p in pristines}
    progress.total = sum(counts[s.module] if s.module else sum(counts.values()) for s in roster.submissions)
    interrupted = False
    try:
        with cf.ThreadPoolExecutor(max(1, args.fetch_jobs)) as pool:
            futures = {pool.submit(prepare, sub, pristines, graders, cache, args.deadline)
                       for sub in roster.submissions}
            try:
                while futures or driver.pending:
                    if futures:
                        done, futures = cf.wait(futures, timeout=0.2 if driver.pending else None,
                                                return_when=cf.FIRST_COMPLETED)
                        for future in done:
                            for plan in future.result():
                                driver.plan(plan)
                    driver.collect(timeout=0.0 if futures else 1.0)
            except KeyboardInterrupt:
                interrupted = True
                for future in futures:
                    future.cancel()
                driver.cancel()
    finally:
        progress.close()
        driver.shutdown()
    if interrupted:
        print("interrupted: what finished is in the gradebook; run the same command again to resume",
              file=sys.stderr)
        book.close()
        return 130
    export(args, book, names)
    book.close()
    if driver.errors:
        print(f"{driver.errors} task(s) failed in the grader (not the submissions): rerun to retry them",
              file=sys.stderr)
    return 1 if driver.errors else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
