"""Throughput of `hpccourse grade-class` against a serial loop of `pytest --course-report` over the same class.

The class: for each module (the demo fixture module of the tests, and the committed lessons of
modules/12-system-design), K students of each kind — reference (the lesson's own solution and answers), blank (the
release as handed out) and mutant (the reference with each lesson's first [[mutants]] edit) — as git repositories
whose first commit is the release (tests/classgrade_factory.py builds them the same way). The roster has a row per
student and module. Both runs grade every (student, module) once, from scratch.

    .venv/bin/python benchmarks/grade_class_throughput.py [--per-kind K] [--cpus N]

Prints submissions per minute (a submission = one student's repository of one module), wall and CPU seconds of each
run, and the load average before and after (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import classgrade_factory as factory  # noqa: E402

from pytest_hpccourse.authoring import release  # noqa: E402
from pytest_hpccourse.grading import manifest  # noqa: E402


def snapshot(root: Path, module: str) -> Path:
    """The module as committed at HEAD (lessons other sessions are still writing are left out)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD", f"modules/{module}", "scoring.toml"],
                             check=True, capture_output=True).stdout
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    return root / "modules" / module


def apply_first_mutants(module: Path, repo: Path) -> None:
    for lesson in manifest.iter_lesson_dirs([module]):
        data = tomllib.loads((lesson / "lesson.toml").read_text(encoding="utf-8"))
        m = data["mutants"][0]
        target = repo / lesson.relative_to(module) / m["file"]
        target.write_text(target.read_text(encoding="utf-8").replace(m["find"], m["replace"]), encoding="utf-8")


def reference(module: Path, repo: Path) -> None:
    for lesson in manifest.iter_lesson_dirs([module]):
        data = tomllib.loads((lesson / "lesson.toml").read_text(encoding="utf-8"))
        rel = lesson.relative_to(module)
        for name in [*data["files"], "answers.yaml"]:
            shutil.copyfile(lesson / name, repo / rel / name)


def mutant(module: Path, repo: Path) -> None:
    reference(module, repo)
    apply_first_mutants(module, repo)


def build(root: Path, per_kind: int) -> tuple[list[Path], Path, list[Path]]:
    demo = factory.make_module(root / "demo")
    shutil.rmtree(demo / "03-tensor-core")  # GPU lesson: NEEDS on a CPU machine, nothing to time
    modules = [demo, snapshot(root / "snap", "12-system-design")]
    lines, repos = ["student,module,repo"], []
    for module in modules:
        blank = root / "release" / module.name
        assert release.main([str(module), "--out", str(blank), "--no-keys", "--template",
                             str(REPO / "template-repo")]) == 0
        for kind, work in (("ref", reference), ("blank", None), ("mutant", mutant)):
            for i in range(per_kind):
                repo = root / "repos" / f"{kind}{i}-{module.name}"
                factory.make_student(module, blank, repo, work)
                lines.append(f"{kind}{i},{module.name},{repo}")
                repos.append(repo)
    roster = root / "roster.csv"
    roster.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return modules, roster, repos


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-kind", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gc-bench-"))
    modules, roster, repos = build(root, args.per_kind)
    n = len(repos)
    print(f"class: {n} submissions ({args.per_kind} reference + blank + mutant per module) of "
          f"{', '.join(m.name for m in modules)}; load average before {os.getloadavg()[0]:.1f}")
    # serial: what an instructor does today, one fork after the other, with the repo's own files
    keys = {}
    for module in modules:  # the released repos have no keys: give each run the module's keys, as grade-class does
        keyed = root / "keyed" / module.name
        assert release.main([str(module), "--out", str(keyed), "--template", str(REPO / "template-repo")]) == 0
        keys[module.name] = keyed / ".hpccourse" / "keys.toml"
    cpu0, start = children_cpu(), time.monotonic()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    for repo in repos:
        module = repo.name.split("-", 1)[1]
        subprocess.run([sys.executable, "-m", "pytest", "--course-report", "-q", "-p", "no:cacheprovider",
                        "--course-keys", str(keys[module])], cwd=repo, env=env, capture_output=True, check=False)
    serial_wall, serial_cpu = time.monotonic() - start, children_cpu() - cpu0
    print(f"serial loop of pytest --course-report: {serial_wall:.1f} s wall, {serial_cpu:.1f} s CPU, "
          f"{n / serial_wall * 60:.1f} submissions/min")
    cpu0, start = children_cpu(), time.monotonic()
    cmd = [sys.executable, "-m", "pytest_hpccourse.cli", "grade-class", str(roster), "--gradebook",
           str(root / "book.sqlite"), "--num-cpus", str(args.cpus), "--progress", "off",
           *[x for m in modules for x in ("--module", str(m))]]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env={
        k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"})
    ray_wall, ray_cpu = time.monotonic() - start, children_cpu() - cpu0
    print(proc.stdout[-1500:])
    print(f"grade-class (local Ray, {args.cpus} CPUs): {ray_wall:.1f} s wall (Ray start-up included), "
          f"{ray_cpu:.1f} s CPU (the driver and what it waited for), {n / ray_wall * 60:.1f} submissions/min; "
          f"exit {proc.returncode}; load average after {os.getloadavg()[0]:.1f}")
    print(f"gradebook: {root / 'book.sqlite'}")
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
